"""Footprints per level and the constraints of many factor rows at once: capacity, fan-out,
coverage, dependences and windows, each violation kind as the amount by which a row
exceeds it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Protocol

import numpy as np

from tileflow.analysis.movement import AxisRec
from tileflow.analysis.resources import compute_mesh, fold_demand, level_mesh, split_limit
from tileflow.evaluator import carried as carried_state
from tileflow.evaluator.compiled import Path
from tileflow.evaluator.engine import Rows
from tileflow.evaluator.lattice import Grid, clamp, interval, on_grid, positions, progression
from tileflow.evaluator.sums import closed_or_grid
from tileflow.tree import ROOT, Op, Tile, child_path, node_depth

Words = dict[str, np.ndarray]


def footprints(r: Rows) -> dict[str, np.ndarray]:
    """Peak words per on-chip level (Seq: the largest child; Shar: the union; Para and Pipe:
    the sum unless on disjoint instances; intermediates at their common ancestor)."""
    return {level: _total(words, r.count)
            for level, words in footprints_by_tensor(r).items()}


def footprints_by_tensor(r: Rows) -> dict[str, Words]:
    """`footprints` per tensor: level name -> tensor -> words held at the peak."""
    c = r.c
    return {c.arch.levels[level].name: _fp(r, ROOT, c.flow.root, level)
            for level in c.footprint_levels}


def words_by_tensor(r: Rows, path: str, level: int) -> Words:
    """Per tensor, the words the subtree at node `path` holds at `level` (what a level's
    footprint is the sum of; at a subtree, where an overrun shows)."""
    return _fp(r, path, r.c.tiles[path], level)


def _total(words: Words, rows: int) -> np.ndarray:
    total = np.zeros(rows)
    for v in words.values():
        total = total + v
    return total


def _largest(kids: list[Words], rows: int) -> Words:
    """Per row, the child with the largest total (the first on ties)."""
    if not kids:
        return {}
    if len(kids) == 1:
        return dict(kids[0])
    pick = np.argmax(np.stack([_total(k, rows) for k in kids]), axis=0)
    tensors = dict.fromkeys(t for k in kids for t in k)
    zero = np.zeros(rows)
    return {t: np.choose(pick, [k.get(t, zero) for k in kids]) for t in tensors}


def _fp(r: Rows, path: str, node, level: int) -> Words:
    if isinstance(node, Op):
        return {}
    c = r.c
    at_level = c.arch.level_index[node.level] == level
    group = len(node.children) > 1 and all(isinstance(k, Tile) and k.level == node.level
                                           for k in node.children)
    own = _own(r, path, level) if at_level else None
    if at_level and not group:
        return own
    kids = [_fp(r, child_path(path, i), k, level) for i, k in enumerate(node.children)]
    combined: Words = {}
    kind = node.semantics
    if kind.serial and not kind.shares_inputs:  # Seq: one child's data at a time
        combined = _largest(kids, r.count)
    elif kind.serial:  # Shar: what they hold is shared, tensor by tensor
        for k in kids:
            for t, v in k.items():
                combined[t] = np.maximum(combined[t], v) if t in combined else v
    else:  # at once: they add, unless they sit on disjoint instances
        disjoint = _disjoint_instances(r, path, level)
        summed: Words = {}
        for k in kids:
            for t, v in k.items():
                summed[t] = summed[t] + v if t in summed else v
        if disjoint.all():
            combined = _largest(kids, r.count)
        elif not disjoint.any():
            combined = summed
        else:
            largest = _largest(kids, r.count)
            zero = np.zeros(r.count)
            combined = {t: np.where(disjoint, largest.get(t, zero), summed.get(t, zero))
                        for t in dict.fromkeys([*summed, *largest])}
    for t, lca in c.lca.items():
        if lca == path and c.homes[t] == level:
            scale = c.words_per_element(t, level, (node,) if at_level else ())
            extent = _scaled(scale, _lca_extent(r, t, path) + _kept_rows(r, t))
            combined[t] = combined[t] + extent if t in combined else extent
    if not at_level:
        return combined
    # a group of same-level children with no loop above one iteration is looked through
    looked = np.ones(r.count, dtype=bool)
    for i in range(len(node.loops)):
        looked &= r.n[c.slot_of[(path, i)]] <= 1
    zero = np.zeros(r.count)
    return {t: np.where(looked, combined.get(t, zero), own.get(t, zero))
            for t in dict.fromkeys([*combined, *own])}


def _scaled(words_per_element: float, elements: np.ndarray) -> np.ndarray:
    """Words held: `elements` times the words each takes (its width in accelerator words,
    times its buffering depth), as the tests' `scalar_resources._own` multiplies them."""
    return words_per_element * elements if words_per_element != 1.0 else elements


def _disjoint_instances(r: Rows, path: str, level: int) -> np.ndarray:
    """Per row, whether every operator below spreads over instances of `level` with a
    spatial loop of its own of more than one iteration (a factor-1 loop spreads over
    nothing): the tests' `scalar_resources._disjoint_instances`."""
    c = r.c
    depth = node_depth(path)
    out = np.ones(r.count, dtype=bool)
    for o in c.ops_below[path]:
        op_path = c.paths[o]
        out &= r.any_above_one(op_path, [i for i, lp in enumerate(op_path.loops)
                                         if lp.spatial and lp.node > depth and lp.level < level])
    return out


def tile_words(r: Rows, path: Path, tensor: str, position: int,
               kept: bool = False) -> np.ndarray:
    """Words of a tensor in the tile at path position `position` (its loops and below), per
    row: per axis, the largest slice over the positions of the loops above, clipped to the
    tensor (`kept`: a producer's kept halo rows included)."""
    w = r.c.workload
    access = path.op.access(tensor)
    words = np.ones(r.count)
    extents = r.extents[path.op.name][position]
    shifts = r.shift[path.op.name]
    for axis, size in zip(access.axes, w.shapes[tensor], strict=True):
        d = axis.terms[0][0]
        if not (axis.is_plain and size == w.sizes[d]):
            words = words * _largest_span(r, path, AxisRec(axis.terms, axis.offset, size),
                                          position, kept)
            continue
        plain = np.minimum(extents[d], size)
        if d in shifts and shifts[d].any():  # a halo shift: the clipped slices differ
            plain = np.where(shifts[d] == 0, plain, _largest_span(
                r, path, AxisRec(axis.terms, axis.offset, size), position, kept))
        words = words * plain
    return words


def _largest_span(r: Rows, path: Path, axis: AxisRec, position: int,
                  kept: bool = False) -> np.ndarray:
    """The longest clipped interval the axis covers over the
    positions of the loops above `position`. From a few candidate positions per dim where
    the axis never reaches past the end of the tensor and each dim's positions form one
    progression (`_separable_span`); on a grid of those loops' values on the other rows."""
    names = {d for d, _ in axis.terms}
    above = [r.vloop(path, i, False) for i, lp in enumerate(path.loops)
             if lp.node < position and lp.dim in names]
    dims = {d: replace(v, cut=None) if kept else v
            for d, v in r.dims(path, position).items() if d in names}

    def largest(sub_dims, sub_loops, _union, rows: int) -> np.ndarray:
        grid = Grid(rows, [(lp, 0) for lp in sub_loops])
        pos = positions(list(zip(sub_loops, grid.values, strict=True)), rows)
        lo, hi = interval(axis, sub_dims, pos)
        return np.where(grid.valid, hi - lo, 0).max(axis=1)

    if _within(axis, dims):
        closed, ok = _separable_span(axis, dims, above, r.count)
        return closed_or_grid(closed, ok, largest, dims, above, [], axis)
    return on_grid(largest, dims, above, [], r.count)


def _within(axis: AxisRec, dims) -> bool:
    """Whether the axis's interval never reaches past the end of the tensor wherever its
    dims' slices lie inside theirs: positive coefficients and
    offset + sum c * (size_d - 1) + 1 <= size (it may start before 0: a padded window)."""
    return (all(c > 0 for _, c in axis.terms)
            and axis.offset + sum(c * (dims[d].size - 1) for d, c in axis.terms) + 1
            <= axis.size)


def _separable_span(axis: AxisRec, dims, above, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(the longest span, rows where it holds: each dim's positions shift + k * step, k <
    count, form one progression). With the end never clipped, a position's span is
    min(sum c * w_d, sum c * hi_d) plus constants (w_d the clipped width of dim d's slice,
    hi_d its clipped end), both sums separable, so a dim's position only needs to be one
    that no other position beats in both w and hi. The width min(x + extent, size) -
    max(x, 0) is unimodal with a plateau [bottom, top] and hi grows with x: the largest
    position at most `top`, the next one and the smallest at least `bottom` dominate all
    others. The span is measured exactly (`interval`) on the product of those candidates."""
    ok = np.ones(rows, dtype=bool)
    candidates: dict[str, np.ndarray] = {}
    for d, _ in axis.terms:
        rec = dims[d]
        step, count, nested = progression([lp for lp in above if lp.dim == d], rows)
        ok &= nested
        step = np.maximum(step, 1)
        top = np.maximum(0, rec.size - rec.extent)
        bottom = np.minimum(0, rec.size - rec.extent)
        last = count - 1
        k_low = clamp(np.floor_divide(top - rec.shift, step), 0, last)
        k_high = clamp(-np.floor_divide(rec.shift - bottom, step), 0, last)
        ks = np.stack([k_low, np.minimum(k_low + 1, last), k_high], axis=1)
        candidates[d] = ks * step[:, None]
    names = list(candidates)
    columns = np.stack(np.meshgrid(*[np.arange(3)] * len(names), indexing="ij"),
                       axis=-1).reshape(-1, len(names))
    pos = {d: candidates[d][:, columns[:, m]] for m, d in enumerate(names)}
    lo, hi = interval(axis, dims, pos)
    return (hi - lo).max(axis=1), ok


def _own(r: Rows, path: str, level: int) -> Words:
    c = r.c
    w = c.workload
    own: Words = {}
    depth = node_depth(path)
    node = c.tiles[path]
    for o in c.ops_below[path]:
        op_path = c.paths[o]
        for t in w.op_by_name[o].tensors:
            if t in c.homes:
                home, lca_depth = c.homes[t], node_depth(c.lca[t])
                if home > level or (home == level and lca_depth < depth):
                    continue
            if not c.holds(o, depth, t):  # bypassed: not held at this level
                continue
            scale = c.words_per_element(t, level, (node,))
            box = _scaled(scale, tile_words(r, op_path, t, depth))
            own[t] = np.maximum(own[t], box) if t in own else box
    return own


def _lca_extent(r: Rows, tensor: str, lca: str) -> np.ndarray:
    w = r.c.workload
    depth = node_depth(lca)
    ops = (w.producer[tensor], *w.consumers[tensor])
    out = None
    for o in ops:  # the kept halo rows stay in the home: the producer's whole region
        box = tile_words(r, r.c.paths[o], tensor, depth + 1, kept=True)
        out = box if out is None else np.maximum(out, box)
    return out


def _kept_rows(r: Rows, tensor: str) -> np.ndarray | float:
    """The tests' `scalar_resources._kept_rows` per row: under a kept halo, loops of the
    common ancestor inside the sliding one over other axes of the intermediate keep the rows
    of each of their positions resident until the slide returns (a line buffer)."""
    c = r.c
    producer = c.workload.producer[tensor]
    cuts = r.cut.get(producer)
    if not cuts:
        return 0.0
    w = c.workload
    path = c.paths[producer]
    depth = c.cuts[producer].depth
    step = r.extents[producer][depth + 1]
    dims = [a.terms[0][0] for a in path.op.output.axes]
    extra = np.zeros(r.count)
    for d, kept in cuts.items():
        slide = r.slide[producer][d]
        sweep = {e: step[e] for e in dims}
        for i, lp in enumerate(path.loops):
            if lp.node <= depth and not lp.spatial and lp.dim != d and lp.dim in sweep:
                grow = (r.n[lp.slot] - 1) * r.stride[lp.slot]
                sweep[lp.dim] = sweep[lp.dim] + np.where(slide < i, grow, 0)
        others = [e for e in dims if e != d]
        swept = np.ones(r.count, dtype=np.int64)
        one = np.ones(r.count, dtype=np.int64)
        for e in others:
            swept = swept * np.minimum(sweep[e], w.sizes[e])
            one = one * np.minimum(step[e], w.sizes[e])
        extra = extra + kept * (swept - one)
    return extra


Site = tuple
"""Which check produced an amount (`check` names it; a `Recorder` turns it into a record)."""


class Recorder(Protocol):
    """Told of every check with its site, the rows' `needed` and `available` amounts (for a
    flag: the rows where it holds and 1 - a boolean amount)."""

    def __call__(self, kind: str, site: Site, needed, available) -> None: ...


class Violations:
    """Per kind, the largest amount (needed - available) by which each row exceeds it; with a
    `recorder`, every check is also reported with its site (the records of one row)."""

    def __init__(self, rows: int, recorder: Recorder | None = None):
        self.rows = rows
        self.amounts: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(rows))
        self.recorder = recorder

    def add(self, kind: str, needed, available, site: Site = ()) -> None:
        over = np.asarray(needed, dtype=float) - np.asarray(available, dtype=float)
        self.amounts[kind] = np.maximum(self.amounts[kind], np.where(over > 0, over, 0.0))
        if self.recorder is not None:
            self.recorder(kind, site, needed, available)

    def flag(self, kind: str, where: np.ndarray, amount, site: Site = ()) -> None:
        self.amounts[kind] = np.maximum(self.amounts[kind],
                                        np.where(where, np.asarray(amount, dtype=float), 0.0))
        if self.recorder is not None:
            self.recorder(kind, site, where, amount)

    @property
    def valid(self) -> np.ndarray:
        ok = np.ones(self.rows, dtype=bool)
        for v in self.amounts.values():
            ok &= v <= 0
        return ok


def check(r: Rows, fps: dict[str, np.ndarray], out: Violations) -> None:
    """Every constraint of every row (each with its site, for `out`'s recorder)."""
    c = r.c
    w = c.workload
    if c.shape.violations:  # dependent Para children: the structure's own, every row
        out.flag("dependency", np.ones(r.count, dtype=bool), 1.0, ("structure",))
    for name, words in fps.items():
        out.add("capacity", words, c.arch.level(name).capacity_words, ("capacity", name))
    for o, path in c.paths.items():
        for k, (used, limit) in enumerate(c.fanout_limits(path)):
            out.add("fanout", r.prod(path, used), limit, ("fanout", o, k))
    _check_arrays(r, out)
    for k, (demand, ops, (first, spread_loops), limits) in enumerate(c.split_limits()):
        spread = r.prod(c.paths[first], spread_loops)
        for kind, (limit, fanout) in limits.items():
            def units(o: str, kind: str = kind, ops=ops):
                own, loops = ops[o]
                return r.prod(c.paths[o], loops) if own == kind else 0
            used = fold_demand(demand, units, np.maximum)
            out.add("fanout", used * spread, split_limit(limit, fanout, spread),
                    ("split", k, kind, spread))
    for o, path in c.paths.items():
        shifts = r.shift[o]
        for d in path.op.dims:
            covered = shifts.get(d, 0) + r.extents[o][0][d]
            out.add("coverage", w.sizes[d], covered, ("coverage", o, d))
    for t, lca in c.lca.items():
        producer = w.op_by_name[w.producer[t]]
        path = c.paths[producer.name]
        depth = node_depth(lca)
        carried = c.carries(t)
        for i, lp in enumerate(path.loops):
            if lp.node <= depth and lp.dim in producer.reduction_dims and i not in carried:
                n = r.n[lp.slot]
                out.flag("dependency", n > 1, n - 1, ("reduction", t, i))
    carried_state.check(r, out)
    for o, path in c.paths.items():  # a summed output split over instances: refused
        summed = {d for axis in path.op.output.axes if len(axis.terms) > 1
                  for d, _ in axis.terms}
        for i, lp in enumerate(path.loops):
            if lp.spatial and lp.dim in summed:
                out.flag("dependency", r.n[lp.slot] > 1, 1.0, ("summed", o, i))
    for t, producer, consumer, d, window, depth, tiling in c.windows:
        need = r.extents[consumer][depth + 1][d] + window
        has = r.extents[producer][depth + 1][d]
        tiled = r.any_above_one(c.paths[producer], tiling)
        out.flag("window", tiled & (has < need), need - has,
                 ("window", t, consumer, d, need, has))


def _check_arrays(r: Rows, out: Violations) -> None:
    """The tests' `scalar_resources._array_violations`: spatial loops onto a 2-D array (a PE
    array or a level's mesh), a loop marked x or y on that axis, the others the first x and
    the later ones y; per row, a loop of one iteration claims no axis (the next unmarked one
    of more than one iteration is the first)."""
    c = r.c
    where = {k: key for key, k in c.slot_of.items()}
    for o, path in c.paths.items():
        levels = path.levels
        for j in range(len(levels)):
            last = j == len(levels) - 1
            if not last and levels[j] == levels[j + 1]:
                continue
            mesh = compute_mesh(c.arch, path) if last else level_mesh(c.arch, levels[j],
                                                                   levels[j + 1])
            if not mesh:
                continue
            run = {k for k in range(j + 1) if levels[k] == levels[j]}
            spread = {"x": np.ones(r.count, dtype=np.int64),
                      "y": np.ones(r.count, dtype=np.int64)}
            first_free = np.ones(r.count, dtype=bool)  # no unmarked loop has spread yet
            for lp in path.loops:
                if not (lp.spatial and lp.node in run):
                    continue
                node_path, index = where[lp.slot]
                axis = c.tiles[node_path].loops[index].axis
                n = r.n[lp.slot]
                if axis:
                    spread[axis] = spread[axis] * n
                    continue
                spreads = n > 1
                spread["x"] = spread["x"] * np.where(first_free, n, 1)
                spread["y"] = spread["y"] * np.where(first_free, 1, n)
                first_free = first_free & ~spreads
            for axis, size in zip("xy", mesh, strict=True):
                out.add("array", spread[axis], size, ("array", o, j, axis, mesh))
