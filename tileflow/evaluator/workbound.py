"""Bound the work of one evaluation before it starts.

The counts along an axis that the tiles cover exactly are closed forms, whatever the sizes.
Along an axis they do not (a clipped last tile, a sliding window, a strided or shifted
index) the count is an exact sum over the steps of the loops that move along it, so its cost
grows with the number of those steps. A row whose loops along one such axis make more than
MAX_ENUMERATED_STEPS steps is refused: the command line names the tree's axis
(`check_enumeration`), the search marks the row invalid (violation 'enumeration')."""

from __future__ import annotations

import numpy as np

from tileflow.errors import InputError
from tileflow.evaluator.engine import Rows, exact_dims
from tileflow.evaluator.structure import Structure

MAX_ENUMERATED_STEPS = 2**13


def enumerated_steps(r: Rows) -> np.ndarray:
    """Per row, the most steps of the loops along one tensor axis that the tiles do not
    cover exactly."""
    return np.max(np.stack([_steps(r, axis) for axis in r.c.enumerated_axes]), axis=0) \
        if r.c.enumerated_axes else np.zeros(r.count)


def _steps(r: Rows, axis) -> np.ndarray:
    """The steps of the loops along one axis, per row (0 where the tiles cover it exactly)."""
    path = r.c.paths[axis.op]
    steps = r.prod(path, axis.moving)
    if axis.plain:
        exact = exact_dims(r, path)
        steps = np.where(np.all([exact[d] for d in axis.dims], axis=0), 0, steps)
    return steps


def check_enumeration(structure: Structure) -> None:
    """Raise InputError naming the operator, the tensor axis and the steps when the tree (at
    its own factors) makes more than MAX_ENUMERATED_STEPS steps along one axis that its
    tiles do not cover exactly."""
    c = structure.compiled
    r = Rows(c, structure.all_loop_factors(structure.default_factors.reshape(1, -1)))
    for axis in c.enumerated_axes:
        steps = int(_steps(r, axis)[0])
        if steps <= MAX_ENUMERATED_STEPS:
            continue
        path = c.paths[axis.op]
        access, text = next((a, str(x)) for a in (path.op.output, *path.op.inputs)
                            for x in a.axes
                            if tuple(sorted(set(x.dims))) == axis.dims and x.is_plain == axis.plain)
        largest = max(axis.moving, key=lambda i: int(r.n[path.loops[i].slot][0]))
        node = path.chain[path.loops[largest].node]
        raise InputError(
            f"operator '{axis.op}': the loops along axis '{text}' of {access.tensor} make "
            f"{steps:,} steps and do not tile it exactly (a clipped last tile or a window), "
            f"so its count is a sum over the steps; at most {MAX_ENUMERATED_STEPS:,} are "
            "supported. Choose tile sizes that divide the dimension, or smaller sizes",
            where=f"tile ({node})")
