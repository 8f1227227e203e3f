"""The model's traffic at a cache boundary in the units a cache simulator counts: words
brought into the inner level (read misses and write-allocate misses), not words moved both
ways. Derived from the model's per-level fills and updates alone."""

from __future__ import annotations

from collections.abc import Mapping

from tileflow.cost.result import Result


def boundary_words(result: Result, inner: str) -> float:
    """Words the model moves across the boundary just above level `inner`, both ways: per
    tensor, the fills of the outermost level at or below the boundary that the tensor passes
    through, plus the updates into the innermost level above it (write-backs)."""
    return sum(fill + update for fill, update, _ in crossing(result, inner).values())


def crossing(result: Result, inner: str) -> dict[str, tuple[float, float, str]]:
    """tensor -> (fill into the level below the boundary, updates written back above it,
    the level above) for the tensors that cross the boundary above `inner`."""
    levels = list(result.levels)
    j = levels.index(inner)
    out = {}
    tensors = {t for per in result.traffic.values() for t in per}
    for t in sorted(tensors):
        below = [lv for lv in levels[j:] if t in result.traffic.get(lv, {})]
        above = [lv for lv in levels[:j] if t in result.traffic.get(lv, {})]
        if below and above:
            out[t] = (result.traffic[below[0]][t].fill, result.traffic[above[-1]][t].update,
                      above[-1])
    return out


def _inbound(fill: float, update: float, size: float) -> float:
    """Fills plus one write-allocation per element written back (a partial sum written
    back k times is filled again k - 1 times: those fills are already counted)."""
    return fill + min(update, size)


def inbound_words(result: Result, inner: str, sizes: Mapping[str, int]) -> float:
    """Words brought into the level below the boundary above `inner`: every fill, plus one
    write-allocation per element written back. Write-backs themselves are not inbound; a
    cache simulator such as cachegrind does not count them either."""
    return sum(_inbound(fill, update, sizes[t])
               for t, (fill, update, _) in crossing(result, inner).items())
