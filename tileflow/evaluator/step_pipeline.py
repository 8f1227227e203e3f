"""The lock-step pipeline of a tile's steps (`overlap: lockstep`) for every row at once:
`scalar_step_pipeline.lockstep_cycles` (tests/) over arrays.

Each tensor of a tile moves at the first step of each of its periods (loads) and after the
last (stores); periods are suffix products of the tile's temporal loops, so they divide one
another. Slot s holds the loads of step s, the compute of step s - 1 and the stores of step
s - 2. Two consecutive steps share no divisor above 1, so a middle slot holds the large
transfers of at most one side: its loads are those of the tensors whose period divides s,
its stores those whose period divides s - 1. The middle slots are therefore counted per
tensor period (how many s in [2, steps) have it as their largest dividing period) instead
of per residue, which keeps the work per row independent of the period's length."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from tileflow.evaluator.engine import Busy
from tileflow.specs.workload import Workload
from tileflow.tree import Tile


def tensor_dims(workload: Workload) -> dict[str, frozenset[str]]:
    """The loop dimensions each tensor's indices use, over every operator that touches it."""
    out: dict[str, set[str]] = {}
    for op in workload.ops:
        for access in (op.output, *op.inputs):
            out.setdefault(access.tensor, set()).update(access.dims)
    return {t: frozenset(d) for t, d in out.items()}


def transfer_time(arch, table: Busy | None, steps) -> tuple:
    """`scalar_model._transfer_time` per row: the busiest (level, port), with per-step
    overheads on the read (or the one shared) port of a level that moves; and the latency
    before the first word."""
    if not table:
        return 0.0, 0.0
    latency = 0.0
    time = None
    for (index, kind), busy in table.items():
        lv = arch.levels[index]
        if kind != "write":  # the read port, or the one shared port
            moving = busy > 0
            busy = np.where(moving, busy + lv.step_overhead_cycles * steps, busy)
            latency = np.where(moving, np.maximum(latency, lv.latency_cycles), latency)
        time = busy if time is None else np.maximum(time, busy)
    return time, latency


def periods(tile: Tile, tensors: list[str], dims: Mapping[str, frozenset[str]],
            factor: Callable[[int], np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """`scalar_step_pipeline.period` per row: the product of the innermost temporal loops
    that do not index the tensor, up to the first that does and has more than one iteration
    (1 under `no_reuse`). `factor(i)` is the tile's loop i's factor per row."""
    out = {}
    for t in tensors:
        p = np.ones(rows, dtype=np.int64)
        if t not in tile.no_reuse:
            indexed = dims.get(t, frozenset())
            broken = np.zeros(rows, dtype=bool)
            for i in reversed(range(len(tile.loops))):
                lp = tile.loops[i]
                if lp.spatial:
                    continue
                f = factor(i)
                if lp.dim in indexed:
                    broken = broken | (f > 1)
                else:
                    p = np.where(broken, p, p * f)
        out[t] = p
    return out


def _multiples(p: np.ndarray, low: int, high: np.ndarray) -> np.ndarray:
    """How many multiples of p lie in [low, high] (none where high < low)."""
    return np.maximum(high, low - 1) // p - (low - 1) // p


def lockstep_cycles(arch, tile: Tile, dims: Mapping[str, frozenset[str]],
                    loads: Mapping[str, Busy], stores: Mapping[str, Busy], inner: np.ndarray,
                    steps: np.ndarray, factor: Callable[[int], np.ndarray],
                    serial_loads: Mapping[str, Busy] | None = None,
                    serial_stores: Mapping[str, Busy] | None = None) -> np.ndarray:
    """Cycles of `steps` steps run in lock step, per row. `loads` and `stores` give per
    tensor the time its transfers keep each (level, port) busy over the whole run; `inner`
    is the children's time over the run, spread evenly over the steps. The single-buffered
    tensors' transfers (`serial_loads`, `serial_stores`) add to the compute of the step
    they happen in: step s's loads of the tensors whose period divides s, its stores of
    those whose period divides s + 1."""
    rows = len(steps)
    serial_loads, serial_stores = serial_loads or {}, serial_stores or {}
    tensors = sorted(set(loads) | set(stores) | set(serial_loads) | set(serial_stores))
    period = periods(tile, tensors, dims, factor, rows)
    spread = inner / steps

    def time(table: Mapping[str, Busy], moving: Mapping[str, np.ndarray]) -> np.ndarray:
        """One step's time of the tensors in `moving` (a mask per tensor)."""
        if not table:
            return np.zeros(rows)
        busy: Busy = {}
        for t, ports in table.items():
            scale = np.where(moving[t], period[t] / steps, 0.0)
            for key, b in ports.items():
                busy[key] = busy[key] + b * scale if key in busy else b * scale
        return np.broadcast_to(transfer_time(arch, busy, 1)[0], (rows,))

    def compute(loaded: Mapping[str, np.ndarray],
                stored: Mapping[str, np.ndarray]) -> np.ndarray:
        """A step's compute with the single-buffered transfers it waits for."""
        if not serial_loads and not serial_stores:
            return spread
        return spread + time(serial_loads, loaded) + time(serial_stores, stored)

    def dividing(s) -> dict[str, np.ndarray]:
        return {t: s % period[t] == 0 for t in tensors}

    # the ends: slots 0, 1, steps and steps + 1 (slot steps is slot 1 when steps is 1)
    total = time(loads, dividing(0))
    total = total + np.maximum(np.where(steps > 1, time(loads, dividing(1)), 0.0),
                               compute(dividing(0), dividing(1)))
    total = total + np.where(steps > 1, np.maximum(compute(dividing(steps - 1), dividing(steps)),
                                                   time(stores, dividing(steps - 1))), 0.0)
    total = total + time(stores, dividing(steps))
    # the middle slots s in [2, steps): loads of the tensors whose period divides s, stores
    # of those whose period divides s - 1 (the compute of step s - 1 waits for the
    # single-buffered loads of step s - 1 and stores of step s); at most one of s and s - 1
    # is divided by a period above 1
    every = {t: period[t] == 1 for t in tensors}
    load_every, store_every = time(loads, every), time(stores, every)
    compute_every = compute(every, every)
    middle = np.maximum(steps - 2, 0)
    counted = np.zeros(rows, dtype=np.int64)
    for k, t in enumerate(tensors):
        p = period[t]
        first = p > 1  # the first tensor with this period stands for the others
        for u in tensors[:k]:
            first &= period[u] != p
        if not first.any():
            continue
        larger = np.full(rows, np.iinfo(np.int64).max)  # the next larger period, if any
        for u in tensors:
            larger = np.where((period[u] > p) & (period[u] < larger), period[u], larger)
        within = {u: period[u] <= p for u in tensors}
        on_load = _multiples(p, 2, steps - 1) - _multiples(larger, 2, steps - 1)
        on_store = _multiples(p, 1, steps - 2) - _multiples(larger, 1, steps - 2)
        on_load, on_store = np.where(first, on_load, 0), np.where(first, on_store, 0)
        counted = counted + on_load + on_store
        total = total + on_load * np.maximum.reduce(
            [time(loads, within), compute(every, within), store_every])
        total = total + on_store * np.maximum.reduce(
            [load_every, compute(within, every), time(stores, within)])
    return total + (middle - counted) * np.maximum.reduce(
        [load_every, compute_every, store_every])
