"""The per-axis sums of `tileflow.analysis.movement`, for many factor rows at once.

Every quantity is an int64 array over rows. A sum over the steps of the loops that move one
tensor axis is evaluated on a grid of loop values (padded to the largest trip count among the
rows, masked per row), so one NumPy expression covers every row; the spatial instances whose
union a parent sends form one more grid axis, and a union of intervals is measured by sorting
and a running maximum. Single-dimension axes whose loops form one arithmetic progression use
closed forms (`ap_clip_sum`) instead of a grid."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tileflow.analysis.movement import AxisRec
from tileflow.evaluator import windows
from tileflow.evaluator.lattice import (
    I64,
    Grid,
    VLoop,
    ap_clip_sum,
    ap_length_sum,
    axis_loops,
    clamp,
    floor_at_cut,
    grid_rows,
    interval,
    lattice_sum,
    on_grid,
    positions,
    progression,
    uncut,
    union_length,
)


def _spans(axis: AxisRec, dims, pos, union: Sequence[VLoop], rows: int):
    """Intervals of the axis at `pos`, one per spatial instance of `union`: [rows, K, U]."""
    if not union:
        lo, hi = interval(axis, dims, pos)
        return lo[..., None], hi[..., None]
    grid = Grid(rows, [(lp, 0) for lp in union])
    shifted = {k: v[..., None] for k, v in pos.items()}
    for d, v in positions([(lp, val) for lp, val in zip(union, grid.values, strict=True)],
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
        dlo = floor_at_cut(dlo, rec.shift[:, None, None] + pos.get(("base", d), 0), rec,
                           pos.get(("slide", d)), lambda a: a[:, None, None])
        dhi = np.minimum(x + rec.extent[:, None, None], rec.size)
        empty = empty | (dhi <= dlo)
        lo = lo + c * dlo
        hi = hi + c * (dhi - 1)
    lo = np.maximum(lo, 0)
    hi = np.minimum(hi + 1, axis.size)
    empty = empty | (hi <= lo)
    return np.where(empty, 0, lo), np.where(empty, 0, hi)


def _plain(axis: AxisRec, dims) -> bool:
    return (len(axis.terms) == 1 and axis.terms[0][1] == 1 and not axis.offset
            and dims[axis.terms[0][0]].size == axis.size)


def closed_or_grid(closed, ok: np.ndarray, grid, dims, loops, union,
                    axis: AxisRec | None = None) -> np.ndarray:
    """The closed form where it holds (`ok`), the grid on the other rows (and on the rows
    where a dim of `axis` keeps a halo)."""
    if axis is not None:
        ok = ok & uncut(axis, dims)
    if ok.all():
        return closed
    out = np.array(closed, dtype=I64, copy=True)
    grid_rows(np.flatnonzero(~ok), out, grid, dims, loops, union, axis)
    return out


def _widened(axis: AxisRec, dims, union: Sequence[VLoop], rows: int,
             loops: Sequence[VLoop] = ()):
    """A plain axis's extent widened by the spatial instances whose union is sent, and per
    row whether that union is one wider slice (`movement._contiguous`): the instances' slices
    abut without gaps or overlaps and the other loops over the dim step by whole multiples
    of the union, so that no element ever moves from one instance to another."""
    d = axis.terms[0][0]
    rec = dims[d]
    mine = _union_of(axis, union)
    extent = rec.extent
    ok = np.ones(rows, dtype=bool)
    spread = np.zeros(rows, dtype=bool)
    for k, lp in enumerate(mine):
        reach = rec.extent
        for m, other in enumerate(mine):
            if m != k:
                first = (other.n > 1) & ((other.stride < lp.stride)
                                         | ((other.stride == lp.stride) & (m < k)))
                reach = reach + np.where(first, (other.n - 1) * other.stride, 0)
        ok &= (lp.n <= 1) | (lp.stride == reach)
        spread |= lp.n > 1
        extent = extent + (lp.n - 1) * lp.stride
    for lp in loops:
        if lp.dim == d:
            ok &= ~spread | (lp.n <= 1) | (lp.stride % np.maximum(extent, 1) == 0)
    return extent, ok


def volume_sum(axis: AxisRec, dims, loops: Sequence[VLoop], union: Sequence[VLoop],
               rows: int) -> np.ndarray:
    """Sum over the steps of the axis's loops of the slice length (union over `union`)."""
    if not _plain(axis, dims):
        if not windows.supported(axis):
            return on_grid(lambda d, lo, u, k: grid_volume(axis, d, lo, u, k),
                            dims, loops, union, rows, axis)
        closed, ok = windows.window_volume(axis, dims, loops, _union_of(axis, union), rows)
        return closed_or_grid(closed, ok, lambda d, lo, u, k: grid_volume(axis, d, lo, u, k),
                               dims, loops, union, axis)
    rec = dims[axis.terms[0][0]]
    extent, ok = _widened(axis, dims, union, rows, loops)
    closed = lattice_sum(
        [loops[i] for i in axis_loops(axis, loops)], rec.shift, rows,
        lambda start, step, count, col: ap_length_sum(start, step, count, col(extent),
                                                      rec.size))
    return closed_or_grid(closed, ok, lambda d, lo, u, k: grid_volume(axis, d, lo, u, k),
                           dims, loops, union, axis)


def grid_volume(axis: AxisRec, dims, loops: Sequence[VLoop], union: Sequence[VLoop],
                 rows: int) -> np.ndarray:
    sub = [loops[i] for i in axis_loops(axis, loops)]
    grid = Grid(rows, [(lp, 0) for lp in sub])
    pos = positions(list(zip(sub, grid.values, strict=True)), rows)
    lo, hi = _spans(axis, dims, pos, _union_of(axis, union), rows)
    return np.where(grid.valid, union_length(lo, hi), 0).sum(axis=1)


def _union_of(axis: AxisRec, union: Sequence[VLoop]) -> list[VLoop]:
    names = {d for d, _ in axis.terms}
    return [lp for lp in union if lp.dim in names]


def overlap_sum(axis: AxisRec, dims, loops: Sequence[VLoop], i: int,
                union: Sequence[VLoop], rows: int) -> np.ndarray:
    """Sum, over the events where loop i advances, of |slice before & slice after|."""
    if not _plain(axis, dims):
        if not windows.supported(axis):
            return on_grid(lambda d, lo, u, k: grid_overlap(axis, d, lo, i, u, k),
                            dims, loops, union, rows, axis)
        closed, ok = windows.window_overlap(axis, dims, loops, i, _union_of(axis, union), rows)
        return closed_or_grid(closed, ok,
                               lambda d, lo, u, k: grid_overlap(axis, d, lo, i, u, k),
                               dims, loops, union, axis)
    rec = dims[axis.terms[0][0]]
    extent, ok = _widened(axis, dims, union, rows, loops)
    idx = axis_loops(axis, loops)
    outer = [loops[j] for j in idx if j < i]
    inner = [loops[j] for j in idx if j > i]
    tail = np.zeros(rows, dtype=I64)  # the inner loops' offset at their last values
    for lp in inner:
        tail = tail + (lp.n - 1) * lp.stride

    def pairs(gap):
        return lambda start, step, count, col: _pair_sum(start, step, count, col(extent),
                                                         col(gap), rec.size)

    if i in idx:
        own = loops[i]
        gap = np.abs(own.stride - tail)
        start = rec.shift + np.minimum(tail, own.stride)
        # every value of the loop but its last: all of them, less the last ones
        total = lattice_sum([*outer, own], start, rows, pairs(gap))
        total = total - lattice_sum(outer, start + (own.n - 1) * own.stride, rows, pairs(gap))
        total = np.where(own.n > 1, total, 0)  # a loop of one iteration never advances
    else:
        total = lattice_sum(outer, rec.shift, rows, pairs(tail))
    return closed_or_grid(total, ok,
                           lambda d, lo, u, k: grid_overlap(axis, d, lo, i, u, k),
                           dims, loops, union, axis)


def _pair_sum(start, step, count, extent, gap, size: int) -> np.ndarray:
    """sum_k |[x_k + gap, x_k + extent) & [0, size)| for x_k = start + k step: the common
    part of two slices `gap` apart (nothing when gap >= extent)."""
    both = ap_clip_sum(start + extent, step, count, size) - ap_clip_sum(start + gap, step,
                                                                       count, size)
    return np.where(gap < extent, both, 0)


def grid_overlap(axis: AxisRec, dims, loops: Sequence[VLoop], i: int,
                  union: Sequence[VLoop], rows: int) -> np.ndarray:
    idx = axis_loops(axis, loops)
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
    a_lo, a_hi = _spans(axis, dims, positions(before, rows), mine, rows)
    b_lo, b_hi = _spans(axis, dims, positions(after, rows), mine, rows)
    # `movement._kept`: of the union after the step, what every instance holding it held
    # before (no instance passes data to another)
    now = b_hi > b_lo
    disjoint = (a_hi <= a_lo) | (a_hi <= b_lo) | (b_hi <= a_lo)
    head = now & (disjoint | (b_lo < a_lo))
    tail = now & ~disjoint & (a_hi < b_hi)
    new_lo = np.concatenate([np.where(head, b_lo, 0), np.where(tail, a_hi, 0)], -1)
    new_hi = np.concatenate([np.where(head, np.where(disjoint, b_hi, a_lo), 0),
                             np.where(tail, b_hi, 0)], -1)
    kept = union_length(b_lo, b_hi) - union_length(new_lo, new_hi)
    return np.where(grid.valid, kept, 0).sum(axis=1)


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
    """`scalar_movement.words_moved` (tests/) for every row (same arguments, per-row arrays)."""
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
    if not _plain(axis, dims):
        return on_grid(lambda d, lo, u, k: _grid_epoch(axis, d, lo, epoch, u, k, any_span),
                        dims, loops, union, rows, axis)
    rec = dims[axis.terms[0][0]]
    names = {axis.terms[0][0]}
    extent, ok = _widened(axis, dims, union, rows, loops)
    ep = [lp for lp, e in zip(loops, epoch, strict=True) if e and lp.dim in names]
    rest = [lp for lp, e in zip(loops, epoch, strict=True) if not e and lp.dim in names]
    lo, hi = _pieces(rest, extent, rows)
    if any_span:
        ok &= (hi - lo > 0).sum(axis=1) <= 1  # one interval: non-empty when it meets the dim
        length = (hi - lo).max(axis=1)
        start = rec.shift + lo.min(axis=1, where=hi > lo, initial=np.iinfo(I64).max)
        start = np.where(length > 0, start, 0)

        def term(start, step, count, col):
            return _nonempty_count(start, step, count, col(length), rec.size)

        closed = lattice_sum(ep, start, rows, term)
    else:
        def term(start, step, count, col):
            # the pieces are disjoint before clipping, so their clipped lengths add up
            piece_lo, piece_hi = (lo, hi) if np.ndim(start) == 1 else (lo[:, None], hi[:, None])
            return ap_length_sum(start[..., None] + piece_lo, step[..., None], count[..., None],
                                 piece_hi - piece_lo, rec.size).sum(axis=-1)

        closed = lattice_sum(ep, rec.shift, rows, term)
    return closed_or_grid(
        closed, ok, lambda d, lo, u, k: _grid_epoch(axis, d, lo, epoch, u, k, any_span),
        dims, loops, union, axis)


def _pieces(loops: Sequence[VLoop], extent: np.ndarray, rows: int):
    """The union of [offset, offset + extent) over the loops' values, as disjoint pieces
    [lo, hi) per row (empty pieces have lo == hi): a progression whose step does not exceed
    the extent is one interval, the other loops are enumerated and merged."""
    chosen: list[int] = []
    for k in sorted(range(len(loops)), key=lambda k: -int(loops[k].n.max(initial=1))):
        step, count, ok = progression([loops[j] for j in (*chosen, k)], rows)
        if (ok & ((count == 1) | (step <= extent))).all():
            chosen.append(k)
    step, count, _ = progression([loops[k] for k in chosen], rows)
    length = extent + (count - 1) * step
    rest = [lp for k, lp in enumerate(loops) if k not in chosen]
    grid = Grid(rows, [(lp, 0) for lp in rest])
    offset = np.zeros((rows, 1), dtype=I64)
    for lp, v in zip(rest, grid.values, strict=True):
        offset = offset + v * lp.stride[:, None]
    lo = np.where(grid.valid, offset, 0)
    hi = np.where(grid.valid, offset + length[:, None], 0)
    if lo.shape[1] == 1:
        return lo, hi
    order = np.argsort(lo, axis=1, kind="stable")
    lo = np.take_along_axis(lo, order, 1)
    hi = np.take_along_axis(hi, order, 1)
    reach = np.maximum.accumulate(hi, axis=1)
    before = np.concatenate([np.full((rows, 1), np.iinfo(I64).min // 2), reach[:, :-1]], 1)
    lo = np.maximum(lo, before)
    hi = np.maximum(hi, lo)
    return lo, hi


def _nonempty_count(start, step, count, extent, size: int) -> np.ndarray:
    """How many k < count have [start + k step, + extent) meeting [0, size)."""
    below_size = clamp(-np.floor_divide(start - size, step), 0, count)
    too_low = clamp(np.floor_divide(-extent - start, step) + 1, 0, count)
    return np.maximum(below_size - too_low, 0)


def _grid_epoch(axis: AxisRec, dims, loops: Sequence[VLoop], epoch: Sequence[bool],
                union: Sequence[VLoop], rows: int, any_span: bool = False) -> np.ndarray:
    union = _union_of(axis, union)
    names = {d for d, _ in axis.terms}
    ep = [lp for lp, e in zip(loops, epoch, strict=True) if e and lp.dim in names]
    rest = [lp for lp, e in zip(loops, epoch, strict=True) if not e and lp.dim in names]
    outer = Grid(rows, [(lp, 0) for lp in ep])
    inner = Grid(rows, [(lp, 0) for lp in rest])
    k_out, k_in = outer.size, inner.size
    pairs = [(lp, np.repeat(v, k_in, axis=1)) for lp, v in zip(ep, outer.values, strict=True)]
    pairs += [(lp, np.tile(v, (1, k_out))) for lp, v in zip(rest, inner.values, strict=True)]
    lo, hi = _spans(axis, dims, positions(pairs, rows), union, rows)
    keep = (np.repeat(outer.valid, k_in, axis=1) & np.tile(inner.valid, (1, k_out)))[..., None]
    lo = np.where(keep, lo, 0).reshape(rows, k_out, -1)
    hi = np.where(keep, hi, 0).reshape(rows, k_out, -1)
    if any_span:
        measure = (hi > lo).any(axis=-1).astype(I64)
    else:
        measure = union_length(lo, hi)
    return np.where(outer.valid, measure, 0).sum(axis=1)
