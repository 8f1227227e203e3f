"""The dataflow: a tree of tiles. Build and change it from Python; read and write it as YAML."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Primitive:
    """What a tile's primitive says about its children, read by every rule that needs it
    (latency, footprints, unit splits, sibling sharing, dependences, the summaries).

    `at_once`: the children run at the same time, each on its own units (the tile's units
    are split among them; their footprints add unless they sit on disjoint instances).
    `pipelined`: they run as stages over the tile's steps (a child may read an earlier
    sibling's result of an earlier step); at once without it, they must be independent.
    `shares_inputs`: siblings reading the same slice of an input hold one copy, and no
    child's data is dropped for the next (without it, as `Seq`, a tensor the next child does
    not use is dropped between them)."""

    name: str
    at_once: bool
    pipelined: bool
    shares_inputs: bool
    words: str  # how the children run, for summaries

    @property
    def serial(self) -> bool:
        """The children run one after another: their times add."""
        return not self.at_once

    @property
    def independent(self) -> bool:
        """The children run at once within a step, so none may read another's result."""
        return self.at_once and not self.pipelined


PRIMITIVE: Mapping[str, Primitive] = {p.name: p for p in (
    Primitive("Seq", at_once=False, pipelined=False, shares_inputs=False,
              words="one after another (a child's data is dropped unless the next one uses it)"),
    Primitive("Shar", at_once=False, pipelined=False, shares_inputs=True,
              words="one after another, sharing the data they hold"),
    Primitive("Para", at_once=True, pipelined=False, shares_inputs=True,
              words="at the same time on separate units"),
    Primitive("Pipe", at_once=True, pipelined=True, shares_inputs=True,
              words="as a pipeline over the tile's steps, on separate units"),
)}
PRIMITIVES = tuple(PRIMITIVE)


@dataclass(frozen=True)
class Loop:
    """One loop of a tile: `factor` iterations over `dim`, spatial (Sp) or temporal (Tp).

    A spatial loop may name the axis of a two-dimensional array of instances it spreads
    over (`axis` 'x': the PE rows or a mesh's first axis, written `:SpX`; 'y': the columns
    or second axis, `:SpY`); without one, the first spatial loop (of more than one
    iteration) over a 2-D array takes x and the later ones y, in the order written."""

    dim: str
    factor: int
    spatial: bool = False
    axis: str = ""

    def __str__(self) -> str:
        kind = (":Sp" + self.axis.upper()) if self.spatial else ""
        return f"{self.dim}:{self.factor}{kind}"


@dataclass(frozen=True)
class Op:
    """A leaf: one operator, whose innermost iterations run on a compute unit."""

    op: str


@dataclass(frozen=True)
class Tile:
    """A tile at a storage level: loops (outermost first) and ordered sub-tiles.

    `primitive` says how the children share the tile's steps (Seq, Shar, Para, Pipe);
    `no_reuse` names tensors whose slices are fetched anew at every step of this tile's
    loops, even when the slice did not change (to describe programs that do not exploit
    a reuse the loop order allows)."""

    level: str
    loops: tuple[Loop, ...] = ()
    children: tuple[Node, ...] = ()
    primitive: str = "Seq"
    name: str = ""
    no_reuse: tuple[str, ...] = ()
    buffering: tuple[tuple[str, int], ...] = ()  # (tensor, depth 1 or 2) over the level's
    bypass: tuple[str, ...] = ()  # tensors not held at this tile's level
    halo: tuple[tuple[str, str], ...] = ()  # (intermediate, 'cache' or 'recompute')

    @property
    def semantics(self) -> Primitive:
        """What the tile's primitive says about its children (`PRIMITIVE`)."""
        return PRIMITIVE[self.primitive]

    def halo_of(self, tensor: str) -> str:
        """'cache' when this tile keeps `tensor`'s halo rows across its steps, else
        'recompute' (the default)."""
        return next((m for t, m in self.halo if t == tensor), "recompute")

    def depth_of(self, tensor: str) -> int | None:
        """The buffering depth this tile sets for `tensor`, if it sets one."""
        return next((d for t, d in self.buffering if t == tensor), None)


Node = Tile | Op


@dataclass(frozen=True)
class Dataflow:
    """A named tile tree plus the home level of intermediates that the dataflow fixes."""

    root: Tile
    name: str = "dataflow"
    homes: Mapping[str, str] = field(default_factory=dict)
    source: str = field(default="", compare=False)  # file it was read from, if any
    lines: Mapping[str, int] = field(default_factory=dict, compare=False)  # node path -> line


def loops(spec: str) -> tuple[Loop, ...]:
    """Parse a compact loop list: 'b:8 m:4:Sp k:2' (outermost first)."""
    return tuple(parse_loop(token) for token in spec.split())


LOOP_TEXT = re.compile(r"^([A-Za-z_]\w*):(\d+)(?::(Sp|SpX|SpY|Tp))?$")


def parse_loop(text: str) -> Loop:
    match = LOOP_TEXT.match(text.strip())
    if not match:
        raise ValueError(f"cannot read loop '{text}': expected DIM:FACTOR, DIM:FACTOR:Sp "
                         "(or :SpX, :SpY for an axis of a 2-D array)")
    dim, factor, kind = match.groups()
    spatial = bool(kind) and kind.startswith("Sp")
    return Loop(dim, int(factor), spatial, kind[2:].lower() if spatial else "")


def tile(level: str, spec: str = "", *children: Node | str, primitive: str = "Seq",
         name: str = "", no_reuse: tuple[str, ...] = (),
         buffering: Mapping[str, int] | None = None, bypass: tuple[str, ...] = (),
         halo: Mapping[str, str] | None = None) -> Tile:
    """Shorthand builder: tile('L1', 'm:4 k:2', 'qk') — strings as children become Op leaves."""
    kids = tuple(Op(c) if isinstance(c, str) else c for c in children)
    return Tile(level, loops(spec), kids, primitive, name, tuple(no_reuse),
                tuple(sorted((buffering or {}).items())), tuple(bypass),
                tuple(sorted((halo or {}).items())))


# A node's path names it in its tree: ROOT, then a child's index after a dot per level
# ('root.0.1': the second child of the root's first child). Only the functions below take
# a path apart or build a child's ("root" elsewhere is the YAML key or a place in a file).
ROOT = "root"


def child_path(path: str, index: int) -> str:
    """The path of child `index` of the node at `path`."""
    return f"{path}.{index}"


def node_depth(path: str) -> int:
    """How deep the node at `path` sits: 0 for the root, 1 for its children, ..."""
    return path.count(".")


def child_index(path: str) -> int:
    """Which child of its parent the (non-root) node at `path` is."""
    return int(path.rsplit(".", 1)[1])


def is_below(path: str, ancestor: str) -> bool:
    """Whether the node at `path` lies in the subtree of `ancestor` (not `ancestor` itself)."""
    return path.startswith(ancestor + ".")


def path_prefixes(path: str) -> list[str]:
    """The paths from the root down to `path`, the root first and `path` last."""
    parts = path.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


def walk(node: Node, path: str = ROOT) -> Iterator[tuple[str, Node]]:
    """Every node with its path ('root', 'root.0', 'root.0.1', ...), parents first."""
    yield path, node
    if isinstance(node, Tile):
        for i, child in enumerate(node.children):
            yield from walk(child, child_path(path, i))


def label(path: str, node: Node) -> str:
    if isinstance(node, Op):
        return f"leaf '{node.op}' ({path})"
    return f"tile '{node.name}' ({path})" if node.name else f"tile at {node.level} ({path})"


def ops_under(node: Node) -> tuple[str, ...]:
    if isinstance(node, Op):
        return (node.op,)
    return tuple(o for c in node.children for o in ops_under(c))


def map_tiles(node: Node, fn) -> Node:
    """Rebuild the tree bottom-up, applying fn(path, tile) -> tile to every tile."""
    def go(n: Node, path: str) -> Node:
        if isinstance(n, Op):
            return n
        kids = tuple(go(c, child_path(path, i)) for i, c in enumerate(n.children))
        return fn(path, replace(n, children=kids))
    return go(node, ROOT)


def with_factors(flow: Dataflow, factors: Mapping[tuple[str, int], int]) -> Dataflow:
    """A copy of the dataflow with loop factors replaced: {(node path, loop index): factor}."""
    def change(path: str, t: Tile) -> Tile:
        new = tuple(replace(lp, factor=factors.get((path, i), lp.factor))
                    for i, lp in enumerate(t.loops))
        return replace(t, loops=new)
    return replace(flow, root=map_tiles(flow.root, change))


def to_dict(flow: Dataflow) -> dict:
    """The YAML form of a dataflow (what `from_dict` and the YAML loader read back)."""
    def node(n: Node) -> dict:
        if isinstance(n, Op):
            return {"op": n.op}
        out: dict = {"level": n.level}
        if n.name:
            out["name"] = n.name
        if n.loops:
            out["loops"] = [str(lp) for lp in n.loops]
        if len(n.children) > 1 or n.primitive != "Seq":
            out["primitive"] = n.primitive
        if n.no_reuse:
            out["no_reuse"] = list(n.no_reuse)
        if n.buffering:
            out["buffering"] = dict(n.buffering)
        if n.bypass:
            out["bypass"] = list(n.bypass)
        if n.halo:
            out["halo"] = dict(n.halo)
        out["children"] = [node(c) for c in n.children]
        return out
    data: dict = {"name": flow.name}
    if flow.homes:
        data["homes"] = dict(flow.homes)
    data["root"] = node(flow.root)
    return data


def render(node: Node, indent: str = "") -> str:
    """A readable outline of the tree, one tile per line."""
    if isinstance(node, Op):
        return f"{indent}{node.op}\n"
    head = f"{indent}[{node.level}] {{{' '.join(str(lp) for lp in node.loops)}}}"
    if len(node.children) > 1:
        head += f" {node.primitive}"
    if node.name:
        head += f"  # {node.name}"
    return head + "\n" + "".join(render(c, indent + "  ") for c in node.children)
