"""What a structure is worth: the best cost a tile-factor search finds for it within a budget.

The searches take a `fit(structure, budget_evals, seed) -> (best_cost, best_factors)`
callable. `random_fit` is the default: exact divisor tilings, every one of them when the
budget allows and uniform samples otherwise, evaluated in batches, feasible points first."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.structure import Structure
from tileflow.explore.structures.tilings import Tilings

Fit = Callable[[Structure, int, int], tuple[float, np.ndarray]]


class Metrics(NamedTuple):
    """Per row: cycles, energy, validity and the summed violation amounts."""

    cycles: np.ndarray
    energy_pj: np.ndarray
    dram_words: np.ndarray
    valid: np.ndarray
    excess: np.ndarray


OBJECTIVES: dict[str, Callable[[Metrics], np.ndarray]] = {
    "latency": lambda m: m.cycles,
    "energy": lambda m: m.energy_pj,
    "edp": lambda m: m.cycles * m.energy_pj,
    "dram": lambda m: m.dram_words,
}


def measure(structure: Structure, factors: np.ndarray, chunk: int = 512) -> Metrics:
    """Evaluate rows of factors; a row the model rejects outright (raises) is invalid."""
    factors = np.asarray(factors, dtype=np.int64).reshape(-1, len(structure.slots))
    parts = []
    for start in range(0, len(factors), chunk):
        rows = factors[start:start + chunk]
        try:
            parts.append(_metrics(evaluate_batch(structure, rows)))
        except InvalidDataflow:
            parts.extend(_one_by_one(structure, rows))
    if not parts:
        empty = np.zeros(0)
        return Metrics(empty, empty, empty, np.zeros(0, dtype=bool), empty)
    return Metrics(*(np.concatenate(x) for x in zip(*parts, strict=True)))


def _metrics(result) -> Metrics:
    excess = np.zeros(len(result))
    for amounts in result.violations.values():
        excess = excess + np.maximum(amounts, 0)
    return Metrics(result.cycles, result.energy_pj, result.dram_words,
                   np.asarray(result.valid, dtype=bool), excess)


def _one_by_one(structure: Structure, rows: np.ndarray) -> list[Metrics]:
    out = []
    for row in rows:
        try:
            out.append(_metrics(evaluate_batch(structure, row[None])))
        except InvalidDataflow:
            inf = np.array([np.inf])
            out.append(Metrics(inf, inf, inf, np.array([False]), inf))
    return out


def pick(metrics: Metrics, cost: np.ndarray) -> int:
    """The best row: the lowest cost among valid rows, else the smallest violation."""
    if metrics.valid.any():
        return int(np.argmin(np.where(metrics.valid, cost, np.inf)))
    return int(np.argmin(metrics.excess))


def random_fit(objective: str | Callable[[Metrics], np.ndarray] = "latency") -> Fit:
    """A tile-factor search by exhaustion or uniform sampling of exact divisor tilings;
    returns (inf, least-violating factors) when no tried tiling is valid."""
    cost_of = OBJECTIVES[objective] if isinstance(objective, str) else objective

    def fit(structure: Structure, budget_evals: int, seed: int) -> tuple[float, np.ndarray]:
        tilings = Tilings(structure)
        total = tilings.count
        if total == 0:
            rows = structure.default_factors[None]
        elif total <= budget_evals:
            rows = tilings.all()
        else:
            rng = np.random.default_rng(seed)
            rows = np.unique(tilings.sample(rng, budget_evals), axis=0)
        metrics = measure(structure, rows)
        cost = cost_of(metrics)
        best = pick(metrics, cost)
        value = float(cost[best]) if metrics.valid[best] else float("inf")
        return value, rows[best]

    return fit
