"""Shared pieces of the baseline builders: what they need to know of the accelerator, the
buffer-level tile of one operator, and picking the largest factors that fit."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.arith import divisors
from tileflow.evaluator.lattice import GridTooLarge
from tileflow.evaluator.structure import structure_of
from tileflow.evaluator.violations import breaks_nothing
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import MATRIX, Workload
from tileflow.tree import Dataflow, Loop, Op, Tile


@dataclass(frozen=True)
class Hardware:
    """The accelerator as the builders see it."""

    outer: str  # off-chip level (DRAM)
    buffer: str  # on-chip level that holds tiles (L1)
    reg: str | None  # register level feeding the array, if any
    per_pe: bool  # one register instance per PE: spatial loops fan out from the buffer
    cores: int  # buffer instances per outer instance
    rows: int
    cols: int
    lanes: int
    vector_on_matrix: bool

    @classmethod
    def of(cls, arch: Architecture) -> Hardware:
        feed = arch.level_index[arch.matrix.level]
        if feed > 1:
            reg, buffer = arch.matrix.level, arch.levels[feed - 1].name
        else:
            reg, buffer = None, arch.matrix.level
        outer = arch.levels[0].name
        cores = arch.fanout_between(outer, buffer) if buffer != outer else 1
        lanes = arch.matrix.rows if arch.vector_on_matrix else arch.vector.rows
        return cls(outer, buffer, reg, arch.matrix.parallelism == 1, cores, arch.matrix.rows,
                   arch.matrix.cols, lanes, arch.vector_on_matrix)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def compute_tile(w: Workload, hw: Hardware, op_name: str, extents: Mapping[str, int],
                 array: tuple[int, int] | None = None, shared: Iterable[str] = ()) -> Tile:
    """The buffer-level tile of one operator covering `extents` per step: spatial loops over
    its largest output dims (PE rows x cols, or vector lanes), temporal loops over the rest
    with reductions innermost (output stationary). Every loop is kept, factor 1 included,
    so that trees for other sizes differ only in their factors."""
    op = w.op_by_name[op_name]
    on_array = op.unit == MATRIX or hw.vector_on_matrix
    rows, cols = array or (hw.rows, hw.cols)
    outs = sorted(op.output.dims, key=lambda d: -extents[d])
    limits = [rows, cols] if on_array else [hw.lanes]
    # along dims `shared` with other operators by a loop above, spatial factors divide the
    # extent: every operator then covers exactly the step's rows (a larger cover would
    # overlap the next step: recomputation); elsewhere the last tile may be clipped
    shared = set(shared)
    spatial = {d: largest_divisor(extents[d], limit) if d in shared else min(limit, extents[d])
               for d, limit in zip(outs, limits, strict=False)}
    order = list(op.output.dims) + list(op.reduction_dims)
    loops = [Loop(d, ceil_div(extents[d], spatial.get(d, 1))) for d in order]
    axes = ("x", "y") if on_array else ("",)  # PE rows and columns, or the lanes
    spread = tuple(Loop(d, f, True, axis)
                   for (d, f), axis in zip(spatial.items(), axes, strict=False))
    leaf = Op(op_name)
    if not (on_array and hw.reg):
        return Tile(hw.buffer, (*loops, *spread), (leaf,), name=op_name)
    if hw.per_pe:  # spatial loops fan out from the buffer to one register file per PE
        return Tile(hw.buffer, (*loops, *spread), (Tile(hw.reg, (), (leaf,),
                                                        name=f"{op_name}-pe"),), name=op_name)
    # a register file shared by the whole unit (a CPU core): the lanes fan out from it
    return Tile(hw.buffer, tuple(loops), (Tile(hw.reg, spread, (leaf,), name=f"{op_name}-reg"),),
                name=op_name)


def outer_loops(w: Workload, op_dims: Iterable[str], tiles: Mapping[str, int],
                covered: Mapping[str, int] | None = None) -> tuple[Loop, ...]:
    """Loops stepping over each dim in tiles of `tiles[d]` within an extent `covered[d]`."""
    covered = covered or w.sizes
    out = []
    for d in op_dims:
        if d in tiles:
            out.append(Loop(d, ceil_div(covered.get(d, w.sizes[d]), tiles[d])))
    return tuple(out)


def core_split(w: Workload, hw: Hardware, batch: str | None, rows: str,
               row_tile: int | None) -> tuple[tuple[Loop, ...], dict[str, int]]:
    """Root loops that spread the work over the cores (batch when large enough, else rows),
    and the extent of every dim that one step of them leaves to the children. Loops of one
    iteration stay loops: the tree's shape does not depend on the sizes."""
    sizes = dict(w.sizes)
    c = hw.cores
    ext = dict(sizes)
    loops: list[Loop] = []
    if batch and sizes[batch] >= c:
        loops += [Loop(batch, ceil_div(sizes[batch], c)), Loop(batch, c, True)]
        ext[batch] = 1
        tile_rows = min(row_tile or sizes[rows], sizes[rows])
        loops.append(Loop(rows, ceil_div(sizes[rows], tile_rows)))
        ext[rows] = tile_rows
    else:
        if batch:
            loops.append(Loop(batch, sizes[batch]))
            ext[batch] = 1
        per_core = ceil_div(sizes[rows], c)
        tile_rows = min(row_tile or per_core, per_core)
        loops += [Loop(rows, ceil_div(per_core, tile_rows)), Loop(rows, c, True)]
        ext[rows] = tile_rows
    return tuple(loops), ext


def fits(w: Workload, arch: Architecture, flow: Dataflow) -> bool:
    """True when the tree is well formed, respects the dependences and covers every
    dimension, within capacity and fan-out: the model's checks at the tree's own factors."""
    try:
        structure = structure_of(w, arch, flow)
        return breaks_nothing(structure, structure.default_factors)
    except (InvalidDataflow, GridTooLarge):  # malformed, or more sums than one evaluation takes
        return False


def largest_fitting(candidates: Iterable[int], make: Callable[[int], Dataflow],
                    w: Workload, arch: Architecture) -> Dataflow:
    """The dataflow for the first (largest) candidate that fits; the last one otherwise."""
    flow = None
    for value in candidates:
        flow = make(value)
        if fits(w, arch, flow):
            return flow
    assert flow is not None
    return flow


def halvings(n: int, floor: int = 1) -> list[int]:
    """n, n/2, n/4, ... (rounded up) down to `floor`."""
    out = []
    while n >= floor:
        out.append(n)
        if n == 1:
            break
        n = ceil_div(n, 2)
    return list(dict.fromkeys(out))


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of n that is at most `limit`."""
    return max(d for d in divisors(n) if d <= limit)


def held_at_middle(flow: Dataflow, arch: Architecture,
                   intermediates: Iterable[str]) -> Dataflow | None:
    """`flow` with its root's steps below the first temporal loop run inside a tile at the
    on-chip level next to DRAM (a shared L2): what the stages reuse across those steps (K
    and V across row blocks) is then held on chip instead of read again from DRAM. The
    root's spatial loops move with them (the cores fan out below that level), and the
    stages' own streaming tiles at DRAM stream from it instead; the intermediates stay
    in the buffer level between stages (homed there). None on a chip without such
    a level, or a root without loops to move."""
    root = flow.root
    hw = Hardware.of(arch)
    names = [lv.name for lv in arch.levels]
    if root.level != hw.outer or names.index(hw.buffer) - names.index(hw.outer) < 2:
        return None
    middle = names[names.index(hw.outer) + 1]
    first = next((i for i, lp in enumerate(root.loops) if not lp.spatial), None)
    stay = root.loops[:first + 1] if first is not None else ()
    moved = root.loops[len(stay):]
    if not moved:
        return None

    def relevel(node):
        if isinstance(node, Tile) and node.level == hw.outer:
            return replace(node, level=middle, children=tuple(map(relevel, node.children)))
        return node

    held = Tile(middle, moved, tuple(map(relevel, root.children)), root.primitive,
                name=f"{root.name or flow.name}-{middle}")
    homes = {t: hw.buffer for t in intermediates} | dict(flow.homes)
    return Dataflow(replace(root, loops=stay, children=(held,), primitive="Seq"), flow.name,
                    homes)
