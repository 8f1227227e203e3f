"""What the analysis keeps per tree shape (the loop layout and the shape's memo) changes no
result: on random trees, an evaluation with the cache warmed by other factor choices of the
same shape equals one with every cache cleared; the strides the layout computes are those of
the reference walk (`loop_strides`); and a plan given another accelerator does not reuse the
first accelerator's facts."""

from __future__ import annotations

import random
from dataclasses import replace

from helpers import (
    CHAIN,
    CONV,
    SOFTMAX,
    STRIDED,
    TWINS,
    level,
    scalar_evaluate,
    small_arch,
    workload,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scalar_model import evaluate_plan
from scalar_prepare import loop_strides, prepare, shape_memo
from trees import ARCH, keep_halos, trees

from tileflow.analysis import shape as shape_module
from tileflow.analysis.shape import node_key, scan, shape_of
from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.evaluator import compiled as compiled_module
from tileflow.tree import Dataflow, Tile, map_tiles, walk

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))
TEXTS = [CHAIN, CONV, SOFTMAX, STRIDED, TWINS]


def _record(w, arch, flow) -> tuple:
    """Everything an evaluation reports, comparable with ==: the evaluator's (which
    compiles the structure from the shape) and the scalar copy's (which reads the shape's
    memo directly)."""
    out = []
    for model in (evaluate, scalar_evaluate):
        try:
            r = model(w, arch, flow)
        except InvalidDataflow as e:
            out.append(("invalid", str(e)))
            continue
        out.append((r.to_dict(), r.latency_breakdown, r.footprints, r.violations,
                    r.bottleneck))
    return tuple(out)


def _clear() -> None:
    """Every cache of factor-independent work: the shapes and the compiled structures."""
    shape_module._CACHE.clear()
    compiled_module._CACHE.clear()


def _refactored(flow: Dataflow, seed: int) -> Dataflow:
    """The same shape with other factors: each loop's factor moved to 1, halved, kept,
    incremented or doubled (factor-1 loops drop out of the paths, so the memo sees other
    loop sets too)."""
    rng = random.Random(seed)

    def change(_path: str, t: Tile) -> Tile:
        loops = tuple(replace(lp, factor=rng.choice(
            [1, max(lp.factor // 2, 1), lp.factor, lp.factor + 1, 2 * lp.factor]))
            for lp in t.loops)
        return replace(t, loops=loops)

    return replace(flow, root=map_tiles(flow.root, change))


@SETTINGS
@given(st.sampled_from(TEXTS), st.data(), st.integers(0, 2**31))
def test_warm_shape_cache_gives_the_cold_results(text, data, seed):
    w = workload(text)
    flow = data.draw(trees(w))
    if data.draw(st.booleans()):
        flow = keep_halos(w, flow)
    _clear()
    cold = _record(w, ARCH, flow)
    _clear()
    for k in range(4):  # other factor choices of the shape fill the memo first
        _record(w, ARCH, _refactored(flow, seed + k))
    assert _record(w, ARCH, flow) == cold


@SETTINGS
@given(st.sampled_from(TEXTS), st.data())
def test_scan_and_layout_strides_are_the_walks(text, data):
    w = workload(text)
    flow = data.draw(trees(w))
    try:
        plan = prepare(w, ARCH, flow)
    except InvalidDataflow:
        return
    key, tiles = scan(flow.root)
    assert key == node_key(flow.root)
    assert tiles == {p: n for p, n in walk(flow.root) if isinstance(n, Tile)}
    assert list(tiles) == [p for p, n in walk(flow.root) if isinstance(n, Tile)]
    layout = shape_memo(shape_of(w, ARCH, flow))["layout"]
    factors = layout.factors(plan.tiles)
    strides = dict(zip(layout.loops, layout.strides(factors), strict=True))
    walked = loop_strides(w, flow.root)
    assert {key: strides[key] for key, f in zip(layout.loops, factors, strict=True)
            if f > 1} == {key: walked[key] for key, f in zip(layout.loops, factors,
                                                              strict=True) if f > 1}


def test_a_plan_given_another_accelerator_uses_that_accelerators_limits():
    """Fan-out and buffer sizes enter the memo (spatial limits, buffering); a plan re-run
    with another accelerator (`replace(plan, arch=...)`) must give that accelerator's
    evaluation, not the first one's."""
    w = workload(CHAIN)
    from tileflow.tree import tile

    flow = Dataflow(tile("DRAM", "m:2:Sp", tile("L1", "m:2 l:4 k:3", tile("Reg", "", "g1")),
                         tile("L1", "m:2 n:3 l:4", tile("Reg", "", "g2"))), "two")
    wide = small_arch(cores=2)
    levels = (wide.levels[0], level("L1", 64.0, 1, 1, 16.0, 10.0), wide.levels[2])
    narrow = replace(wide, levels=levels)
    first = evaluate_plan(prepare(w, wide, flow))
    again = evaluate_plan(replace(prepare(w, wide, flow), arch=narrow))
    assert again.to_dict() == evaluate(w, narrow, flow).to_dict()
    assert first.valid
    assert {v.kind for v in again.violations} == {"fanout"}
