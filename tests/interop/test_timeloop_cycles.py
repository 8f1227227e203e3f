"""Twelve single-operator Timeloop cases pinned to the cycles Timeloop's model gives them.

Timeloop's cycles are the product of the mapping's temporal factors (one MAC per step on
each spatial instance), slowed down where a level's whole-run accesses per instance exceed
its bandwidth: cycles = max(steps, reads / read_bandwidth, writes / write_bandwidth), or
(reads + writes) / shared_bandwidth. A level's reads are what the level below reads from it
(its fills and the partial sums it reads back); a write-back of outputs to the level above
is counted only as that level's update (Timeloop's `reads = content_accesses -
parent_access_share`), so it takes no read bandwidth. Every figure below is derived by hand
from the loop nest; imported files evaluate under Timeloop's conventions (perfect overlap,
`writeback_on_read_port: false`, `ports: shared` for a shared bandwidth)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers import scalar_evaluate

from tests.interop.samples import (
    ARCH_ONE_PE,
    ARCH_V03,
    ARCH_V04,
    CONV_MAPPING_SPATIAL,
    CONV_MAPPING_TEMPORAL,
    CONV_OC_MAPPING,
    CONV_OC_PROBLEM,
    CONV_PROBLEM,
    GEMM_MAPPING,
    GEMM_PROBLEM,
    write,
)
from tileflow.cost import evaluate
from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.structure import structure_of
from tileflow.interop.files import load_arch_any, load_dataflow_any, load_workload_any

# The Buffer reads 4 words per cycle: the 2 A and 2 B words four MACs need each step.
ARCH_NARROW = ARCH_V03.replace("read_bandwidth: 16", "read_bandwidth: 4")
GEMM_32 = GEMM_PROBLEM.replace("{M: 8, N: 6, K: 4}", "{M: 32, N: 32, K: 4}")
GEMM_ONE_PE = GEMM_PROBLEM
# Buffer steps M:16 (outer) N:16 K:4 (inner), M:2 x N:2 on the PEs: 1,024 steps.
K_INNER = """
mapping:
- {target: Buffer, type: temporal, factors: M=16 N=16 K=4, permutation: KNM}
- {target: Buffer, type: spatial, factors: M=2 N=2, permutation: MN}
"""
# The same with N split: DRAM N:2 outermost, Buffer M:16 N:8 K:4.
DRAM_N = """
mapping:
- {target: DRAM, type: temporal, factors: N=2, permutation: N}
- {target: Buffer, type: temporal, factors: M=16 N=8 K=4, permutation: KNM}
- {target: Buffer, type: spatial, factors: M=2 N=2, permutation: MN}
"""
# K outermost: every step changes the Z element each PE holds.
K_OUTER = """
mapping:
- {target: Buffer, type: temporal, factors: M=16 N=16 K=4, permutation: MNK}
- {target: Buffer, type: spatial, factors: M=2 N=2, permutation: MN}
"""
ONE_PE_GEMM = """
mapping:
- {target: Buffer, type: temporal, factors: M=8 N=6 K=4, permutation: KNM}
"""

CASES = {
    # compute-bound: cycles = product of the temporal factors
    "gemm-v03": (ARCH_V03, GEMM_PROBLEM, GEMM_MAPPING, 2 * 3 * 2 * 4),
    "gemm-v04": (ARCH_V04, GEMM_PROBLEM, GEMM_MAPPING, 2 * 3 * 2 * 4),
    "conv-temporal": (ARCH_V03, CONV_PROBLEM, CONV_MAPPING_TEMPORAL, 2 * 2 * 2 * 3 * 2),
    "conv-spatial": (ARCH_V03, CONV_PROBLEM, CONV_MAPPING_SPATIAL, 2 * 2 * 2 * 3),
    "conv-oc": (ARCH_ONE_PE, CONV_OC_PROBLEM, CONV_OC_MAPPING, 16 * 16 * 2 * 3),
    "gemm-one-pe": (ARCH_ONE_PE, GEMM_ONE_PE, ONE_PE_GEMM, 8 * 6 * 4),
    # Buffer reads at 4 words per cycle: 1,024 steps x (2 A + 2 B) = 4,096 reads -> 1,024;
    # the 1,024 Z words written back to DRAM take no Buffer read bandwidth
    "writeback-k-inner": (ARCH_NARROW, GEMM_32, K_INNER, 4096 // 4),
    "writeback-dram-n": (ARCH_NARROW, GEMM_32, DRAM_N, 4096 // 4),
    # K outermost: A changes every step (1,024 x 2); B[k, n] stays across the innermost M
    # loop (64 (k, n) steps x 2); Z partial sums come back from the Buffer on all but their
    # first touch (4,096 - 1,024): (2,048 + 128 + 3,072) / 4
    "writeback-k-outer": (ARCH_NARROW, GEMM_32, K_OUTER, (2048 + 128 + 3072) // 4),
    # DRAM with one shared port of 1 word per cycle: A 128 + B 128 read, Z 1,024 written
    "dram-shared-port": (ARCH_V03.replace(
        "read_bandwidth: 4,\n                   write_bandwidth: 4",
        "shared_bandwidth: 1"), GEMM_32, K_INNER, 128 + 128 + 1024),
    # a single-ported Buffer at 4 words per cycle: reads 4,096; writes 256 fills of A and B,
    # 1,024 Z updates and (a v0.3 file: Timeloop's releases of its time) a fill of each Z
    # element's first touch, 1,024
    "buffer-shared-port": (ARCH_V03.replace(
        "read_bandwidth: 16, write_bandwidth: 16", "shared_bandwidth: 4"),
        GEMM_32, K_INNER, (4096 + 256 + 1024 + 1024) // 4),
    # DRAM writes 1,024 Z words at half a word per cycle
    "dram-write-bound": (ARCH_V03.replace("write_bandwidth: 4", "write_bandwidth: 0.5"),
                         GEMM_32, K_INNER, 1024 * 2),
}


def _load(tmp_path, arch_text, problem, mapping):
    arch = load_arch_any(write(tmp_path, "arch.yaml", arch_text))
    w = load_workload_any(write(tmp_path, "prob.yaml", problem))
    return w, arch, load_dataflow_any(write(tmp_path, "map.yaml", mapping), w, arch)


@pytest.mark.parametrize("name", CASES)
def test_cycles_equal_timeloops(tmp_path, name):
    arch_text, problem, mapping, cycles = CASES[name]
    w, arch, flow = _load(tmp_path, arch_text, problem, mapping)
    assert arch.overlap == "perfect"
    assert evaluate(w, arch, flow).cycles == cycles


def test_the_shared_port_cases_really_differ_from_separate_ports(tmp_path):
    """The shared DRAM port is slower than two ports of the same rate would be: those would
    take max(256 reads, 1,024 writes) = 1,024 cycles, the compute's."""
    arch_text, problem, mapping, cycles = CASES["dram-shared-port"]
    w, arch, flow = _load(tmp_path, arch_text, problem, mapping)
    separate = replace(arch, levels=(replace(arch.levels[0], ports="separate"),
                                     *arch.levels[1:]))
    assert arch.levels[0].ports == "shared" and evaluate(w, separate, flow).cycles == 1024
    assert cycles == 1280


def test_a_write_back_on_the_read_port_adds_its_words(tmp_path):
    """With `writeback_on_read_port` on (the default outside imports), the Buffer's read
    port also carries the 1,024 Z words written back: (4,096 + 1,024) / 4."""
    arch_text, problem, mapping, _ = CASES["writeback-k-inner"]
    w, arch, flow = _load(tmp_path, arch_text, problem, mapping)
    on = replace(arch, levels=tuple(replace(lv, writeback_on_read_port=True)
                                    for lv in arch.levels))
    assert evaluate(w, on, flow).cycles == (4096 + 1024) / 4


@pytest.mark.parametrize("name", ["writeback-k-outer", "dram-shared-port",
                                  "buffer-shared-port", "dram-write-bound"])
def test_the_batched_evaluator_agrees(tmp_path, name):
    """Under the default fill-drain overlap (the batched engine's), scalar and batched
    cycles agree with either port arrangement and write-back rule."""
    arch_text, problem, mapping, _ = CASES[name]
    w, arch, flow = _load(tmp_path, arch_text, problem, mapping)
    for writeback in (False, True):
        a = replace(arch, overlap="fill-drain", levels=tuple(
            replace(lv, writeback_on_read_port=writeback) for lv in arch.levels))
        structure = structure_of(w, a, flow)
        batched = evaluate_batch(structure, structure.default_factors[None, :])
        assert batched.cycles[0] == pytest.approx(scalar_evaluate(w, a, flow).cycles)


ACCELERATOR = """
name: narrow
clock_ghz: 1
word_bits: 16
levels:
- {name: DRAM, read_words_per_cycle: 4, write_words_per_cycle: 4}
- {name: Buffer, capacity_words: 4096, read_words_per_cycle: 4, write_words_per_cycle: 16}
- {name: Reg, capacity_words: 16, fanout: 4, read_words_per_cycle: 1e9,
   write_words_per_cycle: 1e9}
compute:
  matrix: {rows: 2, cols: 2, level: Reg}
"""

TREE = """
root:
  level: DRAM
  children:
  - level: Buffer
    loops: ["M:16", "N:16", "K:4", "M:2:Sp", "N:2:Sp"]
    children:
    - {level: Reg, children: [gemm]}
"""


def test_conventions_timeloop_on_a_tileflow_accelerator(tmp_path, capsys):
    """The writeback-k-inner case written as TileFlow files: by default the Buffer's read
    port also carries the 1,024 Z words written back ((4,096 + 1,024) / 4 = 1,280 cycles
    at least); `--conventions timeloop` gives Timeloop's 1,024."""
    from tileflow.cli import main

    args = ["evaluate", "--arch", write(tmp_path, "acc.yaml", ACCELERATOR),
            "--workload", write(tmp_path, "prob.yaml", GEMM_32),
            "--dataflow", write(tmp_path, "tree.yaml", TREE), "--json"]
    assert main(args) == 0
    default = json.loads(capsys.readouterr().out)["cycles"]
    assert main([*args, "--conventions", "timeloop"]) == 0
    assert json.loads(capsys.readouterr().out)["cycles"] == 1024
    assert default >= 1280
