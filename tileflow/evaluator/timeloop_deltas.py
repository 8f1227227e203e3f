"""Timeloop's delta rule (`deltas: timeloop`) for many factor rows at once: the words an
input moves over a boundary (the tests' scalar copy: `scalar_traffic._timeloop_counts`,
`scalar_movement.timeloop_words_moved`).

The scalar rule walks the two sampled iterations (first, second) of every loop of more than
one iteration, in order, and keeps a little state from one sampled step to the next: the
slice held before and the last move of its centre. Here every sampled step of every row is
an entry of a [rows, steps] array, the steps of all loops that have more than one
iteration in some row; a step that advances a loop of one iteration in a row does not
exist for that row (it weighs nothing and is skipped as the previous step of the next one).
The state carried from step to step is whether the last move is known (else the slice was
just refilled whole); it follows a two-state automaton whose steps either set it or flip
it, so its value at every step is a running maximum and a parity, with no loop over the
steps. A row of more sampled steps than STEPS_PER_ROW is walked in chunks of that many
steps, each started two steps early (what a step compares with) and handed the state the
chunk before it ended with."""

from __future__ import annotations

import numpy as np

from tileflow.analysis.movement import AxisRec
from tileflow.evaluator.lattice import I64, VDim, VLoop, interval, positions

# rows x sampled steps evaluated at once, and the most sampled steps of one row at once (a
# row of more is walked in chunks of that many)
CELLS = 1 << 20
STEPS_PER_ROW = 1 << 16
# what one more group of rows costs, in cells (its NumPy calls: about 1,000 cells' time)
GROUP_CELLS = 1 << 10


def words_moved(axes: tuple[AxisRec, ...], dims: dict[str, VDim], loops: list[VLoop],
                rows: int) -> np.ndarray:
    """`scalar_movement.timeloop_words_moved` per row: the words Timeloop's rule fills into one
    instance of the buffer, `loops` outermost first."""
    out = np.zeros(rows, dtype=I64)
    if not rows:
        return out
    live = np.stack([lp.n > 1 for lp in loops]) if loops else np.zeros((0, rows), bool)
    used = [k for k in range(len(loops)) if live[k].any()]
    whole = rows << len(used)  # cells of every row on the steps of every used loop
    if not used:
        out[:] = _on_steps(axes, dims, [], np.arange(rows))[0]
        return out
    # or rows grouped by their own loops of more than one iteration: fewer cells where
    # the rows' loops differ, more NumPy calls
    patterns, group = np.unique(live[used].T, axis=0, return_inverse=True)
    group = group.reshape(-1)
    own = np.bincount(group) * np.exp2(patterns.sum(axis=1))  # (float: no overflow)
    if whole <= CELLS and whole <= own.sum() + GROUP_CELLS * len(patterns):
        out[:] = _on_steps(axes, dims, [loops[k] for k in used], np.arange(rows))[0]
        return out
    for g, pattern in enumerate(patterns):
        mine = np.flatnonzero(group == g)
        chosen = [loops[k] for k, on in zip(used, pattern, strict=True) if on]
        steps = 1 << len(chosen)
        block = max(1, CELLS // min(steps, STEPS_PER_ROW))
        for start in range(0, len(mine), block):
            part = mine[start:start + block]
            out[part] = _in_chunks(axes, dims, chosen, part, steps)
    return out


def _in_chunks(axes, dims: dict[str, VDim], loops: list[VLoop], rows: np.ndarray,
               steps: int) -> np.ndarray:
    """`_on_steps` of rows whose every loop has more than one iteration, at most
    STEPS_PER_ROW steps at a time, each chunk handed the state the one before ended with."""
    total = np.zeros(len(rows), dtype=I64)
    entry = None
    for first in range(0, steps, STEPS_PER_ROW):
        words, entry = _on_steps(axes, dims, loops, rows, first,
                                 min(first + STEPS_PER_ROW, steps), entry)
        total = total + words
    return total


def _on_steps(axes, dims: dict[str, VDim], loops: list[VLoop], rows: np.ndarray,
              first: int = 0, stop: int | None = None, entry: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """The rule on `rows`, the sampled steps of `loops` from `first` to `stop` (default:
    all) at once; returns the words of those steps and, per row, whether the last move is
    known after the last of them. Step s sets loop k to its second iteration where bit
    (L - 1 - k) of s is set: lexicographic order, outermost loop first, as the scalar rule
    walks them. A chunk that starts later (`first` > 0, every loop of more than one
    iteration in every row) also computes the two steps before it, which its first step
    compares with, and takes `entry` (the state after step `first` - 1) instead of what
    those two alone would give; their words are the chunk before's."""
    count = len(rows)
    dims = {d: v.take(rows) for d, v in dims.items()}
    loops = [lp.take(rows) for lp in loops]
    width = len(loops)
    stop = 1 << width if stop is None else stop
    begin = max(first - 2, 0)
    s = np.arange(begin, stop, dtype=I64)
    local = np.arange(len(s), dtype=I64)
    steps = len(s)
    bit = [(s >> (width - 1 - k)) & 1 for k in range(width)]  # [steps] per loop
    dead = np.zeros(count, dtype=I64)  # per row: the bits of its loops of one iteration
    dropping = np.zeros(count, dtype=I64)  # and of its dropping loops of more
    for k, lp in enumerate(loops):
        one = np.int64(1) << (width - 1 - k)
        dead = dead | np.where(lp.n > 1, 0, one)
        if lp.drop:
            dropping = dropping | np.where(lp.n > 1, one, 0)
    exists = (s[None, :] & dead[:, None]) == 0  # [rows, steps]
    # the weight of a step: (n - 1) for every loop at its second iteration (0: no step)
    weight = np.ones((count, steps), dtype=I64)
    for k, lp in enumerate(loops):
        weight = weight * np.where(bit[k][None, :] == 1, lp.n[:, None] - 1, 1)
    if first:
        weight[:, s < first] = 0  # the chunk before's steps
    # offsets per dim; under halo caching also the common ancestor's step and the slide
    pos = positions([(lp, bit[k][None, :]) for k, lp in enumerate(loops)], count)
    boxes = [interval(axis, dims, pos) for axis in axes]
    shape = (count, steps)
    size = np.ones(shape, dtype=I64)
    boxes = [(np.broadcast_to(lo, shape), np.broadcast_to(hi, shape)) for lo, hi in boxes]
    for lo, hi in boxes:
        size = size * (hi - lo)
    # the previous step that exists (step 0 always does; its own previous is itself)
    index = np.where(exists, local[None, :], -1)
    previous = np.maximum.accumulate(index, axis=1)
    previous = np.concatenate([np.zeros((count, 1), dtype=I64), previous[:, :-1]], axis=1)

    def before(a: np.ndarray) -> np.ndarray:
        return np.take_along_axis(a, previous, axis=1)

    size_before = before(size)
    kept = np.ones((count, steps), dtype=I64)
    moves = []
    for lo, hi in boxes:
        lo_b, hi_b = before(lo), before(hi)
        kept = kept * np.maximum(np.minimum(hi, hi_b) - np.maximum(lo, lo_b), 0)
        # the centre's shift, rounded half away from zero; zero when the slice is empty now
        twice = (lo + hi) - (lo_b + hi_b)
        move = np.sign(twice) * ((np.abs(twice) + 1) // 2)
        moves.append(np.where(size > 0, move, 0))
    known = size_before > 0  # a move exists only from a slice that held something
    same = before(known).copy()
    for move in moves:
        same &= move == before(move)
    same &= known
    # the loops from the one this step advances inward: bits 0 .. its lowest set bit
    inward = s ^ np.maximum(s - 1, 0)
    refill = (dropping[:, None] & inward[None, :]) != 0
    if begin == 0:
        refill[:, 0] = True  # the first step fills the whole slice
    # the last move is known after a step that did not refill: set (to known, or to `same`
    # when the last one was known) or flipped; steps that do not exist keep it
    sets = exists & (refill | ~known | same)
    value = ~refill & known  # where set
    if entry is not None:  # the state after step first - 1, from the chunk before
        sets[:, first - 1 - begin] = True
        value[:, first - 1 - begin] = entry
    flips = exists & ~sets
    last_set = np.maximum.accumulate(np.where(sets, local[None, :], 0), axis=1)
    flipped = np.cumsum(flips, axis=1)
    known_after = np.take_along_axis(value, last_set, axis=1) ^ (
        (flipped - np.take_along_axis(flipped, last_set, axis=1)) & 1).astype(bool)
    known_before = before(known_after)
    incremental = ~refill & (~known_before | same)
    delta = np.where(incremental, size - kept, size)
    return (weight * np.where(exists, delta, 0)).sum(axis=1), known_after[:, -1]
