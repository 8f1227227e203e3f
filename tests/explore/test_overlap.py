"""The overlap conventions, one module each (`tileflow.evaluator.overlap`): every convention
an accelerator may name has its rule, and each rule is docs/latency.md's formula."""

from __future__ import annotations

import numpy as np
import pytest

from tileflow.evaluator.overlap import CONVENTIONS, Phases
from tileflow.specs.arch import OVERLAPS


def test_every_convention_an_accelerator_may_name_has_its_module() -> None:
    assert set(CONVENTIONS) == set(OVERLAPS)


def phases(load: float, inner: float, store: float, steps: int, latency: float = 0.0,
           lock: float = 0.0) -> Phases:
    def one(x: float) -> np.ndarray:
        return np.array([x])

    return Phases(one(load), one(inner), one(store), one(0.0), latency, one(steps),
                  lambda: one(lock))


@pytest.mark.parametrize(("overlap", "cycles", "extra"), [
    ("perfect", 64.0, 0.0),  # the slowest phase alone
    ("fill-drain", 64.0 + (8 + 64 + 4 - 64) / 2 + 3, (8 + 64 + 4 - 64) / 2 + 3),
    ("lockstep", 80.0 + 3, 80.0 - 64 + 3),  # the slots' total, whatever it is
])
def test_each_convention_times_a_tile_as_documented(overlap: str, cycles: float,
                                                     extra: float) -> None:
    """A tile of 2 steps loading 8 cycles, computing 64 and storing 4, reading a level
    with a first-word latency of 3 (lock step: its slots add up to 80)."""
    got, added = CONVENTIONS[overlap](phases(8, 64, 4, 2, latency=3, lock=80))
    assert (float(got[0]), float(np.asarray(added).reshape(-1)[0])) == (cycles, extra)


@pytest.mark.parametrize("overlap", OVERLAPS)
def test_a_tile_that_moves_nothing_takes_its_children_s_time(overlap: str) -> None:
    got, added = CONVENTIONS[overlap](phases(0, 64, 0, 2, latency=3, lock=80))
    assert (float(got[0]), float(np.asarray(added).reshape(-1)[0])) == (64.0, 0.0)
