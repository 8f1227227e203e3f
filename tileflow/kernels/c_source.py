"""C source of a dataflow: the tree's loop nest, tile sizes, order and fusion, verbatim.

Every tile's loops become `for` loops (outermost first) stepping over the tile's children
with the loop's stride; clipped last steps get bounds, not guards. An intermediate whose
home is on chip becomes a local buffer of its tile's size, allocated once and reset at each
step of the common ancestor of its producer and consumers; one homed in memory is an array.
Spatial loops above the cores (over dims no operator below reduces) become OpenMP parallel
loops; those below the cores are marked as SIMD loops (`omp simd`); spatial reductions stay
sequential loops. The compiler may vectorise other loops too."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tileflow.kernels.nest import Nest
from tileflow.specs.expressions import Access
from tileflow.specs.workload import Operator
from tileflow.tree import Op, Tile

ENTRY = "tf_kernel"
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

    def copy(self) -> CScope:
        return CScope(dict(self.bases), list(self.loops), self.parallel, dict(self.origins),
                      dict(self.init_depth), self.threads)


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


def generate_c(nest: Nest, threads: bool = True) -> KernelSource:
    """The C kernel `void tf_kernel(float **args, int nthreads)` for an analysed dataflow."""
    return CGenerator(nest, threads).run()


class CGenerator:
    def __init__(self, nest: Nest, threads: bool):
        self.nest, self.w, self.threads = nest, nest.workload, threads
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
        self.tile("root", self.nest.plan.flow.root, scope, 1)
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
        opened = 0
        level = self.nest.plan.arch.level_index[tile.level]
        below_reductions = self.nest.reduction_dims_below(tile)
        ops_below = _ops(tile)
        for j, lp in enumerate(tile.loops):
            if lp.factor == 1:
                continue
            var, lo, hi, new, stride, base = self.bounds(path, j, lp, ops_below, scope, depth)
            parallel = (self.threads and lp.spatial and level < self.nest.core_level
                        and lp.dim not in below_reductions and not scope.parallel)
            lanes = (lp.spatial and not parallel and level >= self.nest.core_level
                     and lp.dim not in below_reductions)
            if parallel:
                self.emit("#pragma omp parallel for schedule(static)", depth)
                scope.parallel = True
            elif lanes:  # spatial loops below the cores are the SIMD lanes
                self.emit("#pragma omp simd", depth)
            self.emit(f"for (int {var} = {lo}; {var} < {hi}; ++{var}) {{  "
                      f"/* {lp}{' parallel' if parallel else ''} stride {stride} */", depth)
            depth += 1
            opened += 1
            self.emit(f"const int {new} = {base} + {var} * {stride};", depth)
            scope.bases[lp.dim] = new
            scope.loops.append(CLoop(var, lp.dim, new))
        for t in self.lca_of.get(path, []):
            self.start_intermediate(t, scope, depth)
        for i, child in enumerate(tile.children):
            if isinstance(child, Op):
                self.leaf(self.w.op_by_name[child.op], scope, depth)
            else:
                self.tile(f"{path}.{i}", child, scope, depth)
        for _ in range(opened):
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
        self.emit(f"const int {hi} = TF_MIN({lp.factor}, "
                  f"TF_CEILDIV({self.w.sizes[lp.dim] - low} - {base}, {stride}));", depth)
        return var, lo, hi, new, stride, base

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
        path = self.nest.plan.paths[producer.name]
        lca_depth = b.lca.count(".")
        for axis, (d, o) in enumerate(zip(b.origin_dims, origins, strict=True)):
            v = self.fresh("z")
            ext = path.extent_below(lca_depth, d)
            self.emit(f"for (int {v} = TF_MAX(0, {o}); {v} < TF_MIN({shape[axis]}, {o} + {ext});"
                      f" ++{v})", depth)
            depth += 1
            index.append(v)
        self.emit(f"{t}[{_flat(index, pitched(shape))}] = {value};", depth)
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
            if shift or self._loose(op, d, scope):
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
        rhs = _expression(op, operands)
        if op.update == "+=":
            stmt = f"{out} += {rhs};"
        elif op.update == "max=":
            stmt = f"{out} = fmaxf({out}, {rhs});"
        else:
            stmt = f"{out} = {rhs};"
        if conditions:
            stmt = f"if ({' && '.join(conditions)}) {stmt}"
        self.emit(f"{stmt}  /* {op.name}: {op} */", depth)

    def leaf_conditions(self, scope: CScope) -> list[str]:
        return []

    def _loose(self, op: Operator, d: str, scope: CScope) -> bool:
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
            return f"{a.tensor}_local[{_flat(local, pitched(b.extents))}]", guards
        return f"{a.tensor}[{_flat(values, pitched(shape))}]", guards


def _ops(tile: Tile) -> list[str]:
    from tileflow.tree import ops_under

    return list(ops_under(tile))


def _flat(index: list[str], extents) -> str:
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
