"""Exhaustive enumeration of a structure's divisor space with the batched evaluator, and the
lane restriction that makes attention's space small enough to enumerate.

The restriction holds every spatial loop of a vector stage that does not spread the score
rows at the vector unit's lane count: fewer lanes leave the same work to more vector steps.
`tests/explore/test_exhaustive.py` checks on a small attention shape that the restricted
optimum equals the full one."""

from __future__ import annotations

import math

import numpy as np

from tileflow.explore.batch import evaluate_batch
from tileflow.explore.space import Space, divisor_blocks, divisor_products
from tileflow.explore.structure import Structure
from tileflow.tree import Op, walk


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


def divisor_optimum(space: Space, progress=None) -> tuple[float, list[int] | None, int, int]:
    """(least valid cycles, its factors, valid points, points) over the divisor space."""
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
