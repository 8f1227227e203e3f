"""Exhaustive enumeration of a structure's divisor space with the batched evaluator, the lane
restriction that makes attention's space smaller, and a branch and bound that returns the
same optimum while evaluating a small part of the space.

The restriction holds every spatial loop of a vector stage that does not spread the score
rows at the vector unit's lane count: fewer lanes leave the same work to more vector steps.
`tests/explore/test_exhaustive.py` checks on a small attention shape that the restricted
optimum equals the full one.

The branch and bound skips a row when `latency_floor`, a lower bound on its cycles that costs
a few products per row, is not below the least cycles of a valid row evaluated so far. Every
skipped row has at least the incumbent's cycles, so the least valid cycles found is the
optimum of the whole space (the factors reported may be another row of equal cycles)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from tileflow.explore.batch import evaluate_batch
from tileflow.explore.space import Space, divisor_blocks, divisor_products, product_blocks
from tileflow.explore.structure import Structure
from tileflow.tree import Op, Tile, walk

# a row is skipped only when its floor exceeds the incumbent by more than float rounding
FLOOR_TOLERANCE = 1e-9
EVALUATE_ROWS = 4_096  # rows evaluated at once, lowest floors first


def lane_restriction(structure: Structure) -> dict[int, int]:
    """Slot -> lane count for the vector stages' spatial loops off the score rows."""
    w, arch = structure.workload, structure.arch
    vector = {o.name for o in w.ops if arch.unit(o.unit).kind == "vector"}
    leaf_of = {}
    for path, node in walk(structure.template.root):
        if not isinstance(node, Op):
            for child in node.children:
                if isinstance(child, Op):
                    leaf_of[path] = child.op
    rows = w.ops[0].output.dims[-2]
    return {i: arch.vector.parallelism for i, s in enumerate(structure.slots)
            if s.spatial and leaf_of.get(s.path) in vector and s.dim != rows}


def space_size(space: Space) -> int:
    """Points of the divisor space (with the space's fixed slots)."""
    return sum(math.prod(len(o) for o in options) for _, _, options in divisor_products(space))


def latency_floor(structure: Structure, factors: np.ndarray) -> np.ndarray:
    """A lower bound on the cycles `evaluate_batch` gives each row of exact divisor factors
    (every dimension's factors multiplying to its size).

    It is the model's latency (`batch._latency`) with every transfer left out. An operator's
    time is at least its temporal steps times the unit's cycles per operation, and its
    operand reads (at least operations x inputs) and result updates (the operations) over the
    instances times the leaf level's words per cycle; the instances are at most the product
    of the spatial factors on its path, and the operations at least the product of its
    dimensions. A tile's time is at least its children's combination by its primitive (sum,
    maximum, or the pipeline's fill plus steps x slowest stage, each non-decreasing in every
    child's time), since loads, stores, their overlap and the shared ports only add to it."""
    full = structure.all_loop_factors(np.asarray(factors, dtype=np.int64))
    c = structure.compiled
    arch, w = structure.arch, structure.workload
    ones = np.ones(len(full))

    def leaf(op: str, steps: np.ndarray, spread: np.ndarray) -> np.ndarray:
        o = w.op_by_name[op]
        lv = arch.levels[c.paths[op].leaf_level]
        ops = math.prod(w.sizes[d] for d in o.dims)
        return np.maximum.reduce([steps * arch.unit(o.unit).cycles(o.function),
                                  ops * len(o.inputs) / (spread * lv.read_words_per_cycle),
                                  ops / (spread * lv.write_words_per_cycle)])

    def node(path: str, tile: Tile, steps: np.ndarray, spread: np.ndarray) -> np.ndarray:
        for i, lp in enumerate(tile.loops):
            column = full[:, c.slot_of[(path, i)]]
            if lp.spatial:
                spread = spread * column
            else:
                steps = steps * column
        kids = [leaf(k.op, steps, spread) if isinstance(k, Op)
                else node(f"{path}.{i}", k, steps, spread)
                for i, k in enumerate(tile.children)]
        if tile.primitive in ("Seq", "Shar"):
            return sum(kids[1:], kids[0])
        if tile.primitive == "Para":
            return np.maximum.reduce(kids)
        stages = [k / steps for k in kids]
        return sum(stages[1:], stages[0]) + (steps - 1) * np.maximum.reduce(stages)

    return node("root", c.flow.root, ones, ones)


@dataclass
class Enumeration:
    """Where an enumeration stands: the products of the space finished (in
    `divisor_products` order), the best valid row, and the rows evaluated and skipped."""

    products_done: int = 0
    best: float = math.inf
    best_row: list[int] | None = None
    valid: int = 0  # valid rows among those evaluated
    evaluated: int = 0
    pruned: int = 0

    @property
    def done(self) -> int:
        return self.evaluated + self.pruned


def divisor_optimum(space: Space, progress=None) -> tuple[float, list[int] | None, int, int]:
    """(least valid cycles, its factors, valid points, points) over the divisor space,
    every point evaluated."""
    best, best_row, valid, done = math.inf, None, 0, 0
    for block in divisor_blocks(space):
        result = evaluate_batch(space.structure, block)
        cycles = np.where(result.valid, result.cycles, np.inf)
        valid += int(result.valid.sum())
        done += len(block)
        k = int(np.argmin(cycles))
        if cycles[k] < best:
            best, best_row = float(cycles[k]), block[k].tolist()
        if progress:
            progress(done, best)
    return best, best_row, valid, done


def _evaluate_below(space: Space, block: np.ndarray, floor: np.ndarray,
                    state: Enumeration) -> None:
    """Evaluate the rows of a block whose floor is below the incumbent, lowest floors first,
    tightening the incumbent between batches."""
    live = floor * (1 - FLOOR_TOLERANCE) < state.best
    count = int(live.sum())
    state.pruned += len(block) - count
    if not count:
        return
    order = np.argsort(floor[live], kind="stable")
    block, floor = block[live][order], floor[live][order]
    start = 0
    while start < len(block):
        below = np.flatnonzero(floor[start:] * (1 - FLOOR_TOLERANCE) < state.best)
        if not len(below):
            state.pruned += len(block) - start
            return
        # rows are sorted by floor, so those still below are a prefix of what is left
        stop = start + min(int(below[-1]) + 1, EVALUATE_ROWS)
        rows = block[start:stop]
        result = evaluate_batch(space.structure, rows)
        cycles = np.where(result.valid, result.cycles, np.inf)
        state.valid += int(result.valid.sum())
        state.evaluated += len(rows)
        k = int(np.argmin(cycles))
        if cycles[k] < state.best:
            state.best, state.best_row = float(cycles[k]), rows[k].tolist()
        start = stop


def branch_and_bound(space: Space, state: Enumeration | None = None,
                     save: Callable[[Enumeration], None] | None = None,
                     incumbent: np.ndarray | None = None) -> Enumeration:
    """The least valid cycles over the divisor space, skipping rows whose `latency_floor`
    is not below the best valid cycles so far. Resumes from `state` (products already
    finished are not visited again) and calls `save` after every product. `incumbent`, a
    row of the space, is evaluated first to start with a tight bound."""
    state = replace(state) if state is not None else Enumeration()
    if incumbent is not None and state.best_row is None:
        result = evaluate_batch(space.structure, np.asarray(incumbent, dtype=np.int64)[None])
        if result.valid[0]:
            state.best, state.best_row = float(result.cycles[0]), list(map(int, incumbent))
    for k, (shared, groups, options) in enumerate(divisor_products(space)):
        if k < state.products_done:
            continue
        for block in product_blocks(shared, groups, options):
            _evaluate_below(space, block, latency_floor(space.structure, block), state)
        state.products_done = k + 1
        if save:
            save(state)
    return state
