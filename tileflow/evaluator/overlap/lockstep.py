"""`overlap: lockstep`: each tensor moves on the steps where its slice changes, and the
tile's steps are summed slot by slot (slot s: step s's loads, step s - 1's compute and step
s - 2's stores; `evaluator.step_pipeline`), plus the first-word latency of the level it
reads (docs/mechanisms.md, "Steps in lock step")."""

from __future__ import annotations

import numpy as np

from tileflow.evaluator.overlap.phases import Phases


def tile_cycles(p: Phases):
    """The slots' total where the tile moves anything; its children alone elsewhere."""
    cycles = p.slowest
    lock = p.lock()
    return (np.where(p.moving, lock + p.latency, cycles),
            np.where(p.moving, lock - cycles + p.latency, 0.0))
