"""The FlashAttention-like baseline for workloads with state carried across a reduction loop
(`carried:` in the workload, e.g. `attention-online`): row blocks spread over the cores, and
inside each block one loop over the carried dim that runs every operator using it, so the
score and probability tiles never leave the on-chip buffer; what comes after the loop (the
normalisation) runs once per row block."""

from __future__ import annotations

from collections.abc import Mapping

from tileflow.dataflows.common import Hardware, ceil_div, compute_tile, core_split, fits, halvings
from tileflow.errors import InputError
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import MATRIX, Workload
from tileflow.tree import Dataflow, Loop, Tile


def carried_dim(w: Workload) -> str:
    """The dim the workload's carried operator declares (one carried dim only)."""
    dims = {op.carried for op in w.ops if op.carried}
    if len(dims) != 1:
        raise InputError(f"workload '{w.name}' declares no carried operator (or several "
                         "carried dims); the flash dataflow needs exactly one")
    return dims.pop()


def _rows(w: Workload, carried: str) -> tuple[str | None, str]:
    """(batch, rows) of the first matrix operator's output: the dims the row blocks tile."""
    first = next(op for op in w.ops if op.unit == MATRIX)
    dims = [d for d in first.output.dims if d != carried]
    return (dims[0] if len(dims) > 1 else None), dims[-1]


def flash(w: Workload, arch: Architecture, tiles: Mapping[str, int] | None = None) -> Dataflow:
    """Row blocks over the cores (batch first, as the other fused baselines); per block a
    loop over the carried dim runs the operators that use it in order, then the rest. The
    row block defaults to twice the PE rows and the carried tile to the largest halving of
    the dim that fits; `tiles` fixes either, and `compare` fits both."""
    hw = Hardware.of(arch)
    d = carried_dim(w)
    batch, rows = _rows(w, d)
    tiles = dict(tiles or {})
    per_core = ceil_div(w.sizes[rows], 1 if batch and w.sizes[batch] >= hw.cores else hw.cores)
    tm = tiles.get(rows, min(2 * hw.rows, per_core))

    def make(tl: int) -> Dataflow:
        loops, ext = core_split(w, hw, batch, rows, tm)
        shared = tuple(x for x in (batch, rows) if x)
        inside = {**ext, d: tl}
        stream = tuple(compute_tile(w, hw, op.name, inside, shared=(*shared, d))
                       for op in w.ops if d in op.dims)
        after = tuple(compute_tile(w, hw, op.name, ext, shared=shared)
                      for op in w.ops if d not in op.dims)
        sweep = Tile(hw.outer, (Loop(d, ceil_div(w.sizes[d], tl)),), stream, "Shar",
                     name="sweep")
        return Dataflow(Tile(hw.outer, loops, (sweep, *after), "Seq", name="flash"), "flash")

    if d in tiles:
        return make(tiles[d])
    flow = None
    for tl in halvings(w.sizes[d]):
        flow = make(tl)
        if fits(w, arch, flow):
            return flow
    assert flow is not None
    return flow
