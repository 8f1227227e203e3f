"""Evaluate many factor assignments of one structure at once, as arrays.

`evaluate_batch` is the contract the searches use. The structure's analysis is done once
(`Structure.compiled`); each batch computes the factor part with NumPy, equal to the scalar
model (`tests/scalar_model.evaluate_plan`, the reference) row by row; every structure is
modelled here (none falls back to the scalar rules)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tileflow.evaluator import carried
from tileflow.evaluator.compiled import Compiled
from tileflow.evaluator.engine import FILL, READ, UPDATE, Rows, Tally, count_boundary
from tileflow.evaluator.lattice import GRID_PER_ROW, MAX_GRID_CELLS, GridTooLarge
from tileflow.evaluator.leaf import leaf_counts
from tileflow.evaluator.limits import Violations, check, footprints, footprints_by_tensor
from tileflow.evaluator.overlap import CONVENTIONS, Phases
from tileflow.evaluator.shared_inputs import served_masks
from tileflow.evaluator.static_energy import BLOCK_SLACK
from tileflow.evaluator.step_pipeline import lockstep_cycles, tensor_dims, transfer_time
from tileflow.evaluator.structure import Structure
from tileflow.evaluator.violations import Records
from tileflow.evaluator.workbound import MAX_ENUMERATED_STEPS, enumerated_steps
from tileflow.specs.arch import Architecture
from tileflow.tree import ROOT, Op, Tile, child_path


@dataclass(frozen=True)
class BatchResult:
    """Metrics of B factor assignments, one array entry per row.

    `violations` maps a violation kind (the `kind` of the model's violation records, e.g.
    'capacity', 'fanout', 'array', 'coverage', 'dependency') to the largest amount by which
    a row exceeds that constraint (needed - available, in the record's unit; 0 where none)."""

    cycles: np.ndarray
    energy_pj: np.ndarray
    dram_words: np.ndarray
    ops: np.ndarray
    footprint_words: Mapping[str, np.ndarray]
    valid: np.ndarray
    violations: Mapping[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.cycles)


@dataclass
class NodeTimes:
    """One tile's phases per row, as `_latency` combines them: its loads, its children, its
    stores, its single-buffered transfers in series, and what the overlap convention adds
    (the first load and last store, or the lock-step slots beyond the slowest phase). Each
    an array over rows, or one number where it is the same on every row (0: none)."""

    load: np.ndarray | float
    inner: np.ndarray | float
    store: np.ndarray | float
    serial: np.ndarray | float
    extra: np.ndarray | float


@dataclass
class LeafTimes:
    """One operator's leaf per row: its compute, its operand reads and result updates at
    its innermost level, and the bypassing tensors' transfers (None: none bypass)."""

    compute: np.ndarray
    read: np.ndarray
    write: np.ndarray
    fed: np.ndarray | None


@dataclass
class Trace:
    """What one evaluation computed on the way, kept for the records of `explain` (asked
    for one row at a time; the search never keeps it)."""

    rows: Rows | None = None
    tally: Tally | None = None
    leaves: dict = field(default_factory=dict)  # operator -> `leaf.Leaf`
    rescale: dict = field(default_factory=dict)  # carried operator -> rescaling counts
    footprints: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    nodes: dict[str, NodeTimes] = field(default_factory=dict)  # tile path -> its phases
    leaf_times: dict[str, LeafTimes] = field(default_factory=dict)  # operator -> its leaf
    records: tuple | None = None  # the row's `Violation` records, from the same checks
    result: BatchResult | None = None
    booked: tuple | None = None  # a one-row trace's bookings, flat, once `retime` asked


def traced(structure: Structure, factors: np.ndarray, records: bool = False) -> Trace:
    """`evaluate_batch` that keeps its intermediate arrays (per-tensor words included);
    with `records`, of one row, also its `Violation` records from the same checks.
    Raises `lattice.GridTooLarge` where a row enumerates more than the engine may."""
    factors = np.asarray(factors, dtype=np.int64)
    trace = Trace(records=() if records else None)
    # one row alone may enumerate a whole grid's cells (the search's rows stop at its bound)
    bound = GRID_PER_ROW.set(MAX_GRID_CELLS if len(factors) == 1 else None)
    try:
        trace.result = _evaluate(structure.compiled, structure.all_loop_factors(factors), trace)
    finally:
        GRID_PER_ROW.reset(bound)
    return trace


def evaluate_batch(structure: Structure, factors: np.ndarray) -> BatchResult:
    """Metrics for each row of `factors` (shape B x len(structure.slots), factors >= 1)."""
    factors = np.asarray(factors, dtype=np.int64)
    if factors.ndim != 2 or factors.shape[1] != len(structure.slots):
        raise ValueError(f"factors must have shape (B, {len(structure.slots)}), "
                         f"got {factors.shape}")
    if factors.size and factors.min() < 1:
        raise ValueError("every factor must be at least 1")
    return _bounded(structure.compiled, structure.all_loop_factors(factors))


def footprint_words(structure: Structure, factors: np.ndarray) -> Mapping[str, np.ndarray]:
    """`evaluate_batch(...).footprint_words` without counting data movement: what the
    search's capacity bounds need, at a fraction of the cost."""
    factors = np.asarray(factors, dtype=np.int64)
    if not len(factors):
        return evaluate_batch(structure, factors).footprint_words
    try:
        return footprints(Rows(structure.compiled, structure.all_loop_factors(factors)))
    except GridTooLarge:  # split, with the rows that enumerate too much refused
        return evaluate_batch(structure, factors).footprint_words


def _evaluate(c: Compiled, full: np.ndarray, trace: Trace | None = None) -> BatchResult:
    """The batch on one compiled tree, with factor rows over all its loops; `trace` keeps
    what the records of one row need."""
    r = Rows(c, full)
    r.served = served_masks(r)
    rows = r.count
    tally = Tally(rows, c.arch, any(v != 1.0 for v in c.width.values()),
                  per_tensor=trace is not None)
    leaves = {}
    for o, path in c.paths.items():
        for b in path.boundaries:
            count_boundary(r, path, b, tally)
        leaves[o] = leaf_counts(r, path, tally)
    if trace is None:
        fps = footprints(r)
    else:
        trace.footprints = footprints_by_tensor(r)
        fps = {level: sum(words.values(), np.zeros(rows))
               for level, words in trace.footprints.items()}
    recorder = Records(r) if trace is not None and trace.records is not None else None
    violations = Violations(rows, recorder)
    check(r, fps, violations)
    if recorder is not None:  # (the enumeration bound below is not a record)
        trace.records = recorder.records()
        violations.recorder = None
    violations.add("enumeration", enumerated_steps(r), MAX_ENUMERATED_STEPS)
    arch = c.arch
    energy = np.zeros(rows)
    for (level, kind), words in tally.words.items():
        if level in tally.blocks:
            continue  # charged per tensor in whole blocks, below
        energy = energy + words * _per_word(arch.levels[level], kind)
    if tally.blocks:
        energy = energy + _whole_block_energy(r, tally)
    ops = np.zeros(rows)
    for o, leaf in leaves.items():
        ops = ops + leaf.ops
        energy = energy + leaf.ops * arch.unit(c.workload.op_by_name[o].unit).energy_pj_per_op
    rescale = carried.rescaling(r)
    for counts in rescale.values():  # a carried operator's rescaling, on the vector unit
        for n in counts:
            ops = ops + n
            energy = energy + n * arch.unit("vector").energy_pj_per_op
    dram = tally.traffic[(0, FILL)] + tally.traffic[(0, READ)] + tally.traffic[(0, UPDATE)]
    cycles = tree_cycles(r, tally, leaves, rescale, trace)
    if trace is not None:
        trace.rows, trace.tally, trace.leaves, trace.rescale = r, tally, leaves, rescale
    energy = energy + _leakage(r) * cycles
    return BatchResult(cycles, energy, dram, ops, fps, violations.valid,
                       dict(violations.amounts))


def _per_word(lv, kind: int) -> float:
    """The level's energy per word of a fill, a read or an update."""
    return {FILL: lv.write_energy_pj, READ: lv.read_energy_pj,
            UPDATE: lv.update_energy_pj}[kind]


def _whole_block_energy(r: Rows, tally: Tally) -> np.ndarray:
    """Energy of the levels that charge whole blocks (`block_words`): per tensor and kind,
    the words of each instance in use rounded up to whole blocks
    (`evaluator.static_energy.whole_block_words`, the instances those of `used_instances`)."""
    c = r.c
    energy = np.zeros(r.count)
    used = {level: instances_in_use(r, [p for p in c.paths.values() if p.leaf_level >= level],
                                    level)
            for level in tally.blocks}
    for (level, _tensor, kind), words in tally.tensor_words.items():
        lv = c.arch.levels[level]
        instances = np.maximum(used[level], 1)
        blocks = np.ceil(words / instances / lv.block_words - BLOCK_SLACK)
        charged = np.where(words > 0, instances * blocks * lv.block_words, 0.0)
        energy = energy + charged * _per_word(lv, kind)
    return energy


def instances_in_use(r: Rows, paths, level: int) -> np.ndarray:
    """Per row, the most instances of `level` the operators of `paths` spread over
    (`evaluator.static_energy.used_instances`, powered): their spatial factors above it."""
    cap = r.c.arch.levels[level].instances
    used = np.zeros(r.count, dtype=np.int64)
    for path in paths:
        spread = r.prod(path, [i for i, lp in enumerate(path.loops)
                               if lp.spatial and lp.level < level])
        used = np.maximum(used, np.minimum(spread, cap))
    return used


def _leakage(r: Rows) -> np.ndarray:
    """Leakage per cycle of each row: pJ per cycle x instances in use, per level and unit
    (`evaluator.static_energy.leakage_pj` over the cycles)."""
    c = r.c
    arch = c.arch
    per_cycle = np.zeros(r.count)
    for index, lv in enumerate(arch.levels):
        if lv.leakage_pj_per_cycle:  # every operator's spread, as leakage_pj's
            per_cycle = per_cycle + lv.leakage_pj_per_cycle * instances_in_use(
                r, c.paths.values(), index)
    units = {}
    for p in c.paths.values():
        units.setdefault(arch.unit(p.op.unit).kind, []).append(p)
    for kind, paths in units.items():
        unit = arch.unit(kind)
        if unit.leakage_pj_per_cycle:
            level = arch.level_index[unit.level]
            per_cycle = per_cycle + unit.leakage_pj_per_cycle * unit.parallelism * \
                instances_in_use(r, paths, level)
    return per_cycle


def tree_cycles(r: Rows, tally: Tally, leaves, rescale, trace: Trace | None = None,
                arch: Architecture | None = None) -> np.ndarray:
    """`scalar_model._latency` for every row: each tile's phases (its loads, children and
    stores) combined by the accelerator's overlap convention (`evaluator.overlap`, one
    module each). `arch`: the structure's, or one of other timings (`retime`). `r` needs
    only `c`, `n` and `count`."""
    c = r.c
    arch = arch or c.arch
    tile_cycles = CONVENTIONS[arch.overlap]
    dims = tensor_dims(c.workload) if arch.overlap == "lockstep" else {}

    def leaf(op: str) -> np.ndarray:
        lf = leaves[op]
        o = c.workload.op_by_name[op]
        unit = arch.unit(o.unit)
        lv = arch.levels[c.paths[op].leaf_level]
        inst = np.maximum(lf.instances, 1)
        read_time = lf.reads / (inst * lv.read_words_per_cycle)
        write_time = lf.updates / (inst * lv.write_words_per_cycle)
        if lv.ports == "shared":  # `scalar_model._latency`: one port, the reads and writes add
            read_time = write_time = read_time + write_time
        compute = lf.steps * unit.cycles(o.function)
        if op in rescale:  # on the lanes the leaf uses: its operations per step
            lanes = np.maximum(lf.ops / np.maximum(lf.steps, 1), 1.0)
            extra = sum(n * unit.cycles(fn)
                        for fn, n in zip(carried.RESCALE, rescale[op], strict=True))
            compute = compute + extra / lanes
        slowest = np.maximum.reduce([compute, read_time, write_time])
        if trace is not None:
            trace.leaf_times[op] = LeafTimes(compute, read_time, write_time, lf.fed)
        # tensors that bypass the innermost level, straight from a level above
        return slowest if lf.fed is None else np.maximum(slowest, lf.fed)

    def node(path: str, tile: Tile, steps_above) -> np.ndarray:
        steps = steps_above
        for i, lp in enumerate(tile.loops):
            if not lp.spatial:
                steps = steps * r.n[c.slot_of[(path, i)]]
        kids = [leaf(k.op) if isinstance(k, Op) else node(child_path(path, i), k, steps)
                for i, k in enumerate(tile.children)]
        if tile.semantics.serial:
            inner = sum(kids[1:], kids[0])
        elif not tile.semantics.pipelined:
            inner = np.maximum.reduce(kids)
        else:
            stages = [k / steps for k in kids]
            inner = sum(stages[1:], stages[0]) + (steps - 1) * np.maximum.reduce(stages)
        load, latency = transfer_time(arch, tally.loads.get(path), steps)
        store, _ = transfer_time(arch, tally.stores.get(path), steps)
        # single-buffered tensors' transfers in series with the children
        serial = transfer_time(arch, tally.serial_loads.get(path), steps)[0] + \
            transfer_time(arch, tally.serial_stores.get(path), steps)[0]

        def lock() -> np.ndarray:
            def factor(i: int) -> np.ndarray:
                return r.n[c.slot_of[(path, i)]]

            return lockstep_cycles(arch, tile, dims, tally.tensor_loads.get(path, {}),
                                   tally.tensor_stores.get(path, {}),
                                   np.broadcast_to(inner, (r.count,)),
                                   np.broadcast_to(steps, (r.count,)), factor,
                                   tally.tensor_serial_loads.get(path, {}),
                                   tally.tensor_serial_stores.get(path, {}))

        cycles, extra = tile_cycles(Phases(load, inner, store, serial, latency, steps, lock))
        if trace is not None:
            trace.nodes[path] = NodeTimes(load, inner, store, serial, extra)
        return cycles

    cycles = node(ROOT, c.flow.root, np.ones(r.count, dtype=np.int64))
    # children running at once share a one-instance level's port: its total bounds the cycles
    for busy in tally.shared.values():
        cycles = np.maximum(cycles, busy)
    return cycles


def _bounded(c: Compiled, full: np.ndarray) -> BatchResult:
    """`_evaluate` within the memory a grid of loop combinations may take: a batch whose
    grid is too large is split in halves, and a row that alone enumerates more than
    MAX_GRID_PER_ROW combinations is invalid (violation 'enumeration': the combinations),
    as the command line refuses such a tree."""
    try:
        return _evaluate(c, full)
    except GridTooLarge as exc:
        if len(full) == 1:
            nothing = np.zeros(1)
            return BatchResult(nothing, nothing, nothing, nothing, {},
                               np.zeros(1, dtype=bool),
                               {"enumeration": np.array([exc.combinations.max()], float)})
        half = len(full) // 2
        return _concat([_bounded(c, full[:half]), _bounded(c, full[half:])])


def _concat(parts: list[BatchResult]) -> BatchResult:
    """One result of the parts' rows one after another (a metric one part lacks is 0)."""
    sizes = [len(p) for p in parts]

    def joined(name: str) -> dict[str, np.ndarray]:
        keys = dict.fromkeys(k for p in parts for k in getattr(p, name))
        return {k: np.concatenate([getattr(p, name).get(k, np.zeros(n))
                                   for p, n in zip(parts, sizes, strict=True)]) for k in keys}

    return BatchResult(*(np.concatenate([getattr(p, f) for p in parts])
                         for f in ("cycles", "energy_pj", "dram_words", "ops")),
                       joined("footprint_words"), np.concatenate([p.valid for p in parts]),
                       joined("violations"))
