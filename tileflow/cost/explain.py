"""The records of one dataflow from the batched engine at one row: the full `Result` of the
cost model (traffic per level and tensor, footprints, energy per level and tensor, the
per-tile latency and what bounds it, utilization, components and leakage), read from the
arrays the engine computes anyway (`batch.traced`), so that the records and the search's
metrics come from one set of rules."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from tileflow.analysis.records import Bottleneck, Violation
from tileflow.analysis.resources import Footprint
from tileflow.cost.components import component_costs
from tileflow.cost.result import (
    Bound,
    Movement,
    NodeLatency,
    Result,
    bottleneck_record,
    overlap_convention,
)
from tileflow.evaluator.batch import Trace, instances_in_use, traced
from tileflow.evaluator.engine import FILL, READ, UPDATE
from tileflow.evaluator.lattice import GridTooLarge
from tileflow.evaluator.static_energy import leakage_pj, whole_block_words
from tileflow.evaluator.structure import Structure, structure_of
from tileflow.evaluator.violations import grid_refusal
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import MATRIX, Workload
from tileflow.tree import ROOT, Dataflow, Op, Tile, child_path, label, node_depth

# What gives a row's violation records: (structure, one factor row) -> records.
ViolationSource = Callable[[Structure, np.ndarray], Sequence[Violation]]


def evaluate(workload: Workload, arch: Architecture, flow: Dataflow | Tile, *,
             double_buffer: bool = False, fill_drain: bool | None = None,
             overlap: str | None = None) -> Result:
    """Analyse a dataflow (or a bare root tile: a dataflow with default homes). Malformed
    trees (unknown operators, levels, tensors) raise InvalidDataflow; whatever is a property
    of the dataflow (capacity, fan-out, array shape, coverage, dependences, windows) comes
    back as `valid=False` with Violation records. `overlap` ('perfect', 'fill-drain' or
    'lockstep') overrides the accelerator's convention; `fill_drain=False` is the older
    spelling of `overlap='perfect'` (the published model's perfect overlap). The search's
    evaluator at the dataflow's own factors, its records read from the same pass."""
    if not isinstance(flow, (Dataflow, Tile)):
        raise TypeError(f"evaluate() takes a Dataflow or a root Tile, not {type(flow).__name__}")
    return explain_dataflow(workload, arch, flow, double_buffer=double_buffer,
                            fill_drain=fill_drain, overlap=overlap)


def explain_dataflow(workload: Workload, arch: Architecture, flow: Dataflow | Tile, *,
                     double_buffer: bool = False, fill_drain: bool | None = None,
                     overlap: str | None = None,
                     violations: ViolationSource | None = None) -> Result:
    """`explain` of a concrete dataflow (every loop a slot, at its own factor)."""
    if isinstance(flow, Tile):
        flow = Dataflow(flow, flow.name or "dataflow")
    structure = structure_of(workload, arch, flow)
    return _explained(structure, structure.default_factors, flow, double_buffer=double_buffer,
                      fill_drain=fill_drain, overlap=overlap, violations=violations)


def explain(structure: Structure, factors: Sequence[int] | np.ndarray, *,
            double_buffer: bool = False, fill_drain: bool | None = None,
            overlap: str | None = None, violations: ViolationSource | None = None) -> Result:
    """The cost model's `Result` of one factor row of `structure`, from the engine's arrays.
    The options are `evaluate()`'s: `overlap` (or the older `fill_drain`) overrides the
    accelerator's convention, `double_buffer` holds every tensor with no depth set twice.
    `violations` gives the row's violation records (default: the engine's own, from the
    checks of the same pass)."""
    return _explained(structure, factors, None, double_buffer=double_buffer,
                      fill_drain=fill_drain, overlap=overlap, violations=violations)


def _explained(structure: Structure, factors: Sequence[int] | np.ndarray,
               flow: Dataflow | None, *, double_buffer: bool, fill_drain: bool | None,
               overlap: str | None, violations: ViolationSource | None) -> Result:
    """`explain`, given the row's dataflow where the caller has it (else rebuilt)."""
    row = np.asarray(factors, dtype=np.int64).reshape(1, -1)
    structure = _with_options(structure, overlap_convention(structure.arch, overlap,
                                                            fill_drain), double_buffer)
    flow = flow or structure.dataflow(row[0])
    trace = _traced_row(structure, row, flow, records=violations is None)
    records = trace.records if violations is None else tuple(violations(structure, row[0]))
    return _result(trace, structure, flow, records)


class LeafWork(NamedTuple):
    """What one operator's leaf computes: its operations (recomputation included, a carried
    operator's rescaling apart) and its temporal steps."""

    ops: int | float
    steps: int | float


def leaf_work(workload: Workload, arch: Architecture, flow: Dataflow) -> dict[str, LeafWork]:
    """Per operator, the work of its leaf in a concrete dataflow, from the model's pass.
    Raises InvalidDataflow for a tree whose sums enumerate more than the model takes at
    once."""
    structure = structure_of(workload, arch, flow)
    trace = _traced_row(structure, structure.default_factors.reshape(1, -1), flow)
    return {name: LeafWork(_count(leaf.ops), _count(leaf.steps))
            for name, leaf in trace.leaves.items()}


def _traced_row(structure: Structure, row: np.ndarray, flow: Dataflow,
                records: bool = False) -> Trace:
    """`batch.traced` of one row; a row whose sums enumerate more than a grid's 4 M cells
    is an InvalidDataflow naming the tree and what to change."""
    try:
        return traced(structure, row, records=records)
    except GridTooLarge as exc:
        raise grid_refusal(flow.name, exc) from None


def _with_options(structure: Structure, convention: str, double_buffer: bool) -> Structure:
    """The structure on the accelerator the options describe: its overlap convention, and
    under `double_buffer` a depth of 2 at every level that sets none (a tensor with no depth
    is held once and overlapped; depth 2 holds it twice, overlapped too)."""
    arch = structure.arch
    if convention != arch.overlap:
        arch = replace(arch, overlap=convention)
    if double_buffer and any(lv.buffering is None for lv in arch.levels):
        arch = replace(arch, levels=tuple(lv if lv.buffering is not None
                                          else replace(lv, buffering=2)
                                          for lv in arch.levels))
    if arch is structure.arch:
        return structure
    return Structure(structure.workload, arch, structure.template, structure.slots)


def _at(x) -> float:
    return float(np.asarray(x, dtype=float).reshape(-1)[0])


def _count(x) -> int | float:
    """An operation count at the row: an integer where it is whole."""
    v = _at(x)
    return int(v) if v.is_integer() else v


def _result(trace: Trace, structure: Structure, flow: Dataflow,
            violations: tuple[Violation, ...]) -> Result:
    r, tally = trace.rows, trace.tally
    c = r.c
    arch, w = c.arch, c.workload
    traffic: dict[str, dict[str, Movement]] = defaultdict(dict)
    energy: dict[str, dict[str, float]] = defaultdict(dict)
    moved: dict[tuple[int, str], list[float]] = {}
    for (level, tensor, kind), elements in tally.by_tensor.items():
        moved.setdefault((level, tensor), [0.0, 0.0, 0.0])[kind] = _at(elements)
    for (index, tensor), (fill, read, update) in sorted(moved.items()):
        lv = arch.levels[index]
        traffic[lv.name][tensor] = Movement(fill, read, update)
        ratio = c.width[tensor]
        words = (fill * ratio, read * ratio, update * ratio)
        if lv.block_words:  # whole accesses per instance in use
            used = _at(instances_in_use(r, [p for p in c.paths.values()
                                            if p.leaf_level >= index], index))
            words = tuple(whole_block_words(x, int(used), lv.block_words) for x in words)
        energy[lv.name][tensor] = (words[FILL] * lv.write_energy_pj
                                   + words[READ] * lv.read_energy_pj
                                   + words[UPDATE] * lv.update_energy_pj)
    ops: dict[str, int | float] = {}
    macs = 0
    compute_by_unit: dict[str, float] = defaultdict(float)
    for name, leaf in trace.leaves.items():
        own = _count(leaf.ops)
        rescale = trace.rescale.get(name)
        rescale_ops = sum(_count(n) for n in rescale) if rescale is not None else 0
        ops[name] = own + rescale_ops
        unit = arch.unit(w.op_by_name[name].unit)
        if w.op_by_name[name].unit == MATRIX:
            macs += own
        compute_by_unit[unit.kind] += own * unit.energy_pj_per_op
        if rescale is not None:  # a carried operator's rescaling runs on the vector unit
            vector = arch.unit("vector")
            compute_by_unit[vector.kind] += rescale_ops * vector.energy_pj_per_op
    compute_pj = sum(compute_by_unit.values())
    cycles = _at(trace.result.cycles)
    breakdown, bottleneck = _latency_records(trace, flow)
    powered = [int(_at(instances_in_use(r, c.paths.values(), index)))
               for index in range(len(arch.levels))]
    by_unit: dict[str, list] = {}
    for p in c.paths.values():
        by_unit.setdefault(arch.unit(p.op.unit).kind, []).append(p)
    unit_instances = {kind: int(_at(instances_in_use(r, paths,
                                                     arch.level_index[arch.unit(kind).level])))
                      for kind, paths in by_unit.items()}
    leakage = leakage_pj(arch, powered, unit_instances, cycles)
    total_pj = compute_pj + sum(sum(v.values()) for v in energy.values()) + sum(
        leakage.values())
    fps = tuple(
        Footprint(level, sum(_at(v) for v in words.values()),
                  arch.level(level).capacity_words,
                  {t: _at(v) for t, v in words.items() if _at(v)})  # tensors held
        for level, words in trace.footprints.items())
    utilization = macs / (cycles * arch.total_macs_per_cycle) if cycles else 0.0
    return Result(
        flow.name, not violations, violations, cycles, arch.clock_ghz, total_pj, macs,
        sum(ops.values()) - macs, ops, dict(traffic), fps, dict(energy), compute_pj,
        bottleneck, utilization, tuple(lv.name for lv in arch.levels), breakdown,
        component_costs(arch, energy, compute_by_unit, leakage), leakage)


def _latency_records(trace: Trace, flow: Dataflow) -> tuple[tuple, Bottleneck]:
    """One `NodeLatency` per tile and the `Bottleneck`, by `scalar_model._latency`'s rule:
    a tile is bound by its slowest child (the first of equals), unless its loads or its
    stores take longer; a leaf by its unit, its operand reads, its result updates or the
    bypassing tensors' transfers; the tree by a one-instance level's port when all of its
    transfers through it take longer than the root."""
    r, tally = trace.rows, trace.tally
    c = r.c
    arch = c.arch
    breakdown: list[NodeLatency] = []

    def leaf(op: str, where: str) -> tuple[float, Bound]:
        times = trace.leaf_times[op]
        path = c.paths[op]
        level = path.leaf_level
        unit = arch.unit(path.op.unit)
        best = max((_at(times.compute), Bound("compute", None, unit.kind, where, op)),
                   (_at(times.read), Bound("read", level, None, where, op)),
                   (_at(times.write), Bound("write", level, None, where, op)),
                   key=lambda x: x[0])
        if times.fed is not None:
            fed_level = _port_level(arch, trace.leaves[op].fed_ports, 0)
            kind = "read" if fed_level in _read_feeds(c, op) else "write"
            best = max(best, (_at(times.fed),
                              Bound(kind, fed_level, None, where, op, " (bypass)")),
                       key=lambda x: x[0])
        return best

    def node(path: str, tile: Tile, steps_above: int) -> tuple[float, Bound]:
        steps = steps_above
        for lp in tile.loops:
            if not lp.spatial:
                steps *= lp.factor
        kids = [leaf(k.op, child_path(path, i)) if isinstance(k, Op)
                else node(child_path(path, i), k, steps) for i, k in enumerate(tile.children)]
        phases = trace.nodes[path]
        load, inner, store = _at(phases.load), _at(phases.inner), _at(phases.store)
        serial, extra = _at(phases.serial), _at(phases.extra)
        slowest = max(kids, key=lambda k: k[0])[1]
        if serial:
            note = f" with single-buffered transfers of {label(path, tile)} in series"
            slowest = slowest._replace(note=note)
        load_level = _port_level(arch, tally.loads.get(path), steps)
        store_level = _port_level(arch, tally.stores.get(path), steps)
        own, what = max((inner + serial, slowest),
                        (load, Bound("read", load_level, None, path, tile)),
                        (store, Bound("write", store_level, None, path, tile)),
                        key=lambda x: x[0])
        breakdown.append(NodeLatency(path, label(path, tile), node_depth(path), load, inner,
                                     store, extra, serial_cycles=serial))
        return own + extra, what

    root_cycles, what = node(ROOT, flow.root, 1)
    # the ports in `scalar_model._busiest_shared_port`'s order: the tiles' loads, their
    # stores, then what only the units move (bypassed tensors, a one-instance unit level)
    ports = [key for table in (*tally.loads.values(), *tally.stores.values())
             for key in table if key in tally.shared]
    busiest = None
    for key in dict.fromkeys([*ports, *tally.shared]):
        if busiest is None or _at(tally.shared[key]) > _at(tally.shared[busiest]):
            busiest = key
    if busiest is not None and _at(tally.shared[busiest]) > root_cycles:
        root = breakdown[-1]
        breakdown[-1] = replace(root, shared_port_cycles=_at(tally.shared[busiest])
                                - root_cycles)
        what = Bound(f"tree-{busiest[1]}", busiest[0], None, ROOT, flow.root)
    return tuple(sorted(breakdown, key=lambda n: n.path)), bottleneck_record(arch, *what)


def _port_level(arch: Architecture, table, steps: int) -> int:
    """The level of the busiest (level, port) of a tile's transfers at the row, with the
    read (or shared) port's per-step overhead where it moves (`scalar_model._transfer_time`):
    the first of equals; level 0 when the tile moves nothing."""
    best, most = 0, None
    for (index, port), busy in (table or {}).items():
        time = _at(busy)
        if port != "write" and time > 0:
            time += arch.levels[index].step_overhead_cycles * steps
        if most is None or time > most:
            best, most = index, time
    return best


def _read_feeds(c, op: str) -> set[int]:
    """The levels above an operator's innermost one that its unit reads straight from (a
    bypassed input, or its output's partial sums where it accumulates there)."""
    path = c.paths[op]
    x = path.leaf_level
    sources = path.leaf_sources
    out = {path.levels[sources[a.tensor]] for a in path.op.inputs} - {x}
    home = path.levels[sources[path.op.output.tensor]]
    if path.op.accumulates and home != x:
        out.add(home)
    return out

