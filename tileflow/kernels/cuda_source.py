"""CUDA source of a dataflow, from the same analysis as the C kernels.

Spatial loops in a tile that holds every operator of its kernel and sits above the cores
(the SMs) spread over thread blocks; spatial loops below the cores in a tile holding one
operator spread over the threads of a block (its register tiles); every other loop is a
loop in each thread, in the tree's order. Intermediates homed on chip live in shared memory
per block (global scratch per block when they do not fit); siblings are separated by
barriers. A root without loops whose children each spread over blocks becomes one kernel
per child, launched in order (the launch boundary is the only grid-wide barrier)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tileflow.kernels.c_source import INIT, CGenerator, CLoop, CScope, pitched
from tileflow.kernels.nest import Nest
from tileflow.tree import Op, Tile, ops_under

SHARED_LIMIT_BYTES = 48 * 1024  # static shared memory per block
MAX_THREADS = 1024
CUDA_PRELUDE = """#ifndef TF_CUDA_PRELUDE
#define TF_CUDA_PRELUDE
#include <math.h>
#define TF_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TF_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TF_CEILDIV(a, b) (((a) + (b) - 1) / (b))
__device__ __forceinline__ float tf_gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
#endif
"""


@dataclass(frozen=True)
class Launch:
    """One `__global__` kernel of the source and how to launch it."""

    name: str
    blocks: int
    threads: int
    arguments: tuple[str, ...]  # device arrays (tensors, then scratch buffers)


@dataclass(frozen=True)
class CudaSource:
    text: str
    launches: tuple[Launch, ...]  # in order: init kernels, then the stages
    tensors: tuple[str, ...]  # arrays the host allocates (logical shapes, pitched layouts)
    layouts: dict[str, tuple[int, ...]] = field(default_factory=dict)
    scratch_words: dict[str, int] = field(default_factory=dict)  # global scratch per buffer


def generate_cuda(nest: Nest, prefix: str = "tf") -> CudaSource:
    return _CudaGenerator(nest, prefix).build()


class _CudaGenerator(CGenerator):
    def __init__(self, nest: Nest, prefix: str):
        super().__init__(nest, threads=True)
        self.prefix = prefix
        self.grid: list[tuple[str, int]] = []  # (variable, factor) of block-mapped loops
        self.block: list[tuple[str, int]] = []
        self.thread_product = 1
        self.shared: dict[str, bool] = {}
        self.scratch: dict[str, int] = {}

    def build(self) -> CudaSource:
        w = self.w
        tensors = tuple(t for t in w.tensors if t not in self.local)
        root = self.nest.plan.flow.root
        stages: list[tuple[str, Tile]] = [("root", root)]
        if not root.loops and len(root.children) > 1 and all(
                isinstance(c, Tile) for c in root.children):
            stages = [(f"root.{i}", c) for i, c in enumerate(root.children)]
        launches: list[Launch] = []
        texts = [CUDA_PRELUDE]
        for op in w.ops:  # outputs that accumulate start from the update's identity
            t = op.output.tensor
            if op.accumulates and t not in self.buffers:
                n = math.prod(pitched(w.shapes[t]))
                name = f"{self.prefix}_init_{t}"
                texts.append(f"extern \"C\" __global__ void {name}(float *{t}) {{\n"
                             f"    for (long z = blockIdx.x * (long)blockDim.x + threadIdx.x; "
                             f"z < {n}L; z += (long)gridDim.x * blockDim.x) "
                             f"{t}[z] = {INIT[op.update]};\n}}\n")
                launches.append(Launch(name, min(-(-n // 256), 1024), 256, (t,)))
        for k, (path, stage) in enumerate(stages):
            self.lines, self.grid, self.thread_product = [], [], 1
            name = f"{self.prefix}_stage{k}"
            scope = CScope(bases={d: "0" for d in w.sizes})
            for t in w.tensors:
                if t in self.buffers or any(o.output.tensor == t and o.accumulates
                                            for o in w.ops):
                    scope.init_depth[t] = 0
            self.tile(path, stage, scope, 1, covers=set(ops_under(stage)))
            body = self.lines
            params = ", ".join(f"float *__restrict__ {t}" for t in tensors)
            scratch = [t for t in self.local if t in self.scratch and t in self._stage_locals]
            params += "".join(f", float *{t}_scratch" for t in scratch)
            head = [f"extern \"C\" __global__ void {name}({params}) {{",
                    "    const int tid = threadIdx.x;", "    (void)tid;"]
            for t in self._stage_locals:
                words = math.prod(pitched(self.buffers[t].extents))
                if t in scratch:
                    head.append(f"    float *{t}_pool = {t}_scratch + (long)blockIdx.x * "
                                f"{words}L;")
                else:
                    head.append(f"    __shared__ float {t}_pool[{words}];")
            texts.append("\n".join(head + body + ["}"]) + "\n")
            blocks = math.prod(f for _, f in self.grid) or 1
            launches.append(Launch(name, blocks, min(max(self.thread_product, 1), MAX_THREADS),
                                   tensors + tuple(f"{t}_scratch" for t in scratch)))
            self._stage_locals = []
        scratch_words = {t: math.prod(pitched(self.buffers[t].extents)) * max(
            (la.blocks for la in launches if f"{t}_scratch" in la.arguments), default=1)
            for t in self.scratch}
        return CudaSource("\n".join(texts), tuple(launches), tensors,
                          {t: pitched(w.shapes[t]) for t in tensors}, scratch_words)

    _stage_locals: list[str] = []

    # -- loops mapped onto blocks, threads or kept in each thread ----------------------------

    def tile(self, path: str, tile: Tile, scope: CScope, depth: int,
             covers: set[str] | None = None) -> None:
        scope = scope.copy()
        opened = 0
        level = self.nest.plan.arch.level_index[tile.level]
        below = set(ops_under(tile))
        reductions = self.nest.reduction_dims_below(tile)
        for j, lp in enumerate(tile.loops):
            if lp.factor == 1:
                continue
            var, lo, hi, new, stride, base = self.bounds(path, j, lp, below, scope, depth)
            independent = lp.spatial and lp.dim not in reductions
            on_grid = (independent and level < self.nest.core_level and covers is not None
                       and below >= covers and not scope.parallel)
            on_threads = independent and level >= self.nest.core_level and len(below) == 1
            if on_grid:
                div = math.prod(f for _, f in self.grid)
                self.grid.append((var, lp.factor))
                self.emit(f"const int {var} = (blockIdx.x / {div}) % {lp.factor};  "
                          f"/* {lp} blocks stride {stride} */", depth)
                self.emit(f"if ({var} >= {lo} && {var} < {hi}) {{", depth)
            elif on_threads:
                guard = ""
                if not scope.threads:  # the first of the chain's thread loops: idle threads
                    total = self._thread_total(tile)
                    self.thread_product = max(self.thread_product, total)
                    guard = f"tid < {total} && "
                div = max(scope.threads, 1)
                scope.threads = div * lp.factor
                self.emit(f"const int {var} = (tid / {div}) % {lp.factor};  "
                          f"/* {lp} threads stride {stride} */", depth)
                self.emit(f"if ({guard}{var} >= {lo} && {var} < {hi}) {{", depth)
            else:
                self.emit(f"for (int {var} = {lo}; {var} < {hi}; ++{var}) {{  "
                          f"/* {lp} stride {stride} */", depth)
            depth += 1
            opened += 1
            self.emit(f"const int {new} = {base} + {var} * {stride};", depth)
            scope.bases[lp.dim] = new
            scope.loops.append(CLoop(var, lp.dim, new))
        if self.grid:
            scope.parallel = True
        for t in self.lca_of.get(path, []):
            self.start_intermediate(t, scope, depth)
        several = len(tile.children) > 1
        for i, child in enumerate(tile.children):
            if isinstance(child, Op):
                self.leaf(self.w.op_by_name[child.op], scope, depth)
            else:
                self.tile(f"{path}.{i}", child, scope, depth, covers)
            if several:
                self.emit("__syncthreads();", depth)
        for _ in range(opened):
            depth -= 1
            self.emit("}", depth)

    def _thread_total(self, tile: Tile) -> int:
        """Threads the loops of a one-operator chain of tiles spread over (from `tile` down)."""
        total, node = 1, tile
        while isinstance(node, Tile):
            level = self.nest.plan.arch.level_index[node.level]
            reductions = self.nest.reduction_dims_below(node)
            total *= math.prod(lp.factor for lp in node.loops if lp.spatial and lp.factor > 1
                               and lp.dim not in reductions and level >= self.nest.core_level)
            node = node.children[0]
        return total

    def leaf_conditions(self, scope: CScope) -> list[str]:
        """Outside the threads' register tiles, one thread of the block computes."""
        return [] if scope.threads else ["tid == 0"]

    def start_intermediate(self, t: str, scope: CScope, depth: int) -> None:
        b = self.buffers[t]
        producer = self.w.op_by_name[self.w.producer[t]]
        origins = []
        for d in b.origin_dims:
            name = self.fresh(f"o{t}_")
            self.emit(f"const int {name} = {scope.bases[d]} + "
                      f"({self.nest.shift(producer.name, d)});", depth)
            origins.append(name)
        scope.origins[t] = origins
        scope.init_depth[t] = len(scope.loops)
        if not b.local:
            if producer.accumulates:
                raise NotImplementedError(
                    f"CUDA: '{t}' accumulates in global memory within one step of its common "
                    "ancestor; home it on chip")
            return
        words = math.prod(pitched(b.extents))
        if t not in self._stage_locals:
            self._stage_locals = [*self._stage_locals, t]
            if words * 4 > SHARED_LIMIT_BYTES or not self.grid:
                self.scratch[t] = words
        self.emit(f"float *{t}_local = {t}_pool;", depth)
        if producer.accumulates:
            self.emit(f"for (long z = tid; z < {words}L; z += blockDim.x) "
                      f"{t}_local[z] = {INIT[producer.update]};", depth)
        self.emit("__syncthreads();", depth)
