"""The closed forms of the batched evaluator against brute-force sums over every step."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tileflow.analysis.movement import AxisRec
from tileflow.evaluator.lattice import I64, VDim, VLoop, ap_clip_sum, progression
from tileflow.evaluator.sums import grid_overlap, grid_volume
from tileflow.evaluator.windows import piecewise_sum, window_overlap, window_volume

SMALL = st.integers(-20, 20)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(SMALL, st.integers(1, 7), st.integers(0, 12), st.integers(1, 15))
def test_clamped_progression_sum(start: int, step: int, count: int, size: int) -> None:
    """The closed form against the sum itself, for one row (Python's integers) and for
    several rows at once (NumPy's arrays)."""
    expected = sum(min(max(start + k * step, 0), size) for k in range(count))
    got = ap_clip_sum(np.array([start]), np.array([step]), np.array([count]), size)
    assert got.tolist() == [expected]
    rows = ap_clip_sum(np.array([start, 0]), np.array([step, 1]), np.array([count, 0]), size)
    assert rows.tolist() == [expected, 0]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 12)), min_size=2, max_size=4))
def test_progression_of_one_row_and_of_many(loops) -> None:
    """Whether loops' offsets form one progression, with its step and count: the same for a
    row alone and among other rows, and the progression is what the loops enumerate."""
    one = [VLoop("d", np.array([n]), np.array([s])) for n, s in loops]
    two = [VLoop("d", np.array([n, 1]), np.array([s, 1])) for n, s in loops]
    step, count, ok = progression(one, 1)
    steps, counts, oks = progression(two, 2)
    assert (step[0], count[0], ok[0]) == (steps[0], counts[0], oks[0])
    offsets = {0}
    for n, s in loops:
        offsets = {o + k * s for o in offsets for k in range(n)}
    if ok[0]:
        assert sorted(offsets) == [k * step[0] for k in range(count[0])]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(SMALL, st.integers(1, 5), st.integers(0, 15), SMALL, st.integers(1, 4), SMALL)
def test_piecewise_linear_sum(start, step, count, a, c, b) -> None:
    """A clamped line min(max(a + c x, 0), 9) - |x - b| summed between its kinks."""
    def f(x):
        return np.minimum(np.maximum(a + c * x, 0), 9) - np.abs(x - b)

    cuts = [np.array([-(a // c)]), np.array([-((a - 9) // c)]), np.array([b])]
    expected = sum(int(f(np.array(start + k * step))) for k in range(count))
    got = piecewise_sum(f, np.array([start]), np.array([step]), np.array([count]), cuts)
    assert got[0] == expected


def _loop(dim: str, n: int, stride: int) -> VLoop:
    return VLoop(dim, np.array([n], dtype=I64), np.array([stride], dtype=I64))


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 6), st.integers(1, 4),
       st.integers(1, 3), st.integers(-2, 0), st.integers(1, 3), st.integers(1, 3),
       st.booleans(), st.integers(1, 2), st.integers(0, 1))
def test_window_axis_sums(coef, extent, inner, outer, kernel, offset, instances, spread,
                          with_union, gap, shift) -> None:
    """A window axis coef * p + r + offset: the piecewise closed forms equal the grid of
    every step (slice lengths, overlaps between consecutive steps, unions of instances)."""
    size_p = max(extent * inner * outer - 1, 1)
    axis = AxisRec((("p", coef), ("r", 1)), offset, coef * (size_p - 1) + kernel)
    dims = {"p": VDim(size_p, np.array([extent]), np.array([-shift])),
            "r": VDim(kernel, np.array([kernel]), np.array([0]))}
    loops = [_loop("p", outer, extent * inner * spread), _loop("p", inner, extent * spread)]
    union = [_loop("p", instances, extent * gap)] if with_union and spread == 1 else []
    if union:
        loops = [_loop("p", outer, extent * gap * inner * instances),
                 _loop("p", inner, extent * gap * instances)]
    got, ok = window_volume(axis, dims, loops, union, 1)
    if ok[0]:
        assert got[0] == grid_volume(axis, dims, loops, union, 1)[0]
    for i in range(len(loops)):
        got, ok = window_overlap(axis, dims, loops, i, union, 1)
        if ok[0]:
            assert got[0] == grid_overlap(axis, dims, loops, i, union, 1)[0]


def test_strided_window_is_a_closed_form() -> None:
    """Conv rows 2p + r - 1 (kernel 3) over p tiled 2 x 4, instances along p joined: the
    closed forms apply (no enumeration) and give the counts by hand."""
    axis = AxisRec((("p", 2), ("r", 1)), -1, 16)
    dims = {"p": VDim(8, np.array([1]), np.array([0])),
            "r": VDim(3, np.array([3]), np.array([0]))}
    loops = [_loop("p", 2, 4), _loop("p", 4, 1)]
    total, ok = window_volume(axis, dims, loops, [], 1)
    # rows 2p-1 .. 2p+1 clipped to [0, 16): p = 0 gives 2 rows, p = 1..7 give 3
    assert ok[0] and total[0] == 2 + 7 * 3
    common, ok = window_overlap(axis, dims, loops, 1, [], 1)
    # consecutive p share one row: 3 advances in each of the 2 outer steps
    assert ok[0] and common[0] == 2 * 3
    joined, ok = window_volume(axis, dims, [_loop("p", 2, 4)], [_loop("p", 4, 1)], 1)
    # per outer step the union of 4 instances: rows -1..7 -> 8 rows, then 7..15 -> 9 rows
    assert ok[0] and joined[0] == 8 + 9


def test_largest_span_from_candidate_positions() -> None:
    """The longest clipped span of an axis (plain, a strided window with padding, three
    terms) over every position of the loops above, by brute force over each row's own
    positions, equals the few-candidate form wherever each dim's positions form one
    progression; random sizes, extents, halo shifts and loops."""
    from itertools import product

    from tileflow.evaluator.limits import _separable_span, _within

    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(400):
        rows = 12
        sizes = {"p": int(rng.integers(1, 30)), "r": int(rng.integers(1, 5)),
                 "q": int(rng.integers(1, 9))}
        terms = [(("p", int(rng.integers(1, 3))), ("r", 1)), (("p", 1),),
                 (("p", 1), ("r", 2), ("q", 1))][int(rng.integers(3))]
        offset = int(rng.integers(-2, 2)) if len(terms) > 1 else int(rng.integers(-1, 1))
        size = offset + sum(c * (sizes[d] - 1) for d, c in terms) + 1 + int(rng.integers(0, 2))
        axis = AxisRec(terms, offset, size)
        dims = {d: VDim(sizes[d], rng.integers(1, sizes[d] + 3, rows),
                        rng.integers(-2, 1, rows) * (rng.random() < 0.5)) for d, _ in terms}
        loops = [VLoop(d, rng.integers(1, 6, rows), rng.integers(1, 8, rows))
                 for d in rng.choice(["p", "p", "r", "q"], int(rng.integers(0, 4)))
                 if d in dims]
        assert _within(axis, dims)
        got, ok = _separable_span(axis, dims, loops, rows)
        for row in np.flatnonzero(ok):
            best = 0
            for values in product(*(range(int(lp.n[row])) for lp in loops)):
                pos = dict.fromkeys(dims, 0)
                for lp, v in zip(loops, values, strict=True):
                    pos[lp.dim] += v * int(lp.stride[row])
                lo = hi = offset
                for d, c in terms:
                    x = int(dims[d].shift[row]) + pos[d]
                    a, b = max(x, 0), min(x + int(dims[d].extent[row]), dims[d].size)
                    if b <= a:
                        break
                    lo, hi = lo + c * a, hi + c * (b - 1)
                else:
                    best = max(best, min(hi + 1, size) - max(lo, 0))
            assert got[row] == best
            checked += 1
    assert checked > 2000


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(1, 6),
       st.lists(st.tuples(st.integers(1, 4), st.integers(1, 24)), min_size=2, max_size=6))
def test_nested_chain_of_one_row_and_of_many(start, loops) -> None:
    """Whether loops sorted by stride each stride over the span of those before them, and the
    final span: the same for a row alone and among other rows, and a chain that nests
    enumerates every multiple of `start` below its span once."""
    from tileflow.evaluator.engine import nested_chain

    ok, span = nested_chain(np.array([start]), [(np.array([n]), np.array([s]))
                                                for n, s in loops])
    oks, spans = nested_chain(np.array([start, 1]), [(np.array([n, 1]), np.array([s, 1]))
                                                     for n, s in loops])
    assert (bool(ok[0]), int(span[0])) == (bool(oks[0]), int(spans[0]))
    if ok[0]:
        offsets = {0}
        for n, s in loops:
            offsets = {o + k * s for o in offsets for k in range(n)}
        assert sorted(offsets) == list(range(0, int(span[0]), start))
