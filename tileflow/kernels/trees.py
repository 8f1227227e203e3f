"""Random valid dataflows for a CPU: fused trees of chain workloads (GEMM chain, attention,
MLP) with tiles at the cache levels, and the one-core view of a multi-core description."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.arith import divisors
from tileflow.cost import evaluate
from tileflow.dataflows.chain import Roles
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import MATRIX, Workload
from tileflow.tree import Dataflow, Loop, Op, Tile


def single_core(arch: Architecture) -> Architecture:
    """The description seen by one core: every fan-out 1 (a single-threaded kernel)."""
    levels = tuple(replace(lv, fanout=1, instances=1) for lv in arch.levels)
    return replace(arch, levels=levels, name=f"{arch.name}-1core")


def threaded(arch: Architecture, threads: int) -> Architecture:
    """The description a `threads`-thread kernel is modelled on: the one-core view with
    `threads` instances of the level below the outermost one, where the kernel's parallel
    loop (`parallel_rows`, in the outermost tile) spreads its steps; one thread: the
    one-core view."""
    one = single_core(arch)
    if threads <= 1 or len(one.levels) < 2:
        return one
    levels = [one.levels[0], replace(one.levels[1], fanout=threads, instances=threads),
              *(replace(lv, instances=threads) for lv in one.levels[2:])]
    return replace(one, levels=tuple(levels), name=f"{arch.name}-{threads}threads")


def lanes_on_row(w: Workload, arch: Architecture, flow: Dataflow) -> Dataflow:
    """`flow` with the unnamed spatial loops right above matrix operators on the columns
    (y) axis where the matrix unit is one row of lanes (1 x lanes, a CPU's SIMD unit): an
    unnamed spatial loop would take the rows (x) axis, of size 1. Other arrays, vector
    operators' loops and loops already named are left as they are."""
    unit = arch.matrix
    if not (unit.rows == 1 and unit.cols > 1):
        return flow

    def go(node: Tile) -> Tile:
        kids = tuple(c if isinstance(c, Op) else go(c) for c in node.children)
        loops = node.loops
        if node.level == unit.level and all(
                isinstance(c, Op) and w.op_by_name[c.op].unit == MATRIX for c in kids):
            loops = tuple(replace(lp, axis="y") if lp.spatial and not lp.axis else lp
                          for lp in loops)
        return replace(node, loops=loops, children=kids)

    return replace(flow, root=go(flow.root))


def _split(rng: np.random.Generator, n: int, parts: int) -> list[int]:
    """A random ordered factorisation of n into `parts` exact factors (outermost first)."""
    out = []
    for _ in range(parts - 1):
        f = int(rng.choice(divisors(n)))
        out.append(f)
        n //= f
    return [*out, n]


def shuffled_loops(rng: np.random.Generator, factors: dict[str, int]) -> tuple[Loop, ...]:
    dims = [d for d, f in factors.items() if f > 1]
    order = rng.permutation(len(dims)) if dims else []
    return tuple(Loop(dims[i], factors[dims[i]]) for i in order)


def random_chain_tree(w: Workload, arch: Architecture, rng: np.random.Generator,
                      name: str = "random") -> Dataflow:
    """One random fused tree: DRAM loops over the shared batch and row dims, a fused tile at
    a random cache level holding every intermediate, below it one chain of tiles per operator
    (one per remaining cache level, random exact factors and loop orders) and a register tile
    whose spatial loop spreads the lanes over an output dim."""
    r = Roles.of(w)
    names = [lv.name for lv in arch.levels]
    reg = arch.matrix.level
    caches = names[1 : names.index(reg)]  # on-chip levels between memory and registers
    fused_at = int(rng.integers(0, max(len(caches) - 1, 1)))  # above the first level
    shared = [d for d in (r.batch, r.rows) if d]
    outer: dict[str, int] = {}
    fused: dict[str, int] = {}
    for d in shared:
        a, b, c = _split(rng, w.sizes[d], 3)
        outer[d], fused[d] = a, b
    left = {d: w.sizes[d] // (outer.get(d, 1) * fused.get(d, 1)) for d in w.sizes}
    below = caches[fused_at + 1 :]
    stages = []
    for op in w.ops:
        lanes = arch.matrix.parallelism if op.unit == MATRIX else arch.vector.parallelism
        # lanes over the dim that is contiguous in memory: the output's last axis for a
        # contraction, the first input's last axis for a vector operator (a reduction's too)
        lane_dim = op.output.dims[-1] if op.unit == MATRIX else op.inputs[0].dims[-1]
        lane = int(rng.choice([f for f in divisors(left[lane_dim]) if f <= lanes]))
        per_level: list[dict[str, int]] = [{} for _ in below] or [{}]
        for d in op.dims:
            extent = left[d] // (lane if d == lane_dim else 1)
            for i, f in enumerate(_split(rng, extent, len(per_level))):
                per_level[i][d] = f
        node: Tile | Op = Op(op.name)
        node = Tile(reg, (Loop(lane_dim, lane, True),) if lane > 1 else (), (node,),
                    name=f"{op.name}-reg")
        levels = below or [caches[fused_at]]
        for level, factors in reversed(list(zip(levels, per_level, strict=True))):
            node = Tile(level, shuffled_loops(rng, factors), (node,), name=f"{op.name}-{level}")
        stages.append(node)
    body = Tile(caches[fused_at], shuffled_loops(rng, fused), tuple(stages), "Seq", name="fused")
    root = Tile(names[0], shuffled_loops(rng, outer), (body,), name="rows")
    return Dataflow(root, name)


def random_valid_trees(w: Workload, arch: Architecture, count: int, seed: int = 0,
                       tries: int = 50) -> list[Dataflow]:
    """`count` distinct random trees that the model finds valid on `arch` (fewer if
    `tries` x count attempts do not find them)."""
    rng = np.random.default_rng(seed)
    found: dict[str, Dataflow] = {}
    for _ in range(count * tries):
        if len(found) >= count:
            break
        flow = lanes_on_row(w, arch, random_chain_tree(w, arch, rng, f"random-{len(found)}"))
        key = repr(flow.root)
        if key in found:
            continue
        try:
            if evaluate(w, arch, flow).valid:
                found[key] = flow
        except InvalidDataflow:
            continue
    return list(found.values())


def parallel_rows(w: Workload, flow: Dataflow, threads: int) -> Dataflow:
    """`flow` with its outermost loop over a dim that no operator reduces (in the root tile,
    else in the tile below it while it is the only child) split into `threads` spatial steps
    (the kernel's OpenMP parallel loop over the cores) and the rest; unchanged for one
    thread. Raises InputError where no such loop divides."""
    from tileflow.errors import InputError

    if threads <= 1:
        return flow
    reduced = {d for op in w.ops for d in op.reduction_dims}

    def split(node: Tile) -> Tile | None:
        for i, lp in enumerate(node.loops):
            if not lp.spatial and lp.dim not in reduced and lp.factor % threads == 0:
                parts = (Loop(lp.dim, threads, True), Loop(lp.dim, lp.factor // threads))
                return replace(node, loops=node.loops[:i] + parts + node.loops[i + 1:])
        if len(node.children) == 1 and isinstance(node.children[0], Tile):
            child = split(node.children[0])
            return None if child is None else replace(node, children=(child,))
        return None

    root = split(flow.root)
    if root is None:
        raise InputError(f"dataflow '{flow.name}': no outermost loop over an unreduced dim "
                         f"divides into {threads} threads")
    return replace(flow, root=root)
