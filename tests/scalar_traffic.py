"""Walk each operator's path and count fills, reads and updates per level and tensor, the
words each tile moves over its links, and the operations each leaf performs."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from scalar_carried import is_carried, rescaling
from scalar_movement import (
    distinct_slices,
    epochs_revisited,
    iteration_count,
    timeloop_words_moved,
    words_moved,
)
from scalar_prepare import OpPath, PathLoop, Plan, bypassed
from scalar_sharing import served_by_sibling

from tileflow.analysis.buffering import depth, serialised
from tileflow.analysis.bypass import source_run
from tileflow.analysis.movement import (
    AxisRec,
    DimRec,
    LoopRec,
    first_touches,
    resident_first_touches,
)
from tileflow.specs.expressions import Access
from tileflow.tree import Op, Tile, child_index, node_depth


class Transfer(NamedTuple):
    """Words moved over one link by one tile: `words` counted at `level`, spread over
    `instances` instances of it; `kind` is 'read' or 'write' (which port it uses)."""

    level: int
    words: float
    instances: int
    kind: str
    tensor: str = ""
    serial: bool = False  # a single-buffered tensor's: it does not overlap the compute


@dataclass(frozen=True)
class Leaf:
    """What one operator's leaf computes, and the operand traffic at its innermost level."""

    op: str
    unit: str
    function: str
    ops: int  # operations performed (recomputation included)
    steps: float  # temporal iterations (clipped ones included: they still take cycles;
    # fewer where a kept halo shortens the producer's later steps)
    level: int  # innermost storage level, which feeds the unit
    operand_reads: float
    result_updates: float
    instances: int  # instances of the innermost level in use
    fed: tuple[Transfer, ...] = ()  # tensors that bypass the innermost level: read from
    # (and, for the result, updated in) a level above it, straight to the unit
    rescale: tuple[tuple[str, int], ...] = ()  # a carried operator's rescaling (function,
    # operations): vector work on the leaf's lanes besides its own operations

    @property
    def rescale_ops(self) -> int:
        return sum(n for _, n in self.rescale)


@dataclass
class Counts:
    traffic: dict[tuple[int, str], list[float]] = field(
        default_factory=lambda: defaultdict(lambda: [0.0, 0.0, 0.0]))  # fill, read, update
    loads: dict[str, list[Transfer]] = field(default_factory=lambda: defaultdict(list))
    stores: dict[str, list[Transfer]] = field(default_factory=lambda: defaultdict(list))
    leaves: dict[str, Leaf] = field(default_factory=dict)


FILL, READ, UPDATE = 0, 1, 2


def count(plan: Plan) -> Counts:
    """All data movement and operation counts of the dataflow."""
    counts = Counts()
    served = served_by_sibling(plan)
    for path in plan.paths.values():
        _count_path(plan, path, counts, served)
    for name, ops in rescaling(plan).items():
        counts.leaves[name] = replace(counts.leaves[name], rescale=ops)
    return counts


def _axes(plan: Plan, access: Access) -> tuple[AxisRec, ...]:
    shape = plan.workload.shapes[access.tensor]
    return tuple(AxisRec(a.terms, a.offset, size) for a, size in zip(access.axes, shape,
                                                                      strict=True))


def _dims(plan: Plan, path: OpPath, j: int) -> dict[str, DimRec]:
    """Each dim's size, extent inside the buffer below path position j, and shift."""
    sizes = plan.workload.sizes
    extents = path.extents_from[j + 1]
    cut = path.cut or {}
    return {d: DimRec(sizes[d], extents[d], path.shift.get(d, 0), cut.get(d, 0))
            for d in path.op.dims}


def _point_dims(plan: Plan, path: OpPath) -> dict[str, DimRec]:
    """Each dim of the operator as single iterations (extent 1): its iteration space."""
    sizes = plan.workload.sizes
    cut = path.cut or {}
    return {d: DimRec(sizes[d], 1, path.shift.get(d, 0), cut.get(d, 0)) for d in path.op.dims}


def _all_loops(path: OpPath) -> list[LoopRec]:
    return [LoopRec(lp.dim, lp.n, lp.stride, False, m)
            for lp, m in zip(path.loops, path.marks, strict=True)]


def _drop_depths(plan: Plan, path: OpPath, tensor: str) -> list[int]:
    """Path positions of Seq tiles whose next child (wrapping) does not use `tensor`: below
    them the tensor is dropped between steps, so loops at or above them give no reuse."""
    if plan.shape is not None:
        return list(plan.shape.drops[(path.op.name, tensor)])
    depths = []
    for k, (_, tile) in enumerate(path.tiles):
        if tile.semantics.shares_inputs or len(tile.children) < 2:
            continue
        child = path.tiles[k + 1][0] if k + 1 < len(path.tiles) else None
        index = _child_index(tile, path, k, child)
        nxt = tile.children[(index + 1) % len(tile.children)]
        if tensor not in plan.tensors_under[id(nxt)]:
            depths.append(k)
    return depths


def _child_index(tile: Tile, path: OpPath, k: int, child: str | None) -> int:
    if child is not None:
        return child_index(child)
    return next(i for i, c in enumerate(tile.children)
                if isinstance(c, Op) and c.op == path.op.name)


def _tensor_info(plan: Plan, path: OpPath) -> dict:
    """Per tensor of the operator: its axes, Seq drop positions, no-reuse positions and which
    loops start a new epoch of it (shape-only: kept in the shape's memo)."""
    memo = plan.memo
    key = ("tensor_info", path.op.name, path.loop_key)
    if key in memo:
        return memo[key]
    op = path.op
    info = {}
    for access in (*op.inputs, op.output):
        t = access.tensor
        drops = _drop_depths(plan, path, t)
        no_reuse = {k for k, (_, tile) in enumerate(path.tiles) if t in tile.no_reuse}
        if t in plan.lca:
            lca_depth = node_depth(plan.lca[t])
            epoch = [lp.node <= lca_depth and not is_carried(plan, t, lp)
                     for lp in path.loops]
        else:
            epoch = [lp.dim not in op.dims for lp in path.loops]
        info[t] = (_axes(plan, access), drops, no_reuse, epoch)
    memo[key] = info
    return info


def _count_path(plan: Plan, path: OpPath, counts: Counts,
                served: set[tuple[str, int, str]] = frozenset()) -> None:
    op = path.op
    tensor_info = _tensor_info(plan, path)
    for j, owner, y, links in _links(plan, path):
        if y is None:  # the innermost tile: the compute
            _count_compute(plan, path, counts, links, tensor_info)
            continue
        extents = path.extents_from[j + 1]
        dims_y = None  # built when a link needs the general sums
        geometry: dict[int, tuple] = {}
        for access, is_out, run_start, x, serial in links:
            t = access.tensor
            if (op.name, j, t) in served:
                continue  # resident already: an earlier sibling loaded the same slice
            if run_start not in geometry:
                geometry[run_start] = _geometry(plan, path, j, run_start, extents)
            union_sp, fast, inst_x, inst_y = geometry[run_start]
            axes, drops, no_reuse, epoch = tensor_info[t]
            level = plan.arch.levels[y]
            first = is_out and level.first_touch_fills
            moved = fast.counts(access, is_out, drops, no_reuse, epoch, first)
            if moved is None and level.deltas == "timeloop" and not is_out:
                dims_y = dims_y or _dims(plan, path, j)
                moved = _timeloop_counts(path, j, run_start, dims_y, axes, drops, no_reuse)
            if moved is None:
                dims_y = dims_y or _dims(plan, path, j)
                moved = _general_counts(path, j, run_start, dims_y, _union(path, union_sp),
                                        axes, is_out, drops, no_reuse, epoch, first)
            if first and not level.first_touch_reads_parent:  # filled, the parent not read
                plain = fast.counts(access, is_out, drops, no_reuse, epoch, False)
                if plain is None:
                    dims_y = dims_y or _dims(plan, path, j)
                    plain = _general_counts(path, j, run_start, dims_y,
                                            _union(path, union_sp), axes, is_out, drops,
                                            no_reuse, epoch, False)
                moved = (*moved[:3], plain[3])
            _record(counts, owner, x, y, t, is_out, inst_x, inst_y, *moved, serial=serial,
                    width=plan.workload.width_ratio(t, plan.arch.word_bytes * 8))


def _links(plan: Plan, path: OpPath) -> list[tuple]:
    """Per boundary of the path where the level changes: (position, owner tile, inner level,
    the tensors crossing it with their source run and level and whether they are
    single-buffered); the innermost tile gives (position, owner, None, each tensor's source
    run). Shape-only, kept in the shape's memo."""
    memo = plan.memo
    key = ("links", path.op.name)
    found = memo.get(key)
    if found is not None:
        return found
    op = path.op
    levels = path.levels
    accesses = [(a, False) for a in op.inputs] + [(op.output, True)]
    out = []
    nodes = len(path.tiles)
    for j in range(nodes):
        last = j == nodes - 1
        if not last and levels[j] == levels[j + 1]:
            continue
        owner = path.tiles[j][0]
        if last:
            out.append((j, owner, None, {a.tensor: _source(path, j, a.tensor,
                                                              plan.homes.get(a.tensor))
                                         for a, _ in accesses}))
            continue
        y = levels[j + 1]
        inner = _run_tiles(path, j + 1)
        links = []
        for access, is_out in accesses:
            t = access.tensor
            if bypassed(path, j + 1, t, plan.homes.get(t)):
                continue  # the tensor skips level y: counted at the boundary below it
            run_start = _source(path, j, t, plan.homes.get(t))
            x = levels[run_start]
            if t in plan.homes and x < plan.homes[t]:
                continue
            links.append((access, is_out, run_start, x,
                          serialised(depth(plan.arch, y, t, inner))))
        out.append((j, owner, y, links))
    memo[key] = out
    return out


def _source(path: OpPath, j: int, tensor: str, home: int | None = None) -> int:
    """`bypass.source_run` on the operator's path."""
    return source_run(path.levels, [tile for _, tile in path.tiles], j, tensor, home)


def _geometry(plan: Plan, path: OpPath, j: int, run_start: int, extents: dict[str, int]):
    """Spatial loops whose instances one parent instance serves (it sends the union), the
    closed-form counter, and the instances on each side of the link."""
    union_sp = [lp for lp in path.loops if lp.spatial and run_start <= lp.node <= j]
    fast = _ExactTiling(plan, path, j, run_start, extents, union_sp)
    return union_sp, fast, fast.inst_x, fast.inst_y


def _union(path: OpPath, union_sp: list[PathLoop]) -> list[LoopRec]:
    """The union's spatial loops as the general sums take them."""
    marks = dict(zip(path.loops, path.marks, strict=True))
    return [LoopRec(lp.dim, lp.n, lp.stride, False, marks[lp]) for lp in union_sp]


def _run_tiles(path: OpPath, start: int) -> list[Tile]:
    """The tiles of the path from `start` down while they stay at its level."""
    out = []
    for k in range(start, len(path.tiles)):
        if path.levels[k] != path.levels[start]:
            break
        out.append(path.tiles[k][1])
    return out


def _general_counts(path: OpPath, j: int, run_start: int, dims_y: dict[str, DimRec],
                    union: list[LoopRec], axes: tuple[AxisRec, ...], is_out: bool,
                    drops: list[int], no_reuse: set[int], epoch: list[bool],
                    first: bool = False):
    """Words moved over the boundary below path position j, by the exact per-axis sums:
    (into the child level, out of the parent, partial sums refilled into each). `first`:
    outputs are filled on their first touch too (the child level's `first_touch_fills`)."""
    temporal = []
    for lp, ep, m in zip(path.loops, epoch, path.marks, strict=True):
        if lp.node > j or lp.spatial:
            continue
        temporal.append((LoopRec(lp.dim, lp.n, lp.stride, _drops(lp, j, drops, no_reuse), m),
                         ep))
    # spatial instances above the boundary each hold their own copy: no reuse between them
    inst_y = [(LoopRec(lp.dim, lp.n, lp.stride, True, m), True)
              for lp, m in zip(path.loops, path.marks, strict=True)
              if lp.spatial and lp.node <= j]
    inst_x = [(LoopRec(lp.dim, lp.n, lp.stride, True, m), True)
              for lp, m in zip(path.loops, path.marks, strict=True)
              if lp.spatial and lp.node < run_start]
    loops_y = [r for r, _ in inst_y + temporal]
    loops_x = [r for r, _ in inst_x + temporal]
    moved_y = words_moved(axes, dims_y, loops_y)
    moved_x = words_moved(axes, dims_y, loops_x, union=union)
    if not is_out:
        return moved_y, moved_x, 0, 0
    # partial sums come back only for elements touched before in their epoch
    epoch_y = [e for _, e in inst_y + temporal]
    epoch_x = [e for _, e in inst_x + temporal]
    refill_y = _refills(axes, dims_y, loops_y, epoch_y, (), moved_y, first)
    refill_x = _refills(axes, dims_y, loops_x, epoch_x, union, moved_x, first)
    # the parent reads, per step, the union of what its instances are refilled with: never
    # more than they are refilled with in all (none where no instance is refilled; the
    # per-axis sums over overlapping instances count first touches over their union)
    return moved_y, moved_x, refill_y, min(refill_x, refill_y)


def _refills(axes: tuple[AxisRec, ...], dims: dict[str, DimRec], loops: list[LoopRec],
             epoch: list[bool], union: list[LoopRec], moved: int, first: bool) -> int:
    """Partial sums filled back (`first`: every entry filled, first touches included: the
    entries themselves). Where an epoch's steps are consecutive, each starts with nothing
    resident of it: the entries with each epoch counted afresh, less the first touches.
    Where they are not, the entries less the first touches that enter
    (`resident_first_touches`)."""
    if first:
        return moved
    if epochs_revisited(loops, epoch):
        resident = resident_first_touches(axes, dims, loops, epoch, union)
        if resident is not None:
            return moved - first_touches(axes, dims, loops, epoch, union=union) + resident
    return (words_moved(axes, dims, loops, epoch, union)
            - first_touches(axes, dims, loops, epoch, union=union))


def _timeloop_counts(path: OpPath, j: int, run_start: int, dims_y: dict[str, DimRec],
                     axes: tuple[AxisRec, ...], drops: list[int], no_reuse: set[int]):
    """An input's words over the boundary below path position j under Timeloop's delta
    rule (`deltas: timeloop`): each instance below is filled by the rule on its own; the
    level above sends each different slice of the instances it serves once (the same slice:
    multicast), overlapping ones each whole. The spatial loops of each tile are a fan-out
    stage that multicasts on its own (Timeloop's inter-level fan-outs): the reads are the
    product of the stages' different slices."""
    temporal = [LoopRec(lp.dim, lp.n, lp.stride, _drops(lp, j, drops, no_reuse), m)
                for lp, m in zip(path.loops, path.marks, strict=True)
                if lp.node <= j and not lp.spatial]
    per_instance = timeloop_words_moved(axes, dims_y, temporal)
    stages: dict[int, list[LoopRec]] = defaultdict(list)  # each tile's spatial loops
    for lp in path.loops:
        if lp.spatial and run_start <= lp.node <= j:
            stages[lp.node].append(LoopRec(lp.dim, lp.n, lp.stride))
    inst_y = math.prod(lp.n for lp in path.loops if lp.spatial and lp.node <= j)
    inst_x = math.prod(lp.n for lp in path.loops if lp.spatial and lp.node < run_start)
    moved_y = inst_y * per_instance
    moved_x = inst_x * per_instance * math.prod(distinct_slices(axes, loops)
                                                for loops in stages.values())
    return moved_y, moved_x, 0, 0


def _drops(lp: PathLoop, j: int, drops: list[int], no_reuse: set[int]) -> bool:
    """The buffer below path position j keeps nothing of the tensor across this loop: its
    tile says no_reuse, or a Seq tile between it and the boundary drops the tensor."""
    return lp.node in no_reuse or any(lp.node <= k <= j for k in drops)


def _record(counts: Counts, owner: str, x: int, y: int, t: str, is_out: bool, inst_x: int,
            inst_y: int, moved_y: float, moved_x: float, refill_y: float,
            refill_x: float, serial: bool = False, width: float = 1.0) -> None:
    """Book one tensor's movement over one link: inputs are filled down; outputs are written
    back up (after spatial reduction) and their partial sums filled down again. Counts are
    in elements; transfers (their time) in accelerator words, `width` per element."""
    w = width
    if is_out:
        counts.traffic[(y, t)][FILL] += refill_y
        counts.traffic[(x, t)][READ] += refill_x
        counts.traffic[(x, t)][UPDATE] += moved_x
        counts.loads[owner] += [Transfer(x, w * refill_x, inst_x, "read", t, serial),
                                Transfer(y, w * refill_y, inst_y, "write", t, serial)]
        counts.stores[owner] += [Transfer(x, w * moved_x, inst_x, "write", t, serial),
                                 Transfer(y, w * moved_y, inst_y, "read", t, serial)]
    else:
        counts.traffic[(y, t)][FILL] += moved_y
        counts.traffic[(x, t)][READ] += moved_x
        counts.loads[owner] += [Transfer(x, w * moved_x, inst_x, "read", t, serial),
                                Transfer(y, w * moved_y, inst_y, "write", t, serial)]


class _ExactTiling:
    """Closed forms for a boundary where every dimension is tiled exactly (no clipping, no
    shift, no gaps between spatial instances): a slice is then either unchanged or replaced
    whole, so a tensor moves |slice| x (the trip counts of every loop down to the innermost
    one that changes or drops it). Returns None for anything else."""

    def __init__(self, plan: Plan, path: OpPath, j: int, run_start: int,
                 extents: dict[str, int], union_sp: list[PathLoop]):
        self.sizes = plan.workload.sizes
        self.shapes = plan.workload.shapes
        self.memo = plan.memo
        self.path = path
        self.j = j
        self.run_start = run_start
        self.inst_y = path.spread_above[j + 1]
        self.inst_x = path.spread_above[run_start]
        self.extent_y = {d: extents[d] for d in path.op.dims}
        self.extent_x = dict(self.extent_y)
        # strides grow up the path, so a dim tiled exactly overall is tiled exactly from any
        # boundary up; the spatial instances under one parent must also abut (no temporal
        # loop above the boundary striding between them)
        self.regular = set(path.exact_dims)
        for d in {lp.dim for lp in union_sp} & self.extent_y.keys():
            span = self.extent_y[d]
            for stride, n in sorted((lp.stride, lp.n) for lp in union_sp
                                    if lp.dim == d and lp.n > 1):
                if stride != span:
                    self.regular.discard(d)
                span *= n
            self.extent_x[d] = span

    def _trips(self, tensor: str, dims: list[str], drops: list[int], no_reuse: set[int],
               epoch: list[bool]) -> tuple[tuple[int, ...], ...]:
        """Which loops' trip counts multiply into each term of the closed form, as indices
        into the path's loops: the slice changes (`_steps`, without and with restarts), the
        epochs, and the spatial instances over other dims on each side. Depends only on
        which loops the path holds (all of more than one iteration): kept in the memo."""
        key = ("trips", self.path.op.name, self.j, tensor, self.path.loop_key)
        found = self.memo.get(key)
        if found is not None:
            return found
        path = self.path
        flagged = [(i, lp, _drops(lp, self.j, drops, no_reuse), e)
                   for i, (lp, e) in enumerate(zip(path.loops, epoch, strict=True))
                   if lp.node <= self.j and not lp.spatial]
        others = [(i, lp) for i, lp in enumerate(path.loops)
                  if lp.node <= self.j and lp.dim not in dims]
        found = (_steps(flagged, dims, fresh=False), _steps(flagged, dims, fresh=True),
                 tuple(i for i, lp, _, e in flagged if e and lp.dim not in dims),
                 tuple(i for i, lp in others if lp.spatial),
                 tuple(i for i, lp in others if lp.spatial and lp.node < self.run_start))
        self.memo[key] = found
        return found

    def _plain_dims(self, access) -> list[str] | None:
        """The dims of a tensor whose every axis is one whole dimension (shape-only, kept
        in the memo); None for any other tensor."""
        key = ("plain_dims", self.path.op.name, access.tensor)
        if key in self.memo:
            return self.memo[key]
        dims: list[str] | None = []
        for axis, size in zip(access.axes, self.shapes[access.tensor], strict=True):
            if len(axis.terms) != 1 or axis.terms[0][1] != 1 or axis.offset or \
                    size != self.sizes[axis.terms[0][0]]:
                dims = None
                break
            dims.append(axis.terms[0][0])
        self.memo[key] = dims
        return dims

    def counts(self, access, is_out: bool, drops: list[int], no_reuse: set[int],
               epoch: list[bool], first: bool = False):
        dims = self._plain_dims(access)
        if dims is None or not self.regular.issuperset(dims):
            return None
        loops = self.path.loops
        moving, restarting, epoch_loops, spread_y, spread_x = self._trips(
            access.tensor, dims, drops, no_reuse, epoch)
        moved = _product(loops, moving)
        slice_y = math.prod(self.extent_y[d] for d in dims)
        slice_x = math.prod(self.extent_x[d] for d in dims)
        moved_y = slice_y * self.inst_y * moved
        moved_x = slice_x * self.inst_x * moved
        if not is_out:
            return moved_y, moved_x, 0, 0
        restarts = _product(loops, restarting)
        flagged = [(lp, _drops(lp, self.j, drops, no_reuse), e)
                   for lp, e in zip(loops, epoch, strict=True)
                   if lp.node <= self.j and not lp.spatial]
        if first:  # every entry is filled, first touches included
            return moved_y, moved_x, moved_y, moved_x
        kept = _kept_epochs(flagged, dims)
        if kept is not None:  # an epoch's steps are not consecutive
            restarts = moved + kept
        # every instance over a dim the tensor does not index starts its own partial sums,
        # and so does every epoch (recomputation, a new step of the common ancestor)
        words = math.prod(self.sizes[d] for d in dims) * _product(loops, epoch_loops)
        refill_y = slice_y * self.inst_y * restarts - words * _product(loops, spread_y)
        refill_x = slice_x * self.inst_x * restarts - words * _product(loops, spread_x)
        return moved_y, moved_x, refill_y, refill_x


def _kept_epochs(flagged: list[tuple[PathLoop, bool, bool]], dims: list[str]) -> int | None:
    """Under exact tiling, where an unmarked loop encloses a marked one (an epoch's steps
    not consecutive) and no marked loop moves the slice: `resident_first_touches` over one
    slice, the entries' multiplier it adds: the sum, over the marked loops k inside which
    nothing moves or drops the slice, of (n_k - 1) x the marked loops outside k, times the
    unmarked loops over the tensor's dims (each of their positions holds a new slice).
    None where the epochs' steps are consecutive or a marked loop moves the slice."""
    live = [(lp, drop, e) for lp, drop, e in flagged if lp.n > 1]
    if any(e and lp.dim in dims for lp, _, e in live):
        return None
    if not any(e for lp, _, e in live[next((i for i, (_, _, e) in enumerate(live) if not e),
                                           len(live)):]):
        return None
    total = 0
    marked_outer = 1
    for i, (lp, drop, e) in enumerate(live):
        if e:
            still = not drop and not any(d or (not ee and o.dim in dims)
                                         for o, d, ee in live[i + 1:])
            if still:
                total += (lp.n - 1) * marked_outer
            marked_outer *= lp.n
    return total * math.prod(lp.n for lp, _, e in live if not e and lp.dim in dims)


def _steps(flagged, dims: list[str], fresh: bool) -> tuple[int, ...]:
    """The loops (indices) whose trip counts multiply into the steps that change the slice:
    every flagged loop down to the innermost one over the tensor's dims, dropping it, or
    (`fresh`) starting an epoch."""
    last = -1
    for k, (_, lp, drop, epoch) in enumerate(flagged):
        if lp.n > 1 and (lp.dim in dims or drop or (fresh and epoch)):
            last = k
    return tuple(i for i, _, _, _ in flagged[: last + 1])


def _product(loops: tuple[PathLoop, ...], indices: tuple[int, ...]) -> int:
    """The product of the trip counts of the loops at `indices`."""
    out = 1
    for i in indices:
        out *= loops[i].n
    return out


def _count_compute(plan: Plan, path: OpPath, counts: Counts, sources: dict[str, int],
                   tensor_info: dict) -> None:
    """Compute reads each operand once per operation from the innermost level (or the level
    it is fed from when it bypasses that one) and updates the result once per operation; an
    accumulator is not read on its first touch."""
    op = path.op
    w = plan.workload
    x = path.levels[-1]
    instances = path.spread_above  # at the start of each tensor's source run: sources[t]
    inst_x = path.spread_above[_run_start(path)]
    fed: list[Transfer] = []  # what bypassing tensors move straight to and from the unit
    exact = path.exact_dims == frozenset(op.dims)
    if exact:  # every iteration is a real one: a product of trip counts
        ops = math.prod(lp.n for lp in path.loops)
    else:
        dims = _point_dims(plan, path)
        all_loops = _all_loops(path)
        op_axes = tuple(AxisRec(((d, 1),), 0, w.sizes[d]) for d in op.dims)
        ops = iteration_count(op_axes, dims, all_loops)
    reads = 0.0  # in accelerator words (`precision_bits`), as the transfers
    bits = plan.arch.word_bytes * 8
    for access in op.inputs:
        width = w.width_ratio(access.tensor, bits)
        source = path.levels[sources[access.tensor]]
        if source == x:
            counts.traffic[(source, access.tensor)][READ] += ops
            reads += ops * width
        else:  # one word serves every instance below the source that needs the same one
            sent = ops * multicast_share(path, tensor_info[access.tensor][0],
                                         sources[access.tensor])
            if not exact:  # a step's element is sent if any instance needing it is real
                sent = _multicast_sent(plan, path, access, sources[access.tensor])
            counts.traffic[(source, access.tensor)][READ] += sent
            fed.append(Transfer(source, sent * width, instances[sources[access.tensor]], "read",
                                 access.tensor))
    out = op.output.tensor
    home = path.levels[sources[out]]
    out_width = w.width_ratio(out, bits)
    counts.traffic[(home, out)][UPDATE] += ops
    if op.accumulates:
        axes, _, _, epoch = tensor_info[out]
        marks = [e or lp.spatial for e, lp in zip(epoch, path.loops, strict=True)]
        if exact and all(axis.is_plain for axis in op.output.axes):
            # each instance and epoch starts every element of the result afresh
            starts = w.tensor_words(out) * math.prod(
                lp.n for lp, m in zip(path.loops, marks, strict=True)
                if m and lp.dim not in op.output.dims)
        else:  # clipped, shifted, or summed output indices (instances may overlap)
            dims = _point_dims(plan, path)
            all_loops = _all_loops(path)
            guards = [d for d in op.dims if d not in op.output.dims]
            starts = first_touches(axes, dims, all_loops, marks, guards)
        counts.traffic[(home, out)][READ] += ops - starts
        if home == x:
            reads += (ops - starts) * out_width
        else:
            fed.append(Transfer(home, (ops - starts) * out_width, instances[sources[out]],
                                 "read", out))
    updates = ops * out_width
    if home != x:
        fed.append(Transfer(home, ops * out_width, instances[sources[out]], "write", out))
        updates = 0
    steps = math.prod(lp.n for lp in path.loops if not lp.spatial)
    if path.cut:  # a kept halo: the iterations past the first of a sweep do fewer rows
        whole = iteration_count(op_axes, {d: r._replace(cut=0) for d, r in dims.items()},
                                all_loops)
        steps = steps * ops / whole if whole else steps
    counts.leaves[op.name] = Leaf(op.name, op.unit, op.function, ops, steps, x,
                                  reads, updates, inst_x, tuple(fed))


def multicast_share(path: OpPath, axes, position: int) -> float:
    """The share of the operations' operand reads a level at path `position` serves when
    the operand bypasses every level below it: at each step, the spatial instances below
    it that need the same element take one read (multicast), so it sends the distinct
    elements of the step, not one per instance. Distinct elements: the points the spatial
    loops below reach on each axis of the tensor (its index sum(coef * dim))."""
    spatial = [lp for lp in path.loops if lp.spatial and lp.node >= position and lp.n > 1]
    if not spatial:
        return 1.0
    spread = math.prod(lp.n for lp in spatial)
    axis_dims = [{d for d, _ in axis.terms} for axis in axes]
    if sum(len(ds) for ds in axis_dims) == len(set().union(*axis_dims)):  # disjoint axes
        distinct = 1
        for axis in axes:
            coef = dict(axis.terms)
            points = {0}
            for lp in spatial:
                if lp.dim in coef:
                    step = coef[lp.dim] * lp.stride
                    points = {p + i * step for p in points for i in range(lp.n)}
            distinct *= len(points)
    else:  # a dimension on several axes: the index tuples themselves
        offsets = [{}]  # per spatial instance, each dim's offset
        for lp in spatial:
            offsets = [{**o, lp.dim: o.get(lp.dim, 0) + i * lp.stride}
                       for o in offsets for i in range(lp.n)]
        distinct = len({tuple(sum(c * o.get(d, 0) for d, c in axis.terms) for axis in axes)
                        for o in offsets})
    return distinct / spread


def _multicast_sent(plan: Plan, path: OpPath, access, position: int) -> float:
    """The words a level at path `position` sends to the unit for an operand that bypasses
    every level below it, on a clipped tiling: the spatial loops below it over dims the
    operand does not index all need the same element, which is sent when any of them is a
    real iteration (the first instance is the last to be clipped), so they count once; the
    others keep `multicast_share`'s distinct share."""
    used = {d for axis in access.axes for d, _ in axis.terms}
    loops = [lp._replace(n=1) if lp.n > 1 and path.loops[i].spatial and
             path.loops[i].node >= position and lp.dim not in used else lp
             for i, lp in enumerate(_all_loops(path))]
    axes = tuple(AxisRec(((d, 1),), 0, plan.workload.sizes[d]) for d in path.op.dims)
    steps = iteration_count(axes, _point_dims(plan, path), loops)
    rest = replace(path, loops=tuple(
        lp if lp.dim in used else lp._replace(n=1) for lp in path.loops))
    return steps * multicast_share(rest, access.axes, position)


def _run_start(path: OpPath) -> int:
    start = len(path.tiles) - 1
    while start > 0 and path.levels[start - 1] == path.levels[start]:
        start -= 1
    return start
