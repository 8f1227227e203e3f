"""The generated space: every structure passes the model's checks and counts the workload's
operations exactly; the sizes and what the rules prune match hand-derived counts; the
tilings of a structure are exactly the divisor assignments that cover every dimension."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from explore.spaces import DIAMOND, FUSION_ONLY, tiny_chain_space
from helpers import small_arch, workload
from scalar_prepare import prepare

from tileflow.arith import divisors
from tileflow.cost import evaluate
from tileflow.explore.structures.structure_space import (
    StructureSpace,
    fusion_patterns,
    space_size,
    structures,
)
from tileflow.explore.structures.tilings import Tilings
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import walk

SMALL = {"attention": {"b": 2, "m": 32, "l": 32, "k": 8, "n": 8},
         "conv-chain": {"h": 8, "w": 8, "c0": 4, "c1": 8, "c2": 4},
         "mlp": {"m": 16, "d": 8, "f": 16, "e": 8}}


def _evaluates_exactly(space: StructureSpace, enc) -> None:
    w, arch = space.frame.workload, space.frame.arch
    structure = space.structure(enc)
    prepare(w, arch, structure.template)  # raises on any structural rule
    result = evaluate(w, arch, structure.template)
    assert math.isfinite(result.cycles) and result.cycles > 0
    # no recomputation is ever generated: each operator runs its iterations once
    assert result.ops == {o.name: w.op_count(o) for o in w.ops}


@pytest.mark.parametrize("name", ["attention", "conv-chain", "mlp", "diamond"])
def test_random_structures_pass_the_checks_and_count_every_operation_once(name):
    w = workload(DIAMOND) if name == "diamond" else load_workload(name, SMALL[name])
    space = StructureSpace(w, load_arch("edge"))
    rng = np.random.default_rng(11)
    for _ in range(25):
        _evaluates_exactly(space, space.random(rng))


@pytest.mark.parametrize("arch", ["edge", "cloud"])
def test_every_structure_of_the_mlp_evaluates(arch):
    options = FUSION_ONLY if arch == "edge" else replace(FUSION_ONLY, homes=False)
    space = StructureSpace(load_workload("mlp", SMALL["mlp"]), load_arch(arch), options)
    found = list(structures(space))
    assert len(found) == len(set(found)) == space_size(space).structures
    for enc in found:
        _evaluates_exactly(space, enc)


def test_structures_of_a_diamond_are_as_many_as_the_size_says():
    """b and c both read a's result and nothing of each other: Para is allowed between
    them, and only there."""
    options = replace(FUSION_ONLY, primitives=("Seq", "Para"), homes=False)
    space = StructureSpace(workload(DIAMOND), load_arch("edge"), options)
    found = list(structures(space))
    size = space_size(space)
    assert len(found) == len(set(found)) == size.structures
    assert 0 < size.para_rejected < size.primitive_choices
    assert any("Para" in (*e.primitive, e.root_primitive) for e in found)
    for enc in found[::7]:
        _evaluates_exactly(space, enc)


def test_two_operator_chain_sizes_by_hand():
    """Each GEMM: fused into the other at DRAM or L1, or not (3 x 3 tables, 3 with fusion
    into the later one only); three trees: unfused, sharing DRAM loops, an L1 group. Each
    has one tile with two children: Seq, Shar or Pipe (Para would run a consumer beside
    its producer). C may live at DRAM, L1 or Reg when the common ancestor is the DRAM
    tile (both GEMMs have tiles at all three below it) and at L1 or Reg under the L1 group."""
    size = space_size(tiny_chain_space())
    assert (size.fusion_tables, size.into_earlier, size.later_tables) == (9, 6, 3)
    assert (size.cycles, size.duplicates, size.fusion_patterns) == (0, 0, 3)
    assert (size.primitive_choices, size.para_rejected) == (12, 3)
    assert size.structures == 3 * 3 + 3 * 3 + 3 * 2


def test_mlp_sizes_by_hand():
    """fc1 -> gelu -> fc2: 5 x 3 x 1 tables fuse into later operators; fc1 with fc2 but gelu
    outside their group (at the top, or below an L1 group) is a cycle, 3 tables; 3 more
    repeat a tree; 9 = 3 x 3 trees remain (each of the two boundaries: apart, DRAM, L1)."""
    space = StructureSpace(load_workload("mlp", SMALL["mlp"]), load_arch("edge"), FUSION_ONLY)
    size = space_size(space)
    assert size.later_tables == 15
    assert size.fusion_tables == (1 + 2 * 2) ** 3
    assert (size.cycles, size.duplicates, size.fusion_patterns) == (3, 3, 9)


def test_group_loops_exclude_producer_reductions_and_private_dims():
    attention = StructureSpace(load_workload("attention", SMALL["attention"]), load_arch("edge"))
    assert attention.frame.group_dims(range(7)) == ("b", "m")  # l: reduction of max and sum
    assert attention.frame.group_dims([0, 6]) == ("b", "m", "l")  # qk with pv alone
    chain = StructureSpace(load_workload("gemm-chain"), load_arch("edge"))
    assert chain.frame.group_dims([0, 1]) == ("b", "m", "l")  # k and n are private


def _brute_force_tilings(structure) -> set[tuple[int, ...]]:
    """Every divisor per slot (spatial ones within their limit), kept when each operator's
    factors of each of its dims multiply to the dim's size along its root-to-leaf path."""
    w = structure.workload
    leaves = {n.op: p for p, n in walk(structure.template.root) if not hasattr(n, "loops")}
    on_path = {}
    for op in w.ops:
        prefixes = {".".join(leaves[op.name].split(".")[:k])
                    for k in range(1, leaves[op.name].count(".") + 1)}
        for d in op.dims:
            on_path[(op.name, d)] = [k for k, s in enumerate(structure.slots)
                                     if s.dim == d and s.path in prefixes]
    options = [[x for x in divisors(w.sizes[s.dim]) if not s.spatial or x <= limit]
               for s, limit in zip(structure.slots, structure.slot_limits, strict=True)]
    return {row for row in itertools.product(*options)
            if all(math.prod(row[k] for k in ks) == w.sizes[d]
                   for (_, d), ks in on_path.items())}


def test_tilings_are_exactly_the_covering_divisor_assignments():
    space = tiny_chain_space()
    for enc in fusion_patterns(space):
        structure = space.structure(enc)
        tilings = Tilings(structure)
        rows = {tuple(r) for r in tilings.all()}
        assert len(rows) == tilings.count > 0
        assert rows == _brute_force_tilings(structure)
        sample = tilings.sample(np.random.default_rng(0), 50)
        assert {tuple(r) for r in sample} <= rows


def test_default_factors_cover_every_dimension():
    space = StructureSpace(workload(DIAMOND), small_arch(cores=2, pes=4))
    for enc in fusion_patterns(space):
        prepare(space.frame.workload, space.frame.arch, space.structure(enc).template)
