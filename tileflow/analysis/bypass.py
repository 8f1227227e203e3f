"""Bypass (Timeloop's bypass/keep per level): a tile may list tensors its level does not
hold. Such a tensor moves straight between the nearest levels above and below that hold it
(the upper one sends the union of what the spatial instances below need), and the compute
reads it from the nearest level that holds it."""

from __future__ import annotations

from tileflow.analysis.prepare import OpPath


def bypassed(path: OpPath, position: int, tensor: str, home: int | None = None) -> bool:
    """`tensor` skips the level of the tile at `position` on an operator's path: some tile
    of the run of same-level tiles there lists it in `bypass` (Timeloop's bypass). An
    intermediate is never bypassed at its home level `home` (it keeps its homes rule)."""
    levels = path.levels
    if home is not None and levels[position] == home:
        return False
    start = end = position
    while start > 0 and levels[start - 1] == levels[position]:
        start -= 1
    while end + 1 < len(levels) and levels[end + 1] == levels[position]:
        end += 1
    return any(tensor in path.tiles[k][1].bypass for k in range(start, end + 1))
