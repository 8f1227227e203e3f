"""The tree a cache hierarchy realises when it runs a tile tree's loop nest.

A tile tree says what each level keeps: a level holds its tiles and nothing else, as a
scratchpad would. A hardware cache keeps whatever was touched recently: the data of any
loop body that fits in it stays from one iteration to the next, whether or not the tree
puts a tile there. The cache view rebuilds the tree with one tile per loop (each loop body
becomes a candidate tile), places every tile at the innermost cache level whose capacity
holds its footprint (never above its parent), lets intermediates live where their common
ancestor lands, and evaluates that tree with the same model. Register tiles stay as they
are. Traffic at a cache boundary is then counted as a cache simulator counts it: words
brought in (read and write-allocate misses, `boundary.inbound_words`) plus one allocation
of every buffer written below the boundary and never written back across it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from tileflow.cost import evaluate
from tileflow.cost.result import Result
from tileflow.evaluator.engine import Rows
from tileflow.evaluator.lattice import one_row_grids
from tileflow.evaluator.limits import tile_words
from tileflow.evaluator.structure import structure_of
from tileflow.kernels.boundary import crossing, inbound_words
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import ROOT, Dataflow, Op, Tile, child_path, is_below, walk


def split_loops(node: Tile, register: str) -> Tile:
    """One tile per loop, outermost first, at the tile's level; the last holds the loop
    nest's children (and the primitive). Register tiles and loop-less tiles stay whole."""
    kids = tuple(c if isinstance(c, Op) else split_loops(c, register) for c in node.children)
    if node.level == register or len(node.loops) <= 1:
        return replace(node, children=kids)
    inner = replace(node, loops=node.loops[-1:], children=kids)
    for i, loop in enumerate(reversed(node.loops[:-1])):
        inner = Tile(node.level, (loop,), (inner,), "Seq", f"{node.name}~{i}")
    return inner


def _rows(w: Workload, arch: Architecture, flow: Dataflow) -> Rows:
    """The model's arrays of `flow` at its own factors (one row)."""
    structure = structure_of(w, arch, flow)
    return Rows(structure.compiled, structure.all_loop_factors(
        structure.default_factors.reshape(1, -1)))


def _words(r: Rows, op: str, tensor: str, position: int) -> float:
    """Words of `tensor` in operator `op`'s tile at path position `position` (the model's
    tile box: its loops and below, clipped to the tensor)."""
    with one_row_grids():
        return float(tile_words(r, r.c.paths[op], tensor, position)[0])


def buffer_words(w: Workload, arch: Architecture, flow: Dataflow) -> dict[str, float]:
    """Words of the buffer the kernel allocates for each intermediate: its slice within one
    step of its common ancestor (the generated C resets and reuses it at every step)."""
    return _buffers(_rows(w, arch, flow))


def _buffers(r: Rows) -> dict[str, float]:
    """`buffer_words` from the model's arrays of the tree."""
    out: dict[str, float] = {}
    for t, lca in r.c.lca.items():
        for o, op_path in r.c.paths.items():
            if lca in op_path.chain and t in op_path.op.tensors:
                step = min(op_path.chain.index(lca) + 1, len(op_path.chain) - 1)
                out[t] = max(out.get(t, 0.0), _words(r, o, t, step))
    return out


def working_set_words(w: Workload, arch: Architecture, flow: Dataflow) -> dict[str, float]:
    """Words a cache must hold to keep each tile's data while the tile runs and for the
    next instance of it, by node path: per tensor, the slice the tile touches over its
    loops, except an intermediate whose common ancestor is the tile or below it, whose one
    buffer (`buffer_words`) is all that is resident."""
    r = _rows(w, arch, flow)
    lcas = r.c.lca
    buffers = _buffers(r)
    out: dict[str, float] = {}
    for path, node in walk(flow.root):
        if isinstance(node, Op):
            continue
        need: dict[str, float] = {}
        for o, op_path in r.c.paths.items():
            if path not in op_path.chain:
                continue
            at = op_path.chain.index(path)
            for t in op_path.op.tensors:
                if t in lcas and (lcas[t] == path or is_below(lcas[t], path)):
                    need[t] = buffers[t]
                else:
                    need[t] = max(need.get(t, 0.0), _words(r, o, t, at))
        out[path] = sum(need.values())
    return out


def cache_tree(w: Workload, arch: Architecture, flow: Dataflow,
               capacities: Mapping[str, float]) -> Dataflow:
    """The tree the caches realise (`capacities`: words per cache level, which may differ
    from the description's, e.g. a simulator's set-rounded sizes)."""
    register = arch.matrix.level
    split = Dataflow(split_loops(flow.root, register), flow.name)
    sizes = working_set_words(w, arch, split)
    levels = [arch.levels[0].name] + [lv.name for lv in arch.levels[1:]
                                      if lv.name != register and lv.name in capacities]

    def place(node: Tile, path: str, floor: int) -> Tile:
        if node.level == register:
            return node
        fits = [i for i in range(max(floor, 1), len(levels))
                if capacities[levels[i]] >= sizes[path]]
        index = max(fits, default=floor)
        kids = tuple(c if isinstance(c, Op) else place(c, child_path(path, k), index)
                     for k, c in enumerate(node.children))
        return replace(node, level=levels[index], children=kids)

    root = split.root
    first = place(root, ROOT, 0)
    top = Tile(arch.levels[0].name, (), (first,), "Seq", "memory")
    return Dataflow(top, f"{flow.name} (cache view)")


def cache_view_words(w: Workload, arch: Architecture, flow: Dataflow, original: Result,
                     inner: str, capacities: Mapping[str, float]) -> float:
    """Words brought into cache level `inner` by the kernel of `flow`, as the cache view
    predicts them (`original`: the model's result for `flow` itself, which says which
    tensors the kernel keeps in memory arrays)."""
    viewed = evaluate(w, arch, cache_tree(w, arch, flow, capacities))
    sizes = {t: w.tensor_words(t) for t in w.tensors}
    words = inbound_words(viewed, inner, sizes)
    memory = original.traffic.get(original.levels[0], {})
    buffers = buffer_words(w, arch, flow)
    passing = crossing(viewed, inner)
    for t in w.producer:
        if t not in passing:  # written below the boundary only: its lines allocated once
            words += sizes[t] if t in memory else buffers.get(t, sizes[t])
    return words
