"""The analytic model agrees exactly with the enumerating reference simulator on randomly
generated small trees: every primitive, spatial loops, clipping, sliding windows with halos,
partial-sum spills, Seq drops, intermediates at their home level, the softmax topology."""

from __future__ import annotations

import pytest
from helpers import CHAIN, CONV, GEMM, SOFTMAX, STRIDED, TWINS, workload
from hypothesis import HealthCheck, given, settings
from reference_sim import simulate
from trees import ARCH, trees

from tileflow.analysis.prepare import InvalidDataflow, prepare
from tileflow.analysis.traffic import count
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, render


def _features(plan) -> set[str]:
    """What a tree exercises, so the test can insist every feature was covered."""
    found = set()
    for path in plan.paths.values():
        if path.shift:
            found.add("halo")
        if any(lp.spatial for lp in path.loops):
            found.add("spatial")
        for d in path.op.dims:
            if path.extent_below(-1, d) > plan.workload.sizes[d]:
                found.add("clipping")
    for tile in plan.tiles.values():
        if len(tile.children) > 1:
            found.add(tile.primitive)
    if any(plan.homes[t] > 0 for t in plan.homes):
        found.add("on-chip intermediate")
    return found


def _agree(w: Workload, flow: Dataflow, seen: set[str]) -> None:
    try:
        plan = prepare(w, ARCH, flow)
    except InvalidDataflow:
        return  # the generator can produce trees the model rightly rejects
    if plan.violations:
        return
    seen |= _features(plan)
    counts = count(plan)
    expected, ops = simulate(plan)
    names = [lv.name for lv in ARCH.levels]
    got = {(names[x], t): [round(v) for v in vals] for (x, t), vals in counts.traffic.items()}
    keys = set(got) | set(expected)
    for key in sorted(keys):
        assert got.get(key, [0, 0, 0]) == list(expected.get(key, [0, 0, 0])), (
            f"{key}: model {got.get(key)} simulator {expected.get(key)}\n{render(flow.root)}")
    assert {o: leaf.ops for o, leaf in counts.leaves.items()} == ops


SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


CASES = {
    "gemm": (GEMM, {"spatial", "clipping"}),
    "chain": (CHAIN, {"spatial", "clipping", "Seq", "Shar", "Pipe", "on-chip intermediate"}),
    "softmax": (SOFTMAX, {"spatial", "clipping", "Seq", "Shar", "Pipe",
                          "on-chip intermediate"}),
    "conv-halo": (CONV, {"halo", "spatial", "clipping", "Seq", "Shar"}),
    "strided": (STRIDED, {"spatial", "clipping"}),
    "independent twins": (TWINS, {"spatial", "clipping", "Seq", "Shar", "Pipe", "Para"}),
}


@pytest.mark.parametrize("case", CASES)
def test_model_matches_simulator(case: str) -> None:
    text, required = CASES[case]
    w = workload(text)
    seen: set[str] = set()

    @SETTINGS
    @given(trees(w))
    def check(flow: Dataflow) -> None:
        _agree(w, flow, seen)

    check()
    assert required <= seen, f"the generated trees never exercised {required - seen}"
