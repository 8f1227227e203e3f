"""Checks and facts of a tree's shape that need no factors: its nodes against the workload
and the accelerator, each operator's chain of tiles, the common ancestor and home level of
each intermediate, which the shape analysis (`analysis.shape`) uses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from tileflow.analysis.records import Violation
from tileflow.errors import InputError
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import (
    PRIMITIVES,
    ROOT,
    Dataflow,
    Op,
    Tile,
    child_path,
    label,
    node_depth,
    ops_under,
    walk,
)


class InvalidDataflow(InputError):
    """A tree that cannot be analysed: the message names the node and the constraint."""


class LevelsOfPath(Protocol):
    """What `home_level` reads of an operator's path: its tiles' level indices, root first."""

    levels: tuple[int, ...]


def check_nodes(w: Workload, arch: Architecture, root: Tile, found: list[Violation]) -> None:
    """Every node against the workload and the accelerator: malformed input raises
    InvalidDataflow; dependent Para children are appended to `found` as violations."""
    seen_ops: dict[str, str] = {}
    below_of = ops_below(root)
    for path, node in walk(root):
        if isinstance(node, Op):
            if node.op not in w.op_by_name:
                raise InvalidDataflow(f"unknown operator '{node.op}'; the workload "
                                      f"'{w.name}' has {', '.join(w.op_by_name)}", where=path)
            if node.op in seen_ops:
                raise InvalidDataflow(f"operator '{node.op}' appears twice (also at "
                                      f"{seen_ops[node.op]})", where=path)
            seen_ops[node.op] = path
            continue
        where = label(path, node)
        if node.level not in arch.level_index:
            raise InvalidDataflow(f"unknown level '{node.level}'; {arch.name} has "
                                  f"{', '.join(arch.level_index)}", where=where)
        if node.primitive not in PRIMITIVES:
            raise InvalidDataflow(f"unknown primitive '{node.primitive}'; expected one of "
                                  f"{', '.join(PRIMITIVES)}", where=where)
        if not node.children:
            raise InvalidDataflow("a tile needs at least one child", where=where)
        below = below_of[id(node)]
        dims_below = {d for o in below if o in w.op_by_name for d in w.op_by_name[o].dims}
        for lp in node.loops:
            if lp.factor < 1:
                raise InvalidDataflow(f"loop {lp}: factor must be >= 1", where=where)
            if lp.dim not in dims_below and lp.dim not in w.sizes:
                raise InvalidDataflow(f"loop over '{lp.dim}', which no operator below this "
                                      f"tile ({', '.join(below)}) uses and the workload does "
                                      f"not have (dimensions: {', '.join(w.sizes)})",
                                      where=where)
        for name in node.no_reuse:
            if name not in w.tensors:
                raise InvalidDataflow(f"no_reuse names unknown tensor '{name}'", where=where)
        for name in node.bypass:
            if name not in w.tensors:
                raise InvalidDataflow(f"bypass names unknown tensor '{name}'", where=where)
            if arch.level_index[node.level] == 0:
                raise InvalidDataflow(f"bypass: '{name}' cannot skip the outermost level "
                                      f"{node.level}, where every tensor starts",
                                      where=where)
        for name, depth in node.buffering:
            if name not in w.tensors or depth not in (1, 2):
                raise InvalidDataflow(f"buffering: expected a tensor of the workload and a "
                                      f"depth of 1 or 2, got {name}: {depth}", where=where)
        for child in node.children:
            if isinstance(child, Tile) and child.level in arch.level_index and \
                    arch.level_index[child.level] < arch.level_index[node.level]:
                raise InvalidDataflow(f"child tile at {child.level} sits above its parent's "
                                      f"level {node.level}", where=where)
        if node.semantics.independent:
            found += check_independent(w, node, path, where)
    missing = [o.name for o in w.ops if o.name not in seen_ops]
    if missing:
        raise InvalidDataflow(f"operators missing from the tree: {', '.join(missing)} (every "
                              f"operator of workload '{w.name}' needs a leaf)", where="root")


def ops_below(root: Tile) -> dict[int, tuple[str, ...]]:
    """The operators under every node (by id), in one walk."""
    out: dict[int, tuple[str, ...]] = {}

    def go(node) -> tuple[str, ...]:
        if isinstance(node, Op):
            found = (node.op,)
        else:
            found = tuple(o for c in node.children for o in go(c))
        out[id(node)] = found
        return found

    go(root)
    return out


def check_independent(w: Workload, node: Tile, path: str, where: str) -> list[Violation]:
    """Violations for a data dependence between two children of the Para tile `node`."""
    groups = [set(ops_under(c)) for c in node.children]
    out = []
    for i, a in enumerate(groups):
        for b in groups[i + 1 :]:
            for t in sorted({t for o in a | b for t in w.op_by_name[o].tensors}):
                producer = w.producer.get(t)
                consumers = set(w.consumers.get(t, ()))
                if producer is not None and ((producer in a and consumers & b)
                                             or (producer in b and consumers & a)):
                    out.append(Violation(
                        "dependency", path, node.level, t, None, None, None,
                        f"{where}: Para children must be independent, but '{t}' flows between "
                        "them (use Pipe or Seq)"))
    return out


def leaf_paths(root: Tile) -> dict[str, tuple[str, ...]]:
    """Per operator, the node paths of the tiles above its leaf, root first."""
    out: dict[str, tuple[str, ...]] = {}

    def go(node: Tile, path: str, chain: tuple[str, ...]) -> None:
        chain = (*chain, path)
        for i, child in enumerate(node.children):
            if isinstance(child, Op):
                out[child.op] = chain
            else:
                go(child, child_path(path, i), chain)

    go(root, ROOT, ())
    return out


def common_ancestor(chains: list[tuple[str, ...]]) -> str:
    """The node path of the lowest tile every chain (root first) passes through."""
    common = chains[0]
    for chain in chains[1:]:
        k = 0
        while k < min(len(common), len(chain)) and common[k] == chain[k]:
            k += 1
        common = common[:k]
    return common[-1]


def home_level(w: Workload, arch: Architecture, flow: Dataflow, t: str, lca: str,
          paths: Mapping[str, LevelsOfPath], tiles: Mapping[str, Tile]) -> int:
    """The level an intermediate lives at: named by the dataflow, else the common ancestor's
    level when on chip, else the outermost on-chip level every path passes through below it."""
    ops = (w.producer[t], *w.consumers[t])
    depth = node_depth(lca)
    lca_level = arch.level_index[tiles[lca].level]
    if t in flow.homes:
        name = flow.homes[t]
        if name not in arch.level_index:
            raise InvalidDataflow(f"home of '{t}': unknown level '{name}'", where="homes")
        home = arch.level_index[name]
        if not all(home in paths[o].levels[depth:] for o in ops):
            raise InvalidDataflow(
                f"home of '{t}' is {name}, but not every operator that writes or reads it "
                f"({', '.join(ops)}) has a tile at {name} at or below their common ancestor "
                f"{label(lca, tiles[lca])}", where="homes")
        return home
    if lca_level > 0:
        return lca_level
    common = set.intersection(*(set(paths[o].levels[depth + 1 :]) for o in ops)) - {0}
    return min(common) if common else lca_level
