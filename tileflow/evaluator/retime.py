"""The cycles of traced rows on accelerators of other timings, without counting again.

A pass books every transfer with the time it keeps a port busy, from the words it counted
and the accelerator's bandwidths; the trace keeps those bookings in order (`Tally.journal`).
Booking them again on an accelerator that differs only in its timing (bandwidths, request
overheads, first-word latencies, cycles per operation, the overlap convention) gives its
cycles: what a calibration needs, which asks for the same rows under many timings. Rows of
one tree shape whose passes booked the same transfers (a dataset's rows: one mapping at
many sizes) are booked together, as the rows of one batch."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from tileflow.analysis.shape import node_key
from tileflow.evaluator.batch import Trace, tree_cycles
from tileflow.evaluator.compiled import Compiled
from tileflow.evaluator.engine import Tally
from tileflow.evaluator.leaf import Leaf, fed_times
from tileflow.evaluator.step_pipeline import tensor_dims
from tileflow.specs.arch import Architecture

# what an accelerator's levels may change: what only the timing reads
TIMING_FIELDS = ("read_words_per_cycle", "write_words_per_cycle", "step_overhead_cycles",
                 "latency_cycles")
# per booking kind, the positions of its arguments that hold per-row values
PER_ROW = {"transfer": (4, 5), "feed": (2, 3), "one_port": (2,)}


def retimed(trace: Trace, arch: Architecture) -> np.ndarray:
    """The cycles of a traced row (or batch) on `arch`, an accelerator that differs from
    the structure's only in its levels' timing fields, its units' cycles per operation and
    its overlap convention (ValueError otherwise)."""
    _check(trace, arch)
    tally = Tally(trace.rows.count, arch)
    for method, args in trace.tally.journal:
        getattr(tally, method)(*args)
    return tree_cycles(trace.rows, tally, _refed(trace.leaves, tally), trace.rescale,
                       arch=arch)


def retimed_many(traces: Sequence[Trace], arch: Architecture) -> np.ndarray:
    """`retimed` of many one-row traces, one value each; the traces of one tree shape that
    booked the same transfers go together."""
    out = np.empty(len(traces))
    groups: dict[tuple, list[int]] = {}
    for k, trace in enumerate(traces):
        _check(trace, arch)
        if trace.rows.count != 1:
            raise ValueError("retimed_many() takes traces of one row each")
        groups.setdefault(_booked(trace)[0], []).append(k)
    for members in groups.values():
        out[members] = _stacked([traces[k] for k in members], arch)
    return out


@dataclass(frozen=True)
class _Stacked:
    """What `tree_cycles` reads of a batch's rows: the compiled shape and the trip counts."""

    c: Compiled
    n: np.ndarray
    count: int


LEAF_FIELDS = ("ops", "steps", "reads", "updates", "instances")


def _stacked(traces: list[Trace], arch: Architecture) -> np.ndarray:
    """The cycles of one-row traces of one group, as one batch of their rows: each trace's
    per-row values flat (`_booked`), one column per value."""
    if len(traces) == 1:
        return retimed(traces[0], arch)
    first = traces[0]
    table = np.stack([_booked(t)[1] for t in traces])  # traces x values
    column = iter(table.T)
    slots = len(first.rows.n)
    rows = _Stacked(first.rows.c, np.stack([next(column) for _ in range(slots)])
                    .astype(np.int64), len(traces))
    tally = Tally(len(traces), arch)
    for method, args in first.tally.journal:
        per_row = PER_ROW[method]
        getattr(tally, method)(*(next(column) if a in per_row else arg
                                 for a, arg in enumerate(args)))
    leaves = {op: Leaf(*(next(column) for _ in LEAF_FIELDS)) for op in first.leaves}
    rescale = {op: [next(column) for _ in counts] for op, counts in first.rescale.items()}
    return tree_cycles(rows, tally, _refed(leaves, tally), rescale, arch=arch)


def _booked(trace: Trace) -> tuple[tuple, np.ndarray]:
    """A one-row trace's group (`_bookings`) and its per-row values in one flat array: the
    trip counts, then the bookings' per-row arguments, the leaves' and the rescaling's
    counts, in order. Kept on the trace: a fit asks for it at every setting."""
    if trace.booked is None:
        values = [*trace.rows.n[:, 0]]
        for method, args in trace.tally.journal:
            values += [_one(args[a]) for a in PER_ROW[method]]
        for leaf in trace.leaves.values():
            values += [_one(getattr(leaf, f)) for f in LEAF_FIELDS]
        for counts in trace.rescale.values():
            values += [_one(n) for n in counts]
        trace.booked = (_bookings(trace), np.array(values, dtype=float))
    return trace.booked


def _one(value) -> float:
    """A one-row value (an array of one element or a plain number)."""
    return float(np.asarray(value, dtype=float).reshape(-1)[0])


def _refed(leaves: dict[str, Leaf], tally: Tally) -> dict[str, Leaf]:
    """The leaves with their bypassing tensors' times read from the new bookings."""
    out = {}
    for op, leaf in leaves.items():
        fed, ports = fed_times(tally.fed.get(op))
        out[op] = leaf._replace(fed=fed, fed_ports=ports)
    return out


def _bookings(trace: Trace) -> tuple:
    """What makes traces re-timeable together: the accelerator, the tree's shape, the
    operators' units and functions, the dimensions each tensor's indices use (what lock
    step moves a tensor by), and the bookings but for their per-row values."""
    c = trace.rows.c
    ops = (tuple((op.name, op.unit, op.function) for op in c.workload.ops),
           tuple(sorted((t, tuple(sorted(d))) for t, d in tensor_dims(c.workload).items())))
    bookings = tuple((method, *(arg for a, arg in enumerate(args) if a not in PER_ROW[method]))
                     for method, args in trace.tally.journal)
    return (c.arch, node_key(c.flow.root), tuple(sorted(c.flow.homes.items())), ops, bookings,
            tuple(trace.rescale), tuple(len(v) for v in trace.rescale.values()))


def _check(trace: Trace, arch: Architecture) -> None:
    if trace.tally is None or trace.tally.journal is None:
        raise ValueError("retimed() takes a trace of `batch.traced`")
    if not _timing_only(trace.rows.c.arch, arch):
        raise ValueError("retimed() takes an accelerator that differs only in its timing")


@functools.lru_cache(maxsize=256)
def _timing_only(own: Architecture, arch: Architecture) -> bool:
    """Whether `arch` is `own` but for the timing (a fit asks again and again with the same
    pair)."""
    if len(arch.levels) != len(own.levels):
        return False
    same = replace(arch, overlap=own.overlap, matrix=own.matrix, vector=own.vector,
                   levels=tuple(replace(lv, **{f: getattr(mine, f) for f in TIMING_FIELDS})
                                for lv, mine in zip(arch.levels, own.levels, strict=True)))
    units = all(replace(getattr(arch, u), cycles_per_op=getattr(own, u).cycles_per_op)
                == getattr(own, u) for u in ("matrix", "vector"))
    return same == own and units
