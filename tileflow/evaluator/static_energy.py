"""Two energy terms beyond words x energy per word: whole-block accesses (a level whose
access moves `block_words` words charges each instance's count rounded up to whole blocks)
and leakage (pJ per cycle of each instance, MAC or lane in use, over the run's cycles).
Both follow Timeloop's accounting (docs/energy.md); the instances in use are those the
dataflow's spatial loops reach, the others taken as power-gated."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol

from tileflow.specs.arch import Architecture

# A count per instance within this of a whole block is that block (float sums of counts).
BLOCK_SLACK = 1e-9


class SpatialLoop(Protocol):
    """What the instance counts need of a loop: its trip count, whether it is spatial and
    the level of the tile that holds it."""

    n: int
    spatial: bool
    level: int


def whole_block_words(words: float, instances: int, block_words: int) -> float:
    """Words charged for `words` moved over `instances` instances in `block_words`-word
    accesses: each instance's share rounded up to whole blocks (3 words in 8-word blocks on
    one instance: 8)."""
    if words <= 0:
        return 0.0
    instances = max(instances, 1)
    blocks = math.ceil(words / instances / block_words - BLOCK_SLACK)
    return float(instances * blocks * block_words)


def spread_over(loops: Iterable[SpatialLoop], level: int) -> int:
    """Instances of `level` one operator uses: the product of the spatial factors of its
    tiles at levels above `level` (each spreads over instances of the levels below it)."""
    return math.prod(lp.n for lp in loops if lp.spatial and lp.level < level)


def used_instances(arch: Architecture, paths: Iterable[tuple[Sequence[SpatialLoop], int]],
                   reached_only: bool = True) -> list[int]:
    """Per level: the most instances any operator spreads over (`paths`: each operator's
    loops and its innermost level), at most the level's instances. `reached_only`: an
    operator counts only at the levels down to its innermost (the instances that hold its
    data: whole blocks); else at every level (the instances powered: leakage, which
    Timeloop charges on a level that keeps nothing too)."""
    used = [0] * len(arch.levels)
    for loops, innermost in paths:
        for index in range(innermost + 1 if reached_only else len(arch.levels)):
            used[index] = max(used[index], min(arch.levels[index].instances,
                                               spread_over(loops, index)))
    return used


def leakage_pj(arch: Architecture, used: Sequence[int], unit_instances: dict[str, int],
               cycles: float) -> dict[str, float]:
    """Leakage per component (a level's name, or 'matrix unit' / 'vector unit'): pJ per
    cycle x instances in use x cycles; a unit's instances in use are those of its level
    the operators it runs use, each with all its MACs or lanes. Components that leak
    nothing are left out."""
    out: dict[str, float] = {}
    for lv, n in zip(arch.levels, used, strict=True):
        if lv.leakage_pj_per_cycle and n:
            out[lv.name] = lv.leakage_pj_per_cycle * n * cycles
    for kind, n in unit_instances.items():
        unit = arch.unit(kind)
        if unit.leakage_pj_per_cycle and n:
            out[f"{unit.kind} unit"] = unit.leakage_pj_per_cycle * n * unit.parallelism * cycles
    return out
