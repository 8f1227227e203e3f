"""Bypass (Timeloop's bypass/keep per level): a tile may list tensors its level does not
hold. Such a tensor moves straight between the nearest levels above and below that hold it
(the upper one sends the union of what the spatial instances below need), and the compute
reads it from the nearest level that holds it.

The rules take an operator's path as its levels and tiles (outermost first)."""

from __future__ import annotations

from collections.abc import Sequence

from tileflow.tree import Tile


def skips(levels: Sequence[int], tiles: Sequence[Tile], position: int, tensor: str,
          home: int | None = None) -> bool:
    """`tensor` skips the level of the tile at `position` of a path with these levels and
    tiles: some tile of the run of same-level tiles there lists it in `bypass`. An
    intermediate is never bypassed at its home level `home` (it keeps its homes rule)."""
    if home is not None and levels[position] == home:
        return False
    start = end = position
    while start > 0 and levels[start - 1] == levels[position]:
        start -= 1
    while end + 1 < len(levels) and levels[end + 1] == levels[position]:
        end += 1
    return any(tensor in tiles[k].bypass for k in range(start, end + 1))


def source_run(levels: Sequence[int], tiles: Sequence[Tile], j: int, tensor: str,
               home: int | None = None) -> int:
    """Start of the run of same-level tiles that sends `tensor` down across the boundary
    below position j: the run ending at j, or the nearest one above it that the tensor does
    not bypass (the outermost level is never bypassed)."""
    start = j
    while True:
        while start > 0 and levels[start - 1] == levels[start]:
            start -= 1
        if start == 0 or not skips(levels, tiles, start, tensor, home):
            return start
        start -= 1
