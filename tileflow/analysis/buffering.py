"""Buffering depth per tensor and level (Timeloop's multiple buffering).

A tensor held in a buffer is single-buffered (depth 1: a transfer into or out of the buffer
waits for the compute that uses it, and the compute waits for the transfer) or
double-buffered (depth 2: twice the footprint, and the transfers of one step overlap the
neighbouring steps' compute). A tile may set the depth per tensor (`buffering: {C: 1}`),
over its level's default (`buffering:` of the level). Unset, the tensor follows the
published convention: footprint once, transfers overlapped."""

from __future__ import annotations

from collections.abc import Sequence

from tileflow.specs.arch import Architecture
from tileflow.tree import Tile

SINGLE, DOUBLE = 1, 2


def depth(arch: Architecture, level: int, tensor: str,
          tiles: Sequence[Tile] = ()) -> int | None:
    """The depth of `tensor` in the buffer at `level` index: the first of `tiles` (the tiles
    at that level, outermost first) that names the tensor, else the level's default."""
    for t in tiles:
        found = t.depth_of(tensor)
        if found is not None:
            return found
    return arch.levels[level].buffering


def footprint_scale(found: int | None, double_buffer: bool = False) -> float:
    """Words held per word of slice: 2 for a double-buffered tensor; `double_buffer` makes
    tensors with no depth set double-buffered (the older global flag)."""
    if found is None:
        return 2.0 if double_buffer else 1.0
    return float(found)


def serialised(found: int | None) -> bool:
    """Transfers of a single-buffered tensor do not overlap the compute."""
    return found == SINGLE

