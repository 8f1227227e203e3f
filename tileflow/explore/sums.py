"""The per-axis sums of `tileflow.analysis.movement`, for many factor rows at once.

Every quantity is an int64 array over rows. A sum over the steps of the loops that move one
tensor axis is evaluated on a grid of loop values (padded to the largest trip count among the
rows, masked per row), so one NumPy expression covers every row; the spatial instances whose
union a parent sends form one more grid axis, and a union of intervals is measured by sorting
and a running maximum. Single-dimension axes whose loops form one arithmetic progression use
closed forms (`ap_clip_sum`) instead of a grid."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tileflow.analysis.movement import AxisRec

I64 = np.int64


@dataclass(frozen=True)
class VLoop:
    """A loop above a buffer: per-row trip counts `n` and strides; `drop` as in LoopRec."""

    dim: str
    n: np.ndarray
    stride: np.ndarray
    drop: bool = False

    def take(self, rows: np.ndarray) -> VLoop:
        return VLoop(self.dim, self.n[rows], self.stride[rows], self.drop)


@dataclass(frozen=True)
class VDim:
    """A dimension's size, the per-row extent inside the buffer and start shift."""

    size: int
    extent: np.ndarray
    shift: np.ndarray

    def take(self, rows: np.ndarray) -> VDim:
        return VDim(self.size, self.extent[rows], self.shift[rows])


def ap_clip_sum(start: np.ndarray, step: np.ndarray, count: np.ndarray,
                size: int) -> np.ndarray:
    """sum_{k < count} clamp(start + k * step, 0, size), for step >= 1, in closed form."""
    below = np.clip(np.floor_divide(-start, step) + 1, 0, count)  # terms <= 0
    inside = np.clip(-np.floor_divide(start - size, step), 0, count)  # terms < size
    inside = np.maximum(inside, below)
    linear = (inside - below) * start + step * ((inside * (inside - 1)) // 2
                                                - (below * (below - 1)) // 2)
    return linear + (count - inside) * size


def ap_length_sum(start: np.ndarray, step: np.ndarray, count: np.ndarray, extent: np.ndarray,
                  size: int) -> np.ndarray:
    """sum_k |[start + k step, start + k step + extent) & [0, size)| (extent >= 0)."""
    return ap_clip_sum(start + extent, step, count, size) - ap_clip_sum(start, step, count, size)


class Grid:
    """Loop values on a padded grid: axis 0 is the row, axis 1 enumerates every combination
    of the loops' values (up to each loop's largest trip count), `valid` masks the padding."""

    def __init__(self, rows: int, loops: Sequence[tuple[VLoop, int]]):
        """`loops`: (loop, how many values: 0 = all n, -1 = n - 1, 'last' handled by caller)."""
        sizes = []
        for lp, less in loops:
            sizes.append(max(int((lp.n + less).max(initial=1)), 1))
        self.size = int(np.prod(sizes, dtype=np.int64)) if sizes else 1
        self.values = []
        self.valid = np.ones((rows, self.size), dtype=bool)
        for k, (lp, less) in enumerate(loops):
            shape = [1] * len(sizes)
            shape[k] = sizes[k]
            v = np.broadcast_to(np.arange(sizes[k], dtype=I64).reshape(shape), sizes).reshape(
                1, self.size)
            self.values.append(v)
            self.valid &= v < (lp.n + less)[:, None]


def _positions(pairs, rows: int) -> dict[str, np.ndarray]:
    """Per dim, the summed loop offsets: pairs of (loop, values [rows or 1, K])."""
    pos: dict[str, np.ndarray] = {}
    for lp, v in pairs:
        add = v * lp.stride[:, None]
        pos[lp.dim] = pos[lp.dim] + add if lp.dim in pos else add
    return pos


def interval(axis: AxisRec, dims: dict[str, VDim], pos: dict[str, np.ndarray]):
    """The clipped interval [lo, hi) of the axis at loop offsets `pos` (arrays broadcast
    over rows in axis 0); empty intervals come back as lo == hi == 0."""
    lo = hi = axis.offset
    empty = False
    for d, c in axis.terms:
        rec = dims[d]
        x = rec.shift[:, None] + pos.get(d, 0)
        dlo = np.maximum(x, 0)
        dhi = np.minimum(x + rec.extent[:, None], rec.size)
        empty = empty | (dhi <= dlo)
        lo = lo + c * dlo
        hi = hi + c * (dhi - 1)
    lo = np.maximum(lo, 0)
    hi = np.minimum(hi + 1, axis.size)
    empty = empty | (hi <= lo)
    return np.where(empty, 0, lo), np.where(empty, 0, hi)


def union_length(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Measure of the union of intervals [lo, hi) along the last axis (empty: lo == hi)."""
    if lo.shape[-1] == 1:
        return (hi - lo)[..., 0]
    order = np.argsort(lo, axis=-1, kind="stable")
    lo = np.take_along_axis(lo, order, -1)
    hi = np.take_along_axis(hi, order, -1)
    reach = np.maximum.accumulate(hi, axis=-1)
    before = np.concatenate([np.full(lo.shape[:-1] + (1,), np.iinfo(I64).min // 2),
                             reach[..., :-1]], axis=-1)
    return np.clip(hi - np.maximum(lo, before), 0, None).sum(axis=-1)


def _spans(axis: AxisRec, dims, pos, union: Sequence[VLoop], rows: int):
    """Intervals of the axis at `pos`, one per spatial instance of `union`: [rows, K, U]."""
    if not union:
        lo, hi = interval(axis, dims, pos)
        return lo[..., None], hi[..., None]
    grid = Grid(rows, [(lp, 0) for lp in union])
    shifted = {k: v[..., None] for k, v in pos.items()}
    for d, v in _positions([(lp, val) for lp, val in zip(union, grid.values, strict=True)],
                           rows).items():
        v = v[:, None, :]
        shifted[d] = shifted[d] + v if d in shifted else v
    lo, hi = _interval3(axis, dims, shifted)
    keep = grid.valid[:, None, :]
    return np.where(keep, lo, 0), np.where(keep, hi, 0)


def _interval3(axis: AxisRec, dims, pos):
    lo = hi = axis.offset
    empty = False
    for d, c in axis.terms:
        rec = dims[d]
        x = rec.shift[:, None, None] + pos.get(d, 0)
        dlo = np.maximum(x, 0)
        dhi = np.minimum(x + rec.extent[:, None, None], rec.size)
        empty = empty | (dhi <= dlo)
        lo = lo + c * dlo
        hi = hi + c * (dhi - 1)
    lo = np.maximum(lo, 0)
    hi = np.minimum(hi + 1, axis.size)
    empty = empty | (hi <= lo)
    return np.where(empty, 0, lo), np.where(empty, 0, hi)


def _axis_loops(axis: AxisRec, loops: Sequence[VLoop]) -> list[int]:
    names = {d for d, _ in axis.terms}
    return [i for i, lp in enumerate(loops) if lp.dim in names]


def _plain(axis: AxisRec, dims) -> bool:
    return (len(axis.terms) == 1 and axis.terms[0][1] == 1 and not axis.offset
            and dims[axis.terms[0][0]].size == axis.size)


def volume_sum(axis: AxisRec, dims, loops: Sequence[VLoop], union: Sequence[VLoop],
               rows: int) -> np.ndarray:
    """Sum over the steps of the axis's loops of the slice length (union over `union`)."""
    sub = [loops[i] for i in _axis_loops(axis, loops)]
    mine = _union_of(axis, union)
    if _plain(axis, dims) and not mine:
        merged = _progression(sub, rows)
        if merged is not None:
            rec = dims[axis.terms[0][0]]
            step, count = merged
            return ap_length_sum(rec.shift, step, count, rec.extent, rec.size)
    grid = Grid(rows, [(lp, 0) for lp in sub])
    pos = _positions(list(zip(sub, grid.values, strict=True)), rows)
    lo, hi = _spans(axis, dims, pos, mine, rows)
    return np.where(grid.valid, union_length(lo, hi), 0).sum(axis=1)


def _union_of(axis: AxisRec, union: Sequence[VLoop]) -> list[VLoop]:
    names = {d for d, _ in axis.terms}
    return [lp for lp in union if lp.dim in names]


def _progression(sub: Sequence[VLoop], rows: int):
    """When the loops' offsets are one arithmetic progression in every row (loops of one dim
    whose strides nest: each loop strides over all the values of the ones inside it), its
    (step, count); else None."""
    if not sub:
        one = np.ones(rows, dtype=I64)
        return one, one
    if len(sub) == 1:
        return sub[0].stride, sub[0].n
    # order by stride per row: the nesting holds when, sorted by (stride, n), each stride is
    # the previous stride times the previous count, ignoring loops of one iteration
    n = np.stack([lp.n for lp in sub])
    s = np.stack([lp.stride for lp in sub])
    key = np.where(n > 1, s, np.iinfo(I64).max)
    order = np.argsort(key, axis=0, kind="stable")
    n = np.take_along_axis(n, order, 0)
    s = np.take_along_axis(s, order, 0)
    count = n.prod(axis=0)
    step = np.where(n[0] > 1, s[0], 1)
    span = step * n[0]
    ok = np.ones(rows, dtype=bool)
    for k in range(1, len(sub)):
        ok &= (n[k] == 1) | (s[k] == span)
        span = span * n[k]
    if not ok.all():
        return None
    return step, count


def overlap_sum(axis: AxisRec, dims, loops: Sequence[VLoop], i: int,
                union: Sequence[VLoop], rows: int) -> np.ndarray:
    """Sum, over the events where loop i advances, of |slice before & slice after|."""
    idx = _axis_loops(axis, loops)
    outer = [loops[j] for j in idx if j < i]
    inner = [loops[j] for j in idx if j > i]
    own = i in idx
    mine = _union_of(axis, union)
    spec = [(lp, 0) for lp in outer] + ([(loops[i], -1)] if own else [])
    grid = Grid(rows, spec)
    pairs = list(zip(outer, grid.values, strict=False))
    before = list(pairs)
    after = list(pairs)
    if own:
        v = grid.values[-1]
        before.append((loops[i], v))
        after.append((loops[i], v + 1))
    before += [(lp, (lp.n - 1)[:, None]) for lp in inner]
    a_lo, a_hi = _spans(axis, dims, _positions(before, rows), mine, rows)
    b_lo, b_hi = _spans(axis, dims, _positions(after, rows), mine, rows)
    both = union_length(np.concatenate([a_lo, b_lo], -1), np.concatenate([a_hi, b_hi], -1))
    common = union_length(a_lo, a_hi) + union_length(b_lo, b_hi) - both
    return np.where(grid.valid, common, 0).sum(axis=1)


def _prod(arrays, rows: int) -> np.ndarray:
    out = np.ones(rows, dtype=I64)
    for a in arrays:
        out = out * a
    return out


def iteration_count(axes: Sequence[AxisRec], dims, loops: Sequence[VLoop],
                    union: Sequence[VLoop], rows: int) -> np.ndarray:
    tensor_dims = {d for a in axes for d, _ in a.terms}
    total = _prod([lp.n for lp in loops if lp.dim not in tensor_dims], rows)
    for a in axes:
        total = total * volume_sum(a, dims, loops, union, rows)
    return total


def words_moved(axes: Sequence[AxisRec], dims, loops: Sequence[VLoop], rows: int,
                fresh: Sequence[bool] | None = None,
                union: Sequence[VLoop] = ()) -> np.ndarray:
    """`movement.words_moved` for every row (same arguments, per-row arrays)."""
    tensor_dims = {d for a in axes for d, _ in a.terms}
    total = iteration_count(axes, dims, loops, union, rows)
    later_drop = np.zeros(rows, dtype=bool)
    later_fresh = np.zeros(rows, dtype=bool)
    skip = []
    for i in reversed(range(len(loops))):
        lp = loops[i]
        skip.append((lp.n <= 1) | lp.drop | later_drop
                    | ((fresh is not None and fresh[i]) | later_fresh))
        later_drop = later_drop | (lp.drop & (lp.n > 1))
        if fresh is not None and fresh[i]:
            later_fresh = later_fresh | (lp.n > 1)
    skip.reverse()
    mult = np.ones(rows, dtype=I64)
    for i, lp in enumerate(loops):
        active = ~skip[i]
        if active.any():
            m = mult if lp.dim in tensor_dims else mult * (lp.n - 1)
            part = m
            for a in axes:
                part = part * overlap_sum(a, dims, loops, i, union, rows)
            total = total - np.where(active, part, 0)
        if lp.dim not in tensor_dims:
            mult = mult * lp.n
    return total


def first_touches(axes: Sequence[AxisRec], dims, loops: Sequence[VLoop],
                  epoch: Sequence[bool], rows: int, guards: Sequence[str] = (),
                  union: Sequence[VLoop] = ()) -> np.ndarray:
    """`movement.first_touches` for every row."""
    tensor_dims = {d for a in axes for d, _ in a.terms} | set(guards)
    total = _prod([lp.n for lp, e in zip(loops, epoch, strict=True)
                   if e and lp.dim not in tensor_dims], rows)
    for g in guards:
        guard = AxisRec(((g, 1),), 0, dims[g].size)
        total = total * _epoch_sum(guard, dims, loops, epoch, (), rows, any_span=True)
    for axis in axes:
        total = total * _epoch_sum(axis, dims, loops, epoch, _union_of(axis, union), rows)
    return total


def _epoch_sum(axis: AxisRec, dims, loops: Sequence[VLoop], epoch: Sequence[bool],
               union: Sequence[VLoop], rows: int, any_span: bool = False) -> np.ndarray:
    """Sum over the marked loops' iterations of the union length (or, with `any_span`,
    whether any slice is non-empty) of the axis's slices under the other loops."""
    names = {d for d, _ in axis.terms}
    ep = [lp for lp, e in zip(loops, epoch, strict=True) if e and lp.dim in names]
    rest = [lp for lp, e in zip(loops, epoch, strict=True) if not e and lp.dim in names]
    outer = Grid(rows, [(lp, 0) for lp in ep])
    inner = Grid(rows, [(lp, 0) for lp in rest])
    k_out, k_in = outer.size, inner.size
    pairs = [(lp, np.repeat(v, k_in, axis=1)) for lp, v in zip(ep, outer.values, strict=True)]
    pairs += [(lp, np.tile(v, (1, k_out))) for lp, v in zip(rest, inner.values, strict=True)]
    lo, hi = _spans(axis, dims, _positions(pairs, rows), union, rows)
    keep = (np.repeat(outer.valid, k_in, axis=1) & np.tile(inner.valid, (1, k_out)))[..., None]
    lo = np.where(keep, lo, 0).reshape(rows, k_out, -1)
    hi = np.where(keep, hi, 0).reshape(rows, k_out, -1)
    if any_span:
        measure = (hi > lo).any(axis=-1).astype(I64)
    else:
        measure = union_length(lo, hi)
    return np.where(outer.valid, measure, 0).sum(axis=1)
