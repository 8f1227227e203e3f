"""The exhaustive target's shortcuts lose nothing. The lane restriction: on a small attention
shape on Edge, the optimum over the divisor points with the vector stages at full lanes equals
the optimum over every divisor point. The branch and bound: `latency_floor` is below the
evaluated cycles of every divisor row of many structures (Seq, Shar, Para and Pipe tiles),
the floor of a partial row with free groups is below that of every completion, and the
branch and bound returns the optimum that evaluating every point gives, also when it is
interrupted and resumed."""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace

import numpy as np
import pytest
from explore.spaces import DIAMOND, FUSION_ONLY
from helpers import small_arch, workload

from tileflow.dataflows import build
from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.structure import structure_of
from tileflow.explore.factors.exhaustive import (
    Enumeration,
    Floor,
    branch_and_bound,
    divisor_optimum,
    lane_restriction,
    latency_floor,
    space_size,
)
from tileflow.explore.factors.space import UNDECIDED, Space, divisor_products, enumerate_divisors
from tileflow.explore.structures.structure_space import StructureSpace, structures
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload

SMALL_ATTENTION = {"b": 1, "m": 4, "l": 64, "k": 2, "n": 2}


def attention_space(**fixed_lanes) -> Space:
    w = load_workload("attention", SMALL_ATTENTION)
    arch = load_arch("edge")
    structure = structure_of(w, arch, build("tileflow-pipe", w, arch))
    fixed = lane_restriction(structure) if fixed_lanes.get("lanes") else {}
    return Space(structure, non_divisors=False, fixed=fixed)


def test_restricted_optimum_equals_the_full_optimum_on_a_small_shape():
    full, restricted = attention_space(), attention_space(lanes=True)
    fixed = restricted.fixed
    assert fixed and set(fixed.values()) == {load_arch("edge").vector.parallelism}
    assert space_size(restricted) < space_size(full) // 100
    best_restricted, row, _, restricted_points = divisor_optimum(restricted)
    assert restricted_points == space_size(restricted)
    assert all(row[i] == v for i, v in fixed.items())
    # over all 508,032 points (the branch and bound: exact, see below), evaluating few
    found = branch_and_bound(full)
    assert found.done == space_size(full) and found.evaluated < found.done // 20
    assert found.valid > 0
    assert found.best == best_restricted
    assert evaluate_batch(full.structure, np.array([found.best_row])).cycles[0] == found.best


@functools.cache
def _structures() -> tuple:
    return tuple(_generate_structures())


def _generate_structures():
    """Baselines on a GEMM chain and attention, and generated attention and diamond
    structures (Shar, Para and Pipe tiles among them)."""
    chain = load_workload("gemm-chain", {"b": 2, "m": 16, "l": 16, "k": 4, "n": 4})
    arch = small_arch(l1_words=400, reg_words=8, cores=2, pes=4)
    for name in ("layerwise", "chimera", "tileflow-pipe", "flat-rgran"):
        yield structure_of(chain, arch, build(name, chain, arch))
    att = load_workload("attention", {"b": 2, "m": 16, "l": 16, "k": 4, "n": 4})
    edge = load_arch("edge")
    yield structure_of(att, edge, build("tileflow-pipe", att, edge))
    rng = np.random.default_rng(5)
    for w in (att, workload(DIAMOND)):
        space = StructureSpace(w, edge)
        for _ in range(2):
            yield structure_of(w, edge, space.structure(space.random(rng)).template)
    para = StructureSpace(workload(DIAMOND), edge,
                          replace(FUSION_ONLY, primitives=("Seq", "Para"), homes=False))
    found = [e for e in structures(para) if "Para" in (*e.primitive, e.root_primitive)]
    for enc in found[:2]:
        yield structure_of(para.frame.workload, edge, para.structure(enc).template)


@pytest.mark.parametrize("k", range(11))
def test_the_floor_is_below_the_cycles_of_every_divisor_row(k):
    structure = _structures()[k]
    rows = enumerate_divisors(Space(structure, non_divisors=False), limit=20_000)
    rows = rows[np.random.default_rng(k).permutation(len(rows))[:1_500]]
    cycles = evaluate_batch(structure, rows).cycles
    floor = latency_floor(structure, rows)
    assert (floor > 0).all()
    assert (floor <= cycles * (1 + 1e-12)).all()
    assert (floor >= 0.5 * cycles).any()  # not a vacuous bound: close to the cycles somewhere


def test_branch_and_bound_resumes_where_it_stopped_and_agrees_with_every_point():
    space = attention_space(lanes=True)
    best, _, _, points = divisor_optimum(space)
    saved: list[Enumeration] = []

    class Stop(Exception):
        pass

    def save_then_stop(state: Enumeration) -> None:
        saved.append(Enumeration(**vars(state)))
        if state.products_done == 2:
            raise Stop

    with pytest.raises(Stop):
        branch_and_bound(space, save=save_then_stop)
    resumed = branch_and_bound(space, state=saved[-1])
    whole = branch_and_bound(space)
    assert resumed.best == whole.best == best
    assert resumed.done == whole.done == points
    assert resumed.products_done == whole.products_done > 2
    # started from a tight incumbent, the same optimum with no more evaluations
    warm = branch_and_bound(space, incumbent=np.array(whole.best_row))
    assert warm.best == best and warm.evaluated <= whole.evaluated + 1


def _rows_of(shared: np.ndarray, groups, options) -> np.ndarray:
    """Every row of one product: the shared slots as given, each group one of its options."""
    picks = list(itertools.product(*(range(len(o)) for o in options)))
    rows = np.repeat(shared[None, :], len(picks), axis=0)
    for r, pick in enumerate(picks):
        for g, opts, i in zip(groups, options, pick, strict=True):
            rows[r, g] = opts[i]
    return rows


@pytest.mark.parametrize("k", [1, 2, 7, 9])
def test_the_floor_of_a_partial_row_is_below_every_completion(k):
    """Groups left free (held at 1) and bounded by their options' products: the floor of
    the partial row is at most the least floor of its completions, with equality once no
    group is free."""
    structure = _structures()[k]
    space = Space(structure, non_divisors=False)
    floor = Floor(structure)
    for shared, groups, options in list(divisor_products(space))[:6]:
        rows = _rows_of(shared, groups, options)
        complete = floor(rows)
        assert np.allclose(complete, latency_floor(structure, rows), rtol=1e-12)
        for first in range(len(groups) + 1):
            base = shared.copy()
            base[base == UNDECIDED] = 1
            for g, opts in zip(groups[:first], options[:first], strict=True):
                base[g] = opts[0]  # the first option of the fixed groups
            fixed = np.ones(len(rows), dtype=bool)
            for g, opts in zip(groups[:first], options[:first], strict=True):
                fixed &= (rows[:, g] == opts[0]).all(axis=1)
            bound = floor(base[None], floor.bounds(groups[first:], options[first:]))[0]
            assert bound <= complete[fixed].min() * (1 + 1e-12)
            if first == len(groups):
                assert bound == pytest.approx(complete[fixed].min(), rel=1e-12)
