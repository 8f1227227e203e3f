"""Tensor-core (TF32 WMMA m16n16k8) code for an operator whose SM-level tile fits it.

The condition (`mma_plan`), checked on the first SM-level tile of one operator's path (the
tile whose loops walk the operator's share of a thread block, where input tiles are staged):

* the operator is a contraction `C[.., m, .., n] += A[.., m, .., k] * B[.., k, .., n]`
  (update `+=`, function `mul`, two inputs; every index a plain dim, no offset, no shift);
* over the tile, exactly three of its dims step more than once: two output dims m and n
  (m: the one A holds, n: the one B holds) and one reduction dim k; every other dim (a
  batch or head dim) is fixed in the tile;
* the tile's extents are multiples of 16 in m and n and of 8 in k, and divide the sizes;
* in each of A, B, C (in global memory, a shared-memory input tile or an intermediate's
  on-chip buffer), one of its two matrix dims is the array's last axis (unit stride), the
  other's stride (the leading dimension) is a multiple of 4 words and every other axis's a
  multiple of 8 words, so that each fragment starts on a 32-byte boundary.

The generated code: the block's full warps (`blockDim.x / 32`) take the tile's 16x16
output blocks round-robin (warp w: blocks w, w + warps, ...); each loads its accumulator
fragment from C, walks k in steps of 8 (A's 16x8 and B's 8x16 fragments loaded, their
elements rounded to TF32, one `mma_sync`), and stores the fragment back. The whole tile's
scalar loops (thread loops and register tile) are replaced."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tileflow.kernels.c_source import CScope, pitched, plain_indices
from tileflow.specs.workload import Access, Operator
from tileflow.tree import Tile, node_depth

M, N, K = 16, 16, 8
WARP = 32


@dataclass(frozen=True)
class MmaPlan:
    """A tile computed on tensor cores: the dims and per-array layouts."""

    op: Operator
    m: str
    n: str
    k: str
    extents: dict[str, int]  # the tile's extent per matrix dim
    a: Access
    b: Access
    layouts: dict[str, tuple[str, int]]  # per array a, b, c: 'row' or 'col', leading stride

    @property
    def fragments(self) -> int:
        """16x16 output blocks of the tile."""
        return self.extents[self.m] // M * (self.extents[self.n] // N)


def mma_instructions(op: Operator, sizes: dict[str, int]) -> int:
    """Warp-level `mma_sync` calls (m16n16k8) that compute the whole operator."""
    return math.prod(sizes[d] for d in op.dims) // (M * N * K)


def _strides(extents) -> list[int]:
    out, rest = [], 1
    for e in reversed(list(extents)):
        out.insert(0, rest)
        rest *= e
    return out


def array_extents(gen, t: str) -> tuple[int, ...]:
    """The extents of the array an operand of `t` is read from or written to here."""
    if t in gen.staged:
        return tuple(gen.staged[t][1])
    b = gen.buffers.get(t)
    if b is not None and b.local:
        return pitched(b.extents)
    return pitched(gen.w.shapes[t])


def _layout(gen, a: Access, rows: str, cols: str) -> tuple[str, int] | None:
    """('row' or 'col', the leading dimension's stride): the memory layout of the rows x cols
    matrix `a` holds, or None where the array does not fit a fragment load (module
    docstring)."""
    dims = [ax.terms[0][0] for ax in a.axes]
    if rows not in dims or cols not in dims:
        return None
    strides = _strides(array_extents(gen, a.tensor))
    last = dims[-1]
    if last not in (rows, cols):
        return None
    lead = strides[dims.index(cols if last == rows else rows)]
    others = [s for d, s in zip(dims, strides, strict=True) if d not in (rows, cols)]
    if lead % 4 or any(s % 8 for s in others):
        return None
    b = gen.buffers.get(a.tensor)
    if a.tensor in gen.scratch and b is not None and math.prod(pitched(b.extents)) % 8:
        return None  # per-block scratch pools must start aligned too
    return ("row" if last == cols else "col"), lead


def mma_plan(gen, path: str, tile: Tile, scope: CScope) -> MmaPlan | None:
    """The tensor-core plan of `tile`, or None where the module docstring's condition fails."""
    nest = gen.nest
    op = gen.block_tile_op(tile, scope)
    if not gen.tensor_cores or op is None or gen.lca_of.get(path):
        return None
    if op.update != "+=" or op.function != "mul" or len(op.inputs) != 2:
        return None
    if not all(plain_indices(a) for a in (*op.inputs, op.output)):
        return None
    if any(nest.shift(op.name, d) or gen.loose(op, d, scope) for d in op.dims):
        return None
    extent_of = nest.extents_from(op.name, node_depth(path))
    stepping = [d for d in op.dims if extent_of.get(d, 1) > 1]
    reductions = [d for d in stepping if d in op.reduction_dims]
    outputs = [d for d in stepping if d not in op.reduction_dims]
    if len(reductions) != 1 or len(outputs) != 2:
        return None
    k = reductions[0]
    a, b = op.inputs
    held = [{ax.terms[0][0] for ax in x.axes} for x in (a, b)]
    m = next((d for d in outputs if d in held[0] and d not in held[1]), None)
    n = next((d for d in outputs if d in held[1] and d not in held[0]), None)
    if m is None or n is None or k not in held[0] or k not in held[1]:
        return None
    extents = {d: extent_of[d] for d in (m, n, k)}
    if (extents[m] % M or extents[n] % N or extents[k] % K
            or any(gen.w.sizes[d] % extents[d] for d in (m, n, k))):
        return None
    layouts = {"a": _layout(gen, a, m, k), "b": _layout(gen, b, k, n),
               "c": _layout(gen, op.output, m, n)}
    if None in layouts.values():
        return None
    return MmaPlan(op, m, n, k, extents, a, b, layouts)


def _pointer(gen, access: Access, scope: CScope, at: dict[str, str]) -> str:
    """The address of the access's element at the tile's base plus `at` (per dim)."""
    g = {}
    for ax in access.axes:
        d = ax.terms[0][0]
        g[d] = f"({scope.bases[d]} + {at[d]})" if d in at else scope.bases[d]
    text, _ = gen.address(access, g, scope)
    return f"&{text}"


def emit_mma(gen, plan: MmaPlan, scope: CScope, depth: int) -> None:
    """The warp-mapped WMMA loops of the module docstring, for one tile."""
    op, m, n, k = plan.op, plan.m, plan.n, plan.k
    e = gen.emit
    since = scope.init_depth.get(op.output.tensor, 0)
    once = [f"{lp.var} == 0" for lp in scope.loops[since:] if lp.dim not in op.dims]
    wm = "nvcuda::wmma"
    f, kk = gen.fresh("frag"), gen.fresh("kk")
    e(f"{{  /* {op.name}: {op} on tensor cores, TF32 m16n16k8: {plan.extents[m]}x"
      f"{plan.extents[n]} outputs ({plan.fragments} 16x16 blocks, warp w takes w, "
      f"w + warps, ...), {plan.extents[k]} reduction steps in 8s */", depth)
    d = depth + 1
    if once:
        e(f"if ({' && '.join(once)}) {{", d)
        d += 1
    e(f"const int warps = blockDim.x / {WARP};", d)
    e(f"for (int {f} = tid / {WARP}; {f} < {plan.fragments} && tid / {WARP} < warps; "
      f"{f} += warps) {{", d)
    d += 1
    per_row = plan.extents[n] // N
    e(f"const int {f}_m = ({f} / {per_row}) * {M}, {f}_n = ({f} % {per_row}) * {N};", d)
    layouts = {key: major for key, (major, _) in plan.layouts.items()}
    strides = {key: lead for key, (_, lead) in plan.layouts.items()}
    e(f"{wm}::fragment<{wm}::accumulator, {M}, {N}, {K}, float> {f}_c;", d)
    e(f"{wm}::fragment<{wm}::matrix_a, {M}, {N}, {K}, {wm}::precision::tf32, "
      f"{wm}::{layouts['a']}_major> {f}_a;", d)
    e(f"{wm}::fragment<{wm}::matrix_b, {M}, {N}, {K}, {wm}::precision::tf32, "
      f"{wm}::{layouts['b']}_major> {f}_b;", d)
    c_ptr = _pointer(gen, op.output, scope, {m: f"{f}_m", n: f"{f}_n"})
    c_layout = f"{wm}::mem_{layouts['c']}_major"
    e(f"{wm}::load_matrix_sync({f}_c, {c_ptr}, {strides['c']}, {c_layout});", d)
    e(f"for (int {kk} = 0; {kk} < {plan.extents[k]}; {kk} += {K}) {{", d)
    d += 1
    a_ptr = _pointer(gen, plan.a, scope, {m: f"{f}_m", k: kk})
    b_ptr = _pointer(gen, plan.b, scope, {k: kk, n: f"{f}_n"})
    e(f"{wm}::load_matrix_sync({f}_a, {a_ptr}, {strides['a']});", d)
    e(f"{wm}::load_matrix_sync({f}_b, {b_ptr}, {strides['b']});", d)
    for x in ("a", "b"):
        e(f"for (int t = 0; t < {f}_{x}.num_elements; ++t) "
          f"{f}_{x}.x[t] = {wm}::__float_to_tf32({f}_{x}.x[t]);", d)
    e(f"{wm}::mma_sync({f}_c, {f}_a, {f}_b, {f}_c);", d)
    d -= 1
    e("}", d)
    e(f"{wm}::store_matrix_sync({c_ptr}, {f}_c, {strides['c']}, {c_layout});", d)
    d -= 1
    e("}", d)
    if once:
        d -= 1
        e("}", d)
    e("}", depth)
