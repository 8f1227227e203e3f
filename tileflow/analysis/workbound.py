"""Bound the work of one evaluation before it starts.

The counts along an axis that the tiles cover exactly are closed forms, whatever the sizes.
Along an axis they do not (a clipped last tile, a sliding window, a strided or shifted
index) the count is an exact sum over the steps of the loops that move along it, so its cost
grows with the number of those steps. The command line refuses trees whose enumeration would
take more than MAX_ENUMERATED_STEPS per axis, instead of running for minutes or hours."""

from __future__ import annotations

import math

from tileflow.errors import InputError

MAX_ENUMERATED_STEPS = 2**13


def check_enumeration(plan) -> None:
    """Raise InputError naming the operator, the tensor axis and the steps when a count would
    enumerate more than MAX_ENUMERATED_STEPS steps of the loops along one axis."""
    for name, path in plan.paths.items():
        exact = path.exact_dims
        accesses = (path.op.output, *path.op.inputs)
        for access in accesses:
            for axis in access.axes:
                dims = set(axis.dims)
                if axis.is_plain and dims <= exact:
                    continue
                moving = [lp for lp in path.loops if lp.dim in dims and lp.n > 1]
                steps = math.prod(lp.n for lp in moving)
                if steps > MAX_ENUMERATED_STEPS:
                    largest = max(moving, key=lambda lp: lp.n)
                    tile = path.tiles[largest.node][0]
                    raise InputError(
                        f"operator '{name}': the loops along axis '{axis}' of {access.tensor} "
                        f"make {steps:,} steps and do not tile it exactly (a clipped last "
                        f"tile or a window), so its count is a sum over the steps; at most "
                        f"{MAX_ENUMERATED_STEPS:,} are supported. Choose tile sizes that "
                        "divide the dimension, or smaller sizes", where=f"tile ({tile})")
