"""Pruning bounds: a partial assignment is ruled out only where no covering completion is
valid (checked against the exhaustive divisor space), and the footprint bound is below every
completion at the levels it is checked on."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import small_arch

from tileflow.dataflows import build
from tileflow.evaluator.structure import structure_of
from tileflow.explore.factors.bounds import Bounds
from tileflow.explore.factors.space import (
    UNDECIDED,
    Limits,
    Space,
    enumerate_divisors,
    evaluate_rows,
)
from tileflow.specs.workload import load_workload

SMALL = {"b": 2, "m": 16, "l": 16, "k": 4, "n": 4}


def tight_space(name: str, l1_words: float, reg_words: float) -> Space:
    w = load_workload("gemm-chain", SMALL)
    arch = small_arch(l1_words=l1_words, reg_words=reg_words, cores=2, pes=4)
    return Space(structure_of(w, arch, build(name, w, arch)), non_divisors=False)


def partial_states(space: Space, rng: np.random.Generator, count: int) -> list[np.ndarray]:
    """Random partial assignments: one to five decisions from the root."""
    out = []
    for _ in range(count):
        state = space.root_state()
        for _ in range(rng.integers(1, 6)):
            free = space.free_slots(state)
            if not free:
                break
            slot = free[rng.integers(len(free))]
            values = space.candidates(state, slot)
            state[slot] = values[rng.integers(len(values))]
            state = space.propagate(state)
        out.append(state)
    return out


@pytest.mark.parametrize("name,l1_words,reg_words", [
    ("chimera", 120, np.inf), ("tileflow-pipe", 120, np.inf), ("tileflow-pipe", 400, 4),
    ("flat-rgran", 400, 6)])
def test_ruled_out_partial_assignments_have_no_valid_completion(name, l1_words, reg_words):
    space = tight_space(name, l1_words, reg_words)
    exhaustive = enumerate_divisors(space)
    valid = exhaustive[evaluate_rows(space, exhaustive, "latency", Limits()).valid]
    assert len(valid)
    states = partial_states(space, np.random.default_rng(7), 150)
    ok = Bounds(space).feasible(np.array(states))
    assert not ok.all(), "the limits should rule some partial assignments out"
    for state in np.array(states)[~ok]:
        decided = state != UNDECIDED
        assert not (valid[:, decided] == state[decided]).all(axis=1).any()


def test_a_footprint_limit_rules_out_what_exceeds_it_in_every_completion():
    space = tight_space("tileflow-pipe", np.inf, np.inf)
    limits = Limits(footprint_words={"L1": 150})
    exhaustive = enumerate_divisors(space)
    valid = exhaustive[evaluate_rows(space, exhaustive, "latency", limits).valid]
    states = np.array(partial_states(space, np.random.default_rng(3), 150))
    ok = Bounds(space, limits).feasible(states)
    assert not ok.all() and ok.any()
    for state in states[~ok]:
        decided = state != UNDECIDED
        assert not (valid[:, decided] == state[decided]).all(axis=1).any()


@pytest.mark.parametrize("name", ["tileflow-pipe", "chimera", "flat-rgran"])
def test_footprint_bound_is_below_every_completion_on_the_levels_it_checks(name):
    space = Space(tight_space(name, np.inf, np.inf).structure)  # non-divisors too
    bounds = Bounds(space)
    rng = np.random.default_rng(11)
    for state in partial_states(space, rng, 12):
        rows = np.array([bounds.footprint_bound(state)]
                        + [space.random_completion(state, rng) for _ in range(8)])
        metrics = evaluate_rows(space, rows, "latency", Limits()).metrics
        for x in bounds.monotone_levels(state):
            level = space.levels[x]
            if f"footprint_{level}" in metrics:
                words = metrics[f"footprint_{level}"]
                assert (words[0] <= words[1:] + 1e-9).all(), (level, state)


def test_pipe_children_on_one_instance_are_not_checked_while_a_spread_is_open():
    """Pipe children spread over Reg instances only with loops of more than one iteration:
    while those slots are undecided, the Reg footprint may still fall, so Reg is not checked;
    once every child spreads, it is."""
    space = tight_space("tileflow-pipe", np.inf, np.inf)
    bounds = Bounds(space)
    root = space.root_state()
    reg = space.levels.index("Reg")
    assert reg not in bounds.monotone_levels(root)
    spread = root.copy()
    for i, s in enumerate(space.structure.slots):
        if s.spatial and s.path != "root" and spread[i] == UNDECIDED:
            spread[i] = 2
    assert reg in bounds.monotone_levels(spread)
