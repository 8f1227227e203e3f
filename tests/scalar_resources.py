"""The scalar copy's footprints and fan-out checks of one tree (the evaluator's are
`tileflow/evaluator/limits.py`): peak words per on-chip level, and the spatial loops against
each level's fan-out, the compute units, the arrays and the Para/Pipe splits, as `Violation`
records with the node, the constraint and the amounts."""

from __future__ import annotations

import math
from itertools import product

from scalar_movement import largest_slice
from scalar_prepare import OpPath, Plan, bypassed

from tileflow.analysis.buffering import depth as buffer_depth
from tileflow.analysis.buffering import footprint_scale
from tileflow.analysis.movement import AxisRec, DimRec, LoopRec
from tileflow.analysis.records import Violation
from tileflow.analysis.resources import (
    AXIS_NAMES,
    Footprint,
    compute_mesh,
    fold_demand,
    level_mesh,
    split_fanout,
    split_limit,
    unit_demand,
)
from tileflow.tree import ROOT, Op, Tile, child_path, is_below, label, node_depth, ops_under


def tile_words(plan: Plan, path: OpPath, tensor: str, position: int,
               kept: bool = False) -> float:
    """Words of `tensor` in the tile at path position `position` (its loops and below): per
    axis, the largest slice over the positions of the loops above (clipped to the tensor;
    the full extent for an axis tiled plainly). A producer that keeps a halo computes its
    slices past the kept rows; `kept`: the rows held, kept ones included (the home's)."""
    w = plan.workload
    words = 1.0
    extents = path.extents_from[position]
    for axis, size, plain in _box_axes(plan, path, tensor):
        if plain and not path.shift.get(plain):
            words *= min(extents[plain], size)
            continue
        if path.cut and not kept and any(d in path.cut for d, _ in axis.terms):
            words *= _cut_span(w, path, axis, size, extents, position)
            continue
        words *= _largest_span(w, path, axis, size, extents, position)
    return words


def _box_axes(plan: Plan, path: OpPath, tensor: str) -> list[tuple]:
    """Per axis of the operator's access to `tensor`: (axis, size, its dimension when the
    axis is that whole dimension, else ''). Shape-only, kept in the shape's memo."""
    memo = plan.memo
    key = ("box_axes", path.op.name, tensor)
    found = memo.get(key)
    if found is None:
        w = plan.workload
        found = memo[key] = [
            (axis, size, axis.terms[0][0] if axis.is_plain and size == w.sizes[axis.terms[0][0]]
             else "")
            for axis, size in zip(path.op.access(tensor).axes, w.shapes[tensor], strict=True)]
    return found


def _cut_span(w, path: OpPath, axis, size: int, extents, position: int) -> int:
    """`_largest_span` of a producer that keeps a halo: past the first iteration of the
    sliding loop, its slices start after the kept rows."""
    dims = {d: DimRec(w.sizes[d], extents[d], path.shift.get(d, 0), path.cut.get(d, 0))
            for d, _ in axis.terms}
    loops = [LoopRec(lp.dim, lp.n, lp.stride, False, m)
             for lp, m in zip(path.loops, path.marks, strict=True) if lp.node < position]
    return largest_slice(AxisRec(axis.terms, axis.offset, size), dims, loops)


def _largest_span(w, path: OpPath, axis, size: int, extents, position: int) -> int:
    """The longest clipped interval an affine axis covers over the steps above `position`."""
    names = {d for d, _ in axis.terms}
    above = [lp for lp in path.loops if lp.node < position and lp.dim in names and lp.n > 1]
    best = 0
    for values in product(*(range(lp.n) for lp in above)):
        pos = dict.fromkeys(names, 0)
        for lp, v in zip(above, values, strict=True):
            pos[lp.dim] += v * lp.stride
        lo = hi = axis.offset
        for d, c in axis.terms:
            x = path.shift.get(d, 0) + pos[d]
            a, b = max(x, 0), min(x + extents[d], w.sizes[d])
            if b <= a:
                break
            lo += c * a
            hi += c * (b - 1)
        else:
            best = max(best, min(hi + 1, size) - max(lo, 0))
    return best


def footprints(plan: Plan, double_buffer: bool = False) -> list[Footprint]:
    """Peak words resident per on-chip level: Seq takes the max over children, Shar the
    union (a shared tensor counts once), Para and Pipe the sum; intermediates count at their
    home level with their extent within one step of their common ancestor."""
    out = []
    for index, level in enumerate(plan.arch.levels):
        if index == 0 and math.isinf(level.capacity_words):
            continue
        by_tensor = _fp(plan, ROOT, plan.flow.root, index, double_buffer)
        words = sum(by_tensor.values())
        out.append(Footprint(level.name, words, level.capacity_words, by_tensor))
    return out


def _fp(plan: Plan, path: str, node: Tile | Op, level: int,
        double_buffer: bool = False) -> dict[str, float]:
    if isinstance(node, Op):
        return {}
    holds, at_level, group = _fp_facts(plan, path, node, level)
    if not holds:
        return {}
    if at_level and not (group and not any(lp.factor > 1 for lp in node.loops)):
        return _own(plan, path, node, level, double_buffer)
    kids = [_fp(plan, child_path(path, i), c, level, double_buffer)
            for i, c in enumerate(node.children)]
    combined: dict[str, float] = {}
    kind = node.semantics
    if kind.serial and not kind.shares_inputs:  # Seq: one child's data at a time
        combined = dict(max(kids, key=lambda k: sum(k.values()), default={}))
    elif kind.serial:  # Shar: what they hold is shared, tensor by tensor
        for k in kids:
            for t, v in k.items():
                combined[t] = max(combined.get(t, 0.0), v)
    elif _disjoint_instances(plan, path, node, level):
        combined = dict(max(kids, key=lambda k: sum(k.values()), default={}))
    else:
        for k in kids:
            for t, v in k.items():
                combined[t] = combined.get(t, 0.0) + v
    for t, scale in _homed_here(plan, path, node, level, double_buffer):
        combined[t] = combined.get(t, 0.0) + scale * _width(plan, t) * (
            _lca_extent(plan, t, path) + _kept_rows(plan, t))
    return combined


def _fp_facts(plan: Plan, path: str, node: Tile, level: int) -> tuple[bool, bool, bool]:
    """Shape-only facts of a tile for the footprint at `level` (kept in the shape's memo):
    whether anything below it (itself included) holds data at that level (a tile there, or
    an intermediate homed there), whether it is at that level, and whether it groups
    several tiles at its own level (then, without loops of its own, its children count)."""
    memo = plan.memo
    key = ("fp_facts", path, level)
    found = memo.get(key)
    if found is None:
        level_index = plan.arch.level_index
        below = [p for p in plan.tiles if p == path or is_below(p, path)]
        holds = any(level_index[plan.tiles[p].level] == level for p in below) or any(
            lca in below and plan.homes[t] == level for t, lca in plan.lca.items())
        group = len(node.children) > 1 and all(isinstance(c, Tile) and c.level == node.level
                                               for c in node.children)
        found = memo[key] = (holds, level_index[node.level] == level, group)
    return found


def _homed_here(plan: Plan, path: str, node: Tile, level: int,
                double_buffer: bool) -> list[tuple[str, float]]:
    """The intermediates whose common ancestor is this tile and whose home is `level`, with
    the words held per word of their extent (shape-only, kept in the shape's memo)."""
    memo = plan.memo
    key = ("homed_here", path, level, double_buffer)
    found = memo.get(key)
    if found is None:
        here = [node] if plan.arch.level_index[node.level] == level else []
        found = memo[key] = [
            (t, footprint_scale(buffer_depth(plan.arch, level, t, here), double_buffer))
            for t, lca in plan.lca.items() if lca == path and plan.homes[t] == level]
    return found


def _kept_rows(plan: Plan, tensor: str) -> float:
    """A kept halo (`halo: cache`) when loops of the common ancestor inside the sliding one
    step over other axes of the intermediate: the rows kept for each of their positions stay
    resident until the slide comes back to them (a line buffer), beyond the one step's
    extent."""
    path = plan.paths[plan.workload.producer[tensor]]
    if not path.cut:
        return 0.0
    w = plan.workload
    step = path.extents_from[path.cut_depth + 1]
    dims = [a.terms[0][0] for a in path.op.output.axes]
    extra = 0.0
    for d, kept in path.cut.items():
        slide = max(i for i in path.slide if path.loops[i].dim == d)
        sweep = dict(step)
        for lp in path.loops[slide + 1:]:
            if lp.node <= path.cut_depth and not lp.spatial and lp.dim != d:
                sweep[lp.dim] = sweep.get(lp.dim, 1) + (lp.n - 1) * lp.stride
        others = [e for e in dims if e != d]
        extra += kept * (math.prod(min(sweep[e], w.sizes[e]) for e in others)
                         - math.prod(min(step[e], w.sizes[e]) for e in others))
    return extra


def _disjoint_instances(plan: Plan, path: str, node: Tile, level: int) -> bool:
    """Para/Pipe children that spread over instances of `level` with spatial loops of their
    own (of more than one iteration: a factor-1 loop spreads over nothing) sit on disjoint
    instances: per instance, only one child's data is resident."""
    depth = node_depth(path)
    return all(
        any(lp.spatial and lp.n > 1 and lp.node > depth and lp.level < level
            for lp in plan.paths[o].loops)
        for o in _ops(plan, path, node)
    )


def _ops(plan: Plan, path: str, node: Tile) -> tuple[str, ...]:
    """The operators under a tile (from the cached shape when there is one)."""
    return plan.shape.ops_below[path] if plan.shape is not None else ops_under(node)


def _width(plan: Plan, tensor: str) -> float:
    """Accelerator words per element (the workload's `precision_bits`)."""
    return plan.workload.width_ratio(tensor, plan.arch.word_bytes * 8)


def _own(plan: Plan, path: str, node: Tile, level: int,
         double_buffer: bool = False) -> dict[str, float]:
    own: dict[str, float] = {}
    depth = node_depth(path)
    for o, t, scale in _held(plan, path, node, level, double_buffer):
        own[t] = max(own.get(t, 0.0),
                     scale * _width(plan, t) * tile_words(plan, plan.paths[o], t, depth))
    return own


def _held(plan: Plan, path: str, node: Tile, level: int,
          double_buffer: bool) -> list[tuple[str, str, float]]:
    """(operator, tensor, words held per word of its box) for what the tile at `level` holds
    of its operators' tensors (shape-only, kept in the shape's memo)."""
    memo = plan.memo
    key = ("held", path, level, double_buffer)
    found = memo.get(key)
    if found is not None:
        return found
    found = []
    depth = node_depth(path)
    for o in _ops(plan, path, node):
        for t in plan.workload.op_by_name[o].tensors:
            if t in plan.homes:
                home, lca_depth = plan.homes[t], node_depth(plan.lca[t])
                if home > level or (home == level and lca_depth < depth):
                    continue  # lives above this level, or counted at its common ancestor
            if bypassed(plan.paths[o], depth, t, plan.homes.get(t)):
                continue
            scale = footprint_scale(buffer_depth(plan.arch, level, t, [node]), double_buffer)
            found.append((o, t, scale))
    memo[key] = found
    return found


def _lca_extent(plan: Plan, tensor: str, lca: str) -> float:
    w = plan.workload
    depth = node_depth(lca)
    ops = (w.producer[tensor], *w.consumers[tensor])
    # the kept halo rows stay in the home beside the new ones: the producer's whole region
    return max(tile_words(plan, plan.paths[o], tensor, depth + 1, kept=True) for o in ops)


def capacity_violations(plan: Plan, fps: list[Footprint]) -> list[Violation]:
    out = []
    for fp in fps:
        if fp.words > fp.capacity_words:
            worst = sorted(fp.by_tensor.items(), key=lambda kv: -kv[1])[:3]
            detail = ", ".join(f"{t} {v:,.0f}" for t, v in worst)
            node = _peak_node(plan, plan.arch.level_index[fp.level])
            out.append(Violation(
                "capacity", node, fp.level, None, fp.words, fp.capacity_words, "words",
                f"capacity: level {fp.level} needs {fp.words:,.0f} words but holds "
                f"{fp.capacity_words:,.0f} (over by {fp.words - fp.capacity_words:,.0f}; "
                f"largest: {detail}; at {label(node, plan.tiles[node])})"))
    return out


def _peak_node(plan: Plan, level: int) -> str:
    """The deepest tile whose subtree alone holds the level's peak (where an overrun shows)."""
    peak = sum(_fp(plan, ROOT, plan.flow.root, level).values())
    best = ROOT
    for path, tile in plan.tiles.items():
        if plan.arch.level_index[tile.level] <= level and node_depth(path) > node_depth(best) \
                and sum(_fp(plan, path, tile, level).values()) >= peak:
            best = path
    return best


def spatial_violations(plan: Plan) -> list[Violation]:
    """Spatial loops must fit the fan-out of each level and the compute units; Para and Pipe
    children split the instances of their tile's level between them."""
    out: list[Violation] = []
    for path in plan.paths.values():
        for j, run, limit, what, level, unit, mesh in _spreads(plan, path):
            node_path, tile = path.tiles[j]
            # the run is positions start..j (levels only grow down a path)
            used = path.spread_above[j + 1] // path.spread_above[min(run)]
            if used > limit:
                out.append(Violation(
                    "fanout", node_path, level, None, used, limit, unit,
                    f"fan-out: {label(node_path, tile)} spreads '{path.op.name}' over "
                    f"{used} {what.split(' per ')[0]} but there are {limit} ({what})"))
            if mesh:
                run_loops = [lp for lp in path.loops if lp.spatial and lp.node in run]
                out += _array_violations(plan, path, run_loops, mesh, level)
    for node_path, node in plan.tiles.items():
        if node.semantics.at_once and len(node.children) > 1:
            out += _split_violations(plan, node_path, node)
    return list(dict.fromkeys(out))


def _spreads(plan: Plan, path: OpPath) -> list[tuple]:
    """Per boundary of an operator's path where the level changes, and for its compute:
    (position, the positions of the run of same-level tiles there, the instance limit, its
    description, the level or unit's level, the unit of the amounts, the array's x-by-y
    layout). Shape-only, kept in the shape's memo."""
    memo = plan.memo
    key = ("spreads", path.op.name)
    found = memo.get(key)
    if found is not None:
        return found
    arch = plan.arch
    levels = path.levels
    found = []
    for j, (_, tile) in enumerate(path.tiles):
        last = j == len(levels) - 1
        if not last and levels[j] == levels[j + 1]:
            continue
        run = frozenset(k for k in range(j + 1) if levels[k] == levels[j])
        assert run == frozenset(range(min(run), j + 1)), "levels grow down a path"
        if last:
            limit, what = _compute_limit(plan, path)
            level = arch.unit(path.op.unit).level
            unit = f"{arch.unit(path.op.unit).kind} units"
            mesh = compute_mesh(plan.arch, path)
        else:
            level = arch.levels[levels[j + 1]].name
            limit = arch.fanout_between(tile.level, level)
            what = f"{level} instances per {tile.level} instance"
            unit = f"{level} instances"
            mesh = level_mesh(arch, levels[j], levels[j + 1])
        found.append((j, run, limit, what, level, unit, mesh))
    memo[key] = found
    return found


def _array_violations(plan: Plan, path: OpPath, loops, mesh: tuple[int, ...],
                      level: str) -> list[Violation]:
    """Spatial loops onto a 2-D array: a loop marked x or y takes that axis; the others, in
    the order written, the first x and the later ones y (loops of one iteration claim
    nothing). Each axis must hold its loops."""
    spread = {"x": 1, "y": 1}
    where = {"x": 0, "y": 0}
    unmarked = "x"
    for lp in loops:
        axis = lp.axis
        if lp.n == 1:  # spreads over nothing, claims no axis
            continue
        if not axis:
            axis, unmarked = unmarked, "y"
        spread[axis] *= lp.n
        where[axis] = max(where[axis], lp.node)
    out = []
    for axis, size in zip("xy", mesh, strict=True):
        if spread[axis] > size:
            node_path, tile = path.tiles[where[axis]]
            out.append(Violation(
                "array", node_path, level, None, spread[axis], size, AXIS_NAMES[axis],
                f"array: {label(node_path, tile)} spreads '{path.op.name}' over "
                f"{spread[axis]} {AXIS_NAMES[axis]} of {level} but the array has {size} "
                f"({mesh[0]} x {mesh[1]})"))
    return out


def _split_violations(plan: Plan, node_path: str, node: Tile) -> list[Violation]:
    """Para and Pipe children run at once on disjoint units: per kind of compute unit, the
    units they spread over must add up to no more than each instance of the tile has (the
    tile's own spatial loops give each instance a whole share of the instances below). A
    child's units are those of its operators combined as its tree runs them
    (`unit_demand`): the largest of operators one after another, the sum of those at once."""
    arch = plan.arch
    depth = node_depth(node_path)
    level = arch.level_index[node.level]
    first = plan.paths[_ops(plan, node_path, node)[0]]
    spread = math.prod(lp.n for lp in first.loops
                       if lp.spatial and lp.node <= depth and lp.level == level)
    kinds = dict.fromkeys(arch.unit(plan.paths[o].op.unit).kind
                          for o in _ops(plan, node_path, node))
    demand = unit_demand(node)
    used: dict[str, int] = {}
    for kind in kinds:
        def units(o: str, kind: str = kind) -> int:
            path = plan.paths[o]
            if arch.unit(path.op.unit).kind != kind:
                return 0
            return math.prod(lp.n for lp in path.loops if lp.spatial and lp.node > depth)
        used[kind] = fold_demand(demand, units) * spread
    out = []
    for kind, units in used.items():
        unit = arch.matrix if kind == "matrix" else arch.vector
        start, feed = arch.level_index[node.level], arch.level_index[unit.level]
        limit = unit.parallelism * (arch.fanout_between(node.level, unit.level)
                                    if start < feed else 1)
        if start < feed:
            limit = int(split_limit(limit, split_fanout(arch, first, depth, level, feed),
                                        spread))
        if units > limit:
            out.append(Violation(
                "fanout", node_path, unit.level, None, units, limit, f"{kind} units",
                f"fan-out: the {node.primitive} children of {label(node_path, node)} "
                f"spread over {units} {kind} units together (the tile's own spatial loops "
                f"included) but the tile's {spread} instance(s) have {limit}"))
    return out


def _compute_limit(plan: Plan, path: OpPath) -> tuple[int, str]:
    arch = plan.arch
    unit = arch.unit(path.op.unit)
    innermost = path.levels[-1]
    feed = arch.level_index[unit.level]
    name = arch.levels[innermost].name
    if innermost > feed:
        return 0, (f"{unit.kind} units: '{path.op.name}' runs on the {unit.kind} unit fed from "
                   f"{unit.level}, which is above its innermost tile at {name}")
    limit = arch.fanout_between(name, unit.level) * unit.parallelism
    return limit, f"{unit.kind} units per {name} instance"
