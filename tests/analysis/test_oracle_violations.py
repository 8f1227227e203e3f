"""The model's violations (capacity, fan-out, array, coverage, dependency, window) agree
exactly with the oracle's (`tests/reference_checks.py`, from docs/concepts.md,
docs/footprints.md and the README's list of kinds): kind, node, level and both amounts, on
random small trees and capacities, some of them broken on purpose (a factor cut, a
reduction looped above a consumer, a producer short of its consumer's window, dependent
`Para` children)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from helpers import CHAIN, CONV, GEMM, SOFTMAX, STRIDED, TWINS, workload
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from reference_checks import violations
from reference_sim import Oracle
from trees import ARCH, trees

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, Loop, Op, Tile, map_tiles, render, tile, walk

NAMES = [lv.name for lv in ARCH.levels]


def _ops(node: Tile) -> set[str]:
    return {n.op for _, n in walk(node) if isinstance(n, Op)}


def broken(w: Workload, flow: Dataflow, rng: random.Random) -> Dataflow:
    """The tree as drawn, or with one rule broken: a loop's factor cut by one or halved
    (coverage), a loop over a producer's reduction added to the root (dependency), a
    producer's loop over a window axis cut (window), the root made `Para` (dependency)."""
    kind = rng.randrange(6)
    tiles = [p for p, n in walk(flow.root) if isinstance(n, Tile) and n.loops]

    def cut(target: str, pick, halve: bool = False):
        def edit(path: str, t: Tile) -> Tile:
            if path != target:
                return t
            i = pick(t)
            lp = t.loops[i]
            f = max(1, lp.factor // 2 if halve else lp.factor - 1)
            return replace(t, loops=(*t.loops[:i], replace(lp, factor=f), *t.loops[i + 1:]))
        return replace(flow, root=map_tiles(flow.root, edit))

    if kind in (1, 2) and tiles:
        return cut(rng.choice(tiles), lambda t: rng.randrange(len(t.loops)), kind == 2)
    if kind == 3:
        dims = sorted({d for t in w.intermediates
                       for d in w.op_by_name[w.producer[t]].reduction_dims})
        if dims:
            loop = Loop(rng.choice(dims), 2)
            return replace(flow, root=replace(flow.root, loops=(loop, *flow.root.loops)))
    if kind == 4:
        windowed = {(w.producer[t], axis.terms[0][0]) for t in w.intermediates
                    for c in w.consumers[t] for axis in w.op_by_name[c].access(t).axes
                    if len(axis.terms) > 1}
        for producer, d in sorted(windowed):
            found = [p for p, n in walk(flow.root) if isinstance(n, Tile) and p != "root"
                     and producer in _ops(n) and any(lp.dim == d and lp.factor > 1
                                                     for lp in n.loops)]
            if found:
                return cut(rng.choice(found), lambda t, d=d: max(
                    i for i, lp in enumerate(t.loops) if lp.dim == d and lp.factor > 1))
    if kind == 5:
        return replace(flow, root=replace(flow.root, primitive="Para"))
    return flow


CASES = {"gemm": GEMM, "chain": CHAIN, "softmax": SOFTMAX, "conv-halo": CONV,
         "strided": STRIDED, "independent twins": TWINS}
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("case", CASES)
def test_violations_match_the_oracle(case: str) -> None:
    w = workload(CASES[case])
    seen: dict = {}

    @SETTINGS
    @given(trees(w), st.sampled_from([4.0, 8.0, 20.0, 60.0]), st.sampled_from([2.0, 3.0, 5.0]),
           st.integers(0, 2**31))
    def check(flow: Dataflow, l1_words: float, reg_words: float, seed: int) -> None:
        flow = broken(w, flow, random.Random(seed))
        arch = replace(ARCH, levels=(ARCH.levels[0],
                                     replace(ARCH.levels[1], capacity_words=l1_words),
                                     replace(ARCH.levels[2], capacity_words=reg_words)))
        try:
            result = evaluate(w, arch, flow)
        except InvalidDataflow:
            return
        oracle = Oracle(w, NAMES, flow)
        # the model names the tile whose footprint it reports; the oracle only the level
        got = {(v.kind, None if v.kind == "capacity" else v.node, v.level, v.needed,
                v.available) for v in result.violations}
        expected = violations(oracle, arch)
        assert got == expected, f"model {got - expected} oracle {expected - got}\n" + \
            render(flow.root)
        for v in got:
            seen[v[0]] = seen.get(v[0], 0) + 1

    check()
    required = {"capacity", "coverage", "fanout"} | (
        {"dependency"} if w.intermediates else set()) | (
        {"window"} if case == "conv-halo" else set()) | (
        {"array"} if case in ("gemm", "chain", "softmax") else set())
    assert required <= set(seen), seen


def test_a_producer_short_of_its_consumers_window():
    """conv1 computes two rows of A per step of the root's p:5 (the root steps by conv2's
    one row); conv2 reads A[p+t-1] over t < 3: it needs 3 rows per step (window: needed 3,
    available 2), named at conv1's tile."""
    w = workload(CONV)
    flow = Dataflow(tile("DRAM", "p:5", tile("L1", "c1:2 c0:2 r:3 p:2", "conv1"),
                         tile("L1", "c2:2 c1:2 t:3", "conv2")))
    expected = {("window", "root.0", "L1", 3, 2)}
    assert violations(Oracle(w, NAMES, flow), ARCH) == expected
    got = {(v.kind, v.node, v.level, v.needed, v.available)
           for v in evaluate(w, ARCH, flow).violations}
    assert got == expected


def test_a_shared_loop_steps_by_the_smallest_extent_below_it():
    """CHAIN (m = 4): a root m:2 over g1 with m:2 below and g2 with no m loop below. The
    root's loop steps by g2's extent, 1 (docs/concepts.md), so g2 covers rows 0..1 (2 of
    4) and g1 rows 0..2 (3 of 4, though 2 x 2 = 4): both are coverage violations."""
    w = workload(CHAIN)
    flow = Dataflow(tile("DRAM", "m:2", tile("Reg", "m:2 l:4 k:3", "g1"),
                         tile("Reg", "n:3 l:4", "g2"), primitive="Shar"))
    expected = {("coverage", "root.1", "Reg", 4, 2), ("coverage", "root.0", "Reg", 4, 3)}
    oracle = Oracle(w, NAMES, flow)
    assert {v for v in violations(oracle, ARCH) if v[0] == "coverage"} == expected
    got = {(v.kind, v.node, v.level, v.needed, v.available)
           for v in evaluate(w, ARCH, flow).violations if v.kind == "coverage"}
    assert got == expected


def test_the_checks_share_no_code_with_the_model():
    import ast

    import reference_checks

    tree = ast.parse(open(reference_checks.__file__).read())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {m for m in imported if m.startswith("tileflow")} <= {"tileflow.specs.arch"}
