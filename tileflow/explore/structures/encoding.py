"""Tile trees as genes, and back.

Per operator, as the published encoding: the operator it is fused into (`into`, a later
operator or -1), the level of the tile where the two meet (`level`), the inter-tile primitive
of that tile (`primitive`) and the level its result is kept at (`home`, -1: the model's
default). What the table leaves implicit is explicit here too: per tile, its loops (which dims
are tiled there, in which order, which ones spatial), which intermediate levels an operator's
own chain visits (a tile is present when its key is in `loops`), and per operator the share of
the array it gets under Pipe or Para (`share`: 1, 2, 4, ...).

Fusion edges define how far two operators share their path: the minimum edge level along the
forest path between them. Operators sharing level L sit under one tile at L (a group);
operators in no common group are children of a root that only sequences them.
`decode` is strict: an encoding that breaks a rule raises InvalidEncoding; `repair` makes any
encoding valid and counts what it changed."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace
from functools import cached_property

from tileflow.errors import InputError
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import (
    PRIMITIVE,
    PRIMITIVES,
    ROOT,
    Dataflow,
    Loop,
    Node,
    Op,
    Tile,
    child_path,
    ops_under,
)

LoopSpec = tuple[tuple[str, bool], ...]  # (dim, spatial), outermost first


class InvalidEncoding(InputError):
    """An encoding that no valid tree corresponds to (the message says which rule)."""

    def __init__(self, rule: str, message: str, fix=None):
        self.rule = rule
        self.fix = fix  # Encoding -> Encoding that removes this cause, when one is known
        super().__init__(message)


@dataclass(frozen=True)
class Encoding:
    into: tuple[int, ...]
    level: tuple[int, ...]
    primitive: tuple[str, ...]
    home: tuple[int, ...]
    share: tuple[int, ...]
    root_primitive: str
    loops: tuple[tuple[str, LoopSpec], ...]  # (tile key, loops), sorted by key
    bypass: tuple[tuple[str, int], ...] = ()  # (input or output, level it skips), sorted

    @cached_property
    def loop_map(self) -> dict[str, LoopSpec]:
        return dict(self.loops)

    def with_loops(self, loops: dict[str, LoopSpec]) -> Encoding:
        return replace(self, loops=tuple(sorted(loops.items())))

    @property
    def text(self) -> str:
        """The encoding as text for seeding searches and keying stored fitness searches:
        without a bypass gene it is the text encodings had before they had one, so seeded
        runs stay as they were and a stored structure search still replays."""
        return repr(self) if self.bypass else repr(self).replace(", bypass=())", ")")

    def with_bypass(self, pairs) -> Encoding:
        return replace(self, bypass=tuple(sorted(set(pairs))))


class Frame:
    """What the genes mean for one workload on one accelerator: operators in topological
    order, their dependences, and per operator the levels its chain can use."""

    def __init__(self, workload: Workload, arch: Architecture):
        self.workload, self.arch = workload, arch
        self.ops = tuple(o.name for o in workload.ops)
        self.index = {o: i for i, o in enumerate(self.ops)}
        self.levels = tuple(lv.name for lv in arch.levels)
        self.deps = frozenset((self.index[workload.producer[t]], self.index[c])
                              for t in workload.intermediates for c in workload.consumers[t])
        feed, loop_level = [], []
        for op in workload.ops:
            unit = arch.unit(op.unit)
            f = arch.level_index[unit.level]
            per_pe = f > 0 and unit.parallelism == 1 and arch.levels[f].fanout > 1
            feed.append(f)
            loop_level.append(f - 1 if per_pe else f)
        self.feed, self.loop_level = tuple(feed), tuple(loop_level)

    @property
    def bypassable(self) -> tuple[str, ...]:
        """Tensors a level may skip: the workload's inputs and outputs (an intermediate
        lives where its home says)."""
        return tuple(t for t in (*self.workload.inputs, *self.workload.outputs)
                     if t not in self.workload.intermediates)

    def dims(self, o: int) -> tuple[str, ...]:
        return self.workload.op_by_name[self.ops[o]].dims

    def output(self, o: int) -> str:
        return self.workload.op_by_name[self.ops[o]].output.tensor

    def own_key(self, o: int, level: int) -> str:
        return f"{self.ops[o]}@{self.levels[level]}"

    def group_key(self, members, level: int) -> str:
        return "+".join(self.ops[o] for o in sorted(members)) + f"@{self.levels[level]}"

    def max_junction(self, a: int, b: int) -> int:
        return min(self.loop_level[a], self.loop_level[b])

    def group_dims(self, members) -> tuple[str, ...]:
        """Dims a loop shared by `members` may run over: used by every member and not a
        reduction of a member whose result another member reads (partial values), unless
        that member carries its state across the dim (online softmax)."""
        common = set.intersection(*(set(self.dims(o)) for o in members))
        ops = self.workload.op_by_name
        banned = {d for p, c in self.deps if p in members and c in members
                  for d in ops[self.ops[p]].reduction_dims if d != ops[self.ops[p]].carried}
        return tuple(d for d in self.workload.sizes if d in common and d not in banned)

    def group_loops_allowed(self, members, level: int) -> bool:
        """Whether a group tile at `level` may have loops: at the outermost level, and at an
        on-chip level above every member's innermost loops (a shared L2 stepping through
        blocks that its members' L1 tiles then work on)."""
        return level == 0 or level < min(self.loop_level[o] for o in members)

    def middle_levels(self, o: int, start: int) -> tuple[int, ...]:
        """On-chip levels strictly between `start` and the level of `o`'s innermost loops:
        where an own tile can keep a block of `o`'s data (a shared L2 between DRAM and
        per-core L1s)."""
        return tuple(range(max(start, 0) + 1, self.loop_level[o]))

    def fanout_below(self, level: int) -> int:
        return self.arch.levels[level + 1].fanout if level + 1 < len(self.levels) else 1

    def spread_below(self, members, level: int) -> int:
        """Instances of the levels between `level` and the members' innermost loops: what a
        spatial loop of a tile at `level` may spread over when no tile sits between (a DRAM
        tile over per-core L1s spreads over the cores even where the L2 between has one)."""
        inner = min(self.loop_level[o] for o in members)
        if level >= inner:
            return self.fanout_below(level)
        return self.arch.fanout_between(self.levels[level], self.levels[inner])

    def spatial_limit(self, o: int, level: int) -> int:
        """Instances a spatial loop in `o`'s own tile at `level` may spread over."""
        if level < self.loop_level[o]:
            return self.spread_below((o,), level)
        unit = self.arch.unit(self.workload.op_by_name[self.ops[o]].unit)
        if self.feed[o] > level:
            return self.arch.fanout_between(self.levels[level], unit.level) * unit.parallelism
        return unit.parallelism


# ---- shares and clusters ----------------------------------------------------------------

def shares(enc: Encoding) -> list[list[int]]:
    """share[a][b]: the deepest level whose tile a and b both sit under (-1: none)."""
    n = len(enc.into)
    adj: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for o, h in enumerate(enc.into):
        if h >= 0:
            adj[o].append((h, enc.level[o]))
            adj[h].append((o, enc.level[o]))
    out = [[-1] * n for _ in range(n)]
    for s in range(n):
        out[s][s] = 1 << 30
        stack, seen = [(s, 1 << 30)], {s}
        while stack:
            u, m = stack.pop()
            for v, lv in adj[u]:
                if v not in seen:
                    seen.add(v)
                    out[s][v] = min(m, lv)
                    stack.append((v, min(m, lv)))
    return out


def components(members, share: list[list[int]], threshold: int) -> list[tuple[int, ...]]:
    members = sorted(members)
    out, seen = [], set()
    for m in members:
        if m in seen:
            continue
        comp = tuple(o for o in members if share[m][o] >= threshold)
        seen.update(comp)
        out.append(comp)
    return out


def merge_level(members, share: list[list[int]]) -> int:
    return min(share[a][b] for a in members for b in members if a != b)


def ordered(frame: Frame, groups: list[tuple[int, ...]], fix=None) -> list[tuple[int, ...]]:
    """Sibling groups in an order every dependence respects (producers first), ties by the
    first operator; a cycle (each needs the other first) raises, with `fix(stuck groups)`."""
    where = {o: i for i, g in enumerate(groups) for o in g}
    after: list[set[int]] = [set() for _ in groups]
    need = [0] * len(groups)
    for p, c in frame.deps:
        if p in where and c in where and where[p] != where[c] and where[c] not in after[where[p]]:
            after[where[p]].add(where[c])
            need[where[c]] += 1
    ready = [(groups[i][0], i) for i in range(len(groups)) if need[i] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(groups[i])
        for j in after[i]:
            need[j] -= 1
            if need[j] == 0:
                heapq.heappush(ready, (groups[j][0], j))
    if len(out) < len(groups):
        stuck = [frame.ops[g[0]] for g, n in zip(groups, need, strict=True) if n]
        left = [g for g, n in zip(groups, need, strict=True) if n]
        raise InvalidEncoding("cycle", "fused groups depend on each other in a cycle "
                              f"(around {', '.join(stuck)})",
                              fix and (lambda enc: fix(enc, left)))
    return out


# ---- decoding ---------------------------------------------------------------------------

def check_genes(frame: Frame, enc: Encoding) -> None:
    """The per-gene rules (ranges, fusion into a later operator, junction levels)."""
    n = len(frame.ops)
    for name in ("into", "level", "primitive", "home", "share"):
        if len(getattr(enc, name)) != n:
            raise InvalidEncoding("shape", f"'{name}' needs one entry per operator ({n})")
    for o, h in enumerate(enc.into):
        if h != -1 and not 0 <= h < n:
            raise InvalidEncoding("shape", f"'{frame.ops[o]}' is fused into unknown index {h}")
        if 0 <= h <= o:
            raise InvalidEncoding("order", f"'{frame.ops[o]}' is fused into '{frame.ops[h]}', "
                                  "which comes before it (producers are fused into later ops)")
        if h > o and not 0 <= enc.level[o] <= frame.max_junction(o, h):
            raise InvalidEncoding("level", f"'{frame.ops[o]}' meets '{frame.ops[h]}' at level "
                                  f"{enc.level[o]}, outside 0..{frame.max_junction(o, h)}")
        if not -1 <= enc.home[o] < len(frame.levels):
            raise InvalidEncoding("home", f"home of '{frame.ops[o]}': no level {enc.home[o]}")
        s = enc.share[o]
        if s < 1 or s & (s - 1):
            raise InvalidEncoding("share", f"share of '{frame.ops[o]}' must be 1, 2, 4, ...")
    for p in (*enc.primitive, enc.root_primitive):
        if p not in PRIMITIVES:
            raise InvalidEncoding("primitive", f"unknown primitive '{p}'")
    for t, lv in enc.bypass:
        if t not in frame.bypassable or not 0 < lv < len(frame.levels):
            raise InvalidEncoding("bypass", f"'{t}' cannot skip level {lv} (inputs and outputs "
                                  f"may skip levels 1..{len(frame.levels) - 1})",
                                  lambda e, x=(t, lv): e.with_bypass(set(e.bypass) - {x}))


class _Builder:
    def __init__(self, frame: Frame, enc: Encoding):
        self.frame, self.enc = frame, enc
        self.share = shares(enc)
        self.loops = enc.loop_map

    def root(self) -> Tile:
        f = self.frame
        comps = ordered(f, components(range(len(f.ops)), self.share, 0),
                        lambda enc, left: _flatten(enc, left, -1))
        if len(comps) == 1:
            return self.component(comps[0], True)
        self.check_para(self.enc.root_primitive, comps, "the root",
                        lambda enc: replace(enc, root_primitive="Pipe"))
        return Tile(f.levels[0], (), tuple(self.component(c, False) for c in comps),
                    self.enc.root_primitive, name="root")

    def component(self, members: tuple[int, ...], is_root: bool) -> Node:
        f = self.frame
        if len(members) == 1:
            return self.chain(members[0], 0, force=is_root)
        lam = merge_level(members, self.share)
        if lam == 0:
            return self.group(members, 0)
        inner = self.group(members, lam)
        key = f.group_key(members, 0)
        spec = self.loops.get(key, ())
        if spec or is_root:
            return Tile(f.levels[0], self.group_loops(members, key, spec), (inner,), name=key)
        return inner

    def group(self, members: tuple[int, ...], lam: int) -> Tile:
        f = self.frame
        subs = ordered(f, components(members, self.share, lam + 1),
                       lambda enc, left: _flatten(enc, left, lam))
        kids = tuple(self.chain(s[0], lam) if len(s) == 1
                     else self.group(s, merge_level(s, self.share)) for s in subs)
        key = f.group_key(members, lam)
        if lam == 0:
            spec = self.loops.get(key, default_group_loops(f, members))
        else:
            spec = self.loops.get(key, ())
            if spec and not f.group_loops_allowed(members, lam):
                raise InvalidEncoding("loops", f"group tile {key}: a group at the level that "
                                      "feeds its operators' units has no loops",
                                      _set_loops(key, ()))
        chooser = self.primitive_gene(members, lam)
        primitive = self.enc.primitive[chooser] if len(kids) > 1 else "Seq"
        self.check_para(primitive, subs, key, lambda enc: _set_primitive(enc, chooser, "Pipe"))
        return Tile(f.levels[lam], self.group_loops(members, key, spec, lam), kids, primitive,
                    name=key)

    def primitive_gene(self, members: tuple[int, ...], lam: int) -> int:
        """The operator whose primitive gene the group tile at `lam` takes: the first one
        whose fusion edge meets at that level."""
        edges = [o for o in members if self.enc.into[o] in members and self.enc.level[o] == lam]
        return edges[0] if edges else members[0]

    def check_para(self, primitive: str, subs: list[tuple[int, ...]], where: str, fix) -> None:
        if not PRIMITIVE[primitive].independent:
            return
        side = {o: i for i, s in enumerate(subs) for o in s}
        for p, c in self.frame.deps:
            if p in side and c in side and side[p] != side[c]:
                raise InvalidEncoding("para", f"{where}: Para children must be independent, "
                                      f"but '{self.frame.ops[c]}' reads '{self.frame.ops[p]}'",
                                      fix)

    def group_loops(self, members, key: str, spec: LoopSpec,
                    lam: int = 0) -> tuple[Loop, ...]:
        f = self.frame
        legal = set(f.group_dims(members))
        _check_spec(key, spec, legal, f.spread_below(members, lam) > 1, "dims shared by the "
                    "group and no reduction of a producer whose consumer is in it")
        return tuple(Loop(d, 1, sp) for d, sp in spec)

    def chain(self, o: int, start: int, force: bool = False) -> Node:
        f = self.frame
        present = [lv for lv in range(start, f.feed[o] + 1)
                   if lv in (f.loop_level[o], f.feed[o]) or f.own_key(o, lv) in self.loops
                   or (lv == start and force)]
        node: Node = Op(f.ops[o])
        for lv in reversed(present):
            key = f.own_key(o, lv)
            spec = self.loops.get(key, ())
            if lv > f.loop_level[o] and spec:
                raise InvalidEncoding("loops", f"{key}: no loops below the level that feeds "
                                      "the compute unit's instances", _set_loops(key, ()))
            _check_spec(key, spec, set(f.dims(o)), f.spatial_limit(o, lv) > 1,
                        f"dims of '{f.ops[o]}'")
            node = Tile(f.levels[lv], tuple(Loop(d, 1, sp) for d, sp in spec), (node,),
                        name=key)
        return node


def _check_spec(key: str, spec: LoopSpec, legal: set[str], spatial_ok: bool, what: str) -> None:
    if len(set(spec)) != len(spec):
        raise InvalidEncoding("loops", f"{key}: a dim appears twice with the same kind",
                              _set_loops(key, tuple(dict.fromkeys(spec))))
    for d, sp in spec:
        drop = _set_loops(key, tuple(x for x in spec if x != (d, sp)))
        if d not in legal:
            raise InvalidEncoding("loops", f"{key}: loop over '{d}' is not allowed here "
                                  f"(allowed: {what})", drop)
        if sp and not spatial_ok:
            raise InvalidEncoding("loops", f"{key}: spatial loop over '{d}' but there is no "
                                  "fan-out below this tile", drop)


def _set_loops(key: str, spec: LoopSpec):
    return lambda enc: enc.with_loops({**enc.loop_map, key: spec})


def _set_primitive(enc: Encoding, o: int, primitive: str) -> Encoding:
    genes = list(enc.primitive)
    genes[o] = primitive
    return replace(enc, primitive=tuple(genes))


def _flatten(enc: Encoding, groups: list[tuple[int, ...]], lam: int) -> Encoding:
    """Dissolve fused groups into single operators meeting at `lam` (-1: not fused)."""
    into, level = list(enc.into), list(enc.level)
    for g in groups:
        for o in g:
            if into[o] in g and level[o] > lam:
                if lam < 0:
                    into[o] = -1
                else:
                    level[o] = lam
    return replace(enc, into=tuple(into), level=tuple(level))


def default_group_loops(frame: Frame, members, level: int = 0) -> LoopSpec:
    """Temporal loops over every dim the group may share, and a spread over the instances of
    the level below (the cores): over the largest dim that every member's output keeps (no
    member then sums partial results across cores: SwiGLU's `m`, not the `f` that `down`
    contracts), else over the largest shared dim."""
    dims = frame.group_dims(members)
    spec: list[tuple[str, bool]] = [(d, False) for d in dims]
    if dims and frame.spread_below(members, level) > 1:
        ops = frame.workload.op_by_name
        kept = [d for d in dims if all(d in ops[frame.ops[o]].output.dims for o in members)]
        spec.append((max(kept or dims, key=lambda d: frame.workload.sizes[d]), True))
    return tuple(spec)


def leaf_chains(root: Tile) -> dict[str, list[tuple[str, Tile]]]:
    out: dict[str, list[tuple[str, Tile]]] = {}

    def go(node: Tile, path: str, chain: list[tuple[str, Tile]]) -> None:
        chain = [*chain, (path, node)]
        for i, child in enumerate(node.children):
            if isinstance(child, Op):
                out[child.op] = chain
            else:
                go(child, child_path(path, i), chain)

    go(root, ROOT, [])
    return out


def home_options(frame: Frame, chains, tensor: str) -> tuple[tuple[int, ...], int]:
    """Levels an intermediate may live at (a tile of every operator that touches it, at or
    below their common ancestor) and the model's default among them."""
    w, index = frame.workload, frame.arch.level_index
    users = [chains[o] for o in (w.producer[tensor], *w.consumers[tensor])]
    depth = 0
    while all(len(c) > depth + 1 for c in users) and \
            len({c[depth + 1][0] for c in users}) == 1:
        depth += 1
    levels = [{index[t.level] for _, t in c[depth:]} for c in users]
    allowed = tuple(sorted(set.intersection(*levels)))
    lca_level = index[users[0][depth][1].level]
    below = set.intersection(*({index[t.level] for _, t in c[depth + 1:]} for c in users)) - {0}
    default = lca_level if lca_level > 0 else (min(below) if below else lca_level)
    return allowed, default


def decode(frame: Frame, enc: Encoding, name: str = "generated") -> Dataflow:
    """The tile tree of an encoding, every loop factor 1 (see `tilings` for factors)."""
    check_genes(frame, enc)
    root = _Builder(frame, enc).root()
    chains = leaf_chains(root)
    for o, op in enumerate(frame.ops):
        tiled = {lp.dim for _, t in chains[op] for lp in t.loops}
        for d in frame.dims(o):
            if d not in tiled and frame.workload.sizes[d] > 1:
                key = frame.own_key(o, frame.loop_level[o])
                spec = (*enc.loop_map.get(key, ()), (d, False))
                raise InvalidEncoding("coverage", f"no loop over '{d}' on the path of '{op}'",
                                      _set_loops(key, spec))
    homes = {}
    for t in frame.workload.intermediates:
        o = frame.index[frame.workload.producer[t]]
        if enc.home[o] < 0:
            continue
        allowed, default = home_options(frame, chains, t)
        if enc.home[o] not in allowed:
            genes = tuple(-1 if i == o else h for i, h in enumerate(enc.home))
            raise InvalidEncoding("home", f"'{t}' cannot live at {frame.levels[enc.home[o]]}: "
                                  "not every operator using it has a tile there below their "
                                  "common ancestor", lambda e, g=genes: replace(e, home=g))
        if enc.home[o] != default:
            homes[t] = frame.levels[enc.home[o]]
    return Dataflow(_bypassed(frame, enc, root, chains), name, homes)


def _bypassed(frame: Frame, enc: Encoding, root: Tile, chains) -> Tile:
    """The tree with every tile at a skipped level listing the tensors that skip it (each
    (tensor, level) gene must meet a tile at that level on the path of an operator that
    uses the tensor)."""
    index = frame.arch.level_index
    skip: dict[int, set[str]] = {}
    for t, lv in enc.bypass:
        users = [o for o in frame.ops if t in frame.workload.op_by_name[o].tensors]
        if not any(index[tile.level] == lv for o in users for _, tile in chains[o]):
            raise InvalidEncoding("bypass", f"'{t}' skips {frame.levels[lv]} but no operator "
                                  "using it has a tile there",
                                  lambda e, x=(t, lv): e.with_bypass(set(e.bypass) - {x}))
        skip.setdefault(lv, set()).add(t)
    if not skip:
        return root

    def go(node: Node) -> Node:
        if isinstance(node, Op):
            return node
        kids = tuple(go(c) for c in node.children)
        used = {t for o in ops_under(node) for t in frame.workload.op_by_name[o].tensors}
        gone = tuple(sorted(skip.get(index[node.level], set()) & used))
        return replace(node, children=kids, bypass=gone)

    return go(root)
