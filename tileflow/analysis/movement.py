"""Counting the words a loop nest moves into a buffer, without enumerating its steps.

A buffer holds, at each step t of the temporal loops above it, a box-shaped slice S_t of a
tensor (one interval per tensor axis). The words moved in are

    DM = sum_t |S_t| - sum_{t >= 1} |S_t & S_{t-1}|

and the events t >= 1 are grouped by the loop i that advanced (inner loops resetting).
Each axis depends only on the loops over its own dimensions, so both sums factor into a
product over axes of small one-dimensional sums (exact under clipping, halos and offsets).
When an axis is tiled exactly (no clipping, no offset) its sums have closed forms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product


@dataclass(frozen=True)
class LoopRec:
    """A loop above the buffer: `n` iterations of `dim`, moving the slice by `stride`.

    `drop`: the buffer keeps nothing of this tensor across iterations of this loop
    (spatial instances, Seq siblings that drop data, no-reuse programs)."""

    dim: str
    n: int
    stride: int
    drop: bool = False


@dataclass(frozen=True)
class AxisRec:
    """A tensor axis sum(coef * dim) + offset, clipped to [0, size)."""

    terms: tuple[tuple[str, int], ...]
    offset: int
    size: int


@dataclass(frozen=True)
class DimRec:
    """A dimension's size, the slice extent inside the buffer, and the op's start shift."""

    size: int
    extent: int
    shift: int = 0


Dims = Mapping[str, DimRec]


def _regular(axis: AxisRec, dims: Dims, loops: Sequence[LoopRec]) -> bool:
    """True when the axis is one dimension tiled exactly: every slice is the full extent."""
    if len(axis.terms) != 1 or axis.terms[0][1] != 1 or axis.offset:
        return False
    d = axis.terms[0][0]
    rec = dims[d]
    if rec.shift or rec.size != axis.size:
        return False
    span = rec.extent
    for stride, n in sorted((lp.stride, lp.n) for lp in loops if lp.dim == d and lp.n > 1):
        if stride != span:
            return False
        span *= n
    return span == rec.size


def _interval(axis: AxisRec, dims: Dims, pos: Mapping[str, int]) -> tuple[int, int]:
    lo = hi = axis.offset
    for d, c in axis.terms:
        rec = dims[d]
        x = rec.shift + pos.get(d, 0)
        dlo, dhi = max(x, 0), min(x + rec.extent, rec.size)
        if dhi <= dlo:
            return 0, 0
        lo += c * dlo
        hi += c * (dhi - 1)
    return max(lo, 0), min(hi + 1, axis.size)


def _positions(loops: Sequence[LoopRec], values: Sequence[int]) -> dict[str, int]:
    pos: dict[str, int] = {}
    for lp, v in zip(loops, values, strict=True):
        pos[lp.dim] = pos.get(lp.dim, 0) + v * lp.stride
    return pos


def _axis_loops(axis: AxisRec, loops: Sequence[LoopRec]) -> list[int]:
    axis_dims = {d for d, _ in axis.terms}
    return [i for i, lp in enumerate(loops) if lp.dim in axis_dims and lp.n > 1]


def _volume_sum(axis: AxisRec, dims: Dims, loops: Sequence[LoopRec]) -> int:
    """Sum over all steps of the axis's slice length (only loops over the axis's dims)."""
    idx = _axis_loops(axis, loops)
    if _regular(axis, dims, loops):
        return dims[axis.terms[0][0]].extent * math.prod(loops[i].n for i in idx)
    sub = [loops[i] for i in idx]
    total = 0
    for values in product(*(range(lp.n) for lp in sub)):
        lo, hi = _interval(axis, dims, _positions(sub, values))
        total += max(hi - lo, 0)
    return total


def _overlap_sum(axis: AxisRec, dims: Dims, loops: Sequence[LoopRec], i: int) -> int:
    """Sum, over the events where loop i advances, of |slice before & slice after| on this axis.

    The multiplicity from loops over other dimensions is applied by the caller."""
    idx = _axis_loops(axis, loops)
    outer = [j for j in idx if j < i]
    inner = [j for j in idx if j > i]
    own = i in idx
    if _regular(axis, dims, loops):
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
        a_lo, a_hi = _interval(axis, dims, _pos(before))
        b_lo, b_hi = _interval(axis, dims, _pos(after))
        total += max(0, min(a_hi, b_hi) - max(a_lo, b_lo))
    return total


def _pos(pairs: Sequence[tuple[LoopRec, int]]) -> dict[str, int]:
    pos: dict[str, int] = {}
    for lp, v in pairs:
        pos[lp.dim] = pos.get(lp.dim, 0) + v * lp.stride
    return pos


def iteration_count(axes: Sequence[AxisRec], dims: Dims, loops: Sequence[LoopRec]) -> int:
    """Sum over all steps of the slice size (the operation count, for the op's own axes)."""
    tensor_dims = {d for a in axes for d, _ in a.terms}
    other = math.prod(lp.n for lp in loops if lp.dim not in tensor_dims)
    return other * math.prod(_volume_sum(a, dims, loops) for a in axes)


def words_moved(axes: Sequence[AxisRec], dims: Dims, loops: Sequence[LoopRec]) -> int:
    """Total words filled into the buffer over the whole loop nest (loops outermost first)."""
    tensor_dims = {d for a in axes for d, _ in a.terms}
    total = iteration_count(axes, dims, loops)
    for i, lp in enumerate(loops):
        if lp.n <= 1 or _dropped(loops, i):
            continue
        mult = math.prod(o.n for o in loops[:i] if o.dim not in tensor_dims)
        if lp.dim not in tensor_dims:
            mult *= lp.n - 1
        if mult:
            total -= mult * math.prod(_overlap_sum(a, dims, loops, i) for a in axes)
    return total


def _dropped(loops: Sequence[LoopRec], i: int) -> bool:
    return loops[i].drop or any(lp.drop and lp.n > 1 for lp in loops[i + 1 :])


def first_touches(axes: Sequence[AxisRec], dims: Dims, loops: Sequence[LoopRec],
                  epoch: Sequence[bool]) -> int:
    """Elements entering the buffer for the first time within an epoch (they need no fill).

    `epoch[i]` marks loops whose every iteration starts afresh (spatial instances,
    recomputation, steps of the intermediate's lowest common ancestor). Axes must be plain
    dimensions whose tiles leave no gaps, so the union over the other loops is an interval."""
    tensor_dims = {d for a in axes for d, _ in a.terms}
    other = math.prod(lp.n for lp, e in zip(loops, epoch, strict=True)
                      if e and lp.dim not in tensor_dims)
    total = other
    for axis in axes:
        d = axis.terms[0][0]
        if _regular(axis, dims, loops):
            total *= axis.size
            continue
        ep = [lp for lp, e in zip(loops, epoch, strict=True) if e and lp.dim == d and lp.n > 1]
        rest = [lp for lp, e in zip(loops, epoch, strict=True)
                if not e and lp.dim == d and lp.n > 1]
        span = sum((lp.n - 1) * lp.stride for lp in rest)
        acc = 0
        for values in product(*(range(lp.n) for lp in ep)):
            base = _positions(ep, values).get(d, 0)
            lo, hi = _interval(axis, dims, {d: base})
            last_lo, last_hi = _interval(axis, dims, {d: base + span})
            if last_hi > last_lo:
                hi = last_hi
            else:  # trailing slices clipped empty: the union ends at the last non-empty one
                for values2 in product(*(range(lp.n) for lp in rest)):
                    s = _positions(rest, values2).get(d, 0)
                    hi = max(hi, _interval(axis, dims, {d: base + s})[1])
            acc += max(hi - lo, 0)
        total *= acc
    return total
