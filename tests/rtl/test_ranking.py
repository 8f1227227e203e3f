"""Rank metrics of the RTL report on small frames whose values are worked out by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tileflow.rtl.ranking import rank_by_shape, top1_regret


def test_top1_regret_is_the_measured_cost_of_the_models_pick():
    # the model picks row 2 (predicted 5), measured 110; the measured best is 100
    assert top1_regret([9, 7, 5], [100, 105, 110]) == pytest.approx(0.10)
    assert top1_regret([1, 2, 3], [100, 105, 110]) == 0.0


def test_shapes_with_fewer_than_three_rows_or_one_measured_value_do_not_count():
    frame = pd.DataFrame({
        "M": [1, 1, 1, 2, 2, 3, 3, 3],
        "predicted": [3, 2, 1, 1, 2, 1, 2, 3],
        "rtl_cycles": [30, 20, 10, 5, 6, 7, 7, 7],
    })
    out = rank_by_shape(frame, ["M"]).set_index("M")
    assert out.loc[1, "spearman"] == pytest.approx(1.0) and out.loc[1, "regret"] == 0.0
    assert out.loc[1, "rows"] == 3
    for m in (2, 3):
        assert out.loc[m, "spearman"] is None or math.isnan(out.loc[m, "spearman"])
        assert out.loc[m, "regret"] is None or math.isnan(out.loc[m, "regret"])


def test_a_reversed_order_has_spearman_minus_one_and_picks_the_slowest():
    frame = pd.DataFrame({"M": [1] * 4, "predicted": [4, 3, 2, 1],
                          "rtl_cycles": [100, 120, 150, 200]})
    out = rank_by_shape(frame, ["M"]).iloc[0]
    assert out.spearman == pytest.approx(-1.0)
    assert out.regret == pytest.approx(1.0)


def test_a_model_that_cannot_tell_the_rows_apart_scores_zero_and_an_average_pick():
    frame = pd.DataFrame({"M": [1] * 4, "predicted": [7, 7, 7, 7],
                          "rtl_cycles": [100, 110, 120, 130]})
    out = rank_by_shape(frame, ["M"]).iloc[0]
    assert out.spearman == 0.0
    assert out.regret == pytest.approx((100 + 110 + 120 + 130) / 4 / 100 - 1)
    assert top1_regret([1, 1, 2], [100, 120, 90]) == pytest.approx(110 / 90 - 1)
