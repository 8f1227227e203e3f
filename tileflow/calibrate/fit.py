"""A deterministic fit of declared parameters to measured latencies: least squares on the
log of predicted over measured, from the defaults, within the physical bounds; seeded
splits for held-out validation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from tileflow.calibrate.parameters import ParameterSet

# predict(values, rows) -> predicted cost of `rows` under parameter `values`
Predictor = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Fit:
    values: np.ndarray
    names: tuple[str, ...]
    train_rows: np.ndarray
    rms_log_error: float  # on the training rows
    bound_hits: tuple[dict, ...]
    evaluations: int

    def as_dict(self) -> dict[str, float]:
        return {n: float(v) for n, v in zip(self.names, self.values, strict=True)}


def fit(parameters: ParameterSet, predict: Predictor, measured: np.ndarray,
        rows: np.ndarray, max_evaluations: int = 200, diff_step: float = 1e-3) -> Fit:
    """Minimise sum(log(predicted / measured)^2) over `rows`. The same inputs give the same
    answer: a fixed start (the defaults), a deterministic solver (trust region reflective)."""
    rows = np.asarray(rows)
    target = np.log(np.asarray(measured, float)[rows])

    def residual(x: np.ndarray) -> np.ndarray:
        predicted = predict(parameters.from_search(x), rows)
        return np.log(np.maximum(predicted, 1e-30)) - target

    lo, hi = parameters.search_bounds()
    start = np.clip(parameters.to_search(parameters.defaults), lo, hi)
    result = least_squares(residual, start, bounds=(lo, hi), method="trf",
                           diff_step=diff_step, max_nfev=max_evaluations)
    values = parameters.from_search(result.x)
    rms = float(np.sqrt(np.mean(result.fun ** 2)))
    return Fit(values, parameters.names, rows, rms, tuple(parameters.at_bounds(values)),
               int(result.nfev))


def split(n: int, heldout_fraction: float = 0.3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) row indices, sorted; the same seed gives the same split."""
    if not 0 < heldout_fraction < 1:
        raise ValueError(f"held-out fraction must be in (0, 1), got {heldout_fraction}")
    order = np.random.default_rng(seed).permutation(n)
    k = max(1, int(round(n * heldout_fraction)))
    return np.sort(order[k:]), np.sort(order[:k])


def halves(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2 :])


def cross_fit(parameters: ParameterSet, predict: Predictor, measured: np.ndarray,
              folds: list[tuple[np.ndarray, np.ndarray]],
              **kw) -> tuple[np.ndarray, list[Fit]]:
    """Fit on each fold's training rows, predict its held-out rows: every held-out row gets
    a prediction from parameters that never saw it."""
    held = np.full(len(measured), np.nan)
    fits = []
    for train, test in folds:
        f = fit(parameters, predict, measured, train, **kw)
        fits.append(f)
        held[test] = predict(f.values, np.asarray(test))
    return held, fits
