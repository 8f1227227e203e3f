"""The lock-step pipeline of a tile's steps (`overlap: lockstep`): a tile's transfers placed
on the steps where they happen, and its cycles summed slot by slot.

Under `perfect` and `fill-drain` a tile's loads, compute and stores are totals over its run,
as if every step moved the same words. A tensor's slice changes only when a loop that
indexes it moves: a GEMM tile whose innermost loop is the reduction writes its output back
once every k steps, in one large transfer. A controller that runs its double-buffered steps
in lock step (in slot s: the loads of step s, the compute of step s - 1, the stores of step
s - 2, the slot ending when all three have) cannot spread that write-back over the k steps:
the slot that holds it takes as long as it does. This module sums those slots exactly."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from scalar_traffic import Transfer

from tileflow.specs.workload import Workload
from tileflow.tree import Tile

TransferTime = Callable[[list[Transfer], int], tuple[float, int, float]]


def tensor_dims(workload: Workload) -> dict[str, frozenset[str]]:
    """The loop dimensions each tensor's indices use, over every operator that touches it
    (this copy's own: the evaluator's is not shared with the reference)."""
    out: dict[str, set[str]] = {}
    for op in workload.ops:
        for access in (op.output, *op.inputs):
            out.setdefault(access.tensor, set()).update(access.dims)
    return {t: frozenset(d) for t, d in out.items()}


def period(tile: Tile, tensor: str, dims: frozenset[str]) -> int:
    """Consecutive steps of the tile that share one slice of `tensor`: the product of the
    innermost temporal loops that do not index it (none under `no_reuse`), up to the first
    that does and has more than one iteration. The tensor is loaded at the first step of each
    period, stored after its last."""
    if tensor in tile.no_reuse:
        return 1
    out = 1
    for lp in reversed(tile.loops):
        if lp.spatial or lp.factor == 1:  # a loop of one iteration moves nothing
            continue
        if lp.dim in dims:
            break
        out *= lp.factor
    return out


def lockstep_cycles(tile: Tile, dims: Mapping[str, frozenset[str]], loads: Iterable[Transfer],
                    stores: Iterable[Transfer], inner: float, steps: int,
                    transfer_time: TransferTime) -> float:
    """Cycles of `steps` steps run in lock step: slot s (0 <= s <= steps + 1) takes the largest
    of the loads of step s, the compute of step s - 1 and the stores of step s - 2 (each
    where it exists). `inner` is the children's time over the run, spread evenly over the
    steps; single-buffered (`serial`) transfers add to the compute of the step they happen
    in. `transfer_time(transfers, 1)` gives one step's time of a set of transfers (busiest
    port, a level's per-step overhead included)."""
    if steps <= 0:
        return 0.0
    loads = [tr for tr in loads if tr.words]
    stores = [tr for tr in stores if tr.words]
    periods = {tr.tensor: period(tile, tr.tensor, dims.get(tr.tensor, frozenset()))
               for tr in (*loads, *stores)}
    distinct = sorted(set(periods.values()))
    cycle = distinct[-1] if distinct else 1  # periods divide one another: the largest repeats
    # the periods with a transfer at each residue, as bits (loads at the first step of a
    # period, stores after its last): steps with the same bits cost the same
    load_bits, store_bits = [0] * cycle, [0] * cycle
    for i, p in enumerate(distinct):
        for r in range(0, cycle, p):
            load_bits[r] |= 1 << i
            store_bits[r + p - 1] |= 1 << i

    def costs(transfers: list[Transfer], bits: list[int]) -> tuple[list[float], list[float]]:
        """Per residue: the overlapped transfers' time, and the single-buffered ones'."""
        overlapped, serial = {}, {}
        for key in set(bits):
            now = [tr._replace(words=tr.words * periods[tr.tensor] / steps) for tr in transfers
                   if key >> distinct.index(periods[tr.tensor]) & 1]
            overlapped[key] = _time(transfer_time, [tr for tr in now if not tr.serial])
            serial[key] = _time(transfer_time, [tr for tr in now if tr.serial])
        return [overlapped[k] for k in bits], [serial[k] for k in bits]

    load, load_serial = costs(loads, load_bits)
    store, store_serial = costs(stores, store_bits)
    compute = [inner / steps + a + b for a, b in zip(load_serial, store_serial, strict=True)]

    def slot(s: int) -> float:
        parts = [0.0]
        if s < steps:
            parts.append(load[s % cycle])
        if 1 <= s <= steps:
            parts.append(compute[(s - 1) % cycle])
        if 2 <= s <= steps + 1:
            parts.append(store[(s - 2) % cycle])
        return max(parts)

    # slots 2 .. steps - 1 hold all three stages and repeat with the period; the ends apart
    total = sum(slot(s) for s in sorted({0, 1, steps, steps + 1}))
    for r in range(cycle):
        middle = (steps - 1 - r) // cycle - (1 - r) // cycle  # slots s in [2, steps), s % cycle = r
        if middle > 0:
            total += middle * max(load[r], compute[(r - 1) % cycle], store[(r - 2) % cycle])
    return total


def _time(transfer_time: TransferTime, transfers: list[Transfer]) -> float:
    return transfer_time(transfers, 1)[0] if transfers else 0.0
