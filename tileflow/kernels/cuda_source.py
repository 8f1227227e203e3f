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
import re
from dataclasses import dataclass, field

from tileflow.kernels.c_source import (
    INIT,
    CGenerator,
    CLoop,
    CScope,
    flat_index,
    pitched,
    plain_indices,
)
from tileflow.kernels.cuda_mma import WARP, emit_mma, mma_plan
from tileflow.kernels.nest import Nest
from tileflow.specs.workload import Operator
from tileflow.tree import ROOT, Op, Tile, child_path, node_depth, ops_under

SHARED_LIMIT_BYTES = 48 * 1024  # static shared memory per block
MAX_THREADS = 1024
CUDA_PRELUDE = """#ifndef TF_CUDA_PRELUDE
#define TF_CUDA_PRELUDE
#include <math.h>
#ifdef __CUDACC__
#include <mma.h>
#endif
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
    mma_ops: tuple[str, ...] = ()  # operators computed on tensor cores (TF32 WMMA)

    @property
    def precision(self) -> str:
        """'tf32' where some operator runs on tensor cores (inputs rounded to TF32), else
        'fp32'."""
        return "tf32" if self.mma_ops else "fp32"


def generate_cuda(nest: Nest, prefix: str = "tf", stage_inputs: bool = True,
                  tensor_cores: bool = True) -> CudaSource:
    """`stage_inputs`: load input tiles into shared memory where the tree keeps them at the
    SM level (False: every input read from global memory, as kernels generated before).
    `tensor_cores`: contractions whose SM-level tile fits TF32 WMMA run on tensor cores
    (`cuda_mma`; False: scalar code everywhere, as kernels generated before)."""
    return CudaGenerator(nest, prefix, stage_inputs, tensor_cores).build()


class CudaGenerator(CGenerator):
    def __init__(self, nest: Nest, prefix: str, stage_inputs: bool = True,
                 tensor_cores: bool = True):
        super().__init__(nest, threads=True)
        self.prefix = prefix
        self.stage_inputs = stage_inputs
        self.tensor_cores = tensor_cores
        self.mma_ops: list[str] = []  # operators computed on tensor cores, in order
        self.grid: list[tuple[str, int]] = []  # (variable, factor) of block-mapped loops
        self.block: list[tuple[str, int]] = []
        self.thread_product = 1
        self.shared: dict[str, bool] = {}
        self.scratch: dict[str, int] = {}
        # tensor -> (origins, extents, array) of its tile in shared memory
        self.staged: dict[str, tuple[list[str], tuple[int, ...], str]] = {}
        self._stage_tiles: list[tuple[str, int]] = []  # (__shared__ array, words) per stage
        self.staged_count = 0  # input tiles staged in shared memory, all stages
        # per operator: the tensors staged for it and the words its tiles load, all blocks
        self.staged_for: dict[str, set[str]] = {}
        self.staged_words: dict[str, float] = {}
        self._parent_level = -1

    def build(self) -> CudaSource:
        w = self.w
        tensors = tuple(t for t in w.tensors if t not in self.local)
        root = self.nest.root
        stages: list[tuple[str, Tile]] = [(ROOT, root)]
        if not root.loops and len(root.children) > 1 and all(
                isinstance(c, Tile) for c in root.children):
            stages = [(f"root.{i}", c) for i, c in enumerate(root.children)]
        launches: list[Launch] = []
        texts = [CUDA_PRELUDE]
        for op in w.ops:  # tensors in memory that accumulate start from the identity
            t = op.output.tensor
            if op.accumulates and (t not in self.buffers or not self.buffers[t].local):
                n = math.prod(pitched(w.shapes[t]))
                name = f"{self.prefix}_init_{t}"
                texts.append(f"extern \"C\" __global__ void {name}(float *{t}) {{\n"
                             f"    for (long z = blockIdx.x * (long)blockDim.x + threadIdx.x; "
                             f"z < {n}L; z += (long)gridDim.x * blockDim.x) "
                             f"{t}[z] = {INIT[op.update]};\n}}\n")
                launches.append(Launch(name, min(-(-n // 256), 1024), 256, (t,)))
        for k, (path, stage) in enumerate(stages):
            self.lines, self.grid, self.thread_product = [], [], 1
            self._parent_level = -1
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
            threads = min(max(self.thread_product, 1), MAX_THREADS)
            # the block size bounds the registers per thread: a launch never asks for more
            # registers than an SM has
            head = [f"extern \"C\" __global__ void __launch_bounds__({threads}) "
                    f"{name}({params}) {{",
                    "    const int tid = threadIdx.x;", "    (void)tid;"]
            for t in self._stage_locals:
                words = math.prod(pitched(self.buffers[t].extents))
                if t in scratch:
                    head.append(f"    float *{t}_pool = {t}_scratch + (long)blockIdx.x * "
                                f"{words}L;")
                else:
                    head.append(f"    __shared__ __align__(32) float {t}_pool[{words}];")
            for array, words in self._stage_tiles:
                head.append(f"    __shared__ __align__(32) float {array}[{words}];  "
                            "/* an input's tile */")
            texts.append("\n".join(head + body + ["}"]) + "\n")
            blocks = math.prod(f for _, f in self.grid) or 1
            launches.append(Launch(name, blocks, threads,
                                   tensors + tuple(f"{t}_scratch" for t in scratch)))
            self._stage_locals, self._stage_tiles = [], []
        scratch_words = {t: math.prod(pitched(self.buffers[t].extents)) * max(
            (la.blocks for la in launches if f"{t}_scratch" in la.arguments), default=1)
            for t in self.scratch}
        return CudaSource("\n".join(texts), tuple(launches), tensors,
                          {t: pitched(w.shapes[t]) for t in tensors}, scratch_words,
                          tuple(self.mma_ops))

    _stage_locals: list[str] = []

    # -- loops mapped onto blocks, threads or kept in each thread ----------------------------

    def tile(self, path: str, tile: Tile, scope: CScope, depth: int,
             covers: set[str] | None = None) -> None:
        scope = scope.copy()
        opened = 0
        level = self.nest.arch.level_index[tile.level]
        below = set(ops_under(tile))
        reductions = self.nest.reduction_dims_below(tile)
        staged = self._stage_inputs(path, tile, scope, depth)
        mma = mma_plan(self, path, tile, scope)
        if mma is not None:  # the tile's loops become warp-level matrix operations
            self.mma_ops.append(mma.op.name)
            self.thread_product = max(self.thread_product, self._thread_total(tile), WARP)
            emit_mma(self, mma, scope, depth)
            for t in staged:
                del self.staged[t]
            self.emit("__syncthreads();", depth)
            return
        accumulator = self._register_tile(tile)
        if accumulator:
            op = self.w.op_by_name[tile.children[0].op]
            name = self.fresh("acc")
            self.emit(f"float {name} = {INIT[op.update]};  /* {op.name}: register "
                      "accumulator */", depth)
            self._acc = {"name": name, "names": set(), "out": None, "conditions": []}
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
                if accumulator:  # a constant-trip loop of the register tile
                    self.emit("#pragma unroll", depth)
                    self._acc["names"] |= {var, new}
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
        parent_level, self._parent_level = self._parent_level, level
        for i, child in enumerate(tile.children):
            if isinstance(child, Op):
                self.leaf(self.w.op_by_name[child.op], scope, depth)
            else:
                self.tile(child_path(path, i), child, scope, depth, covers)
            if several:
                self.emit("__syncthreads();", depth)
        self._parent_level = parent_level
        for _ in range(opened):
            depth -= 1
            self.emit("}", depth)
        if accumulator:
            acc, self._acc = self._acc, None
            op = self.w.op_by_name[tile.children[0].op]
            update = (f"{acc['out']} += {acc['name']};" if op.update == "+=" else
                      f"{acc['out']} = fmaxf({acc['out']}, {acc['name']});")
            if acc["conditions"]:
                update = f"if ({' && '.join(acc['conditions'])}) {update}"
            self.emit(update, depth)
        if staged:  # every thread is done with the tiles before they are loaded again
            for t in staged:
                del self.staged[t]
            self.emit("__syncthreads();", depth)

    _acc: dict | None = None

    def _shared_bytes(self) -> int:
        """Static shared memory the stage declares so far (intermediates and input tiles)."""
        return 4 * (sum(math.prod(pitched(self.buffers[u].extents))
                        for u in self._stage_locals if u not in self.scratch)
                    + sum(words for _, words in self._stage_tiles))

    def block_tile_op(self, tile: Tile, scope: CScope) -> Operator | None:
        """The operator of `tile` where it is the first SM-level tile on that operator's path
        (one operator below, no thread loop open yet, not inside a register tile): the tile
        whose input tiles may be staged in shared memory and that may run on tensor cores."""
        level = self.nest.arch.level_index[tile.level]
        below = list(ops_under(tile))
        if (level != self.nest.core_level or len(below) != 1 or scope.threads
                or self._parent_level >= self.nest.core_level or self._acc is not None):
            return None
        return self.w.op_by_name[below[0]]

    def _stage_inputs(self, path: str, tile: Tile, scope: CScope, depth: int) -> list[str]:
        """Where the tree keeps an operator's tile at the SM level (the first SM-level tile
        on its path, one operator below, no thread loop open yet): each input in global
        memory whose indices are plain dims is loaded by the block's threads together into
        a `__shared__` array of the tile's extent, then a barrier; the operator reads it
        from there. Inputs whose tile would overflow the static shared memory stay global.
        Returns the tensors staged."""
        op = self.block_tile_op(tile, scope)
        if not self.stage_inputs or not self.grid or op is None:
            return []
        position = node_depth(path)
        extent_of = self.nest.extents_from(op.name, position)
        staged = []
        for a in op.inputs:
            t = a.tensor
            if (t in self.staged or t in staged or (t in self.buffers and self.buffers[t].local)
                    or not plain_indices(a)):
                continue
            dims = [ax.terms[0][0] for ax in a.axes]
            extents = tuple(min(extent_of.get(d, 1), self.w.sizes[d]) for d in dims)
            words = math.prod(extents)
            if self._shared_bytes() + 4 * words > SHARED_LIMIT_BYTES:
                continue
            array = self.fresh(f"{t}_tile")
            self._stage_tiles.append((array, words))
            self.staged_count += 1
            origins = []
            for d in dims:
                name = self.fresh(f"o{t}_")
                shift = self.nest.shift(op.name, d)
                self.emit(f"const int {name} = {scope.bases[d]}"
                          + (f" + ({shift})" if shift else "") + ";", depth)
                origins.append(name)
            z = self.fresh("z")
            self.emit(f"for (int {z} = tid; {z} < {words}; {z} += blockDim.x) {{  "
                      f"/* {t}: the tile's {'x'.join(map(str, extents))} words, together */",
                      depth)
            index, inside, rest = [], [], 1
            for axis in reversed(range(len(dims))):
                g = self.fresh("g")
                self.emit(f"    const int {g} = {origins[axis]} + ({z} / {rest}) % "
                          f"{extents[axis]};", depth)
                rest *= extents[axis]
                index.insert(0, g)
                inside.insert(0, f"{g} >= 0 && {g} < {self.w.shapes[t][axis]}")
            self.emit(f"    {array}[{z}] = ({' && '.join(inside)}) ? "
                      f"{t}[{flat_index(index, pitched(self.w.shapes[t]))}] : 0.0f;", depth)
            self.emit("}", depth)
            self.staged[t] = (origins, extents, array)
            staged.append(t)
            loads = math.prod(self.w.sizes[d] / min(extent_of.get(d, 1), self.w.sizes[d])
                              for d in op.dims)  # the tile's steps over the whole operator
            self.staged_for.setdefault(op.name, set()).add(t)
            self.staged_words[op.name] = self.staged_words.get(op.name, 0.0) + words * loads
        if staged:
            self.emit("__syncthreads();", depth)
        return staged

    def address(self, a, g, scope):
        """An input staged in shared memory is read from its tile there."""
        if a.tensor not in self.staged:
            return super().address(a, g, scope)
        text, guards = super().address(a, g, scope)
        origins, extents, array = self.staged[a.tensor]
        values = [g[ax.terms[0][0]] for ax in a.axes]
        local = [f"({v} - {o})" for v, o in zip(values, origins, strict=True)]
        return f"{array}[{flat_index(local, extents)}]", guards

    def _register_tile(self, tile: Tile) -> bool:
        """A tile holding one accumulating operator whose loops (of more than one step) are
        temporal loops over dims it reduces: the output element stays in a register
        across them, written once after."""
        if len(tile.children) != 1 or not isinstance(tile.children[0], Op):
            return False
        op = self.w.op_by_name[tile.children[0].op]
        loops = [lp for lp in tile.loops if lp.factor > 1]
        return (op.update in ("+=", "max=") and bool(loops)
                and all(not lp.spatial and lp.dim in op.reduction_dims for lp in loops))

    def statement(self, op, out: str, rhs: str, conditions: list[str], depth: int) -> None:
        """In a register tile: update the accumulator; the output's own conditions (those
        not on the tile's loops) guard the one write after the loops."""
        if self._acc is None:
            return super().statement(op, out, rhs, conditions, depth)
        acc = self._acc
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, acc["names"])) + r")\b")
        acc["out"] = out
        acc["conditions"] = [c for c in conditions if not pattern.search(c)]
        stmt = (f"{acc['name']} += {rhs};" if op.update == "+=" else
                f"{acc['name']} = fmaxf({acc['name']}, {rhs});")
        if conditions:
            stmt = f"if ({' && '.join(conditions)}) {stmt}"
        self.emit(f"{stmt}  /* {op.name}: {op} */", depth)

    def _thread_total(self, tile: Tile) -> int:
        """Threads the loops of a one-operator chain of tiles spread over (from `tile` down)."""
        total, node = 1, tile
        while isinstance(node, Tile):
            level = self.nest.arch.level_index[node.level]
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
            shared = self._shared_bytes() - 4 * words  # without this one
            if shared + words * 4 > SHARED_LIMIT_BYTES or not self.grid:
                self.scratch[t] = words  # the block's static shared memory is full
        self.emit(f"float *{t}_local = {t}_pool;", depth)
        if producer.accumulates:
            self.emit(f"for (long z = tid; z < {words}L; z += blockDim.x) "
                      f"{t}_local[z] = {INIT[producer.update]};", depth)
        self.emit("__syncthreads();", depth)
