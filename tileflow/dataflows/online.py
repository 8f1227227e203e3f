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
from tileflow.tree import Dataflow, Loop, Tile, ops_under


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


def _heads(w: Workload, carried: str) -> tuple[str, ...]:
    """Dims of the first matrix operator's output between the batch and the rows (query
    heads): looped one per step inside each tile of the sweep, so heads that share K and V
    (grouped-query attention) reuse their tiles."""
    first = next(op for op in w.ops if op.unit == MATRIX)
    dims = [d for d in first.output.dims if d != carried]
    return tuple(dims[1:-1])


def flash(w: Workload, arch: Architecture, tiles: Mapping[str, int] | None = None) -> Dataflow:
    """Row blocks over the cores (batch first, as the other fused baselines); per block a
    DRAM-level sweep over the carried dim runs the operators that use it one after another
    (Shar: the row block's inputs stay while the others stream), then the rest. The row
    block defaults to twice the PE rows and the carried tile to the largest halving of the
    dim that fits; `tiles` fixes either, and `compare` fits both."""
    return _flash(w, arch, tiles, "Shar", False, "flash")


def flash_pipe(w: Workload, arch: Architecture,
               tiles: Mapping[str, int] | None = None) -> Dataflow:
    """Flash with the sweep's stages pipelined over its steps (the softmax of one l tile
    beside the products of the next) and the PE array split between the two matrix stages,
    as TileFlow-Pipe does for the five-operator form; the vector operators between the
    products form one stage (they share the vector unit)."""
    return _flash(w, arch, tiles, "Pipe", True, "flash-pipe")


def _stages(w: Workload, hw: Hardware, tiles: list[Tile]) -> list[Tile]:
    """Pipeline stages: each matrix operator alone, each run of vector operators between them
    one stage (they share the vector unit, so they run one after another within it)."""
    out: list[Tile] = []
    run: list[Tile] = []
    for t in tiles:
        op = next(o for o in ops_under(t))
        if w.op_by_name[op].unit == MATRIX:
            out += _group(hw, run) + [t]
            run = []
        else:
            run.append(t)
    return out + _group(hw, run)


def _group(hw: Hardware, run: list[Tile]) -> list[Tile]:
    if len(run) <= 1:
        return run
    return [Tile(hw.buffer, (), tuple(run), "Shar", name="softmax")]


def _flash(w: Workload, arch: Architecture, tiles: Mapping[str, int] | None, primitive: str,
           split_array: bool, name: str) -> Dataflow:
    hw = Hardware.of(arch)
    d = carried_dim(w)
    batch, rows = _rows(w, d)
    tiles = dict(tiles or {})
    per_core = ceil_div(w.sizes[rows], 1 if batch and w.sizes[batch] >= hw.cores else hw.cores)
    tm = tiles.get(rows, min(2 * hw.rows, per_core))
    half = (hw.rows, max(hw.cols // 2, 1)) if split_array else None

    heads = _heads(w, d)

    def make(tl: int) -> Dataflow:
        loops, ext = core_split(w, hw, batch, rows, tm)
        shared = tuple(x for x in (batch, *heads, rows) if x)
        # one head per step inside each tile of the sweep: the heads that share K and V
        # (grouped-query attention) use each K and V tile while it is on chip
        inside = {**ext, d: tl, **{h: 1 for h in heads}}
        stream = [compute_tile(w, hw, op.name, inside, half if op.unit == MATRIX else None,
                               shared=(*shared, d))
                  for op in w.ops if d in op.dims]
        if primitive == "Pipe":
            stream = _stages(w, hw, stream)
        after = tuple(compute_tile(w, hw, op.name, ext, shared=shared)
                      for op in w.ops if d not in op.dims)
        head_loops = tuple(Loop(h, w.sizes[h]) for h in heads)
        sweep = Tile(hw.outer, (Loop(d, ceil_div(w.sizes[d], tl)), *head_loops), tuple(stream),
                     primitive, name="sweep")
        return Dataflow(Tile(hw.outer, loops, (sweep, *after), "Seq", name=name), name)

    if d in tiles:
        return make(tiles[d])
    flow = None
    for tl in halvings(w.sizes[d]):
        flow = make(tl)
        if fits(w, arch, flow):
            return flow
    assert flow is not None
    return flow
