"""C source of a dataflow: the tree's loop nest, tile sizes, order and fusion, verbatim.

Every tile's loops become `for` loops (outermost first) stepping over the tile's children
with the loop's stride; clipped last steps get bounds, not guards. An intermediate whose
home is on chip becomes a local buffer of its tile's size, allocated once and reset at each
step of the common ancestor of its producer and consumers; one homed in memory is an array.
Spatial loops above the cores (over dims no operator below reduces) become OpenMP parallel
loops; those below the cores are marked as SIMD loops (`omp simd`); spatial reductions stay
sequential loops. The compiler may vectorise other loops too.

Two styles. `plain` is the nest as written, bounds computed at run time (the committed CPU
campaign was measured with it). `registers` (the default) follows the register tile: every
loop whose range is exact becomes a compile-time constant trip; the spatial loop of an
operator's own tile at the compute level is its SIMD lanes (`omp simd`); and where the
loops innermost around an accumulating operator are its reductions and constant-trip loops
over its output, those output elements are held in a local accumulator array (registers)
for the whole reduction, loaded before and stored after it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tileflow.kernels.nest import Nest
from tileflow.specs.expressions import Access
from tileflow.specs.workload import Operator
from tileflow.tree import ROOT, Op, Tile, child_path, node_depth

ENTRY = "tf_kernel"
STYLES = ("plain", "registers")
ACCUMULATOR_WORDS = 512  # largest accumulator array held for a register tile
UNROLL_WORDS = 128  # largest accumulator whose loops are unrolled whole (in registers)
INIT = {"+=": "0.0f", "max=": "-INFINITY"}
PRELUDE = """#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_thread_num(void) { return 0; }
static void omp_set_num_threads(int n) { (void)n; }
#endif
#define TF_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TF_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TF_CEILDIV(a, b) (((a) + (b) - 1) / (b))
/* exp(x) in single precision (Cephes' polynomial, about 1 ulp), inline and branch-free so
   that a loop calling it is vectorised; inputs below -87 give about 1e-38 */
static inline float tf_expf(float x) {
    x = TF_MIN(TF_MAX(x, -87.0f), 88.0f);
    const float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { float f; int i; } scale;
    scale.i = ((int)n + 127) << 23;
    return p * scale.f;
}
static inline float tf_gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
"""


@dataclass
class CLoop:
    var: str  # loop counter
    dim: str
    base: str  # name of the dim's index after this loop


@dataclass
class CScope:
    """What is open at a point of the nest: loops, current base index per dim."""

    bases: dict[str, str] = field(default_factory=dict)
    loops: list[CLoop] = field(default_factory=list)
    parallel: bool = False
    origins: dict[str, list[str]] = field(default_factory=dict)  # local tensor -> names
    init_depth: dict[str, int] = field(default_factory=dict)  # tensor -> len(loops) at init
    threads: int = 0  # GPU: product of the thread-mapped loops open here (0: none)
    # registers style: per dim, the largest value its base index takes (a static bound)
    max_base: dict[str, int] = field(default_factory=dict)
    accumulator: _Accumulator | None = None  # the register tile open here
    acc_vars: dict[tuple[str, int], str] = field(default_factory=dict)  # its loops' counters

    def copy(self) -> CScope:
        return CScope(dict(self.bases), list(self.loops), self.parallel, dict(self.origins),
                      dict(self.init_depth), self.threads, dict(self.max_base),
                      self.accumulator, dict(self.acc_vars))


@dataclass(frozen=True)
class _Accumulator:
    """An operator's output elements held in a local array across its reduction loops."""

    name: str  # the C array
    op: str
    start: tuple[str, int]  # (tile path, loop index) of the outermost loop it spans
    loops: tuple[tuple[str, int, int, str, int], ...]  # (path, j, factor, dim, stride) kept
    dims: tuple[str, ...]  # the output's axes: the array is a dense tile of them, row-major
    inner_all: bool  # every kept loop lies inside the innermost reduction loop

    @property
    def words(self) -> int:
        return math.prod(f for _, _, f, _, _ in self.loops)

    def index(self, counters: list[str]) -> str:
        """The element of the loops' counters: per output axis, its loops' counters combined
        (outer first), the axes row-major, so that the array keeps the output's layout."""
        text = ""
        for d in self.dims:
            for (_, _, f, dim, _), v in zip(self.loops, counters, strict=True):
                if dim == d:
                    text = v if not text else f"({text}) * {f} + {v}"
        return text or "0"


def pitched(shape) -> tuple[int, ...]:
    """The layout of an array: rows whose length is a multiple of 64 words get one line (16
    words) of padding, so that walking a column does not map every row to the same few cache
    sets (the model counts words, as if caches were fully associative)."""
    shape = tuple(int(e) for e in shape)
    if not shape:
        return shape
    last = shape[-1]
    return (*shape[:-1], last + 16 if last % 64 == 0 else last)


def _fill(array: str, shape, value: str) -> str:
    """Set every element of an array to `value`, its rows' padding left alone (a cache
    would otherwise bring in lines the kernel never uses)."""
    shape = tuple(int(e) for e in shape)
    n, last, pitch = math.prod(shape), (shape[-1] if shape else 1), pitched(shape)[-1:] or (1,)
    if pitch[0] == last:
        return f"for (long z = 0; z < {n}L; ++z) {array}[z] = {value};"
    return (f"for (long r = 0; r < {n // last}L; ++r) for (long z = 0; z < {last}L; ++z) "
            f"{array}[r * {pitch[0]}L + z] = {value};")


@dataclass(frozen=True)
class KernelSource:
    """Generated C: the source text, the entry point and the order of its array arguments."""

    text: str
    arguments: tuple[str, ...]  # tensors passed in, in order
    local_words: dict[str, int]  # local buffers: words each (per thread where private)
    layouts: dict[str, tuple[int, ...]] = field(default_factory=dict)  # argument -> pitched


def generate_c(nest: Nest, threads: bool = True, style: str = "registers") -> KernelSource:
    """The C kernel `void tf_kernel(float **args, int nthreads)` for an analysed dataflow;
    `style`: one of STYLES."""
    if style not in STYLES:
        raise ValueError(f"unknown kernel style '{style}' (one of {', '.join(STYLES)})")
    return CGenerator(nest, threads, registers=style == "registers").run()


def plain_indices(access: Access) -> bool:
    """Every index of `access` is one dim, with coefficient 1 and no offset (a plain tile
    of the tensor: what a shared-memory tile or a matrix fragment can load)."""
    return all(ax.is_plain and len(ax.terms) == 1 and ax.terms[0][1] == 1 and not ax.offset
               for ax in access.axes)


class CGenerator:
    def __init__(self, nest: Nest, threads: bool, registers: bool = False):
        self.nest, self.w, self.threads = nest, nest.workload, threads
        self.registers = registers
        self.acc_bases: dict[str, dict[str, str]] = {}  # accumulator -> bases at its start
        arch = nest.arch
        self.simd_words = max(arch.vector.parallelism, 1)  # the host's SIMD width (words)
        self.lines: list[str] = []
        self.counter = 0
        self.buffers = nest.buffers
        self.local = {t: b for t, b in self.buffers.items() if b.local}
        self.private: dict[str, bool] = {}
        self.lca_of: dict[str, list[str]] = {}
        for t, b in self.buffers.items():
            self.lca_of.setdefault(b.lca, []).append(t)

    def emit(self, text: str, depth: int) -> None:
        self.lines.append("    " * depth + text)

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def run(self) -> KernelSource:
        w = self.w
        args = tuple(t for t in w.tensors if t not in self.local)
        body_start = len(self.lines)
        scope = CScope(bases={d: "0" for d in w.sizes})
        for op in w.ops:  # final outputs that accumulate start from the update's identity
            t = op.output.tensor
            if op.accumulates and t not in self.buffers:
                self.emit(_fill(t, w.shapes[t], INIT[op.update]), 1)
                scope.init_depth[t] = 0
        self.tile(ROOT, self.nest.root, scope, 1)
        body = self.lines[body_start:]
        head = [f"void {ENTRY}(float **args, int nthreads) {{",
                "    omp_set_num_threads(nthreads > 0 ? nthreads : 1);"]
        for i, t in enumerate(args):
            head.append(f"    float *restrict {t} = args[{i}];")
        local_words = {}
        for t, b in self.local.items():
            copies = "(long)nthreads" if self.private.get(t) else "1L"
            words = math.prod(pitched(b.extents))
            local_words[t] = words
            head.append(f"    float *{t}_pool = (float *)aligned_alloc(64, "
                        f"sizeof(float) * (({words}L * {copies} + 15) / 16 * 16));")
        tail = [f"    free({t}_pool);" for t in self.local] + ["}"]
        text = PRELUDE + "\n".join(head + body + tail) + "\n"
        return KernelSource(text, args, local_words,
                            {t: pitched(w.shapes[t]) for t in args})

    # -- tiles and loops -------------------------------------------------------------------

    def tile(self, path: str, tile: Tile, scope: CScope, depth: int) -> None:
        scope = scope.copy()
        closers: list[_Accumulator | None] = []
        level = self.nest.arch.level_index[tile.level]
        below_reductions = self.nest.reduction_dims_below(tile)
        ops_below = _ops(tile)
        plan = (self.register_tile(path, tile, scope)
                if self.registers and scope.accumulator is None else None)
        for j, lp in enumerate(tile.loops):
            if lp.factor == 1:
                continue
            started = None
            if plan is not None and plan.start == (path, j):
                self.open_accumulator(plan, scope, depth)
                depth += 1
                scope.accumulator = started = plan
            var, lo, hi, new, stride, base = self.bounds(path, j, lp, ops_below, scope, depth)
            parallel = (self.threads and lp.spatial and level < self.nest.core_level
                        and lp.dim not in below_reductions and not scope.parallel)
            if self.registers:  # an operator's own lanes are SIMD lanes, not threads
                lanes = lp.spatial and self.own_lanes(tile, j)
                parallel = parallel and not lanes
            else:
                lanes = (lp.spatial and not parallel and level >= self.nest.core_level
                         and lp.dim not in below_reductions)
            if parallel:
                self.emit("#pragma omp parallel for schedule(static)", depth)
                scope.parallel = True
            elif lanes and (not self.registers or lp.factor >= self.simd_words // 2):
                self.emit("#pragma omp simd", depth)  # the lanes: one vector or more
            elif self.unrolled(scope, path, j):
                self.emit(f"#pragma GCC unroll {lp.factor}", depth)
            self.emit(f"for (int {var} = {lo}; {var} < {hi}; ++{var}) {{  "
                      f"/* {lp}{' parallel' if parallel else ''} stride {stride} */", depth)
            depth += 1
            self.emit(f"const int {new} = {base} + {var} * {stride};", depth)
            if self.registers:
                scope.max_base[lp.dim] = self.static_trip(path, j, lp, ops_below,
                                                          scope.max_base)[1]
            scope.bases[lp.dim] = new
            scope.loops.append(CLoop(var, lp.dim, new))
            if scope.accumulator is not None:
                scope.acc_vars[(path, j)] = var
            closers.append(started)
        for t in self.lca_of.get(path, []):
            self.start_intermediate(t, scope, depth)
        for i, child in enumerate(tile.children):
            if isinstance(child, Op):
                self.leaf(self.w.op_by_name[child.op], scope, depth)
            else:
                self.tile(child_path(path, i), child, scope, depth)
        for closer in reversed(closers):
            depth -= 1
            self.emit("}", depth)
            if closer is not None:
                self.move_accumulator(closer, scope, depth, store=True)
                depth -= 1
                self.emit("}", depth)

    def bounds(self, path: str, j: int, lp, ops_below, scope: CScope, depth: int):
        """Names and bounds of one loop: the counter runs over [lo, hi), the steps that some
        operator below needs (clipped at the dim's size, shifted starts included); emits
        `hi`. Returns (counter, lo, hi, index name, stride, base index)."""
        stride = self.nest.strides[(path, j)]
        shifts = {self.nest.shift(o, lp.dim) for o in ops_below
                  if lp.dim in self.w.op_by_name[o].dims}
        low, high = min(shifts), max(shifts)
        base = scope.bases[lp.dim]
        var, hi, new = self.fresh("i"), self.fresh("hi"), self.fresh(f"{lp.dim}_")
        lo = f"TF_MAX(0, TF_CEILDIV({-high} - {base}, {stride}))" if high < 0 else "0"
        if self.registers and self.static_trip(path, j, lp, ops_below, scope.max_base)[0]:
            return var, lo, str(lp.factor), new, stride, base
        self.emit(f"const int {hi} = TF_MIN({lp.factor}, "
                  f"TF_CEILDIV({self.w.sizes[lp.dim] - low} - {base}, {stride}));", depth)
        return var, lo, hi, new, stride, base

    def unrolled(self, scope: CScope, path: str, j: int) -> bool:
        """Whether a loop of the open accumulator is unrolled whole: one over its output
        inside the accumulator's innermost reduction loop, of at most UNROLL_WORDS elements
        in all, so that the compiler keeps each element in a register."""
        acc = scope.accumulator
        if acc is None or not self.registers:
            return False
        keys = [(p, i) for p, i, _, _, _ in acc.loops]
        return (path, j) in keys and acc.words <= UNROLL_WORDS and acc.inner_all

    def static_trip(self, path: str, j: int, lp, ops_below, max_base: dict[str, int]
                    ) -> tuple[bool, int]:
        """Whether a loop runs exactly `factor` steps at every step of the loops around it
        (a compile-time trip count), and the largest index of its dim inside it."""
        stride = self.nest.strides[(path, j)]
        shifts = {self.nest.shift(o, lp.dim) for o in ops_below
                  if lp.dim in self.w.op_by_name[o].dims}
        low, high = min(shifts), max(shifts)
        room = self.w.sizes[lp.dim] - low - 1  # the largest index the loop may reach
        reach = max_base.get(lp.dim, 0) + (lp.factor - 1) * stride
        return high >= 0 and reach <= room, min(reach, room)

    def own_lanes(self, tile: Tile, j: int) -> bool:
        """Whether loop j of `tile` is the SIMD lane loop of one operator: the innermost loop
        (of factor > 1) above it, over the last axis of its output (which it does not
        reduce), so that every lane updates its own, consecutive, output elements."""
        if any(lp.factor > 1 for lp in tile.loops[j + 1:]):
            return False
        node: Tile | Op = tile
        while isinstance(node, Tile):
            if len(node.children) != 1:
                return False
            node = node.children[0]
            if isinstance(node, Tile) and any(lp.factor > 1 for lp in node.loops):
                return False
        op = self.w.op_by_name[node.op]
        dim = tile.loops[j].dim
        last = op.output.axes[-1] if op.output.axes else None
        # lanes over the output's contiguous axis: a vector of lanes is a vector of words
        # (lanes over another axis would gather and scatter; the compiler decides those)
        return (last is not None and last.is_plain and last.terms[0][0] == dim
                and dim not in op.reduction_dims)

    def register_tile(self, path: str, tile: Tile, scope: CScope) -> _Accumulator | None:
        """The register tile of the one accumulating operator below `tile`, where there is
        one: the innermost run of its loops (down to the statement) that are reductions or
        constant-trip loops over its output (those, at most ACCUMULATOR_WORDS elements, are
        the accumulator's axes), starting at a reduction loop."""
        ops = _ops(tile)
        if len(ops) != 1:
            return None
        op = self.w.op_by_name[ops[0]]
        if not op.accumulates or any(self.nest.shift(op.name, d) for d in op.dims):
            return None
        if any(not axis.is_plain for a in (*op.inputs, op.output) for axis in a.axes):
            return None
        since = scope.init_depth.get(op.output.tensor, 0)
        if any(lp.dim not in op.dims for lp in scope.loops[since:]):
            return None  # a loop over another dim computes the statement once: keep it plain
        chain = []
        node, p, max_base = tile, path, dict(scope.max_base)
        arch = self.nest.arch
        while True:
            level = arch.level_index[node.level]
            for j, lp in enumerate(node.loops):
                if lp.factor == 1:
                    continue
                if lp.dim not in op.dims or (self.threads and lp.spatial and level < self.nest
                                             .core_level and not self.own_lanes(node, j)):
                    return None
                constant, max_base[lp.dim] = self.static_trip(p, j, lp, [op.name], max_base)
                chain.append((p, j, lp, constant, self.nest.strides[(p, j)]))
            if len(node.children) != 1:
                return None
            child = node.children[0]
            if isinstance(child, Op):
                break
            node, p = child, f"{p}.0"
        taken, words, start = [], 1, -1
        for p, j, lp, constant, stride in reversed(chain):
            if lp.dim in op.output.dims:
                if not constant or words * lp.factor > ACCUMULATOR_WORDS:
                    break
                words *= lp.factor
            else:
                start = len(taken)
            taken.append((p, j, lp, stride))
        if start < 0:
            return None
        taken = taken[: start + 1][::-1]  # from the outermost reduction loop inwards
        kept = tuple((p, j, lp.factor, lp.dim, stride) for p, j, lp, stride in taken
                     if lp.dim in op.output.dims)
        last = max(i for i, (_, _, lp, _) in enumerate(taken) if lp.dim not in op.output.dims)
        inner_all = all(lp.dim not in op.output.dims for _, _, lp, _ in taken[:last])
        return _Accumulator(self.fresh("acc"), op.name, (taken[0][0], taken[0][1]), kept,
                            tuple(op.output.dims), inner_all)

    def open_accumulator(self, acc: _Accumulator, scope: CScope, depth: int) -> None:
        self.emit("{", depth)
        self.emit(f"float {acc.name}[{acc.words}] __attribute__((aligned(64)));", depth + 1)
        self.move_accumulator(acc, scope, depth + 1, store=False)

    def move_accumulator(self, acc: _Accumulator, scope: CScope, depth: int,
                         store: bool) -> None:
        """Copy the accumulator's output elements in (before its loops) or back (after),
        indexed from the bases where its outermost loop starts."""
        op = self.w.op_by_name[acc.op]
        bases = dict(self.acc_bases.setdefault(acc.name, dict(scope.bases)))
        counters, loops = [], []
        for _, _, factor, dim, stride in acc.loops:
            v = self.fresh("a")
            counters.append(v)
            loops.append(f"for (int {v} = 0; {v} < {factor}; ++{v}) ")
            bases[dim] = f"({bases[dim]} + {v} * {stride})"
        out, _ = self.address(op.output, bases, scope)
        cell = f"{acc.name}[{acc.index(counters)}]"
        move = f"{out} = {cell};" if store else f"{cell} = {out};"
        self.emit("".join(loops) + move, depth)

    def start_intermediate(self, t: str, scope: CScope, depth: int) -> None:
        """At each step of the common ancestor: where the tensor's slice starts, and (when
        its producer accumulates) the slice reset to the update's identity."""
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
        if b.local:
            self.private[t] = scope.parallel
            words = math.prod(pitched(b.extents))
            offset = f"(long)omp_get_thread_num() * {words}L" if scope.parallel else "0"
            self.emit(f"float *restrict {t}_local = {t}_pool + {offset};", depth)
        if not producer.accumulates:
            return
        value = INIT[producer.update]
        if b.local:
            self.emit(_fill(f"{t}_local", b.extents, value), depth)
            return
        depth0 = depth
        index = []
        shape = self.w.shapes[t]
        lca_depth = node_depth(b.lca)
        for axis, (d, o) in enumerate(zip(b.origin_dims, origins, strict=True)):
            v = self.fresh("z")
            ext = self.nest.extent_below(producer.name, lca_depth, d)
            self.emit(f"for (int {v} = TF_MAX(0, {o}); {v} < TF_MIN({shape[axis]}, {o} + {ext});"
                      f" ++{v})", depth)
            depth += 1
            index.append(v)
        self.emit(f"{t}[{flat_index(index, pitched(shape))}] = {value};", depth)
        del depth0

    # -- leaves ----------------------------------------------------------------------------

    def leaf(self, op: Operator, scope: CScope, depth: int) -> None:
        w = self.w
        conditions = self.leaf_conditions(scope)
        g = {}
        for d in op.dims:
            shift = self.nest.shift(op.name, d)
            g[d] = f"({scope.bases[d]} + ({shift}))" if shift else scope.bases[d]
            # a shared loop bounded for another operator's start: guard this one's range
            if shift or self.loose(op, d, scope):
                conditions.append(f"{g[d]} >= 0 && {g[d]} < {w.sizes[d]}")
        out_t = op.output.tensor
        since = scope.init_depth.get(out_t, 0)
        if op.accumulates:  # loops over dims the operator does not use: compute it once
            conditions += [f"{lp.var} == 0" for lp in scope.loops[since:]
                           if lp.dim not in op.dims]
        operands = []
        for a in op.inputs:
            text, guards = self.address(a, g, scope)
            operands.append(text)
            conditions += guards
        out, _ = self.address(op.output, g, scope)
        acc = scope.accumulator
        if acc is not None and acc.op == op.name:  # the register tile's accumulator
            counters = [scope.acc_vars[(p, j)] for p, j, _, _, _ in acc.loops]
            out = f"{acc.name}[{acc.index(counters)}]"
        rhs = _expression(op, operands)
        if self.registers:  # functions the compiler can vectorise: inline, branch-free
            rhs = rhs.replace("expf(", "tf_expf(")
        self.statement(op, out, rhs, conditions, depth)

    def statement(self, op: Operator, out: str, rhs: str, conditions: list[str],
                  depth: int) -> None:
        """Emit the operator's update of `out` by `rhs` where every condition holds."""
        if op.update == "+=":
            stmt = f"{out} += {rhs};"
        elif op.update == "max=":
            stmt = (f"{out} = TF_MAX({out}, {rhs});" if self.registers
                    else f"{out} = fmaxf({out}, {rhs});")
        else:
            stmt = f"{out} = {rhs};"
        if conditions:
            stmt = f"if ({' && '.join(conditions)}) {stmt}"
        self.emit(f"{stmt}  /* {op.name}: {op} */", depth)

    def leaf_conditions(self, scope: CScope) -> list[str]:
        return []

    def loose(self, op: Operator, d: str, scope: CScope) -> bool:
        """Whether a loop over `d` was bounded for a different start than this operator's."""
        mine = self.nest.shift(op.name, d)
        return any(self.nest.shift(o.name, d) != mine for o in self.w.ops
                   if d in o.dims) and any(lp.dim == d for lp in scope.loops)

    def address(self, a: Access, g: dict[str, str], scope: CScope) -> tuple[str, list[str]]:
        """The C lvalue of an access, and the guards keeping it inside the tensor (padding)."""
        shape = self.w.shapes[a.tensor]
        values, guards = [], []
        for axis, size in zip(a.axes, shape, strict=True):
            terms = [f"{c} * {g[d]}" if c != 1 else g[d] for d, c in axis.terms]
            text = " + ".join(terms) or "0"
            if axis.offset:
                text = f"({text} + ({axis.offset}))"
            if not axis.is_plain:
                guards.append(f"{text} >= 0 && {text} < {size}")
            values.append(text)
        b = self.buffers.get(a.tensor)
        if b is not None and b.local:
            local = [f"({v} - {o})" for v, o in zip(values, scope.origins[a.tensor], strict=True)]
            return f"{a.tensor}_local[{flat_index(local, pitched(b.extents))}]", guards
        return f"{a.tensor}[{flat_index(values, pitched(shape))}]", guards


def _ops(tile: Tile) -> list[str]:
    from tileflow.tree import ops_under

    return list(ops_under(tile))


def flat_index(index: list[str], extents) -> str:
    """Row-major offset of `index` in an array of `extents` (as C, in long arithmetic)."""
    text = ""
    for i, (v, e) in enumerate(zip(index, extents, strict=True)):
        text = f"(long)({v})" if i == 0 else f"({text}) * {e}L + ({v})"
    return text or "0"


def _expression(op: Operator, operands: list[str]) -> str:
    f = op.function
    symbol = {"mul": "*", "sub": "-", "add": "+", "div": "/"}
    if f in symbol:
        return f"{operands[0]} {symbol[f]} {operands[1]}"
    if f == "exp":
        return f"expf({operands[0]})"
    if f == "gelu":
        return f"tf_gelu({operands[0]})"
    if f == "copy":
        return operands[0]
    raise ValueError(f"operator '{op.name}': no C form for function '{f}'")
