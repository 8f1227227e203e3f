"""How a tile's loads, children and stores overlap in time: one module per convention that
an accelerator's `overlap:` names (docs/latency.md), each turning a tile's phases
(`Phases`) into its cycles, for every row at once."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tileflow.evaluator.overlap import fill_drain, lockstep, perfect
from tileflow.evaluator.overlap.phases import Phases

# convention -> (a tile's phases -> (its cycles, what it adds to its slowest phase))
TileCycles = Callable[[Phases], tuple[np.ndarray, np.ndarray | float]]
CONVENTIONS: dict[str, TileCycles] = {
    "perfect": perfect.tile_cycles,
    "fill-drain": fill_drain.tile_cycles,
    "lockstep": lockstep.tile_cycles,
}

__all__ = ["CONVENTIONS", "Phases", "TileCycles"]
