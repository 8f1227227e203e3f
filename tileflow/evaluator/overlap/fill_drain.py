"""`overlap: fill-drain` (the default): double-buffered steps overlap, but the first load
and the last store are hidden by nothing, so a tile of n steps takes its slowest phase plus
one step's worth of the other two, and the first-word latency of the level it reads:

    cycles = max(load, inner, store) + (load + inner + store - max) / n + latency."""

from __future__ import annotations

import numpy as np

from tileflow.evaluator.overlap.phases import Phases


def tile_cycles(p: Phases):
    """The slowest phase, plus the fill and drain where the tile moves anything."""
    cycles = p.slowest
    extra = (p.load + p.inner + p.store - cycles) / p.steps + p.latency
    return np.where(p.moving, cycles + extra, cycles), np.where(p.moving, extra, 0.0)
