"""Sums over the steps of loops for many factor rows at once: the loop values on a padded
grid (`Grid`), the clipped interval of a tensor axis at given loop offsets, the measure of a
union of intervals, the detection of loops whose offsets form one arithmetic progression and
the closed form of a clipped progression's sum (`ap_clip_sum`). The primitives of the per-axis
sums (`sums`) and of windowed axes (`windows`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from tileflow.analysis.movement import AxisRec

I64 = np.int64


def clamp(values, low, high):
    """`np.clip(values, low, high)` by its definition, minimum(maximum(values, low), high):
    the same arrays without NumPy's per-call checks (the evaluator calls it per tree node)."""
    return np.minimum(np.maximum(values, low), high)


@dataclass(frozen=True)
class VLoop:
    """A loop above a buffer: per-row trip counts `n` and strides; `drop` as in LoopRec.
    Halo caching (`LoopRec.mark`): `mark`, the loop places the region of a step of the
    common ancestor; `slide`, per row, it is the loop the kept halo slides along."""

    dim: str
    n: np.ndarray
    stride: np.ndarray
    drop: bool = False
    mark: bool = False
    slide: np.ndarray | None = None

    def take(self, rows: np.ndarray) -> VLoop:
        return VLoop(self.dim, self.n[rows], self.stride[rows], self.drop, self.mark,
                     None if self.slide is None else self.slide[rows])


@dataclass(frozen=True)
class VDim:
    """A dimension's size, the per-row extent inside the buffer and start shift; `cut`,
    per row, the halo rows a producer keeps along it (`DimRec.cut`; None: none on any row)."""

    size: int
    extent: np.ndarray
    shift: np.ndarray
    cut: np.ndarray | None = None

    def take(self, rows: np.ndarray) -> VDim:
        return VDim(self.size, self.extent[rows], self.shift[rows],
                    None if self.cut is None else self.cut[rows])


def uncut(axis: AxisRec, dims) -> np.ndarray | bool:
    """Per row, whether no dim of the axis keeps a halo (the closed forms ignore it: the
    rows that do are summed on the grid)."""
    ok: np.ndarray | bool = True
    for d, _ in axis.terms:
        cut = dims[d].cut if d in dims else None
        if cut is not None:
            ok = ok & (cut == 0)
    return ok


def floor_at_cut(dlo, x_base, rec: VDim, slide, expand):
    """`movement.clipped_interval` under halo caching: past the first iteration of the sliding
    loop (`slide`), the slice starts no earlier than the region's start + the kept rows
    (`x_base`: the shift plus the offset of the common ancestor's step)."""
    if rec.cut is None or slide is None:
        return dlo
    return np.where(slide, np.maximum(dlo, x_base + expand(rec.cut)), dlo)


def ap_clip_sum(start: np.ndarray, step: np.ndarray, count: np.ndarray,
                size: int) -> np.ndarray:
    """sum_{k < count} clamp(start + k * step, 0, size), for step >= 1, in closed form."""
    if np.shape(start) == np.shape(step) == np.shape(count) == (1,):  # one row: Python ints
        return np.array([_ap_clip_one(int(start[0]), int(step[0]), int(count[0]), size)],
                        dtype=I64)
    below = clamp(np.floor_divide(-start, step) + 1, 0, count)  # terms <= 0
    inside = clamp(-np.floor_divide(start - size, step), 0, count)  # terms < size
    inside = np.maximum(inside, below)
    linear = (inside - below) * start + step * ((inside * (inside - 1)) // 2
                                                - (below * (below - 1)) // 2)
    return linear + (count - inside) * size


def _ap_clip_one(start: int, step: int, count: int, size: int) -> int:
    """`ap_clip_sum` of one row."""
    below = min(max(-start // step + 1, 0), count)
    inside = max(min(max(-((start - size) // step), 0), count), below)
    linear = (inside - below) * start + step * ((inside * (inside - 1)) // 2
                                                - (below * (below - 1)) // 2)
    return linear + (count - inside) * size


def ap_length_sum(start: np.ndarray, step: np.ndarray, count: np.ndarray, extent: np.ndarray,
                  size: int) -> np.ndarray:
    """sum_k |[start + k step, start + k step + extent) & [0, size)| (extent >= 0)."""
    return ap_clip_sum(start + extent, step, count, size) - ap_clip_sum(start, step, count, size)


# Combinations one row may enumerate (a clipped or windowed sum over loop steps): beyond it
# the row is refused, as the command line refuses such a tree (evaluator.workbound)
MAX_GRID_PER_ROW = 2**13  # = workbound.MAX_ENUMERATED_STEPS
MAX_GRID_CELLS = 2**22  # rows x combinations of one grid: larger batches are split
# the combinations one row may enumerate here, where not MAX_GRID_PER_ROW: the records of
# one row (`tileflow evaluate` counts any tree the command line takes) go to a grid's cells
GRID_PER_ROW: ContextVar[int | None] = ContextVar("grid_per_row", default=None)


@contextmanager
def one_row_grids() -> Iterator[None]:
    """Within it, a grid of one row may take a whole grid's cells (MAX_GRID_CELLS): the
    bound of the model at one dataflow (`evaluate()`), where the search's rows stop at
    MAX_GRID_PER_ROW."""
    token = GRID_PER_ROW.set(MAX_GRID_CELLS)
    try:
        yield
    finally:
        GRID_PER_ROW.reset(token)


class GridTooLarge(Exception):
    """A grid over more combinations than MAX_GRID_PER_ROW (or cells than MAX_GRID_CELLS);
    `combinations`: each of its rows' own count."""

    def __init__(self, combinations: np.ndarray):
        super().__init__(f"up to {combinations.max(initial=0):,.0f} combinations per row")
        self.combinations = combinations


class Grid:
    """Loop values on a padded grid: axis 0 is the row, axis 1 enumerates every combination
    of the loops' values (up to each loop's largest trip count), `valid` masks the padding."""

    def __init__(self, rows: int, loops: Sequence[tuple[VLoop, int]]):
        """`loops`: (loop, how many values: 0 = all n, -1 = n - 1, 'last' handled by caller)."""
        sizes = []
        for lp, less in loops:
            sizes.append(max(int((lp.n + less).max(initial=1)), 1))
        self.size = int(np.prod([float(s) for s in sizes])) if sizes else 1
        per_row = GRID_PER_ROW.get()
        per_row = MAX_GRID_PER_ROW if per_row is None else per_row
        if self.size > per_row or (rows > 1 and rows * self.size > MAX_GRID_CELLS):
            own = np.ones(rows)
            for lp, less in loops:
                own = own * np.maximum(lp.n + less, 1)
            raise GridTooLarge(own)
        self.values = []
        self.valid = np.ones((rows, self.size), dtype=bool)
        for k, (lp, less) in enumerate(loops):
            shape = [1] * len(sizes)
            shape[k] = sizes[k]
            v = np.broadcast_to(np.arange(sizes[k], dtype=I64).reshape(shape), sizes).reshape(
                1, self.size)
            self.values.append(v)
            self.valid &= v < (lp.n + less)[:, None]


def positions(pairs, rows: int) -> dict[str, np.ndarray]:
    """Per dim, the summed loop offsets: pairs of (loop, values [rows or 1, K])."""
    pos: dict = {}
    for lp, v in pairs:
        add = v * lp.stride[:, None]
        pos[lp.dim] = pos[lp.dim] + add if lp.dim in pos else add
        if lp.mark:  # halo caching: the common ancestor's step, and past the first slide
            key = ("base", lp.dim)
            pos[key] = pos[key] + add if key in pos else add
            if lp.slide is not None:
                moved = (v > 0) & lp.slide[:, None]
                key = ("slide", lp.dim)
                pos[key] = pos[key] | moved if key in pos else moved
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
        dlo = floor_at_cut(dlo, rec.shift[:, None] + pos.get(("base", d), 0), rec,
                           pos.get(("slide", d)), lambda a: a[:, None])
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
    return np.maximum(hi - np.maximum(lo, before), 0).sum(axis=-1)


def axis_loops(axis: AxisRec, loops: Sequence[VLoop]) -> list[int]:
    names = {d for d, _ in axis.terms}
    return [i for i, lp in enumerate(loops) if lp.dim in names]


def subset(rows: np.ndarray, dims, loops, union):
    return ({d: v.take(rows) for d, v in dims.items()}, [lp.take(rows) for lp in loops],
            [lp.take(rows) for lp in union])


GRID_CELLS = 1 << 22  # grid cells (rows x combinations) evaluated at once
SMALL_GRID = 1 << 14  # a grid this small costs little more than its NumPy calls


def grid_rows(todo: np.ndarray, out: np.ndarray, grid, dims, loops, union,
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
        sub_dims, sub_loops, sub_union = subset(rows, dims, loops, union)
        out[rows] = grid(sub_dims, sub_loops, sub_union, len(rows))


def on_grid(grid, dims, loops, union, rows: int, axis: AxisRec | None = None) -> np.ndarray:
    """The grid sums of every row (chunked like `grid_rows`)."""
    out = np.zeros(rows, dtype=I64)
    grid_rows(np.arange(rows), out, grid, dims, loops, union, axis)
    return out


def progression(sub: Sequence[VLoop], rows: int):
    """Per row, whether the loops' offsets form one arithmetic progression (loops of one dim
    whose strides nest: sorted by stride, each strides over all the values of the ones
    before it, ignoring single iterations), with its step and count."""
    if not sub:
        one = np.ones(rows, dtype=I64)
        return one, one, np.ones(rows, dtype=bool)
    if len(sub) == 1:
        return sub[0].stride, sub[0].n, np.ones(rows, dtype=bool)
    if rows == 1:
        return _progression_one(sub)
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


def _progression_one(sub: Sequence[VLoop]):
    """`progression` of one row."""
    loops = sorted(((int(lp.n[0]), int(lp.stride[0])) for lp in sub),
                   key=lambda ns: ns[1] if ns[0] > 1 else np.iinfo(I64).max)
    n0, s0 = loops[0]
    step = s0 if n0 > 1 else 1
    span, ok, count = step * n0, True, n0
    for n, stride in loops[1:]:
        ok = ok and (n == 1 or stride == span)
        span *= n
        count *= n
    return (np.array([step], dtype=I64), np.array([count], dtype=I64),
            np.array([ok], dtype=bool))


def lattice_sum(loops: Sequence[VLoop], start: np.ndarray, rows: int, term) -> np.ndarray:
    """sum over every combination of the loops' values (offsets sum(v * stride), one dim) of
    term(start + offset): the loops whose offsets form one progression are summed by the
    closed form `term(start, step, count, col)`, only the others are enumerated (`col`
    shapes a per-row array like `start`)."""
    chosen: list[int] = []
    for k in sorted(range(len(loops)), key=lambda k: -int(loops[k].n.max(initial=1))):
        if progression([loops[j] for j in (*chosen, k)], rows)[2].all():
            chosen.append(k)
    step, count, _ = progression([loops[k] for k in chosen], rows)
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


def distinct_tuples(rows: int, loops: list[VLoop], axes) -> np.ndarray:
    """Per row, the distinct index tuples of `axes` over the values of `loops` (on a grid
    of the loops' values, padded to the largest trip counts, in blocks of GRID_CELLS
    cells): the different slices of spatial instances, or the distinct elements one step
    of them reads."""
    out = np.empty(rows, dtype=I64)
    size = int(np.prod([max(int(lp.n.max(initial=1)), 1) for lp in loops], dtype=np.int64))
    block = max(1, GRID_CELLS // max(size, 1))
    for start in range(0, rows, block):
        part = np.arange(start, min(rows, start + block))
        mine = [lp.take(part) for lp in loops]
        grid = Grid(len(part), [(lp, 0) for lp in mine])
        pos = positions(list(zip(mine, grid.values, strict=True)), len(part))
        key = np.zeros((len(part), grid.size), dtype=I64)
        for axis in axes:
            value = np.zeros((len(part), grid.size), dtype=I64)
            for d, coef in axis.terms:
                if d in pos:
                    value = value + coef * pos[d]
            low = value.min()
            key = key * (int(value.max() - low) + 1) + (value - low)
        # padding takes the first instance's key (every loop at 0), which is always one
        key = np.sort(np.where(grid.valid, key, key[:, :1]), axis=1)
        out[part] = 1 + (np.diff(key, axis=1) != 0).sum(axis=1)
    return out
