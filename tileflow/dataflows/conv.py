"""Baselines for chains of two convolutions: Fused-Layer (rows and columns tiled) and ISOS
(rows only); the first conv's tile grows by the second's halo."""

from __future__ import annotations

from collections.abc import Mapping

from tileflow.dataflows.common import (
    Hardware,
    compute_tile,
    core_split,
    halvings,
    largest_fitting,
)
from tileflow.errors import InputError
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, Loop, Tile


def conv_chain_ops(w: Workload) -> tuple[str, str, str, str]:
    """(first, second, p, q) of a chain of two convolutions; InputError for another workload."""
    if len(w.ops) != 2 or any(len(o.output.dims) != 4 for o in w.ops):
        raise InputError(f"workload '{w.name}' is not a chain of two convolutions")
    first, second = w.ops
    _, _, p, q = first.output.dims
    return first.name, second.name, p, q


def _window(w: Workload, consumer: str, dim: str) -> int:
    op = w.op_by_name[consumer]
    for axis in op.inputs[0].axes:
        if dim in axis.dims:
            return sum(c * (w.sizes[d] - 1) for d, c in axis.terms if d != dim)
    return 0


def _fused(w: Workload, arch: Architecture, tp: int, tq: int, name: str) -> Dataflow:
    """Rows p spread over the cores in bands of `tp`, columns q tiled by `tq`; both
    convolutions share the step, the first one's tile grown by the second's window."""
    hw = Hardware.of(arch)
    first, second, p, q = conv_chain_ops(w)
    sizes = w.sizes
    loops, ext = core_split(w, hw, None, p, tp)
    loops += (Loop(q, -(-sizes[q] // tq)),)
    ext[q] = min(tq, sizes[q])
    ext1 = {d: ext[d] for d in w.op_by_name[first].dims}
    ext2 = {d: ext[d] for d in w.op_by_name[second].dims}
    for d in (p, q):
        if ext[d] < sizes[d]:
            ext1[d] = ext[d] + _window(w, second, d)
    shared = {lp.dim for lp in loops if lp.factor > 1}
    body = Tile(hw.buffer, (), (compute_tile(w, hw, first, ext1, shared=shared),
                                compute_tile(w, hw, second, ext2, shared=shared)),
                "Shar", name="fused")
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
