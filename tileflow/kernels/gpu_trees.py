"""Random valid dataflows for a GPU: fused trees of chain workloads (GEMM chain, attention)
whose outer spatial loops spread the shared batch and row dims over the SMs (thread
blocks) and whose per-operator tiles spread output dims over the threads of a block, with
a register tile of constant-trip loops below."""

from __future__ import annotations

import math

import numpy as np

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.arith import divisors
from tileflow.cost import evaluate
from tileflow.dataflows.chain import Roles
from tileflow.kernels.trees import shuffled_loops
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import MATRIX, Workload
from tileflow.tree import Dataflow, Loop, Op, Tile

MAX_THREADS = 1024  # per block
MMA_SHARE = 0.5  # trees whose blocks' shares fit TF32 WMMA where the sizes allow
MMA_MAX_ROWS = 64  # rows per block in those trees (their intermediates fit shared memory)


def _pick(rng: np.random.Generator, n: int, cap: int) -> int:
    """A random divisor of n no larger than cap."""
    return int(rng.choice([d for d in divisors(n) if d <= cap]))


def _pick_wide(rng: np.random.Generator, n: int, cap: int) -> int:
    """A random divisor of n no larger than cap and at least an eighth of the largest such:
    thread loops that keep a block's threads busy."""
    fits = [d for d in divisors(n) if d <= cap]
    return int(rng.choice([d for d in fits if 8 * d >= fits[-1]]))


def random_gpu_tree(w: Workload, arch: Architecture, rng: np.random.Generator,
                    name: str = "random") -> Dataflow:
    """One random fused tree. The root (in memory) steps over the shared batch and row
    dims, its spatial loops on the SMs; every operator gets a tile at the SM level whose
    temporal loops walk its remaining extent and whose spatial loops spread output dims
    over threads (at most MAX_THREADS), above a register tile that may hold a short
    constant-trip loop of the operator's reduction or an output dim. With probability
    MMA_SHARE the root walks the batch dim one index per block and leaves each block a
    multiple of 16 rows (up to MMA_MAX_ROWS, where the size has one), so that contractions
    whose other sizes fit run on tensor cores (`cuda_mma`)."""
    r = Roles.of(w)
    levels = [lv.name for lv in arch.levels]
    core = next(i for i, lv in enumerate(arch.levels) if lv.fanout > 1)
    sms = arch.levels[core].fanout
    reg = arch.matrix.level
    threads_cap = min(MAX_THREADS, arch.level(reg).fanout)
    outer: list[Loop] = []
    spatial: list[Loop] = []
    blocks = 1
    left = dict(w.sizes)
    # half the trees leave each block a share that tensor cores fit (cuda_mma): one batch
    # index and a multiple of 16 rows
    mma = rng.random() < MMA_SHARE
    for d in [x for x in (r.batch, r.rows) if x]:
        cap = max(sms // blocks, 1)
        rows = [e for e in divisors(left[d]) if e % 16 == 0 and e <= MMA_MAX_ROWS]
        if mma and d == r.batch:  # every block one batch index at a time
            s = _pick(rng, left[d], cap)
            t = left[d] // s
        elif mma and d == r.rows and rows:
            e = int(rng.choice(rows))
            s = _pick(rng, left[d] // e, cap)
            t = left[d] // e // s
        else:
            s = _pick(rng, left[d], cap)
            t = _pick(rng, left[d] // s, left[d] // s)
        blocks *= s
        left[d] //= s * t
        if t > 1:
            outer.append(Loop(d, t))
        if s > 1:
            spatial.append(Loop(d, s, True))
    stages = []
    for op in w.ops:
        matrix = op.unit == MATRIX
        # a matrix operator's threads form the unit's rows (x) and columns (y); a vector
        # operator's, its lanes
        caps = ([("x", arch.matrix.rows), ("y", arch.matrix.cols)] if matrix
                else [("", arch.vector.parallelism)] * 2)
        out_dims = [d for d in op.output.dims if left[d] > 1]
        thread_loops: list[Loop] = []
        taken: dict[str, int] = {}
        budget = threads_cap if matrix else min(threads_cap, arch.vector.parallelism)
        for (axis, cap), d in zip(caps, rng.permutation(out_dims) if out_dims else [],
                                  strict=False):
            d = str(d)
            f = _pick_wide(rng, left[d], min(cap, budget))
            if f > 1:
                thread_loops.append(Loop(d, f, True, axis))
                taken[d] = f
                budget //= f
        rest = {d: left[d] // taken.get(d, 1) for d in op.dims}
        node: Tile | Op = Op(op.name)
        if matrix:
            reg_loops: tuple[Loop, ...] = ()
            candidates = [d for d in op.dims if rest[d] > 1]
            if candidates and rng.random() < 0.6:
                d = str(rng.choice(candidates))
                f = _pick(rng, rest[d], 4)
                if f > 1:
                    reg_loops = (Loop(d, f),)
                    rest[d] //= f
            node = Tile(reg, reg_loops, (node,), name=f"{op.name}-reg")
        stages.append(Tile(levels[core], shuffled_loops(rng, rest) + tuple(thread_loops), (node,),
                           name=f"{op.name}-smem"))
    root = Tile(levels[0], tuple(outer) + tuple(spatial), tuple(stages), "Seq", name="rows")
    return Dataflow(root, name)


def blocks_of(flow: Dataflow) -> int:
    """Thread blocks of a tree from `random_gpu_tree`: its root's spatial loops."""
    return math.prod(lp.factor for lp in flow.root.loops if lp.spatial)


def random_valid_gpu_trees(w: Workload, arch: Architecture, count: int, seed: int = 0,
                           tries: int = 50, min_blocks: int = 1) -> list[Dataflow]:
    """`count` distinct random GPU trees the model finds valid, on at least `min_blocks`
    thread blocks (fewer trees if count x tries attempts do not find them)."""
    rng = np.random.default_rng(seed)
    found: dict[str, Dataflow] = {}
    for _ in range(count * tries):
        if len(found) >= count:
            break
        flow = random_gpu_tree(w, arch, rng, f"random-{len(found)}")
        key = repr(flow.root)
        if key in found or blocks_of(flow) < min_blocks:
            continue
        try:
            if evaluate(w, arch, flow).valid:
                found[key] = flow
        except InvalidDataflow:
            continue
    return list(found.values())
