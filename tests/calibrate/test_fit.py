"""Calibration recovers known parameters from synthetic measurements made with the latency
function itself plus noise, deterministically, and flags parameters left at a bound."""

from __future__ import annotations

import numpy as np
import pytest

from tileflow.calibrate import latency, metrics
from tileflow.calibrate.fit import cross_fit, fit, split
from tileflow.calibrate.parameters import Parameter, ParameterSet
from tileflow.kernels.trees import single_core
from tileflow.specs.arch import load_arch

ARCH = single_core(load_arch("cpu"))


def synthetic(n: int, seed: int):
    """Rows spanning compute-bound and transfer-bound kernels."""
    rng = np.random.default_rng(seed)
    cols = latency.feature_columns(ARCH)
    feats = {c: rng.uniform(1e5, 1e7, n) * rng.choice([0.01, 1.0], n) for c in cols}
    feats["loop_starts"] = rng.uniform(1e4, 1e6, n)
    return feats


def test_fit_recovers_known_parameters_from_noisy_measurements():
    params = latency.parameter_set(ARCH)
    truth = params.defaults * np.array([0.3, 0.5, 0.7, 0.4, 0.6, 0.8, 1.5, 1.0, 1.0])
    truth[-2], truth[-1] = 3.0, 5e5  # loop-start and call overheads
    feats = synthetic(400, 1)
    rng = np.random.default_rng(2)
    measured = latency.cycles(feats, truth, ARCH) * np.exp(rng.normal(0, 0.02, 400))

    def predict(values, rows):
        return latency.cycles({k: v[rows] for k, v in feats.items()}, values, ARCH)

    result = fit(params, predict, measured, np.arange(400))
    assert np.allclose(result.values[:-1], truth[:-1], rtol=0.08)
    assert result.values[-1] == pytest.approx(truth[-1], rel=0.3)
    again = fit(params, predict, measured, np.arange(400))
    assert np.array_equal(result.values, again.values)  # deterministic

    train, test = split(400, 0.3, seed=5)
    held, _ = cross_fit(params, predict, measured, [(train, test)])
    assert metrics.mape(held[test], measured[test]) < 0.03


def test_a_parameter_the_data_cannot_reach_is_flagged_at_its_bound():
    params = ParameterSet((Parameter("rate", "a rate", 1.0, 10.0, 5.0),))
    x = np.linspace(1, 10, 50)
    measured = x / 20.0  # needs rate 20, above the physical upper bound 10

    result = fit(params, lambda v, rows: x[rows] / v[0], measured, np.arange(50))
    assert result.values[0] == pytest.approx(10.0, rel=1e-6)
    assert [h["bound"] for h in result.bound_hits] == ["upper"]


@pytest.mark.parametrize("bad", [dict(lower=0.0, upper=1.0, default=0.5),
                                 dict(lower=2.0, upper=1.0, default=1.5),
                                 dict(lower=1.0, upper=2.0, default=3.0),
                                 dict(lower=float("nan"), upper=2.0, default=1.0)])
def test_parameters_reject_unphysical_declarations(bad):
    with pytest.raises(ValueError):
        Parameter("p", "somewhere", **bad)


def test_metrics_against_hand_computed_values():
    measured = np.array([1.0, 2.0, 4.0, 8.0])
    predicted = np.array([1.1, 1.8, 4.0, 9.0])
    assert metrics.mape(predicted, measured) == pytest.approx((0.1 + 0.1 + 0 + 0.125) / 4)
    ss_res = 0.01 + 0.04 + 0 + 1.0
    ss_tot = np.sum((measured - 3.75) ** 2)
    assert metrics.r2_identity(predicted, measured) == pytest.approx(1 - ss_res / ss_tot)
    assert metrics.spearman(predicted, measured) == pytest.approx(1.0)
    assert metrics.top1_regret(np.array([2.0, 1.0, 3.0]), np.array([1.0, 1.5, 3.0])) == \
        pytest.approx(0.5)
