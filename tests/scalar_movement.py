"""The scalar copy's per-axis sums: the words a loop nest moves into a buffer, without
enumerating its steps (the evaluator's are `tileflow/evaluator/sums.py`).

A buffer holds, at each step t of the temporal loops above it, a box-shaped slice S_t of a
tensor (one interval per tensor axis). The words moved in are

    DM = sum_t |S_t| - sum_{t >= 1} |S_t & S_{t-1}|

and the events t >= 1 are grouped by the loop i that advanced (inner loops resetting).
Each axis depends only on the loops over its own dimensions, so both sums factor into a
product over axes of small one-dimensional sums (exact under clipping, halos and offsets).
When an axis is tiled exactly (no clipping, no offset) its sums have closed forms.

Seen from the parent of spatial instances, the slice is the union of the instances' slices
and an element is new at a step when some instance did not hold it before (instances do not
pass data to each other): per axis, the union minus what every instance holding it now also
held before (`_kept`). Where the instances abut and the other loops step by whole multiples
of their union, no element ever changes instance and the union is one wider slice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import product

from tileflow.analysis.movement import (
    AxisRec,
    Dims,
    LoopRec,
    Spans,
    clipped_interval,
    is_dropped,
    is_regular,
    loop_positions,
    slice_spans,
    spans_length,
    split_union,
    union_length,
)


def _common(a: Spans, b: Spans) -> int:
    total = 0
    for alo, ahi in a:
        for blo, bhi in b:
            total += max(0, min(ahi, bhi) - max(alo, blo))
    return total


def _volume_sum(axis: AxisRec, dims: Dims, loops: Sequence[LoopRec],
                union: Sequence[LoopRec] = ()) -> int:
    """Sum over all steps of the axis's slice length (only loops over the axis's dims)."""
    idx = _axis_loops(axis, loops)
    if not union and is_regular(axis, dims, loops):
        return dims[axis.terms[0][0]].extent * math.prod(loops[i].n for i in idx)
    sub = [loops[i] for i in idx]
    total = 0
    for values in product(*(range(lp.n) for lp in sub)):
        total += spans_length(slice_spans(axis, dims, loop_positions(sub, values), union))
    return total


def _overlap_sum(axis: AxisRec, dims: Dims, loops: Sequence[LoopRec], i: int,
                 union: Sequence[LoopRec] = ()) -> int:
    """Sum, over the events where loop i advances, of |slice before & slice after| on this axis.

    The multiplicity from loops over other dimensions is applied by the caller."""
    idx = _axis_loops(axis, loops)
    outer = [j for j in idx if j < i]
    inner = [j for j in idx if j > i]
    own = i in idx
    if not union and is_regular(axis, dims, loops):
        count = math.prod(loops[j].n for j in outer) * ((loops[i].n - 1) if own else 1)
        moved = own or any(loops[j].n > 1 for j in inner)
        return 0 if moved else count * dims[axis.terms[0][0]].extent
    ranges = [range(loops[j].n) for j in outer] + ([range(loops[i].n - 1)] if own else [])
    total = 0
    for values in product(*ranges):
        before = list(zip((loops[j] for j in outer), values, strict=False))
        after = list(before)
        if own:
            v = values[-1]
            before.append((loops[i], v))
            after.append((loops[i], v + 1))
        before += [(loops[j], loops[j].n - 1) for j in inner]
        pos_before, pos_after = _pair_positions(before), _pair_positions(after)
        if union:
            total += _kept(axis, dims, pos_before, pos_after, union)
        else:
            total += _common(slice_spans(axis, dims, pos_before, ()),
                             slice_spans(axis, dims, pos_after, ()))
    return total


def _kept(axis: AxisRec, dims: Dims, before: Mapping[str, int], after: Mapping[str, int],
          union: Sequence[LoopRec]) -> int:
    """Of the union of the instances' slices after a step, the elements that need no read
    from the parent: every instance holding them now held them before. (An element that
    moves from one instance's window into another's is read again: no sibling transfer.)"""
    covered: Spans = []
    new: Spans = []
    for values in product(*(range(lp.n) for lp in union)):
        shift = loop_positions(union, values)
        now = clipped_interval(axis, dims, {d: after.get(d, 0) + shift.get(d, 0)
                                     for d in {*after, *shift}})
        if now[1] <= now[0]:
            continue
        old = clipped_interval(axis, dims, {d: before.get(d, 0) + shift.get(d, 0)
                                     for d in {*before, *shift}})
        covered.append(now)
        if old[1] <= old[0] or old[1] <= now[0] or now[1] <= old[0]:
            new.append(now)
            continue
        if now[0] < old[0]:
            new.append((now[0], old[0]))
        if old[1] < now[1]:
            new.append((old[1], now[1]))
    return union_length(covered) - union_length(new)


def _pair_positions(pairs: Sequence[tuple[LoopRec, int]]) -> dict[str, int]:
    return loop_positions([lp for lp, _ in pairs], [v for _, v in pairs])


def iteration_count(axes: Sequence[AxisRec], dims: Dims, loops: Sequence[LoopRec],
                    union: Sequence[LoopRec] = ()) -> int:
    """Sum over all steps of the slice size (the operation count, for the op's own axes)."""
    dims, unions = split_union(axes, dims, union, loops)
    return _iteration_count(axes, dims, loops, unions)


def _iteration_count(axes: Sequence[AxisRec], dims: Dims, loops: Sequence[LoopRec],
                     unions: Sequence[Sequence[LoopRec]]) -> int:
    tensor_dims = {d for a in axes for d, _ in a.terms}
    other = math.prod(lp.n for lp in loops if lp.dim not in tensor_dims)
    return other * math.prod(_volume_sum(a, dims, loops, u)
                             for a, u in zip(axes, unions, strict=True))


def words_moved(axes: Sequence[AxisRec], dims: Dims, loops: Sequence[LoopRec],
                fresh: Sequence[bool] | None = None, union: Sequence[LoopRec] = ()) -> int:
    """Total words filled into the buffer over the whole loop nest (loops outermost first).

    `union`: spatial loops whose instances share this buffer's parent, which sends the
    union of their slices. With `fresh` given, elements still resident when a marked loop
    advances count as entering again (an accumulation that restarts touches them anew)."""
    tensor_dims = {d for a in axes for d, _ in a.terms}
    dims, unions = split_union(axes, dims, union, loops)
    total = _iteration_count(axes, dims, loops, unions)
    for i, lp in enumerate(loops):
        if lp.n <= 1 or is_dropped(loops, i) or (fresh is not None and _restarts(loops, fresh, i)):
            continue
        mult = math.prod(o.n for o in loops[:i] if o.dim not in tensor_dims)
        if lp.dim not in tensor_dims:
            mult *= lp.n - 1
        if mult:
            total -= mult * math.prod(_overlap_sum(a, dims, loops, i, u)
                                      for a, u in zip(axes, unions, strict=True))
    return total


def _restarts(loops: Sequence[LoopRec], fresh: Sequence[bool], i: int) -> bool:
    """Advancing loop i changes the value of some marked loop (itself, or one that wraps)."""
    return fresh[i] or any(f and lp.n > 1 for f, lp in zip(fresh[i + 1 :], loops[i + 1 :],
                                                              strict=True))


def timeloop_words_moved(axes: Sequence[AxisRec], dims: Dims,
                         loops: Sequence[LoopRec]) -> int:
    """Words filled into one instance of the buffer as Timeloop counts them (its delta
    rule, `deltas: timeloop`), loops outermost first.

    Timeloop (releases up to 2024) evaluates two iterations of each loop of more than one
    iteration, the first and the second, and counts the second's delta once per iteration
    past the first. At each evaluated step the buffer receives the elements of its slice it
    did not hold at the previous evaluated step, provided the slice moved (the shift of its
    centre, zero included) as at its last step; a step that moves it otherwise refills it
    whole and forgets the last move. A loop that drops the tensor (`LoopRec.drop`) refills
    the slice whole when it or a loop above it advances."""
    live = [lp for lp in loops if lp.n > 1]
    total = 0
    before: list[tuple[int, int]] | None = None
    last_move: tuple[int, ...] | None = None
    for values in product((0, 1), repeat=len(live)):
        weight = math.prod(lp.n - 1 for lp, v in zip(live, values, strict=True) if v)
        now = [clipped_interval(axis, dims, loop_positions(live, values)) for axis in axes]
        size = _box_size(now)
        advanced = max((k for k, v in enumerate(values) if v), default=-1)
        if before is None or (advanced >= 0 and any(lp.drop for lp in live[advanced:])):
            delta, last_move = size, None
        else:
            move = _move(before, now)
            if last_move is None or move == last_move:
                delta = size - math.prod(max(min(a[1], b[1]) - max(a[0], b[0]), 0)
                                         for a, b in zip(before, now, strict=True))
                last_move = move
            else:  # another step than the last: the whole slice again
                delta, last_move = size, None
        total += weight * delta
        before = now
    return total


def _move(before: Sequence[tuple[int, int]], now: Sequence[tuple[int, int]]):
    """The shift of the slice's centre, rounded (none when it held nothing before; zero
    when it holds nothing now)."""
    if not _box_size(before):
        return None
    if not _box_size(now):
        return (0,) * len(now)
    return tuple(_rounded(_centre(b) - _centre(a)) for a, b in zip(before, now, strict=True))


def _box_size(box: Sequence[tuple[int, int]]) -> int:
    return math.prod(max(hi - lo, 0) for lo, hi in box)


def _centre(span: tuple[int, int]) -> float:
    return span[0] + (span[1] - 1 - span[0]) / 2


def _rounded(x: float) -> int:
    """Rounded half away from zero (C's round)."""
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def distinct_slices(axes: Sequence[AxisRec], union: Sequence[LoopRec]) -> int:
    """How many different slices of the tensor the spatial instances of `union` hold (their
    offsets on the tensor's axes): instances with the same slice receive the same words,
    sent once (multicast); the others are each sent their own."""
    offsets = set()
    for values in product(*(range(lp.n) for lp in union)):
        pos = loop_positions(union, values)
        offsets.add(tuple(sum(c * pos.get(d, 0) for d, c in axis.terms) for axis in axes))
    return len(offsets)


def epochs_revisited(loops: Sequence[LoopRec], epoch: Sequence[bool]) -> bool:
    """An unmarked loop of more than one iteration encloses a marked one: an epoch's steps
    are then not consecutive, and an element may stay resident from a step of another epoch
    into one of its own epoch that touched it before."""
    unmarked = False
    for lp, e in zip(loops, epoch, strict=True):
        if lp.n <= 1:
            continue
        if e and unmarked:
            return True
        unmarked = unmarked or not e
    return False


def _axis_loops(axis: AxisRec, loops: Sequence[LoopRec]) -> list[int]:
    axis_dims = {d for d, _ in axis.terms}
    return [i for i, lp in enumerate(loops) if lp.dim in axis_dims and lp.n > 1]


def largest_slice(axis: AxisRec, dims: Dims, loops: Sequence[LoopRec]) -> int:
    """The longest clipped interval of the axis over the positions of the loops above."""
    sub = [loops[i] for i in _axis_loops(axis, loops)]
    best = 0
    for values in product(*(range(lp.n) for lp in sub)):
        lo, hi = clipped_interval(axis, dims, loop_positions(sub, values))
        best = max(best, hi - lo)
    return best
