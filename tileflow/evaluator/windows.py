"""Closed forms for window axes (a tensor axis c * p + r + offset: strided convolution rows,
a consumer's halo), for many rows at once.

Along the loops of one dimension p (the one with the most iterations) the slice of a window
axis is [lo(x), hi(x)) with lo and hi piecewise linear in p's position x, clipped to the
tensor; the sum over a progression of positions is then a sum of piecewise-linear terms,
added segment by segment between the positions where a piece changes (a handful per row).
The loops over the window's other dimensions (kernel offsets) are few and enumerated."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tileflow.analysis.movement import AxisRec
from tileflow.evaluator.lattice import I64, Grid, VLoop, axis_loops, clamp, positions, progression


def _ceil_div(a, b):
    return -np.floor_divide(-a, b)


class Window:
    """The axis's slice as a function of the primary position x (plus `delta`), for fixed
    positions of the other dims (arrays [rows, G])."""

    def __init__(self, axis: AxisRec, dims, primary: str, coef: int, pos: dict, delta,
                 union: Sequence[VLoop] = ()):
        self.c, self.size = coef, axis.size
        rec = dims[primary]
        extent = rec.extent
        for lp in union:
            extent = extent + (lp.n - 1) * lp.stride
        self.extent = extent[:, None]
        self.n = rec.size
        self.delta = rec.shift[:, None] + delta
        lo = hi = axis.offset
        empty = False
        for d, k in axis.terms:
            if d == primary:
                continue
            other = dims[d]
            x = other.shift[:, None] + pos.get(d, 0)
            dlo = np.maximum(x, 0)
            dhi = np.minimum(x + other.extent[:, None], other.size)
            empty = empty | (dhi <= dlo)
            lo = lo + k * dlo
            hi = hi + k * (dhi - 1)
        self.a_lo, self.a_hi, self.empty = lo, hi + 1, empty
        self.joined = _joined(rec.extent, union, coef, hi - lo, empty)


    def interval(self, x):
        """Clipped [lo, hi) at base positions x, and whether it is non-empty."""
        x = x + self.delta
        lo = self.a_lo + self.c * np.maximum(x, 0)
        hi = self.a_hi + self.c * (np.minimum(x + self.extent, self.n) - 1)
        ok = np.logical_not(self.empty) & (x < self.n) & (x + self.extent > 0)
        return np.maximum(lo, 0), np.minimum(hi, self.size), ok

    def constants(self) -> list:
        """The values the window's constant pieces take (beyond the dim's ends)."""
        return [self.a_lo, self.a_hi + self.c * (self.n - 1)]

    def cuts(self, levels: list) -> list:
        """Base positions where a piece of this window changes or crosses a level."""
        e, d = self.extent, self.delta
        out = [1 - e - d, self.n - d, -d, self.n - e + 1 - d]
        for level in levels:
            out.append(_ceil_div(level - self.a_lo, self.c) - d)
            out.append(_ceil_div(level - self.a_hi, self.c) - e + 1 - d)
        return out


def _joined(extent, union: Sequence[VLoop], coef: int, width, empty) -> np.ndarray:
    """Per row, whether the spatial instances along the primary dim abut or overlap in that
    dim (sorted by stride, each reaches the next) and their windows do too (the stride times
    the coefficient does not exceed the window; `width`: the other terms' span - 1). Then,
    clipped or not, the union of their windows is the window of the widened extent."""
    ok = np.ones(extent.shape, dtype=bool)
    for k, lp in enumerate(union):
        reach = extent
        for m, other in enumerate(union):
            if m != k:
                first = (other.n > 1) & ((other.stride < lp.stride)
                                         | ((other.stride == lp.stride) & (m < k)))
                reach = reach + np.where(first, (other.n - 1) * other.stride, 0)
        windows = coef * lp.stride[:, None] <= coef * (reach[:, None] - 1) + width + 1
        windows = (windows | empty).all(axis=1)
        ok &= (lp.n <= 1) | ((lp.stride <= reach) & windows)
    return ok


def piecewise_sum(f, start, step, count, cuts: list) -> np.ndarray:
    """sum_{k < count} f(start + k step) for f linear between consecutive cuts (positions
    where it may change slope): each segment adds (length x (first + last) / 2)."""
    ks = [np.zeros_like(cuts[0]), np.broadcast_to(count, cuts[0].shape)]
    ks += [clamp(_ceil_div(cut - start, step), 0, count) for cut in cuts]
    ks = np.sort(np.stack(np.broadcast_arrays(*ks)), axis=0)
    first, end = ks[:-1], ks[1:]
    length = end - first
    values = f(np.concatenate([start + first * step, start + (end - 1) * step]))
    fa, fb = values[: len(first)], values[len(first):]
    return np.where(length > 0, length * (fa + fb) // 2, 0).sum(axis=0)


def _primary(axis: AxisRec, loops: Sequence[VLoop]) -> tuple[str, int]:
    best = None
    for d, c in axis.terms:
        total = 1
        for lp in loops:
            if lp.dim == d:
                total *= int(lp.n.max(initial=1))
        if best is None or total > best[0]:
            best = (total, d, c)
    return best[1], best[2]


def supported(axis: AxisRec) -> bool:
    """A window axis the closed forms handle: at least one dimension (a constant index is
    one element, counted on the grid), every coefficient positive."""
    return bool(axis.terms) and all(c > 0 for _, c in axis.terms)


def window_volume(axis: AxisRec, dims, loops: Sequence[VLoop], union: Sequence[VLoop],
                  rows: int):
    """(sum over the steps of the axis's loops of the slice length, rows where it holds);
    `union`: spatial loops whose union of slices is counted."""
    sub = [loops[i] for i in axis_loops(axis, loops)]
    primary, coef = _primary(axis, sub + list(union))
    if any(lp.dim != primary for lp in union):
        return np.zeros(rows, dtype=I64), np.zeros(rows, dtype=bool)
    prim = [lp for lp in sub if lp.dim == primary]
    sec = [lp for lp in sub if lp.dim != primary]
    step, count, ok = progression(prim, rows)
    grid = Grid(rows, [(lp, 0) for lp in sec])
    pos = positions(list(zip(sec, grid.values, strict=True)), rows)
    win = Window(axis, dims, primary, coef, pos, 0, union)
    ok = ok & win.joined

    def length(x):
        lo, hi, fine = win.interval(x)
        return np.where(fine, np.maximum(hi - lo, 0), 0)

    levels = [0, 1, axis.size]
    total = piecewise_sum(length, 0, step[:, None], count[:, None], win.cuts(levels))
    return np.where(grid.valid, total, 0).sum(axis=1), ok


def window_overlap(axis: AxisRec, dims, loops: Sequence[VLoop], i: int,
                   union: Sequence[VLoop], rows: int):
    """(sum over the advances of loop i of |slice before & slice after|, rows where it
    holds); `union` as for `window_volume`."""
    idx = axis_loops(axis, loops)
    primary, coef = _primary(axis, [loops[j] for j in idx] + list(union))
    if any(lp.dim != primary for lp in union):
        return np.zeros(rows, dtype=I64), np.zeros(rows, dtype=bool)
    outer = [loops[j] for j in idx if j < i]
    inner = [loops[j] for j in idx if j > i]
    own = loops[i] if i in idx else None
    sec_outer = [lp for lp in outer if lp.dim != primary]
    spec = [(lp, 0) for lp in sec_outer]
    if own is not None and own.dim != primary:
        spec.append((own, -1))
    grid = Grid(rows, spec)
    pairs = list(zip(sec_outer, grid.values, strict=False))
    before, after = list(pairs), list(pairs)
    if own is not None and own.dim != primary:
        v = grid.values[-1]
        before.append((own, v))
        after.append((own, v + 1))
    before += [(lp, (lp.n - 1)[:, None]) for lp in inner if lp.dim != primary]
    tail = np.zeros(rows, dtype=I64)
    for lp in inner:
        if lp.dim == primary:
            tail = tail + (lp.n - 1) * lp.stride
    prim_outer = [lp for lp in outer if lp.dim == primary]
    step_o, count_o, ok = progression(prim_outer, rows)
    if own is not None and own.dim == primary:
        shift_b, shift_a = tail, own.stride
    else:
        shift_b, shift_a = tail, np.zeros(rows, dtype=I64)
    win_b = Window(axis, dims, primary, coef, positions(before, rows), shift_b[:, None], union)
    win_a = Window(axis, dims, primary, coef, positions(after, rows), shift_a[:, None], union)
    ok = ok & win_b.joined & win_a.joined

    def common(x):
        lo_b, hi_b, fine_b = win_b.interval(x)
        lo_a, hi_a, fine_a = win_a.interval(x)
        size = np.minimum(hi_b, hi_a) - np.maximum(lo_b, lo_a)
        return np.where(fine_b & fine_a, np.maximum(size, 0), 0)

    levels = [0, 1, axis.size, *win_b.constants(), *win_a.constants()]
    cuts = win_b.cuts(levels) + win_a.cuts(levels)

    def total_over(step, count, start):
        return piecewise_sum(common, start[:, None], step[:, None], count[:, None], cuts)

    zero = np.zeros(rows, dtype=I64)
    if own is not None and own.dim == primary:
        # every value of the own loop but its last: all of them, less the last ones
        step_f, count_f, ok_f = progression([*prim_outer, own], rows)
        ok &= ok_f
        total = total_over(step_f, count_f, zero)
        total = total - total_over(step_o, count_o, (own.n - 1) * own.stride)
    else:
        total = total_over(step_o, count_o, zero)
    total = np.where(grid.valid, total, 0).sum(axis=1)
    if own is not None:
        total = np.where(own.n > 1, total, 0)
    for lp in union:  # a union reads what its instances did not hold (`movement._kept`):
        ok = ok & (lp.n <= 1)  # the common part of the unions is no closed form for it
    return total, ok
