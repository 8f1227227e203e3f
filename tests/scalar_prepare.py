"""The scalar copy's view of one concrete tree (the evaluator's is its compiled structure
and rows, `tileflow/evaluator/compiled.py` and `engine.Rows`): the tree checked against the
workload and accelerator, and for every operator its root-to-leaf path of loops with
strides, halo shifts and kept halos, what the scalar counting needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import NamedTuple
from weakref import WeakKeyDictionary

from scalar_layout import loop_layout

from tileflow.analysis.bypass import skips
from tileflow.analysis.shape import Shape, scan, shape_of
from tileflow.analysis.tree_checks import InvalidDataflow, ops_below
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Operator, Workload
from tileflow.tree import ROOT, Dataflow, Op, Tile, child_path, label, node_depth, walk

_MEMOS: WeakKeyDictionary = WeakKeyDictionary()


def shape_memo(shape: Shape) -> dict:
    """The scalar copy's own facts about a cached shape (its loop layout, per-path records),
    kept while the shape is."""
    return _MEMOS.setdefault(shape, {})


class PathLoop(NamedTuple):
    dim: str
    n: int
    stride: int
    spatial: bool
    node: int  # index of the tile on the op's path (0 = root)
    level: int  # level index of that tile
    axis: str = ""  # the 2-D array axis a spatial loop names ('x', 'y' or none)


@dataclass(frozen=True)
class OpPath:
    """One operator's view of the tree: the tiles from the root down, and their loops."""

    op: Operator
    tiles: tuple[tuple[str, Tile], ...]  # (node path, tile), root first
    levels: tuple[int, ...]  # level index per tile
    loops: tuple[PathLoop, ...]  # outermost first
    shift: Mapping[str, int]  # start offset per dimension (halo of a windowed consumer)
    size_of: Mapping[str, int]  # dimension sizes
    cut: Mapping[str, int] | None = None  # halo rows kept per dim (`halo: cache`)
    cut_depth: int = -1  # path position of the common ancestor the halo is kept across
    slide: frozenset[int] = frozenset()  # indices in `loops` of the loops the halo slides on

    @cached_property
    def marks(self) -> tuple[int, ...]:
        """Per loop: 2 for a loop the kept halo slides along, 1 for another loop at or above
        the common ancestor over a dimension with a kept halo (it places the step's
        region), 0 otherwise."""
        cut = self.cut or {}
        return tuple(2 if i in self.slide else
                     1 if lp.dim in cut and lp.node <= self.cut_depth else 0
                     for i, lp in enumerate(self.loops))

    @cached_property
    def loop_key(self) -> tuple:
        """Which loops the path holds (memo entries that index them use it as key): the same
        for every factor choice of a shape as long as the path keeps every loop."""
        return tuple((lp.dim, lp.spatial, lp.node) for lp in self.loops)

    @cached_property
    def spread_above(self) -> list[int]:
        """Per path position k (0 to the leaf's + 1): the instances the spatial loops of the
        tiles above position k spread the operator over (the product of their factors)."""
        out = [1] * (len(self.tiles) + 1)
        for lp in self.loops:
            if lp.spatial:
                for k in range(lp.node + 1, len(out)):
                    out[k] *= lp.n
        return out

    def extent_below(self, node: int, dim: str) -> int:
        """Extent of `dim` covered by the loops of tiles strictly below path position `node`."""
        return self.extents_from[node + 1][dim] if node + 1 < len(self.extents_from) else 1

    @cached_property
    def extents_from(self) -> list[dict[str, int]]:
        """For each path position, every dim's extent covered by the tiles from there down."""
        extent = dict.fromkeys((*self.op.dims, *(lp.dim for lp in self.loops)), 1)
        nodes = len(self.tiles)
        by_node: list[list[PathLoop]] = [[] for _ in range(nodes)]
        for lp in self.loops:
            by_node[lp.node].append(lp)
        out = [extent] * (nodes + 1)
        for position in reversed(range(nodes)):
            if by_node[position]:
                extent = dict(extent)
                for lp in by_node[position]:
                    extent[lp.dim] += (lp.n - 1) * lp.stride
            out[position] = extent
        return out

    @cached_property
    def exact_dims(self) -> frozenset[str]:
        """Dims whose loops tile them exactly: no clipped step, no shift (then every slice
        along them is full and the closed forms apply)."""
        steps: dict[str, list[tuple[int, int]]] = {d: [] for d in self.op.dims}
        for lp in self.loops:
            if lp.n > 1 and lp.dim in steps:
                steps[lp.dim].append((lp.stride, lp.n))
        exact = set()
        for d, found in steps.items():
            span = 1
            for stride, n in sorted(found):
                if stride != span:
                    break
                span *= n
            else:
                if span == self.size_of[d] and not self.shift.get(d) and \
                        d not in (self.cut or {}):
                    exact.add(d)
        return frozenset(exact)


@dataclass(frozen=True)
class Plan:
    """Everything structural about (workload, accelerator, dataflow), computed once."""

    workload: Workload
    arch: Architecture
    flow: Dataflow
    paths: Mapping[str, OpPath]
    homes: Mapping[str, int]  # intermediate -> level index
    lca: Mapping[str, str]  # intermediate -> node path of the lowest common ancestor
    shape: Shape | None = None  # the factor-independent part, shared between plans

    @cached_property
    def tiles(self) -> dict[str, Tile]:
        return {p: n for p, n in walk(self.flow.root) if isinstance(n, Tile)}

    @cached_property
    def memo(self) -> dict:
        """Facts that depend only on the tree's shape and the accelerator, kept across the
        plans of one shape (the shape's memo). A plan given another accelerator than its
        shape's (`replace(plan, arch=...)`) keeps its own; a plan without a shape, a fresh
        one."""
        if self.shape is None:
            return {}
        if self.arch is self.shape.arch:
            return shape_memo(self.shape)
        return shape_memo(self.shape).setdefault(("arch", self.arch), {})

    @cached_property
    def tensors_under(self) -> dict[int, frozenset[str]]:
        """Tensors used below each node, keyed by the node's id()."""
        ops = self.workload.op_by_name
        return {key: frozenset(t for o in below for t in ops[o].tensors)
                for key, below in ops_below(self.flow.root).items()}


def prepare(workload: Workload, arch: Architecture, flow: Dataflow) -> Plan:
    """Check the tree and build the per-operator paths. Malformed input (an unknown operator,
    level, primitive or tensor, a missing operator) raises InvalidDataflow; what is a property
    of the dataflow (dependences, coverage, windows) is the evaluator's to check
    (`evaluator/limits.py`). What depends only on the tree's shape (structure checks, chains,
    homes) comes from a cache (`shape_of`)."""
    root = flow.root
    if not isinstance(root, Tile):
        raise InvalidDataflow("the root of a dataflow must be a tile", where="root")
    tree_key, tiles = scan(root)
    shape = shape_of(workload, arch, flow, tree_key)
    memo = shape_memo(shape)
    layout = memo.get("layout")
    if layout is None:
        layout = memo["layout"] = loop_layout(workload, root, shape.chains, shape.levels,
                                                    shape.lca)
    factors = layout.factors(tiles)
    if factors and min(factors) < 1:
        p, i = layout.loops[next(g for g, f in enumerate(factors) if f < 1)]
        raise InvalidDataflow(f"loop {tiles[p].loops[i]}: factor must be >= 1",
                              where=label(p, tiles[p]))
    strides = layout.strides(factors)
    paths: dict[str, OpPath] = {}
    for op in workload.ops:
        tile_list = tuple((p, tiles[p]) for p in shape.chains[op.name])
        loop_list = tuple(  # a loop of one iteration moves, repeats and spreads nothing
            PathLoop(dim, factors[g], strides[g], spatial, k, level, axis)
            for g, dim, spatial, k, level, axis in layout.op_loops[op.name] if factors[g] > 1)
        paths[op.name] = OpPath(op, tile_list, shape.levels[op.name], loop_list, {},
                                workload.sizes)
    for name, shift in _halo_shifts(layout.shift_candidates, paths).items():
        paths[name] = replace(paths[name], shift=shift)
    if layout.cached_halos:
        for name, cut in _halo_cuts(workload, paths, shape.lca, tiles).items():
            paths[name] = replace(paths[name], **cut)
    if layout.summed_outputs:
        _check_summed_outputs(paths)
    plan = Plan(workload, arch, flow, paths, shape.homes, shape.lca, shape)
    plan.__dict__["tiles"] = tiles  # the walk above, not another one
    return plan


def _check_summed_outputs(paths: Mapping[str, OpPath]) -> None:
    """An output written through a summed index (Y[p+r]) may not be split over spatial
    instances along a dimension of that index: the instances would hold overlapping partial
    sums, whose reduction the counting does not model."""
    for path in paths.values():
        summed = {d for axis in path.op.output.axes if len(axis.terms) > 1
                  for d, _ in axis.terms}
        for lp in path.loops:
            if lp.spatial and lp.n > 1 and lp.dim in summed:
                node_path, tile = path.tiles[lp.node]
                raise InvalidDataflow(
                    f"spatial loop '{lp.dim}:{lp.n}:Sp' splits '{path.op.name}' along "
                    f"'{lp.dim}', which its output indexes through a sum "
                    f"({path.op.output}): overlapping partial sums across instances are not "
                    "supported; make the loop temporal", where=label(node_path, tile))


def loop_strides(w: Workload, root: Tile) -> dict[tuple[str, int], int]:
    """A loop's stride is the extent its inner loops cover; where operators under a shared
    loop cover different extents (a producer grown by a halo), the smallest one."""
    strides: dict[tuple[str, int], int] = {}

    def go(node: Tile, path: str) -> dict[str, dict[str, int]]:
        extents: dict[str, dict[str, int]] = {}
        for i, child in enumerate(node.children):
            if isinstance(child, Op):
                extents[child.op] = {d: 1 for d in w.op_by_name[child.op].dims}
            else:
                extents.update(go(child, child_path(path, i)))
        for i in reversed(range(len(node.loops))):
            lp = node.loops[i]
            spans = [e[lp.dim] for e in extents.values() if lp.dim in e]
            stride = min(spans, default=1)  # a dim no operator below uses: a repetition
            strides[(path, i)] = stride
            for e in extents.values():
                if lp.dim in e:
                    e[lp.dim] += (lp.factor - 1) * stride
        return extents

    go(root, ROOT)
    return strides


def _halo_shifts(candidates, paths: Mapping[str, OpPath]) -> dict[str, dict[str, int]]:
    """A producer whose output a consumer reads through a window (A[p+t-1]), tiled along p in
    their common ancestor, computes per step the rows the window needs: its tile starts at
    the window's offset (and its factors must cover the halo). `candidates`: the layout's
    (producer, dim, common ancestor's depth, offset) of every windowed or offset read."""
    shifts: dict[str, dict[str, int]] = {}
    for producer, d, depth, offset in candidates:
        if any(lp.dim == d and lp.node <= depth and lp.n > 1 for lp in paths[producer].loops):
            own = shifts.setdefault(producer, {})
            own[d] = min(own.get(d, 0), offset)
    return shifts


def _halo_cuts(w: Workload, paths: Mapping[str, OpPath], lca: Mapping[str, str],
               tiles: Mapping[str, Tile]) -> dict[str, dict]:
    """`halo: cache` on an intermediate's common ancestor: along each dimension a windowed
    consumer reads through, the producer's regions of two consecutive iterations of the
    innermost temporal loop over it at or above the ancestor overlap by (its extent below
    the ancestor - that loop's stride) rows; those rows are kept, and every iteration but
    the first of a sweep computes only the rows after them."""
    cuts: dict[str, dict] = {}
    for t, where in lca.items():
        if tiles[where].halo_of(t) != "cache":
            continue
        producer = w.op_by_name[w.producer[t]]
        path = paths[producer.name]
        depth = node_depth(where)
        windowed = {out_axis.terms[0][0]
                    for consumer in w.consumers[t]
                    for out_axis, axis in zip(producer.output.axes,
                                              w.op_by_name[consumer].access(t).axes,
                                              strict=True) if len(axis.terms) > 1}
        cut: dict[str, int] = {}
        slide = set()
        for d in sorted(windowed):
            above = [i for i, lp in enumerate(path.loops)
                     if lp.dim == d and lp.node <= depth and not lp.spatial]
            if not above:
                continue
            kept = path.extent_below(depth, d) - path.loops[above[-1]].stride
            if kept > 0:
                cut[d] = kept
                slide.add(above[-1])
        if cut:
            cuts[producer.name] = {"cut": cut, "cut_depth": depth,
                                   "slide": frozenset(slide)}
    return cuts


def bypassed(path: OpPath, position: int, tensor: str, home: int | None = None) -> bool:
    """`bypass.skips` on an operator's analysed path."""
    return skips(path.levels, [tile for _, tile in path.tiles], position, tensor, home)
