"""Baselines for chains of two matrix operators with optional vector operators between them
(self-attention, GEMM chains, MLP blocks)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tileflow.dataflows.common import (
    Hardware,
    compute_tile,
    core_split,
    fits,
    halvings,
    largest_fitting,
    outer_loops,
)
from tileflow.dataflows.conv import ConvRoles
from tileflow.errors import InputError
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import MATRIX, Workload
from tileflow.tree import Dataflow, Loop, Tile


@dataclass(frozen=True)
class Roles:
    """Which operators and dims play which part in the chain."""

    first: str  # first matrix operator (Q x K)
    middle: tuple[str, ...]  # vector operators between (the softmax)
    last: str  # second matrix operator (x V)
    batch: str | None  # 'b' (or 'g', the KV heads): spread over the cores first
    rows: str  # 'm': rows of both outputs
    inner: str  # 'l': the first's output columns, the second's reduction
    heads: tuple[str, ...] = ()  # other dims of both outputs ('h': query heads of a group)

    @classmethod
    def of(cls, w: Workload) -> Roles:
        ops = w.ops
        if len(ops) < 2 or ops[0].unit != MATRIX or ops[-1].unit != MATRIX or \
                any(o.unit == MATRIX for o in ops[1:-1]):
            raise InputError(f"workload '{w.name}' is not a chain of two matrix operators "
                             "with vector operators between them")
        first, last = ops[0], ops[-1]
        shared = [d for d in first.output.dims if d in last.output.dims]
        if not shared or not last.reduction_dims:
            raise InputError(f"workload '{w.name}' is not a chain the named dataflows tile: "
                             f"'{last.name}' must reduce over a dimension and share a row "
                             f"dimension with '{first.name}'")
        batch = shared[0] if len(shared) > 1 else None
        rows = shared[-1]
        inner = last.reduction_dims[0]
        return cls(first.name, tuple(o.name for o in ops[1:-1]), last.name, batch, rows, inner,
                   tuple(shared[1:-1]))

    def reused_across(self, w: Workload) -> dict[str, tuple[str, ...]]:
        """Head dim -> the inputs of the two matrix operators it does not index (grouped-
        query attention: the query heads `h` of a group share K and V)."""
        ins = [t for o in (self.first, self.last) for t in w.op_by_name[o].inputs
               if t.tensor not in w.intermediates]
        return {h: tuple(t.tensor for t in ins if h not in t.dims) for h in self.heads}

    @property
    def fused_group(self) -> tuple[str, ...]:
        """What FLAT and Uni-pipe fuse: Q x K with the softmax (the whole chain if there is
        no vector operator between the matrix operators)."""
        return (self.first, *self.middle) if self.middle else (self.first, self.last)


def _shared(r: Roles) -> tuple[str, ...]:
    """Dims that the fused dataflows tile in the loops above all stages."""
    return tuple(d for d in (r.batch, *r.heads, r.rows) if d)


def _steps(w: Workload, hw: Hardware, r: Roles, row_tile: int | None,
           tiles: Mapping[str, int] | None = None) -> tuple[tuple[Loop, ...], dict[str, int]]:
    """The loops above the fused stages: batch (or rows) over the cores (`core_split`), the
    row blocks, then one head per step inside each row block. Query heads that share K and V
    (grouped-query attention) thus run one after another while a row block's K and V tiles
    stay on chip, and the stages see as many steps as the multi-head form's; the fit may
    take the head loop's factor into the tiles instead (every head of a group in one step)."""
    loops, ext = core_split(w, hw, r.batch, r.rows, row_tile)
    tiles = tiles or {}
    for h in r.heads:  # `tiles[h]` heads per step (one by default)
        per_step = min(tiles.get(h, 1), w.sizes[h])
        loops += (Loop(h, -(-w.sizes[h] // per_step)),)
        ext[h] = per_step
    return loops, ext


def _middle_group(w: Workload, hw: Hardware, r: Roles, ext: Mapping[str, int],
                  primitive: str = "Seq", array: tuple[int, int] | None = None) -> list[Tile]:
    tiles = [compute_tile(w, hw, o, ext, array, shared=_shared(r)) for o in r.middle]
    if len(tiles) <= 1:
        return tiles
    return [Tile(hw.buffer, (), tuple(tiles), primitive, name="softmax")]


def _standalone(w: Workload, hw: Hardware, op: str, row_tile: int | None = None,
                col_tile: int | None = None) -> Tile:
    """One operator on its own (Layerwise): its largest output dim spread over the cores in
    tiles of `row_tile`, its next largest tiled by `col_tile`."""
    opx = w.op_by_name[op]
    batch = _batch(w, op)
    rows, cols = _rows(w, op), _cols(w, op)
    loops, ext = core_split(w, hw, batch, rows, row_tile)
    if cols:
        col_tile = min(col_tile or w.sizes[cols], w.sizes[cols])
        loops += (Loop(cols, -(-w.sizes[cols] // col_tile)),)
        ext[cols] = col_tile
    ext = {d: ext.get(d, w.sizes[d]) for d in opx.dims}
    return Tile(hw.outer, loops, (compute_tile(w, hw, op, ext),), name=f"{op}-layer")


def _batch(w: Workload, op: str) -> str | None:
    """The output dim a standalone operator spreads over the cores first: `b` where it has
    one; otherwise, in a chain of contractions, the chain's batch whatever its name
    (`Roles.batch`: grouped-query attention's KV heads `g`). A convolution's output rows
    are not a batch."""
    dims = w.op_by_name[op].output.dims
    if "b" in dims:
        return "b"
    try:
        ConvRoles.of(w)
        return None
    except InputError:
        pass
    try:
        batch = Roles.of(w).batch
    except InputError:
        return None
    return batch if batch in dims else None


def _rows(w: Workload, op: str) -> str:
    """The output dim a standalone operator is spread over the cores along: the largest one
    other than the batch."""
    dims = [d for d in w.op_by_name[op].output.dims if d != _batch(w, op)]
    return max(dims, key=lambda d: w.sizes[d])


def _cols(w: Workload, op: str) -> str | None:
    """The output dim tiled next when the rows alone do not make the tile fit."""
    dims = [d for d in w.op_by_name[op].output.dims if d not in (_batch(w, op), _rows(w, op))]
    return max(dims, key=lambda d: w.sizes[d]) if dims else None


def layerwise(w: Workload, arch: Architecture, tiles: Mapping[str, int] | None = None) -> Dataflow:
    """No fusion: operators one after another, every intermediate through DRAM; each
    operator's tile is the largest that fits (rows first, then columns)."""
    hw = Hardware.of(arch)
    homes = {t: hw.outer for t in w.intermediates}
    choice = {op.name: (1, 1) for op in w.ops}

    def make() -> Dataflow:
        children = tuple(_standalone(w, hw, op.name, *choice[op.name]) for op in w.ops)
        return Dataflow(Tile(hw.outer, (), children, "Seq", name="layers"), "layerwise", homes)

    tiles = tiles or {}
    for op in w.ops:
        rows, cols = _rows(w, op.name), _cols(w, op.name)
        row_options = [tiles[rows]] if rows in tiles else halvings(w.sizes[rows])
        col_options = [tiles[cols]] if cols in tiles else \
            (halvings(w.sizes[cols]) if cols else [1])
        options = sorted(((r, c) for r in row_options for c in col_options),
                         key=lambda rc: -rc[0] * rc[1])
        for option in options:
            choice[op.name] = option
            if fits(w, arch, make()):
                break
    return make()


def _with_separate_last(w: Workload, arch: Architecture, r: Roles, group: Tile,
                        name: str) -> Dataflow:
    """The fused group, then (for attention) x V on its own with P through DRAM, its rows
    tiled as far as the buffer needs."""
    if r.last in r.fused_group:
        return Dataflow(group, name)
    hw = Hardware.of(arch)
    homes = {t: hw.outer for t in w.intermediates
             if w.producer[t] in r.fused_group and r.last in w.consumers[t]}

    def make(row_tile: int) -> Dataflow:
        last = _standalone(w, hw, r.last, row_tile)
        return Dataflow(Tile(hw.outer, (), (group, last), "Seq", name="stages"), name, homes)

    return largest_fitting(halvings(w.sizes[_rows(w, r.last)]), make, w, arch)


def uni_pipe(w: Workload, arch: Architecture, tiles: Mapping[str, int] | None = None) -> Dataflow:
    """Q x K and softmax pipelined per (batch x head); head and sequence dims not tiled."""
    hw, r = Hardware.of(arch), Roles.of(w)
    ext = dict(w.sizes)
    loops: tuple[Loop, ...] = ()
    for d in (r.batch, *r.heads):
        if d:
            loops += (Loop(d, w.sizes[d]),)
            ext[d] = 1
    stages = [compute_tile(w, hw, r.first, ext, shared=_shared(r))]
    stages += _middle_group(w, hw, r, ext)
    if r.last in r.fused_group:
        stages.append(compute_tile(w, hw, r.last, ext, shared=_shared(r)))
    group = Tile(hw.outer, loops, tuple(stages), "Pipe", name="uni-pipe")
    return _with_separate_last(w, arch, r, group, "uni-pipe")


def _flat(w: Workload, arch: Architecture, row_tile: int | None, name: str) -> Dataflow:
    hw, r = Hardware.of(arch), Roles.of(w)
    loops, ext = _steps(w, hw, r, row_tile)
    tiles = [compute_tile(w, hw, o, ext, shared=_shared(r)) for o in r.fused_group]
    body = Tile(hw.buffer, (), tuple(tiles), "Shar", name="fused")
    group = Tile(hw.outer, loops, (body,), name=name)
    return _with_separate_last(w, arch, r, group, name)


def flat_hgran(w: Workload, arch: Architecture, tiles: Mapping[str, int] | None = None) -> Dataflow:
    """Q x K and softmax fused, tiled on batch and head dims only (one head per step)."""
    return _flat(w, arch, None, "flat-hgran")


def flat_rgran(w: Workload, arch: Architecture, tiles: Mapping[str, int] | None = None) -> Dataflow:
    """Q x K and softmax fused, tiled on batch, head and rows: by default row blocks of twice
    the PE rows, or the largest that fit below that."""
    hw, r = Hardware.of(arch), Roles.of(w)
    given = (tiles or {}).get(r.rows)
    start = given or min(2 * hw.rows, w.sizes[r.rows])
    return largest_fitting([given] if given else halvings(start),
                           lambda tm: _flat(w, arch, tm, "flat-rgran"), w, arch)


def _branch(w: Workload, hw: Hardware, op: str, ext: Mapping[str, int],
            tiles: Mapping[str, int], shared: tuple[str, ...],
            array: tuple[int, int] | None = None) -> Tile:
    """An operator with DRAM-level loops of its own over `tiles` inside a shared step."""
    opx = w.op_by_name[op]
    own = outer_loops(w, opx.dims, tiles, ext)
    inner = {d: min(tiles.get(d, ext[d]), ext[d]) for d in opx.dims}
    leaf = compute_tile(w, hw, op, inner, array, shared)
    return Tile(hw.outer, own, (leaf,), name=f"{op}-stream") if own else leaf


def _fused_chain(w: Workload, arch: Architecture, tm: int, tl: int, primitive: str,
                 split_array: bool, name: str,
                 tiles: Mapping[str, int] | None = None) -> Dataflow:
    hw, r = Hardware.of(arch), Roles.of(w)
    loops, ext = _steps(w, hw, r, tm, tiles)
    ends, middle = _array_split(hw, r) if split_array else (None, None)
    stages = [_branch(w, hw, r.first, ext, {r.inner: tl}, _shared(r), ends)]
    stages += _middle_group(w, hw, r, ext, "Shar", middle)
    stages.append(_branch(w, hw, r.last, ext, {r.inner: tl}, _shared(r), ends))
    return Dataflow(Tile(hw.outer, loops, tuple(stages), primitive, name=name), name)


def _array_split(hw: Hardware, r: Roles) -> tuple[tuple[int, int], tuple[int, int] | None]:
    """The PE columns of pipelined stages running at once: half each for the two matrix
    stages; where the vector operators run on the array too, a quarter each and the middle
    stage the other half."""
    if hw.vector_on_matrix and r.middle:
        return (hw.rows, max(hw.cols // 4, 1)), (hw.rows, max(hw.cols // 2, 1))
    return (hw.rows, max(hw.cols // 2, 1)), None


def _default_tiles(w: Workload, r: Roles, hw: Hardware,
                   tiles: Mapping[str, int] | None) -> tuple[int, int]:
    """Row block and inner tile of the fully fused dataflows: given ones, else row blocks of
    twice the PE rows and the whole inner dim. `compare` fits them with the tile search."""
    tiles = tiles or {}
    per_core = -(-w.sizes[r.rows] // (1 if r.batch and w.sizes[r.batch] >= hw.cores
                                      else hw.cores))
    return (tiles.get(r.rows, min(2 * hw.rows, per_core)),
            tiles.get(r.inner, w.sizes[r.inner]))


def chimera(w: Workload, arch: Architecture, tiles: Mapping[str, int] | None = None) -> Dataflow:
    """Q x K, softmax and x V fused in chain order, sequential. Its rule for the factors (the
    least DRAM traffic among those that fit) is applied by `tileflow.explore.tilesearch.fit`."""
    hw, r = Hardware.of(arch), Roles.of(w)
    return _fused_chain(w, arch, *_default_tiles(w, r, hw, tiles), "Seq", False, "chimera",
                        tiles)


def tileflow_pipe(w: Workload, arch: Architecture,
                  tiles: Mapping[str, int] | None = None) -> Dataflow:
    """The shape the published search found: all three stages pipelined over row blocks, the
    array split between the two matrix stages, the inner dim streamed in each. The factors
    are fitted by `tileflow.explore.tilesearch.fit`."""
    hw, r = Hardware.of(arch), Roles.of(w)
    return _fused_chain(w, arch, *_default_tiles(w, r, hw, tiles), "Pipe", True,
                        "tileflow-pipe", tiles)
