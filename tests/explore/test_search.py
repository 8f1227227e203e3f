"""The factor space and the tile-factor searches: coverage by construction, an exhaustive
enumeration checked against a brute-force one, pruning that never loses a valid point, and
searches that reach the exhaustive optimum of a small structure."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from helpers import small_arch
from hypothesis import given, settings
from hypothesis import strategies as st

from tileflow.dataflows import build
from tileflow.evaluator.structure import structure_of
from tileflow.explore.factors.space import (
    UNDECIDED,
    Limits,
    Space,
    divisor_count_within,
    divisors,
    enumerate_divisors,
    evaluate_rows,
)
from tileflow.explore.tilesearch.mcts import MCTS
from tileflow.explore.tilesearch.search import PointCache, search
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload

SMALL = {"b": 2, "m": 16, "l": 16, "k": 4, "n": 4}


def small_space(name: str = "chimera", l1_words: float = 200) -> Space:
    w = load_workload("gemm-chain", SMALL)
    arch = small_arch(l1_words=l1_words, cores=2, pes=4)
    return Space(structure_of(w, arch, build(name, w, arch)))


def g1_space(name: str = "tileflow-pipe") -> Space:
    w, arch = load_workload("G1"), load_arch("edge")
    return Space(structure_of(w, arch, build(name, w, arch)))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(["tileflow-pipe", "chimera",
                                                          "flat-rgran", "layerwise"]))
def test_random_completions_cover_every_dimension_within_the_fan_out(seed, name):
    space = g1_space(name)
    row = space.random_completion(space.root_state(), np.random.default_rng(seed))
    for chain in space.chains:
        assert math.prod(int(row[i]) for i in chain.slots) >= chain.size
    spatial = space.spatial_limit > 0
    assert (row[spatial] <= space.spatial_limit[spatial]).all()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), value=st.integers(1, 64), data=st.data())
def test_a_changed_slot_fits_by_its_tile_s_fan_out_and_its_chains(seed, value, data):
    """`Space.fits` after one slot changes, against the definition: every tile's spatial
    factors multiply to at most its fan-out (a changed spatial slot alone too), and a
    shared slot divides the size of each chain through it."""
    space = g1_space()
    row = space.random_completion(space.root_state(), np.random.default_rng(seed)).tolist()
    slot = data.draw(st.sampled_from([i for i in range(space.size) if space.chains_of[i]]))
    row[slot] = value
    slots, limit = space.structure.slots, space.spatial_limit
    tiles = {slots[i].path for i in range(space.size) if limit[i]}
    per_tile = [[i for i in range(space.size) if limit[i] and slots[i].path == t]
                for t in tiles]
    spread = all(math.prod(row[i] for i in idx) <= max(limit[i] for i in idx)
                 for idx in per_tile)
    divides = all(space.chains[k].size % value == 0 for k in space.chains_of[slot])
    expected = (divides or not space.shared[slot]) and (
        not limit[slot] or (value <= limit[slot] and spread))
    assert space.fits(row, (slot,)) == expected


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_divisor_completions_tile_every_dimension_exactly(seed):
    space = Space(g1_space().structure, non_divisors=False)
    row = space.random_completion(space.root_state(), np.random.default_rng(seed))
    assert space.exact(row)


@pytest.mark.slow
def test_enumeration_equals_brute_force_over_the_divisor_grid():
    w = load_workload("gemm-chain", {"b": 2, "m": 4, "l": 4, "k": 2, "n": 2})
    arch = small_arch(l1_words=200, cores=2, pes=4)
    space = Space(structure_of(w, arch, build("chimera", w, arch)))
    found = {tuple(r) for r in enumerate_divisors(space)}
    slots = space.structure.slots
    grids = [[d for d in divisors(w.sizes[s.dim])
              if not space.spatial_limit[i] or d <= space.spatial_limit[i]]
             for i, s in enumerate(slots)]
    tiles = {s.path for s in slots}
    spread = {p: [i for i, s in enumerate(slots) if s.path == p and s.spatial] for p in tiles}

    def fits(row) -> bool:
        return all(math.prod(row[i] for i in idx) <= max(space.spatial_limit[i] for i in idx)
                   for idx in spread.values() if idx)

    brute = {row for row in itertools.product(*grids)
             if all(math.prod(row[i] for i in c.slots) == c.size for c in space.chains)
             and fits(row)}
    assert found == brute and len(found) > 50


def test_smallest_completion_keeps_the_decisions_and_covers_every_dimension():
    space = g1_space()
    rng = np.random.default_rng(3)
    for _ in range(5):
        state = space.root_state()
        for _ in range(3):  # a partial assignment: three decisions
            free = space.free_slots(state)
            slot = free[rng.integers(len(free))]
            values = space.candidates(state, slot)
            state[slot] = values[rng.integers(len(values))]
            state = space.propagate(state)
        low = space.smallest_completion(state)
        decided = state != UNDECIDED
        assert (low[decided] == state[decided]).all()
        assert space.covers(low)


def test_pruned_subtrees_hold_no_valid_point():
    space = small_space(l1_words=120)
    exhaustive = enumerate_divisors(space)
    valid = exhaustive[evaluate_rows(space, exhaustive, "latency", Limits()).valid]
    mcts = MCTS(space, seed=1)
    cache = PointCache(space, "latency", Limits())
    for _ in range(20):
        mcts.step(cache.evaluate, 32)
    pruned = [node.state for node in mcts.nodes.values() if node.dead]
    for node in mcts.nodes.values():
        for slot, kept in node.children.items():
            for value in space.candidates(node.state, slot):
                state = node.state.copy()
                state[slot] = value
                state = space.propagate(state)
                if state.tobytes() not in kept:
                    pruned.append(state)
    assert pruned, "the capacity should rule some choices out"
    for state in pruned:
        decided = state != UNDECIDED
        assert not (valid[:, decided] == state[decided]).all(axis=1).any()


def test_the_nodes_a_step_opens_are_checked_by_its_end():
    """The bounds run once per step, on the nodes it opened: after every step, each node
    they rule out is dead (never picked again)."""
    from tileflow.explore.factors.bounds import Bounds

    space = small_space(l1_words=120)
    bounds = Bounds(space)
    mcts = MCTS(space, seed=1)
    cache = PointCache(space, "latency", Limits())
    ruled_out = 0
    for _ in range(10):
        mcts.step(cache.evaluate, 32)
        nodes = [n for key, n in mcts.nodes.items() if key != mcts.root_key]
        feasible = bounds.feasible(np.array([n.state for n in nodes]))
        for node, ok in zip(nodes, feasible, strict=True):
            assert ok or node.dead
            ruled_out += not ok
        assert not mcts._unchecked
    assert ruled_out, "the capacity should rule some choices out"


@pytest.mark.slow
def test_mcts_reaches_the_exhaustive_optimum_of_a_small_structure_and_random_does_not_beat_it():
    """The tileflow-pipe structure of a small chain: 9,135 divisor points. MCTS finds the
    exhaustive optimum within 1,500 evaluations; random search at the same budget finds a
    valid point no better than it."""
    space = Space(small_space("tileflow-pipe").structure, non_divisors=False)
    exhaustive = enumerate_divisors(space)
    optimum = evaluate_rows(space, exhaustive, "latency", Limits()).cost.min()
    for method in ("mcts", "random"):
        cache = search(space, method, budget_evals=1500, seed=0, batch=16)
        assert cache.evaluations <= 1500
        assert cache.best()[1] >= optimum * (1 - 1e-12)
        if method == "mcts":
            assert cache.best()[1] == pytest.approx(optimum, rel=1e-12)


def test_tpe_stays_within_its_budget_and_never_beats_the_exhaustive_optimum():
    """TPE's cost grows with the square of its trials: a short run, checked against the
    exhaustive optimum as a lower bound and its own budget."""
    space = Space(small_space("tileflow-pipe").structure, non_divisors=False)
    exhaustive = enumerate_divisors(space)
    optimum = evaluate_rows(space, exhaustive, "latency", Limits()).cost.min()
    cache = search(space, "tpe", budget_evals=96, seed=0, batch=16)
    assert 0 < cache.evaluations <= 96
    assert cache.best()[1] >= optimum * (1 - 1e-12)


def test_the_capped_count_tells_a_space_within_a_limit_from_one_beyond_it():
    """Against the enumeration itself: within n rows exactly when the space has at most n."""
    for name in ("chimera", "tileflow-pipe"):
        space = Space(small_space(name).structure, non_divisors=False)
        n = len(enumerate_divisors(space))
        assert n > 2
        assert divisor_count_within(space, n) and divisor_count_within(space, 10 * n)
        assert not divisor_count_within(space, n - 1)
        assert not divisor_count_within(space, n // 2)


@pytest.mark.parametrize("objective,column", [("energy", "energy_pj"), ("dram", "dram_words"),
                                              ("edp", "edp")])
def test_objectives_pick_their_metric(objective, column):
    space = small_space()
    cache = search(space, "mcts", objective=objective, budget_evals=150, seed=2)
    best_row, best = cache.best()
    metrics = [m for c, v, m in cache.rows.values() if v]
    assert best == min(m[column] for m in metrics)


def test_a_dram_limit_makes_points_above_it_invalid():
    space = small_space()
    free = search(space, "random", budget_evals=100, seed=4)
    values = sorted(m["dram_words"] for _, v, m in free.rows.values() if v)
    limit = values[len(values) // 2]
    limited = search(space, "random", budget_evals=100, seed=4,
                     limits=Limits(dram_words=limit))
    for _, valid, m in limited.rows.values():
        assert not valid or m["dram_words"] <= limit
        assert valid or m.get("violation_limit_dram", 0) > 0 or any(
            v > 0 for k, v in m.items() if k.startswith("violation_"))


def test_a_time_budget_holds_on_a_structure_slow_to_evaluate(monkeypatch):
    """Rows that take 50 ms each: a search of 64 evaluations in batches of 64 under a
    0.3 s budget probes a few rows, then evaluates only what the time left affords at that
    cost, instead of one batch of 3.2 s (a structure search's share once ran 13 s over)."""
    import time

    from tileflow.explore.tilesearch import search as module

    real = module.evaluate_rows

    def slow(space, rows, *args, **kwargs):
        time.sleep(0.05 * len(rows))
        return real(space, rows, *args, **kwargs)

    monkeypatch.setattr(module, "evaluate_rows", slow)
    start = time.perf_counter()
    cache = search(small_space(), "mcts", budget_evals=64, budget_seconds=0.3, batch=64)
    elapsed = time.perf_counter() - start
    assert 1 <= cache.evaluations < 20 and elapsed < 1.0, (cache.evaluations, elapsed)
