"""The engine's violation records at one row (`evaluator.violations.violation_records`) equal
the scalar model's (`scalar_evaluate(...).violations`): node, level, tensor, amounts, unit,
message and order, on every shipped baseline structure on every shipped accelerator (and on the same
accelerators with their buffers shrunk, so that capacities overflow), and on random trees.
Each kind is also proven on a tree small enough to derive its amount by hand, in the records
and in the batch's amounts."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from helpers import (
    CHAIN,
    CONV,
    GEMM,
    SOFTMAX,
    STRIDED,
    TWINS,
    scalar_evaluate,
    small_arch,
    workload,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trees import ARCH, trees

from tests.explore.test_batch import SMALL, random_rows
from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.dataflows import build
from tileflow.dataflows.registry import baselines_for
from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.structure import Structure, structure_of
from tileflow.evaluator.violations import violation_records
from tileflow.shipped import shipped
from tileflow.specs.arch import Architecture, load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, Loop, Op, Tile, render


def shrunk(arch: Architecture, by: float) -> Architecture:
    """The accelerator with every finite buffer `by` times smaller."""
    return replace(arch, levels=tuple(
        replace(lv, capacity_words=max(1.0, math.floor(lv.capacity_words / by)))
        if math.isfinite(lv.capacity_words) else lv for lv in arch.levels))


def records_or_error(structure: Structure, row: np.ndarray):
    try:
        return violation_records(structure, row)
    except InvalidDataflow as exc:
        return f"InvalidDataflow: {exc}"


def model_or_error(structure: Structure, row: np.ndarray):
    try:
        return scalar_evaluate(structure.workload, structure.arch,
                               structure.dataflow(row)).violations
    except InvalidDataflow as exc:
        return f"InvalidDataflow: {exc}"


def assert_records_equal(structure: Structure, factors: np.ndarray) -> int:
    """Every row's records equal the model's; returns how many records were compared."""
    seen = 0
    for row in factors:
        expected = model_or_error(structure, row)
        got = records_or_error(structure, row)
        assert got == expected, f"row {list(row)}\n{render(structure.dataflow(row).root)}"
        seen += len(expected) if isinstance(expected, tuple) else 1
    return seen


ACCELERATORS = list(shipped("accelerators"))


@pytest.mark.parametrize("arch", ACCELERATORS)
@pytest.mark.parametrize("wl", list(SMALL))
def test_shipped_structures_on_every_accelerator(wl: str, arch: str) -> None:
    """Every baseline on every shipped accelerator, as shipped and with buffers 16 times
    smaller, at random rows around the baseline's factors (clipped and uncovering ones too)."""
    w = load_workload(wl, SMALL[wl])
    rng = np.random.default_rng(11)
    compared = 0
    for a in (load_arch(arch), shrunk(load_arch(arch), 16)):
        for name in baselines_for(w):
            structure = structure_of(w, a, build(name, w, a))
            compared += assert_records_equal(structure, random_rows(structure, 4, rng))
    assert compared > 0


SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))
CASES = {"gemm": GEMM, "chain": CHAIN, "softmax": SOFTMAX, "conv-halo": CONV,
         "strided": STRIDED, "independent twins": TWINS}
TIGHT = small_arch(l1_words=24, reg_words=6)  # capacities the random trees overflow


@pytest.mark.parametrize("case", CASES)
def test_random_trees(case: str) -> None:
    """Random trees (every primitive, spatial loops, clipping, halos) on a roomy and a tight
    accelerator, each with random rows around its factors."""
    w = workload(CASES[case])
    rng = np.random.default_rng(3)
    kinds: set[str] = set()

    @SETTINGS
    @given(trees(w))
    def check(flow: Dataflow) -> None:
        for arch in (ARCH, TIGHT):
            try:
                structure = structure_of(w, arch, flow)
                structure.compiled  # noqa: B018  a malformed tree raises here
            except InvalidDataflow:
                return
            rows = random_rows(structure, 4, rng)
            assert_records_equal(structure, rows)
            for row in rows:
                found = model_or_error(structure, row)
                kinds.update(v.kind for v in found) if isinstance(found, tuple) else None

    check()
    assert kinds, "no tree broke a constraint"


# ---- each kind on a tree whose amount is derived by hand ------------------------------------

def one(w, arch, root: Tile, kind: str):
    """The only record of `kind` (checked equal to the model's records, and its amount
    equal to the batch's)."""
    flow = Dataflow(root, "hand")
    structure = structure_of(w, arch, flow)
    row = structure.default_factors
    records = violation_records(structure, row)
    assert records == scalar_evaluate(w, arch, flow).violations
    found = [v for v in records if v.kind == kind]
    assert len(found) == 1, records
    v = found[0]
    batch = evaluate_batch(structure, row[None, :])
    assert not batch.valid[0]
    if v.needed is not None:
        assert batch.violations[kind][0] == v.needed - v.available
    return v


def test_capacity_overflow_of_a_known_number_of_words() -> None:
    """The L1 tile holds the whole 4 x 4 GEMM: A, B and C at 16 words each, 48 in an L1 of
    10 words."""
    w = workload(GEMM)
    root = Tile("DRAM", (), (Tile("L1", (Loop("m", 4), Loop("n", 4), Loop("k", 4)),
                                  (Op("mm"),)),))
    v = one(w, small_arch(l1_words=10), root, "capacity")
    assert (v.node, v.level, v.needed, v.available, v.unit) == ("root.0", "L1", 48, 10, "words")
    assert "over by 38" in v.message


def test_fanout_beyond_the_instances() -> None:
    """A spatial m:4 at DRAM over the 2 L1 instances: 4 used, 2 there."""
    w = workload(GEMM)
    root = Tile("DRAM", (Loop("m", 4, True),), (Tile("L1", (Loop("n", 4), Loop("k", 4)),
                                                    (Op("mm"),)),))
    v = one(w, small_arch(), root, "fanout")
    assert (v.node, v.level, v.needed, v.available, v.unit) == ("root", "L1", 4, 2,
                                                                 "L1 instances")


def test_array_axis_overflow() -> None:
    """The 4 Reg instances per L1 form the matrix unit's 2 x 2 array: a spatial m:4 in the
    L1 tile fills 4 rows (x) of 2 (the fan-out, 4, holds it)."""
    w = workload(GEMM)
    root = Tile("DRAM", (), (Tile("L1", (Loop("m", 4, True), Loop("n", 4), Loop("k", 4)),
                                  (Tile("Reg", (), (Op("mm"),)),)),))
    v = one(w, small_arch(), root, "array")
    assert (v.node, v.level, v.needed, v.available, v.unit) == ("root.0", "Reg", 4, 2,
                                                                 "rows (x)")


def test_para_children_split_the_units() -> None:
    """Two Para children under one L1 instance spread over 2 and 2 x 2 matrix units: 6
    together, 4 there (each alone fits)."""
    w = workload(TWINS)
    g1 = Tile("L1", (Loop("m", 2, True), Loop("m", 2), Loop("n", 3), Loop("k", 3)),
              (Op("g1"),))
    g2 = Tile("L1", (Loop("m", 2, True), Loop("j", 2, True), Loop("m", 2), Loop("k", 3)),
              (Op("g2"),))
    root = Tile("DRAM", (), (Tile("L1", (), (g1, g2), "Para"),))
    v = one(w, small_arch(), root, "fanout")
    assert (v.node, v.level, v.needed, v.available, v.unit) == ("root.0", "Reg", 6, 4,
                                                                 "matrix units")


def test_coverage_short_of_the_size() -> None:
    """m's factors (2) cover 2 of its 4."""
    w = workload(GEMM)
    root = Tile("DRAM", (), (Tile("L1", (Loop("m", 2), Loop("n", 4), Loop("k", 4)),
                                  (Op("mm"),)),))
    v = one(w, small_arch(), root, "coverage")
    assert (v.node, v.needed, v.available, v.unit) == ("root.0", 4, 2, "iterations of m")


def test_reduction_in_the_common_ancestor() -> None:
    """g1's reduction k:3 at the root, the common ancestor of g1 and g2: g2 would read
    partial values of C."""
    w = workload(CHAIN)
    root = Tile("DRAM", (Loop("k", 3),), (
        Tile("L1", (Loop("m", 4), Loop("l", 4)), (Op("g1"),)),
        Tile("L1", (Loop("m", 4), Loop("l", 4), Loop("n", 3)), (Op("g2"),))))
    v = one(w, small_arch(), root, "dependency")
    assert (v.node, v.tensor, v.needed) == ("root", "C", None)
    assert "'k:3' is a reduction of 'g1'" in v.message


def test_dependent_para_children() -> None:
    """C flows from g1 to g2, children of a Para: the structure's own violation."""
    w = workload(CHAIN)
    root = Tile("DRAM", (), (
        Tile("L1", (Loop("m", 4), Loop("l", 4), Loop("k", 3)), (Op("g1"),)),
        Tile("L1", (Loop("m", 4), Loop("l", 4), Loop("n", 3)), (Op("g2"),))), "Para")
    v = one(w, small_arch(), root, "dependency")
    assert (v.node, v.tensor) == ("root", "C")


def test_window_not_covered() -> None:
    """conv2 reads A through a 3-wide window along p: per step of p:5 at the root it needs
    1 + 2 = 3 rows of A, conv1 produces 1."""
    w = workload(CONV)
    root = Tile("DRAM", (Loop("p", 5),), (
        Tile("L1", (Loop("c1", 2), Loop("r", 3), Loop("c0", 2)), (Op("conv1"),)),
        Tile("L1", (Loop("c2", 2), Loop("t", 3), Loop("c1", 2)), (Op("conv2"),))))
    v = one(w, small_arch(), root, "window")
    assert (v.node, v.tensor, v.needed, v.available, v.unit) == ("root.0", "A", 3, 1,
                                                                  "rows of p")


def test_records_are_for_one_row_of_the_structure() -> None:
    w = workload(GEMM)
    root = Tile("DRAM", (), (Tile("L1", (Loop("m", 4), Loop("n", 4), Loop("k", 4)),
                                  (Op("mm"),)),))
    structure = structure_of(w, small_arch(), Dataflow(root, "hand"))
    assert violation_records(structure, [4, 4, 4]) == ()
    with pytest.raises(ValueError, match="expected 3 factors"):
        violation_records(structure, [4, 4])
    with pytest.raises(ValueError, match="at least 1"):
        violation_records(structure, [0, 4, 4])


def test_a_spatial_split_of_a_summed_output_raises_as_in_the_model() -> None:
    """Y[p+r] split over r on 3 instances: the model refuses the tree (overlapping partial
    sums); the records raise the same error, and the batch flags the row."""
    w = workload("""
name: tconv
dims: {p: 4, r: 3}
ops:
  - {name: tc, expr: "Y[p+r] += X[p] * W[r]"}
""")
    root = Tile("DRAM", (Loop("r", 3, True),), (Tile("L1", (Loop("p", 4),), (Op("tc"),)),))
    arch = small_arch(cores=4)
    structure = structure_of(w, arch, Dataflow(root, "hand"))
    row = structure.default_factors
    expected = model_or_error(structure, row)
    assert isinstance(expected, str) and "splits 'tc' along 'r'" in expected
    assert records_or_error(structure, row) == expected
    assert evaluate_batch(structure, row[None, :]).violations["dependency"][0] == 1
    # r:1 splits nothing: the tree is counted, and r's factors cover 1 of its 3
    records = violation_records(structure, [1, 4])
    assert records == model_or_error(structure, np.array([1, 4]))
    assert [(v.kind, v.needed, v.available) for v in records] == [("coverage", 3, 1)]


# ---- carried state (online softmax) -----------------------------------------------------

def test_carried_state_rules() -> None:
    """The three rules of a carried loop (`evaluator/carried.py`): a spatial carried loop, a
    loop inside the carried one, a result of the running value leaving the sweep."""
    from tests.analysis.test_carried import ARCH as SMALL
    from tests.analysis.test_carried import flash_tree, online
    from tileflow.tree import tile

    flow = flash_tree()
    sweep = flow.root.children[0]
    split = Tile("DRAM", (Loop("l", 2), Loop("l", 2, True)), sweep.children, "Shar")
    spatial = Dataflow(Tile("DRAM", flow.root.loops, (split, flow.root.children[1]), "Seq"))
    inside = Dataflow(tile("DRAM", "b:2", tile(
        "DRAM", "l:4 m:2", tile("L1", "m:4 l:2 k:4", tile("Reg", "", "qk")),
        tile("L1", "m:4 l:2", "max"), tile("L1", "m:4 l:2", "sub"),
        tile("L1", "m:4 l:2", "exp"), tile("L1", "m:4 l:2", "sum"),
        tile("L1", "m:4 n:4 l:2", tile("Reg", "", "pv")), primitive="Shar"),
        tile("L1", "m:8 n:4", "div")))
    leaves = Dataflow(tile("DRAM", "b:2 m:2", tile(
        "DRAM", "l:4", tile("L1", "m:4 l:2 k:4", tile("Reg", "", "qk")),
        tile("L1", "m:4 l:2", "max"), tile("L1", "m:4 l:2", "sub"),
        tile("L1", "m:4 l:2", "exp"), tile("L1", "m:4 l:2", "sum"), primitive="Shar"),
        tile("L1", "m:4 n:4 l:8", tile("Reg", "", "pv")), tile("L1", "m:4 n:4", "div")))
    w = online()
    for flow, text, tensor in ((spatial, "must be temporal", "M"),
                               (inside, "put the carried loops innermost", "M"),
                               (leaves, "leaves the loop over 'l'", "E")):
        structure = structure_of(w, SMALL, flow)
        row = structure.default_factors
        records = violation_records(structure, row)
        assert records == scalar_evaluate(w, SMALL, flow).violations
        assert any(v.kind == "dependency" and v.tensor == tensor and text in v.message
                   for v in records), records
        assert_records_equal(structure, random_rows(structure, 6, np.random.default_rng(5)))


def test_random_carried_sweeps() -> None:
    from tests.analysis.test_carried import ARCH as SMALL
    from tests.analysis.test_carried import SMALL_ONLINE, sweeps

    w = workload(SMALL_ONLINE)
    rng = np.random.default_rng(9)

    @SETTINGS
    @given(sweeps(w))
    def check(flow: Dataflow) -> None:
        structure = structure_of(w, SMALL, flow)
        assert_records_equal(structure, random_rows(structure, 4, rng))

    check()


# ---- against the independent oracle ------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
def test_engine_records_match_the_oracle(case: str) -> None:
    """The engine's records against `tests/reference_checks.py` (which shares no code with
    either copy of the model) on the oracle test's random trees, some broken on purpose, and
    small capacities: kind, node, level and both amounts."""
    import random

    from reference_checks import violations
    from reference_sim import Oracle

    from tests.analysis.test_oracle_violations import NAMES, broken
    from tests.analysis.test_oracle_violations import SETTINGS as ORACLE_SETTINGS

    w = workload(CASES[case])
    seen: set[str] = set()

    @ORACLE_SETTINGS
    @given(trees(w), st.sampled_from([4.0, 8.0, 20.0, 60.0]), st.sampled_from([2.0, 3.0, 5.0]),
           st.integers(0, 2**31))
    def check(flow: Dataflow, l1_words: float, reg_words: float, seed: int) -> None:
        flow = broken(w, flow, random.Random(seed))
        arch = replace(ARCH, levels=(ARCH.levels[0],
                                     replace(ARCH.levels[1], capacity_words=l1_words),
                                     replace(ARCH.levels[2], capacity_words=reg_words)))
        try:
            structure = structure_of(w, arch, flow)
            records = violation_records(structure, structure.default_factors)
        except InvalidDataflow:
            return
        got = {(v.kind, None if v.kind == "capacity" else v.node, v.level, v.needed,
                v.available) for v in records}
        expected = violations(Oracle(w, NAMES, flow), arch)
        if any(v[0] == "coverage" for v in expected):
            # an intermediate's words at its common ancestor: both copies of the model take
            # the largest of the producer's and consumers' boxes, the oracle their union;
            # equal where the producer covers what its consumers read, not on a tree whose
            # factors fall short (already invalid), so capacities are compared on the others
            got = {v for v in got if v[0] != "capacity"}
            expected = {v for v in expected if v[0] != "capacity"}
        assert got == expected, f"engine {got - expected} oracle {expected - got}\n" + \
            render(flow.root)
        seen.update(v.kind for v in records)

    check()
    required = {"capacity", "coverage", "fanout"} | (
        {"dependency"} if w.intermediates else set()) | (
        {"window"} if case == "conv-halo" else set()) | (
        {"array"} if case in ("gemm", "chain", "softmax") else set())
    assert required <= seen, seen


def test_one_pass_gives_the_amounts_and_the_records() -> None:
    """`checked` on one row: the batch's amounts per kind and the records, from one check."""
    from tileflow.evaluator.engine import Rows
    from tileflow.evaluator.limits import footprints
    from tileflow.evaluator.violations import checked

    w = workload(GEMM)
    root = Tile("DRAM", (Loop("m", 4, True),), (Tile("L1", (Loop("n", 4), Loop("k", 2)),
                                                    (Op("mm"),)),))
    structure = structure_of(w, small_arch(l1_words=10), Dataflow(root, "hand"))
    row = structure.default_factors
    r = Rows(structure.compiled, structure.all_loop_factors(row[None, :]))
    amounts, records = checked(r, footprints(r))
    assert records == violation_records(structure, row)
    # m:4 over 2 L1 instances; k's factors cover 2 of 4; per instance the L1 tile holds
    # A 1 x 2, B 2 x 4 and C 1 x 4: 14 words in 10
    assert [(v.kind, v.needed, v.available) for v in records] == [
        ("coverage", 4, 2), ("capacity", 14, 10), ("fanout", 4, 2)]
    assert {k: v[0] for k, v in amounts.amounts.items() if v[0]} == {
        "coverage": 2, "capacity": 4, "fanout": 2}
