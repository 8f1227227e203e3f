"""The part of the analysis that depends only on a tree's shape (levels, loop dims and
spatial marks, primitives, names, homes), never on its factors: the structure checks, each
operator's chain of tiles, common ancestors, home levels, the operators under each tile and
the Seq drops. Computed once per (workload, accelerator, shape) and cached, so that
evaluating many factor choices of one tree redoes only the factor part."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace

from tileflow.analysis.tree_checks import (
    InvalidDataflow,
    check_nodes,
    common_ancestor,
    home_level,
    leaf_paths,
)
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import (
    ROOT,
    Dataflow,
    Node,
    Op,
    Tile,
    child_index,
    child_path,
    label,
    node_depth,
    walk,
)


@dataclass(frozen=True, eq=False)
class Shape:
    """Factor-independent facts about a tree, by node path ('root', 'root.0', ...)."""

    chains: Mapping[str, tuple[str, ...]]  # operator -> node paths from the root to its leaf
    levels: Mapping[str, tuple[int, ...]]  # operator -> level index of each tile of its chain
    lca: Mapping[str, str]  # intermediate -> node path of the lowest common ancestor
    homes: Mapping[str, int]  # intermediate -> level index
    ops_below: Mapping[str, tuple[str, ...]]  # node path -> operators under it
    drops: Mapping[tuple[str, str], tuple[int, ...]]  # (op, tensor) -> Seq drop positions
    violations: tuple = ()  # structural violation records (Para children that depend)
    arch: Architecture | None = None  # the accelerator it was analysed for


def node_key(node: Node) -> tuple:
    """A hashable description of a subtree without its loop factors."""
    if isinstance(node, Op):
        return ("op", node.op)
    return (node.level, node.name, node.primitive, node.no_reuse, node.bypass, node.buffering,
            node.halo,
            tuple((lp.dim, lp.spatial, lp.axis) for lp in node.loops),
            tuple(node_key(c) for c in node.children))


def scan(root: Tile) -> tuple[tuple, dict[str, Tile]]:
    """`node_key(root)` and every tile by node path, parents first (`walk`'s tiles), in one
    recursion."""
    tiles: dict[str, Tile] = {}

    def go(node: Node, path: str) -> tuple:
        if isinstance(node, Op):
            return ("op", node.op)
        tiles[path] = node
        kids = tuple(go(c, child_path(path, i)) for i, c in enumerate(node.children))
        return (node.level, node.name, node.primitive, node.no_reuse, node.bypass,
                node.buffering, node.halo,
                tuple((lp.dim, lp.spatial, lp.axis) for lp in node.loops), kids)

    return go(root, ROOT), tiles


_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 512


def shape_of(workload: Workload, arch: Architecture, flow: Dataflow,
             tree_key: tuple | None = None) -> Shape:
    """The cached shape analysis of a dataflow (raises InvalidDataflow for a malformed
    tree, nothing cached then; structural violations are kept in the shape). `tree_key`:
    `node_key(flow.root)` when the caller has it already."""
    key = (workload, arch, tree_key or node_key(flow.root),
           tuple(sorted(flow.homes.items())))
    found = _CACHE.get(key)
    if found is not None:
        _CACHE.move_to_end(key)
        return found
    shape = _analyse(workload, arch, flow)
    _CACHE[key] = shape
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return shape


def _analyse(w: Workload, arch: Architecture, flow: Dataflow) -> Shape:
    root = flow.root
    found: list = []
    check_nodes(w, arch, root, found)
    for tensor in flow.homes:
        if tensor not in w.intermediates:
            raise InvalidDataflow(
                f"homes names '{tensor}', which is not an intermediate of the workload "
                f"(intermediates: {', '.join(w.intermediates) or 'none'})", where="homes")
    tiles = {path: n for path, n in walk(root) if isinstance(n, Tile)}
    chains = leaf_paths(root)
    levels = {o: tuple(arch.level_index[tiles[x].level] for x in chain)
              for o, chain in chains.items()}
    lca = {t: common_ancestor([chains[o] for o in (w.producer[t], *w.consumers[t])])
           for t in w.intermediates}
    stub = {o: SimpleNamespace(levels=v) for o, v in levels.items()}
    homes = {t: home_level(w, arch, flow, t, lca[t], stub, tiles) for t in lca}
    _check_halo(tiles, lca, w)
    ops_below: dict[str, tuple[str, ...]] = {}
    for path, node in walk(root):
        if isinstance(node, Op):
            ops_below[path] = (node.op,)
    for path in sorted(tiles, key=lambda x: -node_depth(x)):
        ops_below[path] = tuple(o for i in range(len(tiles[path].children))
                                for o in ops_below[child_path(path, i)])
    tensors = {path: frozenset(t for o in ops for t in w.op_by_name[o].tensors)
               for path, ops in ops_below.items()}
    drops = {(op.name, t): _drop_depths(tiles, chains[op.name], op.name, t, tensors)
             for op in w.ops for t in op.tensors}
    return Shape(chains, levels, lca, homes, ops_below, drops, tuple(found), arch=arch)


def _check_halo(tiles: Mapping[str, Tile], lca: Mapping[str, str], w: Workload) -> None:
    """`halo` names intermediates whose common ancestor is the tile that names them."""
    for path, tile in tiles.items():
        for tensor, mode in tile.halo:
            if mode not in ("cache", "recompute"):
                raise InvalidDataflow(f"halo of '{tensor}' must be cache or recompute, not "
                                      f"{mode!r}", where=label(path, tile))
            if tensor not in lca:
                raise InvalidDataflow(
                    f"halo names '{tensor}', which is not an intermediate of the workload "
                    f"(intermediates: {', '.join(w.intermediates) or 'none'})",
                    where=label(path, tile))
            if lca[tensor] != path:
                raise InvalidDataflow(
                    f"halo of '{tensor}' belongs on the common ancestor of its producer and "
                    f"consumers, {label(lca[tensor], tiles[lca[tensor]])}, whose steps it "
                    "is kept across", where=label(path, tile))


def _drop_depths(tiles: Mapping[str, Tile], chain: tuple[str, ...], op: str, tensor: str,
                 tensors: Mapping[str, frozenset[str]]) -> tuple[int, ...]:
    """Positions on the chain of Seq tiles whose next child (wrapping) does not use the
    tensor: below them it is dropped between steps."""
    depths = []
    for k, path in enumerate(chain):
        tile = tiles[path]
        if tile.semantics.shares_inputs or len(tile.children) < 2:
            continue
        if k + 1 < len(chain):
            index = child_index(chain[k + 1])
        else:
            index = next(i for i, c in enumerate(tile.children)
                         if isinstance(c, Op) and c.op == op)
        nxt = (index + 1) % len(tile.children)
        if tensor not in tensors[child_path(path, nxt)]:
            depths.append(k)
    return tuple(depths)
