"""Baselines for chains of two convolutions (an activation between them allowed): Fused-Layer
(rows and columns tiled) and ISOS (rows only); each operator's tile grows by the halo of the
operators after it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tileflow.dataflows.common import (
    Hardware,
    compute_tile,
    core_split,
    halvings,
    largest_fitting,
)
from tileflow.errors import InputError
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import MATRIX, Workload
from tileflow.tree import Dataflow, Loop, Tile


@dataclass(frozen=True)
class ConvRoles:
    """A chain of windowed (convolution) operators: matrix operators, one feeding the next,
    with element-wise vector operators (an activation) between them; `p` and `q` are the
    output rows and columns the windows slide over."""

    ops: tuple[str, ...]  # every operator, in chain order
    p: str
    q: str

    @classmethod
    def of(cls, w: Workload) -> ConvRoles:
        ops = w.ops
        matrix = [o for o in ops if o.unit == MATRIX]
        chained = all(ops[i].output.tensor in {t.tensor for t in ops[i + 1].inputs}
                      for i in range(len(ops) - 1))
        if len(matrix) != 2 or ops[0].unit != MATRIX or ops[-1].unit != MATRIX \
                or not chained:
            raise InputError(f"workload '{w.name}' is not a chain of two convolutions")
        windowed = [d for d in ops[0].output.dims if d in ops[-1].output.dims
                    and any(d in a.dims and len(a.terms) > 1
                            for o in matrix for t in o.inputs for a in t.axes)]
        if len(windowed) != 2:
            raise InputError(f"workload '{w.name}' is not a chain of two convolutions: its "
                             "matrix operators slide no window over two output dims")
        return cls(tuple(o.name for o in ops), *windowed)


def conv_chain_ops(w: Workload) -> tuple[str, str, str, str]:
    """(first, last, p, q) of a chain of two convolutions (`ConvRoles`); InputError for
    another workload."""
    r = ConvRoles.of(w)
    return r.ops[0], r.ops[-1], r.p, r.q


def _window(w: Workload, consumer: str, dim: str) -> int:
    """How many more rows (or columns) of its chained input `consumer` reads along `dim`
    than it writes: the halo the operator before it must add to its tile."""
    op = w.op_by_name[consumer]
    for access in op.inputs:
        if access.tensor not in w.intermediates:
            continue
        for axis in access.axes:
            if dim in axis.dims:
                return sum(c * (w.sizes[d] - 1) for d, c in axis.terms if d != dim)
    return 0


def _fused(w: Workload, arch: Architecture, tp: int, tq: int, name: str) -> Dataflow:
    """Rows p spread over the cores in bands of `tp`, columns q tiled by `tq`; both
    convolutions share the step, the first one's tile grown by the second's window."""
    hw = Hardware.of(arch)
    r = ConvRoles.of(w)
    p, q = r.p, r.q
    sizes = w.sizes
    loops, ext = core_split(w, hw, None, p, tp)
    loops += (Loop(q, -(-sizes[q] // tq)),)
    ext[q] = min(tq, sizes[q])
    shared = {lp.dim for lp in loops if lp.factor > 1}
    tiles = []
    for i, op in enumerate(r.ops):  # each tile grown by the windows of the operators after it
        ext_op = {d: ext[d] for d in w.op_by_name[op].dims}
        for d in (p, q):
            if d in ext_op and ext[d] < sizes[d]:
                ext_op[d] = ext[d] + sum(_window(w, later, d) for later in r.ops[i + 1:])
        tiles.append(compute_tile(w, hw, op, ext_op, shared=shared))
    body = Tile(hw.buffer, (), tuple(tiles), "Shar", name="fused")
    return Dataflow(Tile(hw.outer, tuple(loops), (body,), name=name), name)


def fused_layer(w: Workload, arch: Architecture,
                tiles: Mapping[str, int] | None = None) -> Dataflow:
    """Both convolutions fused, tiled on output rows and columns (largest square that fits)."""
    _, _, p, q = conv_chain_ops(w)
    tiles = tiles or {}
    if p in tiles or q in tiles:
        return _fused(w, arch, tiles.get(p, w.sizes[p]), tiles.get(q, w.sizes[q]), "fused-layer")
    return largest_fitting(halvings(w.sizes[p]),
                           lambda t: _fused(w, arch, t, min(t, w.sizes[q]), "fused-layer"),
                           w, arch)


def isos(w: Workload, arch: Architecture, tiles: Mapping[str, int] | None = None) -> Dataflow:
    """Both convolutions fused, tiled on output rows only."""
    _, _, p, q = conv_chain_ops(w)
    if tiles and p in tiles:
        return _fused(w, arch, tiles[p], w.sizes[q], "isos")
    return largest_fitting(halvings(w.sizes[p]),
                           lambda t: _fused(w, arch, t, w.sizes[q], "isos"), w, arch)
