"""What a structure fixes, analysed once: each operator's path with its loops as factor slots,
the boundaries where data moves and which tensors cross them (with their Seq drops, epochs
and closed-form eligibility), the halo candidates, the latency and footprint trees.

Nothing here depends on the factors; `tileflow.evaluator.engine` evaluates the factor part for
many rows at once from this."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, replace
from functools import cached_property
from typing import NamedTuple

from tileflow.analysis.buffering import depth as buffer_depth
from tileflow.analysis.buffering import footprint_scale, serialised
from tileflow.analysis.bypass import skips, source_run
from tileflow.analysis.movement import AxisRec
from tileflow.analysis.resources import Demand, split_fanout, unit_demand
from tileflow.analysis.shape import node_key, shape_of
from tileflow.specs.arch import Architecture
from tileflow.specs.expressions import Access, Axis
from tileflow.specs.workload import Operator, Workload
from tileflow.tree import Dataflow, Tile, node_depth, walk


@dataclass(frozen=True)
class SLoop:
    """A loop on an operator's path: its factor is column `slot` of the factor matrix."""

    slot: int
    dim: str
    spatial: bool
    node: int  # position of its tile on the path
    level: int


@dataclass(frozen=True)
class Crossing:
    """One tensor crossing one boundary of a path."""

    tensor: str
    is_out: bool
    axes: tuple[AxisRec, ...]
    plain_dims: tuple[str, ...] | None  # dims of its axes when all are plain, else None
    temporal: tuple[tuple[int, bool, bool], ...]  # (loop index, drop, epoch) above, in order
    serial: bool = False  # single-buffered below the boundary: its transfers do not overlap


@dataclass(frozen=True)
class Boundary:
    """A change of level below path position j: the tile at j (level x) feeds level y."""

    j: int
    x: int
    y: int
    run_start: int
    owner: str
    inst_x: tuple[int, ...]  # loop indices: spatial loops above the level's run
    inst_y: tuple[int, ...]  # spatial loops at or above j
    union: tuple[int, ...]  # spatial loops in the run (their union is read once)
    crossings: tuple[Crossing, ...]


@dataclass(frozen=True)
class Path:
    op: Operator
    chain: tuple[str, ...]
    levels: tuple[int, ...]
    loops: tuple[SLoop, ...]
    boundaries: tuple[Boundary, ...]
    leaf_level: int
    leaf_inst: tuple[int, ...]  # spatial loops above the innermost level's run
    leaf_epoch: tuple[bool, ...]  # per loop: starts the result afresh (epoch or spatial)
    leaf_sources: dict[str, int]  # per tensor: the run (its first position) the compute
    # reads it from (and writes a result to): the innermost one unless it is bypassed


class EnumeratedAxis(NamedTuple):
    """A tensor axis of an operator with loops along it, whose counts are sums over those
    loops' steps where the tiles do not cover it exactly (`workbound`)."""

    op: str
    dims: tuple[str, ...]
    moving: tuple[int, ...]  # the path's loops along them
    plain: bool  # the axis is one dimension as it is


class Halo(NamedTuple):
    """A consumer reads a producer's output through a window or an offset along `dim`."""

    dim: str
    offset: int
    tiling: tuple[int, ...]  # the producer's loops over `dim` in the common ancestor or above


class HaloCut(NamedTuple):
    """An intermediate that keeps its halo (`halo: cache` on the common ancestor)."""

    depth: int  # of the common ancestor
    slides: dict[str, tuple[int, ...]]  # per windowed dim, its temporal loops at or above it
    marked: frozenset[int]  # the loops that place the ancestor's step (the tests' `OpPath.marks`)


class WindowedRead(NamedTuple):
    """A consumer reading an intermediate through a window (an axis summing dims)."""

    tensor: str
    producer: str
    consumer: str
    dim: str  # the producer's dim the window slides along
    window: int  # how far the window reaches beyond one element
    depth: int  # of the common ancestor
    tiling: tuple[int, ...]  # the producer's loops over `dim` in the ancestor or above


class FanoutLimit(NamedTuple):
    """At a level change of a path (or its leaf): its spatial loops there and their limit."""

    used: tuple[int, ...]
    limit: float


class SplitLimit(NamedTuple):
    """A Para/Pipe tile: how its operators' units combine, per operator its unit kind and
    spatial loops below the tile, the loops that spread every child, and per unit kind the
    units the tile has and the fan-out its own spatial loops share out."""

    demand: Demand
    ops: dict[str, tuple[str, tuple[int, ...]]]
    spread: tuple[str, tuple[int, ...]]
    limits: dict[str, tuple[int, int]]


def _axes(w: Workload, access: Access) -> tuple[AxisRec, ...]:
    return tuple(AxisRec(a.terms, a.offset, size)
                 for a, size in zip(access.axes, w.shapes[access.tensor], strict=True))


def _plain_dims(w: Workload, access: Access) -> tuple[str, ...] | None:
    dims = []
    for axis, size in zip(access.axes, w.shapes[access.tensor], strict=True):
        if len(axis.terms) != 1 or axis.terms[0][1] != 1 or axis.offset:
            return None
        d = axis.terms[0][0]
        if size != w.sizes[d]:
            return None
        dims.append(d)
    return tuple(dims)


class Compiled:
    """The factor-independent analysis of one structure."""

    def __init__(self, workload: Workload, arch: Architecture, flow: Dataflow):
        w = workload
        self.workload, self.arch, self.flow = w, arch, flow
        shape = shape_of(w, arch, flow)  # checks the structure once
        self.shape = shape
        # accelerator words per element of each tensor (`precision_bits`)
        self.width = {t: w.width_ratio(t, arch.word_bytes * 8) for t in w.shapes}
        self._scales: dict[tuple, float] = {}
        self._holds: dict[tuple, bool] = {}
        self.tiles = {p: n for p, n in walk(flow.root) if isinstance(n, Tile)}
        # every loop of the tree is a column of the factor rows, in tree-walk order
        self.slot_of = {(p, i): k for k, (p, i) in enumerate(
            (p, i) for p, t in self.tiles.items() for i in range(len(t.loops)))}
        self.ops_below = shape.ops_below
        self.lca = shape.lca
        self.homes = shape.homes
        self.paths = {op.name: self._path(op, shape.chains[op.name], shape.levels[op.name])
                      for op in w.ops}
        self.halos = self._halos()
        self.windows = self._windows()
        self.cuts = self._cuts()

    @cached_property
    def enumerated_axes(self) -> tuple[EnumeratedAxis, ...]:
        """Per operator, each distinct tensor axis with loops along it."""
        found = {}
        for name, path in self.paths.items():
            for access in (path.op.output, *path.op.inputs):
                for axis in access.axes:
                    dims = tuple(sorted(set(axis.dims)))
                    moving = tuple(i for i, lp in enumerate(path.loops) if lp.dim in dims)
                    if moving:
                        found[EnumeratedAxis(name, dims, moving, axis.is_plain)] = None
        return tuple(found)

    # -- paths and boundaries --------------------------------------------------------------
    def _path(self, op: Operator, chain: tuple[str, ...], levels: tuple[int, ...]) -> Path:
        w = self.workload
        loops = tuple(SLoop(self.slot_of[(p, i)], lp.dim, lp.spatial, k, levels[k])
                      for k, p in enumerate(chain)
                      for i, lp in enumerate(self.tiles[p].loops))
        info = {}
        for access, is_out in [(a, False) for a in op.inputs] + [(op.output, True)]:
            t = access.tensor
            drops = self.shape.drops[(op.name, t)]
            no_reuse = {k for k, p in enumerate(chain) if t in self.tiles[p].no_reuse}
            if t in self.lca:
                depth = node_depth(self.lca[t])
                # a loop that carries the running value is inside its epoch, not a new one
                epoch = [lp.node <= depth and not self._carrying(t, lp) for lp in loops]
            else:
                epoch = [lp.dim not in op.dims for lp in loops]
            info[t] = (access, is_out, drops, no_reuse, epoch)
        boundaries = []
        nodes = len(chain)
        tiles = [self.tiles[p] for p in chain]
        leaf = None
        for j in range(nodes):
            last = j == nodes - 1
            if not last and levels[j] == levels[j + 1]:
                continue
            x = levels[j]
            run_start = j
            while run_start > 0 and levels[run_start - 1] == x:
                run_start -= 1
            if last:
                leaf = (x, tuple(i for i, lp in enumerate(loops)
                                 if lp.spatial and lp.node < run_start))
                continue
            inst_y = tuple(i for i, lp in enumerate(loops) if lp.spatial and lp.node <= j)
            y = levels[j + 1]
            inner = []  # the tiles of the run below the boundary, outermost first
            for k in range(j + 1, nodes):
                if levels[k] != y:
                    break
                inner.append(tiles[k])
            by_source: dict[int, list[Crossing]] = {}  # run that sends each tensor
            for access, is_out, drops, no_reuse, epoch in info.values():
                t = access.tensor
                home = self.homes.get(t)
                if skips(levels, tiles, j + 1, t, home):
                    continue  # the tensor skips level y: it crosses the boundary below it
                source = source_run(levels, tiles, j, t, home)
                if home is not None and levels[source] < home:
                    continue
                temporal = tuple(
                    (i, lp.node in no_reuse or any(lp.node <= k <= j for k in drops), epoch[i])
                    for i, lp in enumerate(loops) if lp.node <= j and not lp.spatial)
                by_source.setdefault(source, []).append(Crossing(
                    t, is_out, _axes(w, access), _plain_dims(w, access), temporal,
                    serialised(buffer_depth(self.arch, y, t, inner))))
            for source, crossings in by_source.items():
                inst_x = tuple(i for i, lp in enumerate(loops)
                               if lp.spatial and lp.node < source)
                union = tuple(i for i, lp in enumerate(loops)
                              if lp.spatial and source <= lp.node <= j)
                boundaries.append(Boundary(j, levels[source], y, source, chain[j], inst_x,
                                           inst_y, union, tuple(crossings)))
        # where the compute reads each tensor: the innermost run, or the nearest run above
        # that the tensor does not bypass
        sources = {t: source_run(levels, tiles, nodes - 1, t, self.homes.get(t))
                   for t in info}
        out = op.output.tensor
        if out in self.lca:
            depth = node_depth(self.lca[out])
            epoch = tuple((lp.node <= depth and not self._carrying(out, lp)) or lp.spatial
                          for lp in loops)
        else:
            epoch = tuple(lp.dim not in op.dims or lp.spatial for lp in loops)
        return Path(op, chain, levels, loops, tuple(boundaries), leaf[0], leaf[1], epoch,
                    sources)

    def _carrying(self, tensor: str, lp: SLoop) -> bool:
        """`carried.is_carried`: a temporal loop over the producer's carried dim, at or
        above the common ancestor of the producer and its consumers."""
        w = self.workload
        producer = w.producer.get(tensor)
        if producer is None or tensor not in self.lca:
            return False
        d = w.op_by_name[producer].carried
        return bool(d) and lp.dim == d and not lp.spatial and \
            lp.node <= node_depth(self.lca[tensor])

    def carries(self, tensor: str) -> tuple[int, ...]:
        """The loops (indices into its producer's path) that carry `tensor`'s running value."""
        path = self.paths[self.workload.producer[tensor]]
        return tuple(i for i, lp in enumerate(path.loops) if self._carrying(tensor, lp))

    def holds(self, op: str, position: int, tensor: str) -> bool:
        """Whether the tile at `position` of the operator's path holds `tensor` (it does
        unless its run of same-level tiles bypasses it: the tests' `scalar_resources._held`)."""
        key = (op, position, tensor)
        found = self._holds.get(key)
        if found is None:
            path = self.paths[op]
            found = self._holds[key] = not skips(
                path.levels, [self.tiles[p] for p in path.chain], position, tensor,
                self.homes.get(tensor))
        return found

    # -- halos and windows -----------------------------------------------------------------
    def _halos(self) -> dict[str, list[Halo]]:
        """Per producer, each consumer's read through a window or an offset
        (the tests' `scalar_prepare._halo_shifts`)."""
        w = self.workload
        out: dict[str, list] = {}
        for t in w.intermediates:
            producer = w.op_by_name[w.producer[t]]
            depth = node_depth(self.lca[t])
            path = self.paths[producer.name]
            for consumer in w.consumers[t]:
                access = w.op_by_name[consumer].access(t)
                for out_axis, axis in zip(producer.output.axes, access.axes, strict=True):
                    d = out_axis.terms[0][0]
                    if len(axis.terms) > 1 or axis.offset:
                        tiling = tuple(i for i, lp in enumerate(path.loops)
                                       if lp.dim == d and lp.node <= depth)
                        out.setdefault(producer.name, []).append(Halo(d, axis.offset, tiling))
        return out

    def _cuts(self) -> dict[str, HaloCut]:
        """Per producer whose intermediate keeps its halo (the tests'
        `scalar_prepare._halo_cuts`): per dim a windowed consumer reads through, the temporal
        loops over it at or above the ancestor (per row the innermost of more than one
        iteration is the slide), and the loops that place the ancestor's step (over such a
        dim, at or above it)."""
        w = self.workload
        out = {}
        for t, where in self.lca.items():
            if self.tiles[where].halo_of(t) != "cache":
                continue
            producer = w.op_by_name[w.producer[t]]
            path = self.paths[producer.name]
            depth = node_depth(where)
            windowed = {out_axis.terms[0][0]
                        for consumer in w.consumers[t]
                        for out_axis, axis in zip(producer.output.axes,
                                                  w.op_by_name[consumer].access(t).axes,
                                                  strict=True) if len(axis.terms) > 1}
            slides = {d: tuple(i for i, lp in enumerate(path.loops)
                               if lp.dim == d and lp.node <= depth and not lp.spatial)
                      for d in sorted(windowed)}
            slides = {d: loops for d, loops in slides.items() if loops}
            if slides:
                marked = frozenset(i for i, lp in enumerate(path.loops)
                                   if lp.dim in slides and lp.node <= depth)
                out[producer.name] = HaloCut(depth, slides, marked)
        return out

    def _windows(self) -> list[WindowedRead]:
        """Every read of an intermediate through a window."""
        w = self.workload
        out = []
        for t, lca in self.lca.items():
            producer = w.op_by_name[w.producer[t]]
            depth = node_depth(lca)
            path = self.paths[producer.name]
            for consumer in w.consumers[t]:
                for out_axis, axis in zip(producer.output.axes,
                                          w.op_by_name[consumer].access(t).axes, strict=True):
                    if len(axis.terms) < 2:
                        continue
                    d = out_axis.terms[0][0]
                    window = sum(c * (w.sizes[x] - 1) for x, c in axis.terms if x != d)
                    tiling = tuple(i for i, lp in enumerate(path.loops)
                                   if lp.dim == d and lp.node <= depth)
                    out.append(WindowedRead(t, producer.name, consumer, d, window, depth,
                                            tiling))
        return out

    # -- resources -------------------------------------------------------------------------
    def fanout_limits(self, path: Path) -> list[FanoutLimit]:
        """The spatial loops and their limit at each level change of the path and at its
        leaf."""
        arch = self.arch
        out = []
        levels = path.levels
        for j, p in enumerate(path.chain):
            last = j == len(levels) - 1
            if not last and levels[j] == levels[j + 1]:
                continue
            run = {k for k in range(j + 1) if levels[k] == levels[j]}
            used = tuple(i for i, lp in enumerate(path.loops) if lp.spatial and lp.node in run)
            if last:
                unit = arch.unit(path.op.unit)
                name = arch.levels[levels[-1]].name
                if levels[-1] > arch.level_index[unit.level]:
                    limit = 0
                else:
                    limit = arch.fanout_between(name, unit.level) * unit.parallelism
            else:
                limit = arch.fanout_between(self.tiles[p].level,
                                            arch.levels[levels[j + 1]].name)
            out.append(FanoutLimit(used, limit))
        return out

    def split_limits(self) -> list[SplitLimit]:
        """Every Para/Pipe tile's (`resources.unit_demand`; the tests'
        `scalar_resources._split_violations`); the loops that spread every child: the first
        operator's spatial loops of the tile and its same-level ancestors."""
        arch = self.arch
        out = []
        for node_path, node in self.tiles.items():
            if not node.semantics.at_once or len(node.children) < 2:
                continue
            depth = node_depth(node_path)
            level = arch.level_index[node.level]
            first = self.ops_below[node_path][0]
            spread = (first, tuple(k for k, lp in enumerate(self.paths[first].loops)
                                   if lp.spatial and lp.node <= depth and lp.level == level))
            ops = {}
            for o in self.ops_below[node_path]:
                path = self.paths[o]
                ops[o] = (arch.unit(path.op.unit).kind,
                          tuple(k for k, lp in enumerate(path.loops)
                                if lp.spatial and lp.node > depth))
            limits = {}
            for kind in dict.fromkeys(kind for kind, _ in ops.values()):
                unit = arch.matrix if kind == "matrix" else arch.vector
                start, feed = arch.level_index[node.level], arch.level_index[unit.level]
                limit = unit.parallelism * (arch.fanout_between(node.level, unit.level)
                                            if start < feed else 1)
                fanout = (split_fanout(arch, self.paths[first], depth, level, feed)
                          if start < feed else 1)
                limits[kind] = (limit, fanout)
            out.append(SplitLimit(unit_demand(node), ops, spread, limits))
        return out

    def words_per_element(self, tensor: str, level: int, tiles: tuple[Tile, ...]) -> float:
        """Words a buffer at `level` holds per element of `tensor`'s slice: its buffering
        depth (set by the first of `tiles` that names it, else the level's) times its
        width (the tests' `scalar_resources._own` and `_homed_here`)."""
        key = (tensor, level, tuple(id(t) for t in tiles))
        found = self._scales.get(key)
        if found is None:
            scale = footprint_scale(buffer_depth(self.arch, level, tensor, tiles))
            found = self._scales[key] = scale * self.width[tensor]
        return found

    @property
    def footprint_levels(self) -> list[int]:
        return [i for i, lv in enumerate(self.arch.levels)
                if not (i == 0 and math.isinf(lv.capacity_words))]


_CACHE: OrderedDict = OrderedDict()


# the dimension of one iteration a constant index reads (D[0, n] as D[·, n], · of size 1):
# no workload may name it, no loop iterates it, and every rule treats it as any other
UNIT_DIM = "·"


def _with_unit_dim(workload: Workload) -> Workload:
    """The workload with each constant index (an axis without a dimension) read through
    UNIT_DIM, so that the closed forms, which place every axis by a dimension, apply."""
    def placed(access: Access) -> Access:
        return Access(access.tensor, tuple(axis if axis.terms else Axis(((UNIT_DIM, 1),),
                                                                        axis.offset)
                                           for axis in access.axes))

    def constant(access: Access) -> bool:
        return any(not axis.terms for axis in access.axes)

    if not any(constant(a) for op in workload.ops for a in (op.output, *op.inputs)):
        return workload
    ops = tuple(replace(op, output=placed(op.output), inputs=tuple(map(placed, op.inputs)),
                        dims=op.dims + (UNIT_DIM,))
                if any(constant(a) for a in (op.output, *op.inputs)) else op
                for op in workload.ops)
    return replace(workload, ops=ops, sizes={**workload.sizes, UNIT_DIM: 1})


def compiled_for(workload: Workload, arch: Architecture, flow: Dataflow) -> Compiled:
    """The analysis of a structure, shared by every dataflow of the same shape."""
    key = (workload, arch, node_key(flow.root),
           tuple(sorted(flow.homes.items())))
    found = _CACHE.get(key)
    if found is None:
        found = _CACHE[key] = Compiled(_with_unit_dim(workload), arch, flow)
        if len(_CACHE) > 256:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    return found
