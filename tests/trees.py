"""Random tile trees for property-based tests: every primitive, spatial loops, clipping,
grouping under shared tiles, and producers grown by a windowed consumer's halo."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from helpers import small_arch
from hypothesis import strategies as st

from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, Loop, Op, Tile, map_tiles, walk

ARCH = small_arch()
LEVELS = ("DRAM", "L1", "Reg")
CHAINS = [("L1",), ("L1", "Reg"), ("DRAM", "L1"), ("DRAM", "L1", "Reg"), ("Reg",),
          ("DRAM", "Reg")]


def _illegal_dims(w: Workload, ops: set[str]) -> set[str]:
    """Reductions of producers whose consumers also sit under the node."""
    out = set()
    for t in w.intermediates:
        if w.producer[t] in ops and any(c in ops for c in w.consumers[t]):
            out |= set(w.op_by_name[w.producer[t]].reduction_dims)
    return out


def _chain(data, w: Workload, op: str, required: dict[str, int], levels: tuple[str, ...],
           exact: set[str]):
    """A chain of tiles for one operator whose loops cover `required` extents (exactly, by
    divisors, for dims in `exact`: the per-step extent of a loop shared with other ops)."""
    dims = list(w.op_by_name[op].dims)
    remaining = dict(required)
    nodes = []
    for i, lv in enumerate(levels):
        last = i == len(levels) - 1
        order = data.draw(st.permutations(dims))
        loops = []
        for d in order:
            if remaining[d] <= 1:
                continue
            if last:
                f = remaining[d]
            elif d in exact:
                f = data.draw(st.sampled_from([x for x in range(1, remaining[d] + 1)
                                               if remaining[d] % x == 0]))
            else:
                f = data.draw(st.integers(1, remaining[d]))
            if f > 1:
                spatial = not last and data.draw(st.integers(0, 3)) == 0
                loops.append(Loop(d, f, spatial))
                remaining[d] = -(-remaining[d] // f)
        nodes.append((lv, loops))
    node: Tile | Op = Op(op)
    for lv, loops in reversed(nodes):
        node = Tile(lv, tuple(loops), (node,))
    return node


def _extent(node, d: str) -> int:
    ext = 1
    while isinstance(node, Tile):
        ext *= math.prod(lp.factor for lp in node.loops if lp.dim == d)
        node = node.children[0]
    return ext


@st.composite
def trees(draw, w: Workload):
    """A random tree for `w`: root loops over dims every operator uses and, now and then,
    over a dim only some use (the others are repeated); a root dim split into a temporal
    and a spatial loop (on a window axis: instances that overlap and move); optionally a
    group tile; random chains below; now and then factor-1 loops anywhere."""
    data = draw(st.data())
    ops = [o.name for o in w.ops]
    illegal = _illegal_dims(w, set(ops))
    common = set.intersection(*(set(o.dims) for o in w.ops)) - illegal
    partial = set(w.sizes) - common - illegal
    chosen = sorted(common)
    if partial and data.draw(st.integers(0, 3)) == 0:
        chosen.append(data.draw(st.sampled_from(sorted(partial))))
    root_loops, per_step = [], {}
    for d in chosen:
        if data.draw(st.booleans()):
            e = data.draw(st.integers(1, w.sizes[d]))
            n = -(-w.sizes[d] // e)
            per_step[d] = e
            if n > 1 and data.draw(st.integers(0, 2)) == 0:
                root_loops += [Loop(d, -(-n // 2)), Loop(d, 2, True)]
            elif n > 1:
                root_loops.append(Loop(d, n))
    # consumers first, so a windowed producer can cover its consumer's halo
    chains: dict[str, Tile | Op] = {}
    group_level = data.draw(st.sampled_from(["DRAM", "L1"]))
    grouped = len(ops) > 1 and data.draw(st.booleans())
    first_level = group_level if grouped else "DRAM"
    for op in reversed(ops):
        opx = w.op_by_name[op]
        required = {d: per_step.get(d, w.sizes[d]) for d in opx.dims}
        for t in w.intermediates:
            if w.producer[t] != op:
                continue
            for c in w.consumers[t]:
                for axis in w.op_by_name[c].access(t).axes:
                    d = axis.terms[0][0]
                    if len(axis.terms) > 1 and any(lp.dim == d and lp.factor > 1
                                                   for lp in root_loops):
                        window = sum(k * (w.sizes[x] - 1) for x, k in axis.terms if x != d)
                        required[d] = max(required[d], _extent(chains[c], d) + window)
        allowed = [c for c in CHAINS if LEVELS.index(c[0]) >= LEVELS.index(first_level)]
        exact = {d for d in opx.dims if d in per_step and required[d] == per_step[d]}
        chains[op] = _chain(data, w, op, required, data.draw(st.sampled_from(allowed)), exact)
    kinds = ["Seq", "Shar", "Pipe"] + ([] if w.intermediates else ["Para"])
    primitive = data.draw(st.sampled_from(kinds))
    children = [chains[o] for o in ops]
    if grouped:
        cut = data.draw(st.integers(1, len(ops) - 1))
        inner_primitive = data.draw(st.sampled_from(kinds))
        head = Tile(group_level, (), tuple(children[:cut]), inner_primitive)
        children = [head, *children[cut:]] if len(children[:cut]) > 1 else children
    root = Tile("DRAM", tuple(root_loops), tuple(children), primitive)
    flow = Dataflow(root, "random")
    if data.draw(st.integers(0, 5)) == 0:  # a program that refetches a tensor at every step
        tensor = data.draw(st.sampled_from(sorted(w.tensors)))
        chosen_path = data.draw(st.sampled_from(
            [p for p, n in walk(flow.root) if isinstance(n, Tile)]))
        flow = replace(flow, root=map_tiles(flow.root, lambda p, t: replace(
            t, no_reuse=(tensor,)) if p == chosen_path else t))
    if data.draw(st.integers(0, 3)) == 0:
        flow = with_unit_loops(flow, data.draw(st.integers(0, 2**31)), sorted(w.sizes))
    return flow




def with_unit_loops(flow: Dataflow, seed: int, dims: list[str]) -> Dataflow:
    """The same tree with a factor-1 loop (spatial or temporal, over any dimension of the
    workload, used below or not) inserted at a random place of every tile."""
    rng = random.Random(seed)

    def add(_path: str, t: Tile) -> Tile:
        loops = list(t.loops)
        for _ in range(rng.randint(1, 2)):
            loops.insert(rng.randint(0, len(loops)), Loop(rng.choice(dims), 1, rng.random() < .5))
        return replace(t, loops=tuple(loops))

    return replace(flow, root=map_tiles(flow.root, add))


def keep_halos(w: Workload, flow: Dataflow) -> Dataflow:
    """The same tree with `halo: cache` for every intermediate, on its common ancestor."""
    chains = {}
    for path, node in walk(flow.root):
        if not isinstance(node, Tile):
            chains[node.op] = path.rsplit(".", 1)[0]
    halo: dict[str, dict[str, str]] = {}
    for t in w.intermediates:
        paths = [chains[o].split(".") for o in (w.producer[t], *w.consumers[t])]
        common = 0
        while all(len(p) > common and p[common] == paths[0][common] for p in paths):
            common += 1
        halo.setdefault(".".join(paths[0][:common]), {})[t] = "cache"
    return replace(flow, root=map_tiles(flow.root, lambda p, t: replace(
        t, halo=tuple(sorted(halo[p].items()))) if p in halo else t))
