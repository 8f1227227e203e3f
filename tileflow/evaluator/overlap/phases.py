"""What every overlap convention starts from: the time of each phase of one tile alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Phases:
    """One tile's phases over the run, per row: its loads, its children (`inner`) and its
    stores each alone; `serial`, the transfers of single-buffered tensors, in series with
    the children; `latency`, the first-word latency of the level its loads read; `steps`,
    the tile's steps over the run; `lock`, the lock-step slots' total (computed only for
    the convention that asks)."""

    load: np.ndarray
    inner: np.ndarray
    store: np.ndarray
    serial: np.ndarray
    latency: np.ndarray | float
    steps: np.ndarray
    lock: Callable[[], np.ndarray]

    @property
    def slowest(self) -> np.ndarray:
        """The longest phase: what the tile takes when everything else hides behind it."""
        return np.maximum(np.maximum(self.inner + self.serial, self.load), self.store)

    @property
    def moving(self) -> np.ndarray:
        """The rows where the tile moves anything (else its children alone time it)."""
        return (self.load != 0) | (self.store != 0)
