"""Reading a tile tree back into genes, the one canonical encoding of each tree, and repair
of encodings that break a rule (counted by rule)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from tileflow.errors import InputError
from tileflow.explore.structures.encoding import (
    Encoding,
    Frame,
    InvalidEncoding,
    check_genes,
    decode,
    home_options,
    leaf_chains,
)
from tileflow.specs.arch import Architecture
from tileflow.tree import PRIMITIVES, ROOT, Dataflow, Node, Op, Tile, child_path, ops_under, walk


def canonical_edges(share: list[list[int]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """One fusion forest for a sharing pattern: each operator into the first later operator
    it shares the deepest level with (a maximum spanning forest of the shares)."""
    n = len(share)
    into, level = [-1] * n, [0] * n
    for o in range(n):
        later = [(share[o][p], -p) for p in range(o + 1, n) if share[o][p] >= 0]
        if later:
            best, neg = max(later)
            into[o], level[o] = -neg, best
    return tuple(into), tuple(level)


def shape(node: Node):
    """What a tree is, factors and names aside: levels, loops (dim, spatial), primitives of
    tiles with several children, children."""
    if isinstance(node, Op):
        return node.op
    return (node.level, tuple((lp.dim, lp.spatial) for lp in node.loops),
            node.primitive if len(node.children) > 1 else None,
            tuple(sorted(node.bypass)), tuple(shape(c) for c in node.children))


def structure_key(flow: Dataflow, arch: Architecture | None = None) -> tuple:
    """What a dataflow's structure is, factors and names aside: the tree's levels, loop
    order (dim, spatial, axis), primitives of tiles with several children, bypass, reuse,
    buffering and halo marks, and the intermediates' homes. Two dataflows with one key differ
    only in their loop factors (and tile names), so one factor search covers both. With
    `arch`, axis marks that cannot change a result on its arrays are left out
    (`free_axis_marks`)."""
    free = free_axis_marks(flow, arch) if arch is not None else set()
    return (_tree_key(flow.root, ROOT, free), tuple(sorted(flow.homes.items())))


def _tree_key(node: Node, path: str, free: set[tuple[str, int]]) -> tuple:
    if isinstance(node, Op):
        return ("op", node.op)
    return (node.level, node.primitive if len(node.children) > 1 else None,
            tuple(sorted(node.bypass)), tuple(sorted(node.no_reuse)),
            tuple(sorted(node.buffering)), tuple(sorted(node.halo)),
            tuple((lp.dim, lp.spatial, "" if (path, i) in free else lp.axis)
                  for i, lp in enumerate(node.loops)),
            tuple(_tree_key(c, child_path(path, k), free) for k, c in enumerate(node.children)))


def square_arrays(arch: Architecture) -> bool:
    """Whether every two-dimensional array of the chip (a level's mesh, a unit of rows x
    columns; a vector unit's lanes are one row) has as many rows as columns."""
    meshes = [lv.mesh for lv in arch.levels] + [
        (u.rows, u.cols) for u in (arch.matrix, arch.vector) if u.rows > 1 and u.cols > 1]
    return all(len(m) != 2 or m[0] == m[1] for m in meshes)


def free_axis_marks(flow: Dataflow, arch: Architecture) -> set[tuple[str, int]]:
    """The spatial loops (tile path, loop index) whose axis marks change nothing: on a chip
    whose arrays are all square, an operator's spatial loops at one level marked one x and
    one y (or just one of them) check the same two groups against the same size as the
    unmarked loops do (the first that spreads takes x, the other y), whatever the factors.
    A loop is free when that holds for every operator under it."""
    if not square_arrays(arch):
        return set()
    free: set[tuple[str, int]] = set()
    fixed: set[tuple[str, int]] = set()
    for chain in leaf_chains(flow.root).values():
        runs: dict[str, list[tuple[tuple[str, int], str]]] = {}
        for path, tile in chain:
            runs.setdefault(tile.level, []).extend(
                ((path, i), lp.axis) for i, lp in enumerate(tile.loops) if lp.spatial)
        for loops in runs.values():
            marks = [axis for _, axis in loops]
            ok = all(marks) and marks.count("x") <= 1 and marks.count("y") <= 1
            (free if ok else fixed).update(key for key, _ in loops)
    return free - fixed


def encode(frame: Frame, flow: Dataflow, share: tuple[int, ...] | None = None) -> Encoding:
    """The canonical encoding of a tree. Raises InputError when the tree is not one the
    encoding can express (the message says how it differs). `share` defaults to what the
    spatial loops of operators under Pipe/Para leave of the array."""
    root, ops, index = flow.root, frame.ops, frame.arch.level_index
    chains = leaf_chains(root)
    n = len(ops)
    container = not root.loops and len(root.children) > 1
    sh = [[-1] * n for _ in range(n)]
    for a in range(n):
        for b in range(n):
            ca, cb = chains[ops[a]], chains[ops[b]]
            k = 0
            while k < min(len(ca), len(cb)) and ca[k][0] == cb[k][0]:
                k += 1
            if a != b and not (container and k == 1):
                sh[a][b] = index[ca[k - 1][1].level]
    into, level = canonical_edges(sh)
    primitive = ["Seq"] * n
    loops = {}
    for path, node in walk(root):
        if not isinstance(node, Tile) or (path == ROOT and container):
            continue
        members = sorted(frame.index[o] for o in ops_under(node))
        lv = index[node.level]
        key = frame.own_key(members[0], lv) if len(members) == 1 else \
            frame.group_key(members, lv)
        if key in loops:
            raise InputError(f"{path}: a second tile {key} (the encoding has one per operator "
                             "and level, and one per fused group and level)")
        loops[key] = tuple((lp.dim, lp.spatial) for lp in node.loops)
        if len(node.children) > 1:
            for o in members:
                if into[o] in members and level[o] == lv:
                    primitive[o] = node.primitive
    home = [-1] * n
    for t in frame.workload.intermediates:
        o = frame.index[frame.workload.producer[t]]
        _, default = home_options(frame, chains, t)
        if t in flow.homes and index[flow.homes[t]] != default:
            home[o] = index[flow.homes[t]]
    bypass = {(t, index[node.level]) for _, node in walk(root) if isinstance(node, Tile)
              for t in node.bypass}
    enc = Encoding(into, level, tuple(primitive), tuple(home), _shares(frame, root, share),
                   root.primitive if container else "Seq", tuple(sorted(loops.items())),
                   tuple(sorted(bypass)))
    back = decode(frame, enc)
    if shape(back.root) != shape(root):
        raise InputError(f"dataflow '{flow.name}' is not in the generated space: its tree "
                         "differs from every tree the encoding describes")
    return enc


def _shares(frame: Frame, root: Tile, given: tuple[int, ...] | None) -> tuple[int, ...]:
    """Per operator, its share of the array when it runs beside siblings (Pipe/Para);
    1 elsewhere."""
    out = []
    for o, op in enumerate(frame.ops):
        chain = leaf_chains(root)[op]
        split = any(t.semantics.at_once and len(t.children) > 1 for _, t in chain)
        if not split:
            out.append(1)
        elif given is not None:
            out.append(given[o])
        else:
            ll = frame.levels[frame.loop_level[o]]
            used = 1
            for _, t in chain:
                if t.level == ll:
                    for lp in t.loops:
                        used *= lp.factor if lp.spatial else 1
            limit, s = frame.spatial_limit(o, frame.loop_level[o]), 1
            while used * s * 2 <= limit:
                s *= 2
            out.append(s)
    return tuple(out)


def canonical(frame: Frame, enc: Encoding) -> Encoding:
    """The canonical encoding of a valid encoding's tree (raises InvalidEncoding)."""
    return encode(frame, decode(frame, enc), enc.share)


def repair(frame: Frame, enc: Encoding, limit: int = 200) -> tuple[Encoding, Counter]:
    """A valid canonical encoding close to `enc`, and how many fixes of each rule it took.
    Fusion into an earlier operator is reversed (or dropped), junction levels clamped,
    dependence cycles between fused groups dissolved, Para between dependent siblings made
    Pipe, loops the rules forbid removed, missing coverage added, impossible homes reset."""
    fixes: Counter = Counter()
    n = len(frame.ops)
    into, level = list(enc.into), list(enc.level)
    primitive = [p if p in PRIMITIVES else "Seq" for p in enc.primitive]
    fixes["primitive"] += sum(p not in PRIMITIVES for p in enc.primitive)
    for o in range(n):
        h = into[o]
        if h == -1:
            continue
        if not 0 <= h < n or h == o:
            into[o] = -1
        elif h < o:
            if into[h] == -1:
                into[h], level[h], primitive[h] = o, level[o], primitive[o]
            into[o] = -1
        else:
            continue
        fixes["order"] += 1
    for o in range(n):
        if into[o] >= 0:
            top = frame.max_junction(o, into[o])
            if not 0 <= level[o] <= top:
                level[o] = min(max(level[o], 0), top)
                fixes["level"] += 1
    home = [h if -1 <= h < len(frame.levels) else -1 for h in enc.home]
    bypass = {(t, lv) for t, lv in enc.bypass
              if t in frame.bypassable and 0 < lv < len(frame.levels)}
    fixes["bypass"] += len(set(enc.bypass) - bypass)
    enc = enc.with_bypass(bypass)
    share = [s if s >= 1 and not s & (s - 1) else 1 for s in enc.share]
    root_primitive = enc.root_primitive if enc.root_primitive in PRIMITIVES else "Seq"
    enc = replace(enc, into=tuple(into), level=tuple(level), primitive=tuple(primitive),
                  home=tuple(home), share=tuple(share), root_primitive=root_primitive)
    check_genes(frame, enc)
    for _ in range(limit):
        try:
            return canonical(frame, enc), fixes
        except InvalidEncoding as error:
            if error.fix is None:
                raise
            fixes[error.rule] += 1
            enc = error.fix(enc)
    raise InvalidEncoding("repair", f"no valid encoding after {limit} repairs")
