"""What each operator's leaf does, for many rows at once (`scalar_traffic._count_compute`):
operations, the operand reads and result updates at its innermost level, and what tensors
that bypass that level move straight between the unit and a level above (multicast over
the spatial instances below it)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tileflow.evaluator import sums
from tileflow.evaluator.compiled import Path
from tileflow.evaluator.engine import READ, UPDATE, Busy, Rows, Tally, exact_dims
from tileflow.evaluator.lattice import I64, VDim, VLoop, distinct_tuples
from tileflow.specs.workload import Workload


class Leaf(NamedTuple):
    """`scalar_traffic.Leaf` per row: operations, temporal steps, operand reads and result updates
    at the innermost level (in accelerator words), and that level's instances in use."""

    ops: np.ndarray
    steps: np.ndarray
    reads: np.ndarray
    updates: np.ndarray
    instances: np.ndarray
    fed: np.ndarray | None = None  # time of the bypassing tensors' transfers to the unit
    fed_ports: Busy | None = None  # that time per (level, port), the busiest one `fed`


def leaf_counts(r: Rows, path: Path, tally: Tally) -> Leaf:
    """`scalar_traffic._count_compute` for every row."""
    op = path.op
    w: Workload = r.c.workload
    all_loops = list(range(len(path.loops)))
    exact = exact_dims(r, path)
    fine = np.ones(r.count, dtype=bool)
    for d in op.dims:
        fine &= exact[d]
    ops = r.prod(path, all_loops)
    todo = np.flatnonzero(~fine)
    dims1 = None
    if len(todo):
        dims1 = {d: v.take(todo) for d, v in r.dims(path, 0, extent=1).items()}
        loops = [r.vloop(path, i, False).take(todo) for i in all_loops]
        axes = tuple(sums.AxisRec(((d, 1),), 0, w.sizes[d]) for d in op.dims)
        ops = ops.copy()
        ops[todo] = sums.iteration_count(axes, dims1, loops, (), len(todo))
    x = path.leaf_level
    width = r.c.width
    sources = path.leaf_sources
    reads = 0.0  # in accelerator words (`precision_bits`), as the transfers
    for access in op.inputs:
        t = access.tensor
        source = path.levels[sources[t]]
        if source == x:
            tally.count(x, READ, ops, width[t], t)
            reads = reads + (ops * width[t] if width[t] != 1.0 else ops)
            continue
        # one word serves every instance below the source that needs the same one
        sent = ops * multicast_share(r, path, sources[t], (access.tensor, access.axes))
        if len(todo):  # clipped rows: a step's element is sent if any instance is real
            sent = sent.astype(float)
            sent[todo] = _multicast_sent(r, path, sources[t], access, todo, dims1)
        tally.count(source, READ, sent, width[t], t)
        tally.feed(op.name, source, sent * width[t],
                   r.prod(path, _spread_above(path, sources[t])), "read")
    out = op.output.tensor
    out_width = width[out]
    home = path.levels[sources[out]]
    out_instances = r.prod(path, _spread_above(path, sources[out]))
    tally.count(home, UPDATE, ops, out_width, out)
    if op.accumulates:
        out = op.output
        marks = path.leaf_epoch
        starts = w.tensor_words(out.tensor) * np.ones(r.count, dtype=I64)
        for i, m in enumerate(marks):
            if m and path.loops[i].dim not in out.dims:
                starts = starts * r.n[path.loops[i].slot]
        if not all(axis.is_plain for axis in out.axes):  # a summed index: on every row
            todo = np.arange(r.count)
            dims1 = {d: v.take(todo) for d, v in r.dims(path, 0, extent=1).items()}
        if len(todo):
            guards = [d for d in op.dims if d not in out.dims]
            axes = tuple(sums.AxisRec(a.terms, a.offset, s)
                         for a, s in zip(out.axes, w.shapes[out.tensor], strict=True))
            loops = [r.vloop(path, i, False).take(todo) for i in all_loops]
            starts[todo] = sums.first_touches(axes, dims1, loops, marks, len(todo), guards)
        tally.count(home, READ, ops - starts, out_width, out.tensor)
        if home == x:
            reads = reads + ((ops - starts) * out_width if out_width != 1.0 else ops - starts)
        else:
            tally.feed(op.name, home, (ops - starts) * out_width, out_instances, "read")
    updates = ops * out_width if out_width != 1.0 else ops
    if home != x:
        tally.feed(op.name, home, ops * out_width, out_instances, "write")
        updates = np.zeros(r.count)
    tally.one_port(x, "read", reads)  # the unit's own traffic at a one-instance level
    tally.one_port(x, "write", updates)
    steps = r.prod(path, [i for i, lp in enumerate(path.loops) if not lp.spatial])
    steps = _kept_halo_steps(r, path, steps, ops)
    return Leaf(ops, steps, reads, updates, r.prod(path, path.leaf_inst),
                *fed_times(tally.fed.get(op.name)))


def fed_times(fed: Busy | None) -> tuple[np.ndarray | None, Busy | None]:
    """`Leaf.fed` and `Leaf.fed_ports` of what an operator's bypassing tensors keep busy:
    the busiest (level, port), as `scalar_model._transfer_time` takes it, and the table."""
    fed_time = None
    for busy in (fed or {}).values():
        fed_time = busy if fed_time is None else np.maximum(fed_time, busy)
    return fed_time, fed or None


def _multicast_sent(r: Rows, path: Path, position: int, access, todo: np.ndarray,
                    dims1) -> np.ndarray:
    """`scalar_traffic._multicast_sent` on the rows `todo`: the spatial loops below `position`
    over dims the operand does not index count once (their first instance is real when
    any is), the others keep `multicast_share`'s distinct share."""
    used = {d for axis in access.axes for d, _ in axis.terms}
    w: Workload = r.c.workload
    loops = []
    for i, lp in enumerate(path.loops):
        vl = r.vloop(path, i, False).take(todo)
        if lp.spatial and lp.node >= position and lp.dim not in used:
            vl = VLoop(vl.dim, np.ones_like(vl.n), vl.stride, vl.drop, vl.mark, vl.slide)
        loops.append(vl)
    axes = tuple(sums.AxisRec(((d, 1),), 0, w.sizes[d]) for d in path.op.dims)
    steps = sums.iteration_count(axes, dims1, loops, (), len(todo))
    mine = [vl for i, (lp, vl) in enumerate(zip(path.loops, loops, strict=True))
            if lp.spatial and lp.node >= position and lp.dim in used]
    if not mine:
        return steps.astype(float)
    spread = np.ones(len(todo), dtype=I64)
    for vl in mine:
        spread = spread * vl.n
    return steps * distinct_tuples(len(todo), mine, access.axes) / spread


def _kept_halo_steps(r: Rows, path: Path, steps: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """A producer that keeps a halo: past the first iteration of a sweep its steps do fewer
    rows, so its steps scale by its operations over those recomputing every row
    (`scalar_traffic._count_compute`)."""
    cuts = r.cut.get(path.op.name)
    if not cuts:
        return steps
    kept = np.zeros(r.count, dtype=bool)
    for cut in cuts.values():
        kept |= cut > 0
    rows = np.flatnonzero(kept)
    w: Workload = r.c.workload
    dims = {d: VDim(v.size, v.extent, v.shift) for d, v in r.dims(path, 0, extent=1).items()}
    dims = {d: v.take(rows) for d, v in dims.items()}
    loops = [r.vloop(path, i, False).take(rows) for i in range(len(path.loops))]
    axes = tuple(sums.AxisRec(((d, 1),), 0, w.sizes[d]) for d in path.op.dims)
    whole = sums.iteration_count(axes, dims, loops, (), len(rows))
    out = steps.astype(float)
    scaled = steps[rows] * ops[rows]
    out[rows] = np.where(whole > 0, scaled / np.maximum(whole, 1), steps[rows])
    return out


def _spread_above(path: Path, position: int) -> tuple[int, ...]:
    """The spatial loops above path `position` (their product: the instances there)."""
    return tuple(i for i, lp in enumerate(path.loops) if lp.spatial and lp.node < position)


def multicast_share(r: Rows, path: Path, position: int, access) -> np.ndarray:
    """`scalar_traffic.multicast_share` per row: the distinct elements of one step over the
    spatial instances below path `position` (the index tuples the spatial loops there
    reach), over those instances. `access`: (tensor, its axes). Axes over disjoint dims
    count apart (the tuples are then their product), each on the grid of its own loops."""
    loops = [r.vloop(path, i, False) for i, lp in enumerate(path.loops)
             if lp.spatial and lp.node >= position]
    if not loops:
        return np.ones(r.count)
    axes = access[1]
    axis_dims = [{d for d, _ in axis.terms} for axis in axes]
    if sum(len(ds) for ds in axis_dims) == len(set().union(*axis_dims)):  # disjoint axes
        distinct = np.ones(r.count, dtype=I64)
        for axis, ds in zip(axes, axis_dims, strict=True):
            mine = [lp for lp in loops if lp.dim in ds]
            if mine:
                distinct = distinct * distinct_tuples(r.count, mine, (axis,))
    else:
        distinct = distinct_tuples(r.count, loops, axes)
    spread = np.ones(r.count, dtype=I64)
    for lp in loops:
        spread = spread * lp.n
    return distinct / spread
