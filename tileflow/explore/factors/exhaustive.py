"""Exhaustive enumeration of a structure's divisor space with the batched evaluator, the lane
restriction that makes attention's space smaller, and a branch and bound that returns the
same optimum while evaluating a small part of the space.

The restriction holds every spatial loop of a vector stage that does not spread the score
rows at the vector unit's lane count: fewer lanes leave the same work to more vector steps.
`tests/explore/test_exhaustive.py` checks on a small attention shape that the restricted
optimum equals the full one.

The branch and bound opens the space one group of slots at a time and skips a partial
assignment with all its completions when `Floor`, a lower bound on the cycles of every
completion that costs a few products per row, is not below the least cycles of a valid row
evaluated so far. Every skipped row has at least the incumbent's cycles, so the least valid
cycles found is the optimum of the whole space (the factors reported may be those of another
row of equal cycles)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.structure import Structure
from tileflow.explore.factors.space import UNDECIDED, Space, divisor_blocks, divisor_products
from tileflow.tree import ROOT, Op, Tile, child_path, walk

# a row is skipped only when its floor exceeds the incumbent by more than float rounding
FLOOR_TOLERANCE = 1e-9
EVALUATE_ROWS = 4_096  # rows evaluated at once, lowest floors first
BLOCK_ROWS = 65_536  # partial rows bounded at once


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


class Floor:
    """A lower bound on the cycles `evaluate_batch` gives rows of exact divisor factors (every
    dimension's factors multiplying to its size): the model's latency (`batch._latency`) with
    every transfer left out.

    An operator's time is at least its temporal steps times the unit's cycles per operation,
    and its operand reads (at least operations x inputs) and result updates (the operations)
    over its instances times the leaf level's words per cycle; the instances are at most the
    product of the spatial factors on its path, the operations at least the product of its
    dimensions, and steps x spatial product (every loop on the path) at least the operations.
    A tile's time is at least its children's combination by its primitive: their sum (Seq,
    Shar), their maximum (Para), or for Pipe the slowest child plus (sum - slowest) / steps,
    which never falls as a child's time grows and never grows with the steps. Loads, stores,
    their overlap and the shared ports only add to it.

    Rows may leave whole groups of slots free (held at 1): with `bounds` of the free groups'
    options (the least and largest product of each path's loops), every path's steps are
    taken at their least for the operators and at their most for Pipe tiles, and spatial
    products at their most, so the bound is below every completion of the row."""

    def __init__(self, structure: Structure):
        self.structure = structure
        self.columns = structure.loop_columns[0]  # each slot's loop column
        self.masks: list[np.ndarray] = []  # loop columns of each path's steps or spread
        loops = len(structure.loop_columns[1])
        none = np.zeros(loops, dtype=bool)
        self.plan = self._plan(structure.compiled.flow.root, ROOT, none, none)

    def _mask(self, mask: np.ndarray) -> int:
        self.masks.append(mask.copy())
        return len(self.masks) - 1

    def _plan(self, tile: Tile, path: str, temporal: np.ndarray, spatial: np.ndarray):
        c, w, arch = self.structure.compiled, self.structure.workload, self.structure.arch
        temporal, spatial = temporal.copy(), spatial.copy()
        for i, lp in enumerate(tile.loops):
            (spatial if lp.spatial else temporal)[c.slot_of[(path, i)]] = True
        kids = []
        for i, k in enumerate(tile.children):
            if isinstance(k, Op):
                o = w.op_by_name[k.op]
                lv = arch.levels[c.paths[k.op].leaf_level]
                per_op = max(arch.unit(o.unit).cycles(o.function),
                             len(o.inputs) / lv.read_words_per_cycle,
                             1 / lv.write_words_per_cycle)
                kids.append(("op", self._mask(temporal), self._mask(spatial),
                             math.prod(w.sizes[d] for d in o.dims),
                             arch.unit(o.unit).cycles(o.function), per_op))
            else:
                kids.append(self._plan(k, child_path(path, i), temporal, spatial))
        return ("tile", tile.semantics, self._mask(temporal), kids)

    def bounds(self, groups, options) -> tuple[np.ndarray, np.ndarray]:
        """Per path: the least and the largest product of its loops over each group's
        options, multiplied over the groups (the groups vary independently)."""
        low, high = np.ones(len(self.masks)), np.ones(len(self.masks))
        for group, opts in zip(groups, options, strict=True):
            columns = self.columns[np.asarray(group)]
            for k, mask in enumerate(self.masks):
                inside = mask[columns]
                if inside.any():
                    product = np.prod(opts[:, inside].astype(float), axis=1)
                    low[k] *= product.min()
                    high[k] *= product.max()
        return low, high

    def __call__(self, rows: np.ndarray, free=None) -> np.ndarray:
        full = self.structure.all_loop_factors(np.asarray(rows, dtype=np.int64))
        full = full.astype(float)
        products = [np.prod(full[:, m], axis=1) for m in self.masks]
        low, high = free if free is not None else (np.ones(len(self.masks)),) * 2

        def run(node) -> np.ndarray:
            if node[0] == "op":
                _, steps, spread, ops, cycles, per_op = node
                return np.maximum(products[steps] * low[steps] * cycles,
                                  ops * per_op / (products[spread] * high[spread]))
            _, primitive, steps, kids = node
            times = [run(k) for k in kids]
            if primitive.serial:
                return sum(times[1:], times[0])
            if not primitive.pipelined:
                return np.maximum.reduce(times)
            total, slowest = sum(times[1:], times[0]), np.maximum.reduce(times)
            return slowest + (total - slowest) / (products[steps] * high[steps])

        return run(self.plan)


def latency_floor(structure: Structure, factors: np.ndarray) -> np.ndarray:
    """`Floor` of complete rows of exact divisor factors."""
    return Floor(structure)(factors)


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
    """The least valid cycles over the divisor space. Each product of `divisor_products` is
    opened one group of slots at a time (the groups with most options first): a partial row
    whose `Floor` over every completion is not below the best valid cycles so far is skipped
    with all its completions; complete rows below it are evaluated. Resumes from `state`
    (products already finished are not visited again) and calls `save` after every product.
    `incumbent`, a row of the space, is evaluated first to start with a tight bound."""
    state = replace(state) if state is not None else Enumeration()
    if incumbent is not None and state.best_row is None:
        result = evaluate_batch(space.structure, np.asarray(incumbent, dtype=np.int64)[None])
        if result.valid[0]:
            state.best, state.best_row = float(result.cycles[0]), list(map(int, incumbent))
    floor = Floor(space.structure)
    for k, (shared, groups, options) in enumerate(divisor_products(space)):
        if k < state.products_done:
            continue
        _open_product(space, floor, shared, groups, options, state)
        state.products_done = k + 1
        if save:
            save(state)
    return state


def _open_product(space: Space, floor: Floor, shared: np.ndarray, groups, options,
                  state: Enumeration) -> None:
    order = sorted(range(len(groups)), key=lambda j: -len(options[j]))
    groups = [groups[j] for j in order]
    options = [options[j] for j in order]
    n = len(groups)
    free = [floor.bounds(groups[j:], options[j:]) for j in range(n + 1)]
    completions = [math.prod(len(o) for o in options[j:]) for j in range(n + 1)]

    def expand(rows: np.ndarray, j: int) -> None:
        bound = floor(rows, free[j])
        keep = bound * (1 - FLOOR_TOLERANCE) < state.best
        state.pruned += int((~keep).sum()) * completions[j]
        rows, bound = rows[keep], bound[keep]
        if not len(rows):
            return
        if j == n:
            _evaluate_below(space, rows, bound, state)
            return
        opts = options[j]
        step = max(1, BLOCK_ROWS // len(opts))
        for first in range(0, len(rows), step):
            part = rows[first:first + step]
            children = np.repeat(part, len(opts), axis=0)
            children[:, groups[j]] = np.tile(opts, (len(part), 1))
            expand(children, j + 1)

    base = shared.copy()
    base[base == UNDECIDED] = 1  # a free slot counts 1 in the paths' products
    expand(base[None], 0)
