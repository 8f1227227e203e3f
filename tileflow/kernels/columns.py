"""Column names of a measured campaign's table that the model's counts fill: words moved
across each boundary of the hierarchy. Shared by the campaign (which writes them) and the
calibration (which fits rates to them)."""

from __future__ import annotations

from tileflow.specs.arch import Architecture


def boundaries(arch: Architecture) -> list[tuple[str, str]]:
    """(outer, inner) level pairs, outermost first."""
    names = [lv.name for lv in arch.levels]
    return list(zip(names[:-1], names[1:], strict=True))


def words_column(outer: str, inner: str) -> str:
    """The column of words moved from level `outer` into level `inner`."""
    return f"words_{outer}_{inner}"
