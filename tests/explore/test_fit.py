"""Baselines fitted under their own rules, and the closed-form warm start."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from helpers import small_arch

from tileflow.cost import evaluate
from tileflow.dataflows import baselines_for, build
from tileflow.dataflows.chain import chimera
from tileflow.evaluator.structure import structure_of
from tileflow.explore.factors.space import (
    Limits,
    Space,
    divisors,
    enumerate_divisors,
    evaluate_rows,
)
from tileflow.explore.tilesearch.fit import closed_form_tiles, fit_baseline
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload

SMALL = {"b": 2, "m": 16, "l": 16, "k": 4, "n": 4}


def chain_traffic(m, k, n, l, tm, tl):  # noqa: E741  the closed form with ceilings
    return (m * k + m * n) * -(-l // tl) + (k * l + n * l) * -(-m // tm)


@pytest.mark.parametrize("capacity", [3_000, 20_000, 200_000])
def test_closed_form_tiles_fit_and_come_close_to_the_best_divisor_pair(capacity):
    w = load_workload("gemm-chain", {"b": 8, "m": 512, "l": 512, "k": 64, "n": 64})
    arch = load_arch("edge")
    arch = replace(arch, levels=(arch.levels[0], replace(arch.levels[1],
                                                         capacity_words=capacity),
                                 *arch.levels[2:]))
    tiles = closed_form_tiles(w, arch)
    m, l, k, n = 512, 512, 64, 64  # noqa: E741  (batch >= cores: a core takes whole rows)
    tm, tl = tiles["m"], tiles["l"]

    def footprint(tm, tl):
        return max(tm * k + k * tl + tm * tl, tm * tl + tl * n + tm * n)

    assert footprint(tm, tl) <= capacity
    feasible = [(a, b) for a, b in itertools.product(divisors(m), divisors(l))
                if footprint(a, b) <= capacity]
    best = min(chain_traffic(m, k, n, l, a, b) for a, b in feasible)
    assert chain_traffic(m, k, n, l, tm, tl) <= 2.0 * best


def test_closed_form_tiles_grow_with_the_buffer():
    w = load_workload("G1")
    small, large = (closed_form_tiles(w, load_arch(a)) for a in ("edge-artifact", "edge"))
    assert small["m"] * small["l"] <= large["m"] * large["l"]


def test_chimera_is_fitted_to_the_least_dram_traffic_of_its_structure():
    w = load_workload("gemm-chain", SMALL)
    arch = small_arch(l1_words=150, cores=2, pes=4)
    structure = structure_of(w, arch, build("chimera", w, arch))
    every = enumerate_divisors(Space(structure))
    result = evaluate_rows(Space(structure), every, "dram", Limits())
    least = result.metrics["dram_words"][result.valid].min()
    fitted = evaluate(w, arch, fit_baseline("chimera", w, arch, budget_evals=400))
    assert fitted.valid
    assert fitted.dram_words == pytest.approx(least)


@pytest.mark.parametrize("name", ["flat-rgran", "tileflow-pipe", "chimera", "layerwise"])
def test_a_baseline_is_fitted_valid_exactly_where_its_structure_can_fit(name):
    w = load_workload("gemm-chain", SMALL)
    arch = small_arch(l1_words=120, cores=2, pes=4)
    structure = structure_of(w, arch, build(name, w, arch))
    every = enumerate_divisors(Space(structure))
    can_fit = evaluate_rows(Space(structure), every, "latency", Limits()).valid.any()
    fitted = evaluate(w, arch, fit_baseline(name, w, arch, budget_evals=300))
    assert fitted.valid == can_fit
    assert fitted.valid or any(v.kind == "capacity" for v in fitted.violations)


def test_where_nothing_fits_the_result_names_the_level_and_the_amounts():
    w = load_workload("gemm-chain", SMALL)
    arch = small_arch(l1_words=2, cores=2, pes=4)
    result = evaluate(w, arch, fit_baseline("chimera", w, arch, budget_evals=100))
    assert not result.valid
    assert any(v.kind == "capacity" and v.level == "L1" and v.needed > v.available == 2
               for v in result.violations)


def test_every_baseline_fits_on_every_shape_where_its_builder_did():
    w = load_workload("G4")
    arch = load_arch("edge")
    for name in baselines_for(w):
        fitted = evaluate(w, arch, fit_baseline(name, w, arch, budget_evals=150))
        assert fitted.valid or not evaluate(w, arch, build(name, w, arch)).valid
    assert np.isfinite(fitted.cycles)


@pytest.mark.parametrize("workload", ["gemm-chain", "attention"])
def test_chimera_reaches_the_compulsory_traffic_and_then_the_lower_latency(workload):
    """Buffers that hold everything: the least DRAM traffic is every input read once and the
    output written once. Many factors reach it; the fit must also spread them as well as
    the builder's whole tiles do (which reach it too)."""
    w = load_workload(workload, SMALL)
    arch = small_arch(cores=2, pes=4)
    b, m, l, k, n = (SMALL[d] for d in "bmlkn")  # noqa: E741
    compulsory = b * (m * k + k * l + l * n + m * n)
    whole = evaluate(w, arch, chimera(w, arch, {"m": m, "l": l}))
    assert whole.valid and whole.dram_words == compulsory
    fitted = evaluate(w, arch, fit_baseline("chimera", w, arch))
    assert fitted.valid
    assert fitted.dram_words == compulsory
    assert fitted.cycles <= whole.cycles * (1 + 1e-9)


def test_chimera_on_g1_edge_is_no_slower_than_layerwise():
    """Chimera keeps every intermediate on chip (the compulsory traffic); fitted with a
    spread that uses the array, it does not lose to Layerwise, which moves them through DRAM."""
    w, arch = load_workload("G1"), load_arch("edge")
    q = w.sizes["b"] * w.sizes["m"] * w.sizes["k"]  # Q, K, V and the output: same size here
    chimera_run = evaluate(w, arch, fit_baseline("chimera", w, arch))
    layerwise = evaluate(w, arch, fit_baseline("layerwise", w, arch))
    assert chimera_run.valid and layerwise.valid
    assert chimera_run.dram_words == 4 * q
    assert chimera_run.cycles <= layerwise.cycles
