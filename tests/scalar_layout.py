"""The scalar copy's loop layout: where every loop of a tree sits, worked out once per shape
so that `scalar_prepare.prepare` only runs the factor arithmetic: the loops numbered in walk
order, the order in which their strides are computed (children before parents, each node's
loops innermost first) with the (operator, dimension) extents each one reads and grows, and
each operator's loops from the root down. The strides this computes are `loop_strides`'s
(tested against it on random trees)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tileflow.specs.workload import Workload
from tileflow.tree import ROOT, Tile, child_path, node_depth


@dataclass(frozen=True)
class LoopLayout:
    """Loop g is `loops[g]` = (node path, index in its tile)."""

    loops: tuple[tuple[str, int], ...]
    stride_order: tuple[tuple[int, tuple[int, ...]], ...]  # (g, extent slots it reads/grows)
    extent_slots: int  # how many (operator, dimension) extents the strides keep
    op_loops: Mapping[str, tuple[tuple, ...]]  # op -> (g, dim, spatial, position, level, axis)
    shift_candidates: tuple[tuple[str, str, int, int], ...]  # (producer, dim, lca depth, offset)
    cached_halos: bool  # some tile keeps a halo (`halo: cache`)
    summed_outputs: bool  # some operator writes its output through a summed index

    def factors(self, tiles: Mapping[str, Tile]) -> list[int]:
        """The loop factors of a tree of this shape, by loop number."""
        return [tiles[p].loops[i].factor for p, i in self.loops]

    def strides(self, factors: Sequence[int]) -> list[int]:
        """Each loop's stride: the smallest extent its inner loops cover among the operators
        below it that use its dimension (1 when none does). Loops of one iteration, which
        move nothing and which the paths leave out, get 1."""
        extents = [1] * self.extent_slots
        out = [1] * len(self.loops)
        for g, slots in self.stride_order:
            f = factors[g]
            if f == 1 or not slots:
                continue
            stride = min(map(extents.__getitem__, slots))
            out[g] = stride
            grow = (f - 1) * stride
            for s in slots:
                extents[s] += grow
        return out


def loop_layout(w: Workload, root: Tile, chains: Mapping[str, tuple[str, ...]],
                levels: Mapping[str, tuple[int, ...]], lca: Mapping[str, str]) -> LoopLayout:
    """The layout of a tree whose operators' chains of tiles, levels and common ancestors
    the shape analysis found."""
    loops: list[tuple[str, int]] = []
    tiles: dict[str, Tile] = {}

    def number(node: Tile, path: str) -> None:
        tiles[path] = node
        loops.extend((path, i) for i in range(len(node.loops)))
        for i, child in enumerate(node.children):
            if isinstance(child, Tile):
                number(child, child_path(path, i))

    number(root, ROOT)
    index = {key: g for g, key in enumerate(loops)}
    slot: dict[tuple[str, str], int] = {}
    for op in w.ops:
        for d in op.dims:
            slot.setdefault((op.name, d), len(slot))
    order: list[tuple[int, tuple[int, ...]]] = []

    def post(node: Tile, path: str) -> list[str]:
        below: list[str] = []
        for i, child in enumerate(node.children):
            below += [child.op] if not isinstance(child, Tile) else post(child, child_path(path, i))
        for i in reversed(range(len(node.loops))):
            d = node.loops[i].dim
            order.append((index[(path, i)],
                          tuple(slot[(o, d)] for o in below if (o, d) in slot)))
        return below

    post(root, ROOT)
    op_loops = {}
    for op in w.ops:
        op_loops[op.name] = tuple(
            (index[(p, i)], lp.dim, lp.spatial, k, levels[op.name][k], lp.axis)
            for k, p in enumerate(chains[op.name]) for i, lp in enumerate(tiles[p].loops))
    return LoopLayout(tuple(loops), tuple(order), len(slot), op_loops,
                      _shift_candidates(w, lca),
                      any(mode == "cache" for t in tiles.values() for _, mode in t.halo),
                      any(len(axis.terms) > 1 for op in w.ops for axis in op.output.axes))


def _shift_candidates(w: Workload, lca: Mapping[str, str]) -> tuple:
    """(producer, dim, depth of the common ancestor, offset) for every windowed or offset
    read of an intermediate: the producer's tile starts at the offset when a loop of that
    dim at or above the ancestor splits it (see prepare._halo_shifts)."""
    out = []
    for t in w.intermediates:
        producer = w.op_by_name[w.producer[t]]
        depth = node_depth(lca[t])
        for consumer in w.consumers[t]:
            access = w.op_by_name[consumer].access(t)
            for out_axis, axis in zip(producer.output.axes, access.axes, strict=True):
                if len(axis.terms) > 1 or axis.offset:
                    out.append((producer.name, out_axis.terms[0][0], depth, axis.offset))
    return tuple(out)
