"""Specs are hashable values: equal specs hash alike (within a process and after a trip
through pickle into another process), fields left out of equality are left out of the hash,
and the caches of factor-independent work are keyed by the specs themselves."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from dataclasses import replace

from tileflow.dataflows import build
from tileflow.evaluator.compiled import compiled_for
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload


def test_equal_specs_hash_alike_and_differ_by_any_compared_field():
    w, again = load_workload("G1"), load_workload("G1")
    arch, same = load_arch("edge"), load_arch("edge")
    assert w is not again and w == again and hash(w) == hash(again)
    assert arch == same and hash(arch) == hash(same)
    assert len({w, again, arch, same}) == 2
    bigger = replace(w, sizes={**w.sizes, "m": w.sizes["m"] * 2})
    faster = replace(arch, matrix=replace(arch.matrix, cycles_per_op={"default": 2.0}))
    assert bigger != w and hash(bigger) != hash(w)
    assert faster != arch and hash(faster) != hash(arch)


def test_where_a_spec_was_read_from_is_not_part_of_it():
    w = load_workload("G1")
    elsewhere = replace(w, source="other.yaml", lines={"ops": 3})
    assert elsewhere == w and hash(elsewhere) == hash(w)


def test_a_pickled_spec_hashes_as_the_receiving_process_computes_it():
    """The hash of a string differs between processes; a cached hash must not travel."""
    w, arch = load_workload("G1"), load_arch("edge")
    hash(w), hash(arch)  # cached here
    script = (
        "import pickle, sys\n"
        "from tileflow.specs.arch import load_arch\n"
        "from tileflow.specs.workload import load_workload\n"
        "w, arch = pickle.loads(sys.stdin.buffer.read())\n"
        "fresh = {load_workload('G1'): 'w', load_arch('edge'): 'arch'}\n"
        "print(fresh.get(w), fresh.get(arch))\n")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script], input=pickle.dumps((w, arch)),
                         capture_output=True, env=env, check=True)
    assert out.stdout.decode().split() == ["w", "arch"]


def test_equal_specs_share_one_compiled_structure():
    w, arch = load_workload("G1"), load_arch("edge")
    flow = build("chimera", w, arch)
    first = compiled_for(w, arch, flow)
    assert compiled_for(load_workload("G1"), load_arch("edge"), flow) is first
    assert compiled_for(w, replace(arch, clock_ghz=arch.clock_ghz * 2), flow) is not first
