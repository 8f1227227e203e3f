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
    if not (np.diff(lo, axis=-1) >= 0).all():  # instances come in order along one loop
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


def _subset(rows: np.ndarray, dims, loops, union):
    return ({d: v.take(rows) for d, v in dims.items()}, [lp.take(rows) for lp in loops],
            [lp.take(rows) for lp in union])


def _closed_or_grid(closed, ok: np.ndarray, grid, dims, loops, union,
                    axis: AxisRec | None = None) -> np.ndarray:
    """The closed form where it holds (`ok`), the grid on the other rows."""
    if ok.all():
        return closed
    out = np.array(closed, dtype=I64, copy=True)
    _grid_rows(np.flatnonzero(~ok), out, grid, dims, loops, union, axis)
    return out


GRID_CELLS = 1 << 22  # grid cells (rows x combinations) evaluated at once
SMALL_GRID = 1 << 14  # a grid this small costs little more than its NumPy calls


def _grid_rows(todo: np.ndarray, out: np.ndarray, grid, dims, loops, union,
               axis: AxisRec | None = None) -> None:
    """out[todo] = the grid sums on those rows, in blocks of rows: a block's grid is padded
    to its rows' largest trip counts, so rows are taken in order of their own cell counts
    and a block grows while its padded grid stays small, within twice its rows' own cells
    and within memory. With `axis`, only the loops over its dims count (the grids enumerate
    no others)."""
    if not len(todo):
        return
    names = None if axis is None else {d for d, _ in axis.terms}
    trips = [np.maximum(lp.n[todo], 1) for lp in (*loops, *union)
             if names is None or lp.dim in names]
    own = np.ones(len(todo), dtype=np.float64)
    for n in trips:
        own = own * n
    order = np.argsort(own, kind="stable")
    trips_sorted = [n[order].tolist() for n in trips]
    own_sorted = own[order].tolist()
    blocks, start = [], 0
    top = [1] * len(trips)
    total = 0.0
    for k in range(len(todo)):
        grown = [max(t, n[k]) for t, n in zip(top, trips_sorted, strict=True)]
        padded = (k - start + 1) * float(np.prod(grown))
        if k > start and padded > max(SMALL_GRID, 2 * (total + own_sorted[k])) \
                or k > start and padded > GRID_CELLS:
            blocks.append(order[start:k])
            start, total = k, 0.0
            grown = [n[k] for n in trips_sorted]
        top = grown
        total += own_sorted[k]
    blocks.append(order[start:])
    for block in blocks:
        rows = todo[np.sort(block)]
        sub_dims, sub_loops, sub_union = _subset(rows, dims, loops, union)
        out[rows] = grid(sub_dims, sub_loops, sub_union, len(rows))


def _on_grid(grid, dims, loops, union, rows: int, axis: AxisRec | None = None) -> np.ndarray:
    """The grid sums of every row (chunked like `_grid_rows`)."""
    out = np.zeros(rows, dtype=I64)
    _grid_rows(np.arange(rows), out, grid, dims, loops, union, axis)
    return out


def _progression(sub: Sequence[VLoop], rows: int):
    """Per row, whether the loops' offsets form one arithmetic progression (loops of one dim
    whose strides nest: sorted by stride, each strides over all the values of the ones
    before it, ignoring single iterations), with its step and count."""
    if not sub:
        one = np.ones(rows, dtype=I64)
        return one, one, np.ones(rows, dtype=bool)
    if len(sub) == 1:
        return sub[0].stride, sub[0].n, np.ones(rows, dtype=bool)
    n = np.stack([lp.n for lp in sub])
    s = np.stack([lp.stride for lp in sub])
    key = np.where(n > 1, s, np.iinfo(I64).max)
    order = np.argsort(key, axis=0, kind="stable")
    n = np.take_along_axis(n, order, 0)
    s = np.take_along_axis(s, order, 0)
    step = np.where(n[0] > 1, s[0], 1)
    span = step * n[0]
    ok = np.ones(rows, dtype=bool)
    for k in range(1, len(sub)):
        ok &= (n[k] == 1) | (s[k] == span)
        span = span * n[k]
    return step, n.prod(axis=0), ok


def lattice_sum(loops: Sequence[VLoop], start: np.ndarray, rows: int, term) -> np.ndarray:
    """sum over every combination of the loops' values (offsets sum(v * stride), one dim) of
    term(start + offset): the loops whose offsets form one progression are summed by the
    closed form `term(start, step, count, col)`, only the others are enumerated (`col`
    shapes a per-row array like `start`)."""
    chosen: list[int] = []
    for k in sorted(range(len(loops)), key=lambda k: -int(loops[k].n.max(initial=1))):
        if _progression([loops[j] for j in (*chosen, k)], rows)[2].all():
            chosen.append(k)
    step, count, _ = _progression([loops[k] for k in chosen], rows)
    rest = [lp for k, lp in enumerate(loops) if k not in chosen]
    if not rest:
        return term(start, step, count, lambda x: x)
    grid = Grid(rows, [(lp, 0) for lp in rest])
    offset = 0
    for lp, v in zip(rest, grid.values, strict=True):
        offset = offset + v * lp.stride[:, None]
    values = term(start[:, None] + offset, step[:, None], count[:, None],
                  lambda x: x[:, None] if np.ndim(x) else x)
    return np.where(grid.valid, values, 0).sum(axis=1)


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
        from tileflow.explore import windows

        if not windows.supported(axis):
            return _on_grid(lambda d, lo, u, k: _grid_volume(axis, d, lo, u, k),
                            dims, loops, union, rows, axis)
        closed, ok = windows.window_volume(axis, dims, loops, _union_of(axis, union), rows)
        return _closed_or_grid(closed, ok, lambda d, lo, u, k: _grid_volume(axis, d, lo, u, k),
                               dims, loops, union, axis)
    rec = dims[axis.terms[0][0]]
    extent, ok = _widened(axis, dims, union, rows, loops)
    closed = lattice_sum(
        [loops[i] for i in _axis_loops(axis, loops)], rec.shift, rows,
        lambda start, step, count, col: ap_length_sum(start, step, count, col(extent),
                                                      rec.size))
    return _closed_or_grid(closed, ok, lambda d, lo, u, k: _grid_volume(axis, d, lo, u, k),
                           dims, loops, union, axis)


def _grid_volume(axis: AxisRec, dims, loops: Sequence[VLoop], union: Sequence[VLoop],
                 rows: int) -> np.ndarray:
    sub = [loops[i] for i in _axis_loops(axis, loops)]
    grid = Grid(rows, [(lp, 0) for lp in sub])
    pos = _positions(list(zip(sub, grid.values, strict=True)), rows)
    lo, hi = _spans(axis, dims, pos, _union_of(axis, union), rows)
    return np.where(grid.valid, union_length(lo, hi), 0).sum(axis=1)


def _union_of(axis: AxisRec, union: Sequence[VLoop]) -> list[VLoop]:
    names = {d for d, _ in axis.terms}
    return [lp for lp in union if lp.dim in names]


def overlap_sum(axis: AxisRec, dims, loops: Sequence[VLoop], i: int,
                union: Sequence[VLoop], rows: int) -> np.ndarray:
    """Sum, over the events where loop i advances, of |slice before & slice after|."""
    if not _plain(axis, dims):
        from tileflow.explore import windows

        if not windows.supported(axis):
            return _on_grid(lambda d, lo, u, k: _grid_overlap(axis, d, lo, i, u, k),
                            dims, loops, union, rows, axis)
        closed, ok = windows.window_overlap(axis, dims, loops, i, _union_of(axis, union), rows)
        return _closed_or_grid(closed, ok,
                               lambda d, lo, u, k: _grid_overlap(axis, d, lo, i, u, k),
                               dims, loops, union, axis)
    rec = dims[axis.terms[0][0]]
    extent, ok = _widened(axis, dims, union, rows, loops)
    idx = _axis_loops(axis, loops)
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
    return _closed_or_grid(total, ok,
                           lambda d, lo, u, k: _grid_overlap(axis, d, lo, i, u, k),
                           dims, loops, union, axis)


def _pair_sum(start, step, count, extent, gap, size: int) -> np.ndarray:
    """sum_k |[x_k + gap, x_k + extent) & [0, size)| for x_k = start + k step: the common
    part of two slices `gap` apart (nothing when gap >= extent)."""
    both = ap_clip_sum(start + extent, step, count, size) - ap_clip_sum(start + gap, step,
                                                                       count, size)
    return np.where(gap < extent, both, 0)


def _grid_overlap(axis: AxisRec, dims, loops: Sequence[VLoop], i: int,
                  union: Sequence[VLoop], rows: int) -> np.ndarray:
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
    if not _plain(axis, dims):
        return _on_grid(lambda d, lo, u, k: _grid_epoch(axis, d, lo, epoch, u, k, any_span),
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
    return _closed_or_grid(
        closed, ok, lambda d, lo, u, k: _grid_epoch(axis, d, lo, epoch, u, k, any_span),
        dims, loops, union, axis)


def _pieces(loops: Sequence[VLoop], extent: np.ndarray, rows: int):
    """The union of [offset, offset + extent) over the loops' values, as disjoint pieces
    [lo, hi) per row (empty pieces have lo == hi): a progression whose step does not exceed
    the extent is one interval, the other loops are enumerated and merged."""
    chosen: list[int] = []
    for k in sorted(range(len(loops)), key=lambda k: -int(loops[k].n.max(initial=1))):
        step, count, ok = _progression([loops[j] for j in (*chosen, k)], rows)
        if (ok & ((count == 1) | (step <= extent))).all():
            chosen.append(k)
    step, count, _ = _progression([loops[k] for k in chosen], rows)
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
    below_size = np.clip(-np.floor_divide(start - size, step), 0, count)
    too_low = np.clip(np.floor_divide(-extent - start, step) + 1, 0, count)
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
    lo, hi = _spans(axis, dims, _positions(pairs, rows), union, rows)
    keep = (np.repeat(outer.valid, k_in, axis=1) & np.tile(inner.valid, (1, k_out)))[..., None]
    lo = np.where(keep, lo, 0).reshape(rows, k_out, -1)
    hi = np.where(keep, hi, 0).reshape(rows, k_out, -1)
    if any_span:
        measure = (hi > lo).any(axis=-1).astype(I64)
    else:
        measure = union_length(lo, hi)
    return np.where(outer.valid, measure, 0).sum(axis=1)
