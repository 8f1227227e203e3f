"""The scalar rules of one dataflow, written separately from the evaluator: counts
(`scalar_traffic`), latency under each overlap convention (here and `scalar_step_pipeline`)
and energy, to the same `Result`. The package runs the evaluator (`tileflow.cost.evaluate`);
the differential tests hold it to this copy field by field (`helpers.scalar_evaluate`)
until the enumerating oracle covers what they check."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

from scalar_checks import structural_violations
from scalar_prepare import Plan
from scalar_resources import capacity_violations, footprints, spatial_violations
from scalar_step_pipeline import lockstep_cycles, tensor_dims
from scalar_traffic import Counts, Transfer, count

from tileflow.analysis.records import Bottleneck
from tileflow.cost.components import component_costs
from tileflow.cost.result import (
    Bound,
    Movement,
    NodeLatency,
    Result,
    bottleneck_record,
    overlap_convention,
)
from tileflow.evaluator.static_energy import (
    leakage_pj,
    spread_over,
    used_instances,
    whole_block_words,
)
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import MATRIX
from tileflow.tree import ROOT, Op, Tile, child_path, label, node_depth


def evaluate_plan(plan: Plan, *, double_buffer: bool = False,
                  fill_drain: bool | None = None, overlap: str | None = None) -> Result:
    arch, w = plan.arch, plan.workload
    convention = overlap_convention(arch, overlap, fill_drain)
    counts = count(plan)
    fps = footprints(plan, double_buffer)
    violations = [*structural_violations(plan), *capacity_violations(plan, fps),
                  *spatial_violations(plan)]
    traffic: dict[str, dict[str, Movement]] = defaultdict(dict)
    energy: dict[str, dict[str, float]] = defaultdict(dict)
    used = used_instances(arch, ((p.loops, p.levels[-1]) for p in plan.paths.values()))
    for (index, tensor), (fill, read, update) in sorted(counts.traffic.items()):
        lv = arch.levels[index]
        traffic[lv.name][tensor] = Movement(fill, read, update)
        ratio = w.width_ratio(tensor, arch.word_bytes * 8)
        words = (fill * ratio, read * ratio, update * ratio)  # in accelerator words
        if lv.block_words:  # whole accesses per instance in use
            words = tuple(whole_block_words(x, used[index], lv.block_words) for x in words)
        energy[lv.name][tensor] = (words[0] * lv.write_energy_pj + words[1] * lv.read_energy_pj
                                   + words[2] * lv.update_energy_pj)
    ops = {name: leaf.ops + leaf.rescale_ops for name, leaf in counts.leaves.items()}
    macs = sum(leaf.ops for name, leaf in counts.leaves.items()
               if w.op_by_name[name].unit == MATRIX)
    compute_by_unit: dict[str, float] = defaultdict(float)
    for leaf in counts.leaves.values():
        unit = arch.unit(leaf.unit)
        compute_by_unit[unit.kind] += leaf.ops * unit.energy_pj_per_op
        if leaf.rescale:  # a carried operator's rescaling runs on the vector unit
            vector = arch.unit("vector")
            compute_by_unit[vector.kind] += leaf.rescale_ops * vector.energy_pj_per_op
    compute_pj = sum(compute_by_unit.values())
    breakdown: list[NodeLatency] = []
    cycles, bottleneck = _latency(plan, counts, breakdown, convention)
    powered = used_instances(arch, ((p.loops, p.levels[-1]) for p in plan.paths.values()),
                             reached_only=False)
    leakage = leakage_pj(arch, powered, _unit_instances(plan), cycles)
    total_pj = compute_pj + sum(sum(v.values()) for v in energy.values()) + sum(
        leakage.values())
    utilization = macs / (cycles * arch.total_macs_per_cycle) if cycles else 0.0
    return Result(
        plan.flow.name, not violations, tuple(violations), cycles, arch.clock_ghz, total_pj,
        macs, sum(ops.values()) - macs, ops, dict(traffic), tuple(fps), dict(energy),
        compute_pj, bottleneck, utilization, tuple(lv.name for lv in arch.levels),
        tuple(sorted(breakdown, key=lambda n: n.path)),
        component_costs(arch, energy, compute_by_unit, leakage), leakage,
    )


def _unit_instances(plan: Plan) -> dict[str, int]:
    """Per compute unit kind: the most instances of its level that an operator it runs
    uses."""
    arch = plan.arch
    out: dict[str, int] = {}
    for path in plan.paths.values():
        unit = arch.unit(path.op.unit)
        level = arch.level_index[unit.level]
        n = min(arch.levels[level].instances, spread_over(path.loops, level))
        out[unit.kind] = max(out.get(unit.kind, 0), n)
    return out


def _transfer_time(arch: Architecture, transfers: list[Transfer],
                   steps: int) -> tuple[float, int, float]:
    """Time of a tile's transfers: each (level, port) is a resource; the busiest one wins.
    A level read at every step adds its per-step overhead. Returns the time, the busiest
    level's index and the latency before the first word arrives."""
    if not transfers:
        return 0.0, 0, 0.0
    busy: dict[tuple[int, str], float] = defaultdict(float)
    for tr in transfers:
        lv = arch.levels[tr.level]
        rate = lv.read_words_per_cycle if tr.kind == "read" else lv.write_words_per_cycle
        busy[(tr.level, lv.port(tr.kind))] += tr.words / (max(tr.instances, 1) * rate)
    latency = 0.0
    for (index, kind), time in list(busy.items()):
        lv = arch.levels[index]
        if kind != "write" and time > 0:  # the read port, or the one shared port
            busy[(index, kind)] = time + lv.step_overhead_cycles * steps
            latency = max(latency, lv.latency_cycles)
    (index, _kind), time = max(busy.items(), key=lambda kv: kv[1])
    return time, index, latency


def charged_stores(arch: Architecture, stores: list[Transfer] | None) -> list[Transfer]:
    """A tile's stores as its ports see them: a write-back is written into the level above
    and read out of the level below, unless that level's `writeback_on_read_port` is off
    (Timeloop's convention: a write-back costs the parent's write port only)."""
    return [tr for tr in stores or () if tr.kind != "read"
            or arch.levels[tr.level].writeback_on_read_port]


def _serial_time(arch: Architecture, loads: list[Transfer], stores: list[Transfer],
                 steps: int) -> float:
    """Cycles the single-buffered tensors' loads and stores add in series with the compute:
    the buffer they use is busy while the children compute, so they cannot overlap them."""
    serial_loads = [tr for tr in loads if tr.serial]
    serial_stores = [tr for tr in stores if tr.serial]
    if not serial_loads and not serial_stores:
        return 0.0
    load = _transfer_time(arch, serial_loads, steps)[0]
    return load + _transfer_time(arch, serial_stores, steps)[0]


def latency(plan: Plan, counts: Counts, fill_drain: bool | None = None,
            overlap: str | None = None) -> float:
    """Cycles of an analysed dataflow from its counts (`dataclasses.replace(plan, arch=...)`
    re-times them under other timing parameters)."""
    return _latency(plan, counts, [], overlap_convention(plan.arch, overlap, fill_drain))[0]


def _latency(plan: Plan, counts: Counts, breakdown: list[NodeLatency],
             convention: str = "fill-drain") -> tuple[float, Bottleneck]:
    """Cycles of the tree and what bounds them."""
    arch = plan.arch
    fill_drain = convention != "perfect"
    dims = tensor_dims(plan.workload) if convention == "lockstep" else {}
    leaf_paths = {}
    for path, tile in plan.tiles.items():
        for i, c in enumerate(tile.children):
            if isinstance(c, Op):
                leaf_paths[c.op] = child_path(path, i)

    def leaf(op: str) -> tuple[float, Bound]:
        lf = counts.leaves[op]
        unit = arch.unit(lf.unit)
        compute = lf.steps * unit.cycles(lf.function)
        if lf.rescale:  # on the lanes the leaf uses: its operations per step
            lanes = max(lf.ops / max(lf.steps, 1), 1.0)
            compute += sum(n * unit.cycles(fn) for fn, n in lf.rescale) / lanes
        lv = arch.levels[lf.level]
        inst = max(lf.instances, 1)
        reads = lf.operand_reads / (inst * lv.read_words_per_cycle)
        writes = lf.result_updates / (inst * lv.write_words_per_cycle)
        if lv.ports == "shared":  # one port: the unit's reads and writes take turns
            reads = writes = reads + writes
        where = leaf_paths[op]
        best = max((compute, Bound("compute", None, unit.kind, where, op)),
                   (reads, Bound("read", lf.level, None, where, op)),
                   (writes, Bound("write", lf.level, None, where, op)), key=lambda x: x[0])
        if lf.fed:  # tensors that bypass the innermost level, straight from a level above
            fed, fed_level, _ = _transfer_time(arch, list(lf.fed), 0)
            kind = next((tr.kind for tr in lf.fed if tr.level == fed_level), "read")
            best = max(best, (fed, Bound(kind, fed_level, None, where, op, " (bypass)")),
                       key=lambda x: x[0])
        return best

    def node(path: str, tile: Tile, steps_above: int) -> tuple[float, Bound]:
        steps = steps_above * math.prod(lp.factor for lp in tile.loops if not lp.spatial)
        kids = [leaf(c.op) if isinstance(c, Op) else node(child_path(path, i), c, steps)
                for i, c in enumerate(tile.children)]
        if tile.semantics.serial:
            inner = sum(k[0] for k in kids)
        elif not tile.semantics.pipelined:
            inner = max(k[0] for k in kids)
        else:  # Pipe: stages overlap across the parent's steps, with fill and drain
            stages = [k[0] / steps for k in kids]
            inner = sum(stages) + (steps - 1) * max(stages)
        slowest = max(kids, key=lambda k: k[0])[1]
        loads, stores = counts.loads.get(path, []), charged_stores(arch, counts.stores.get(path))
        load, load_level, latency = _transfer_time(arch, loads, steps)
        store, store_level, _ = _transfer_time(arch, stores, steps)
        serial = _serial_time(arch, loads, stores, steps)
        if serial:
            note = f" with single-buffered transfers of {label(path, tile)} in series"
            slowest = slowest._replace(note=note)
        cycles, what = max((inner + serial, slowest),
                           (load, Bound("read", load_level, None, path, tile)),
                           (store, Bound("write", store_level, None, path, tile)),
                           key=lambda x: x[0])
        extra = 0.0
        if convention == "lockstep" and (load or store):
            # the steps' transfers where they happen, slot by slot (tileflow.cost.step_pipeline)
            # (a level's per-step overhead only on the steps that move: below the totals'
            # bound when some steps move nothing)
            extra = lockstep_cycles(tile, dims, loads, stores, inner, steps,
                                    lambda trs, n: _transfer_time(arch, trs, n)) - cycles
            extra += latency
        elif fill_drain and (load or store):
            # double-buffered steps overlap (also across the parents' steps), but the first
            # load and the last store are hidden by nothing: sum + (n - 1) max over n steps
            extra = (load + inner + store - cycles) / steps + latency
        breakdown.append(NodeLatency(path, label(path, tile), node_depth(path), load, inner,
                                     store, extra, serial_cycles=serial))
        return cycles + extra, what

    cycles, what = node(ROOT, plan.flow.root, 1)
    # children that run at once (Para, Pipe) each take a single-instance level's port at
    # its full bandwidth above; together they can move no more than the port allows
    port, words_time = _busiest_shared_port(arch, counts)
    if words_time > cycles:
        root = breakdown[-1]
        breakdown[-1] = replace(root, shared_port_cycles=words_time - cycles)
        cycles, what = words_time, Bound(f"tree-{port[1]}", port[0], None, ROOT,
                                         plan.flow.root)
    return cycles, bottleneck_record(arch, *what)


def _busiest_shared_port(arch: Architecture, counts: Counts) -> tuple[tuple[int, str], float]:
    """The time the busiest port of a level with one instance (DRAM) needs for everything
    the tree moves through it (the tiles' transfers, what bypassing tensors move straight to
    and from the units, a unit's own operand reads and result writes there): a lower bound
    on the cycles."""
    busy: dict[tuple[int, str], float] = defaultdict(float)

    def book(level: int, kind: str, words: float) -> None:
        lv = arch.levels[level]
        if lv.instances == 1 and words:
            rate = lv.read_words_per_cycle if kind == "read" else lv.write_words_per_cycle
            busy[(level, lv.port(kind))] += words / rate

    stores = (charged_stores(arch, s) for s in counts.stores.values())
    for transfers in (*counts.loads.values(), *stores,
                      *(lf.fed for lf in counts.leaves.values())):
        for tr in transfers:
            book(tr.level, tr.kind, tr.words)
    for lf in counts.leaves.values():
        book(lf.level, "read", lf.operand_reads)
        book(lf.level, "write", lf.result_updates)
    if not busy:
        return (0, "read"), 0.0
    return max(busy.items(), key=lambda kv: kv[1])
