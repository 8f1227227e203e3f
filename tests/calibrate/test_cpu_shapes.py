"""Calibration by held-out shape: the split keeps shapes whole, top-10 regret and the best
kernel against NumPy's BLAS match values computed by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tileflow.calibrate.cpu import kernel_vs_blas, regret_by_workload, shape_split
from tileflow.calibrate.metrics import top1_regret, top_k_regret


def test_top_k_regret_by_hand():
    measured = [5.0, 1.0, 3.0, 2.0, 4.0]
    predicted = [1, 5, 2, 4, 3]  # the model's order: rows 0, 2, 4, 3, 1
    assert top_k_regret(predicted, measured, 1) == pytest.approx(5 / 1 - 1)
    assert top_k_regret(predicted, measured, 3) == pytest.approx(3 / 1 - 1)
    assert top_k_regret(predicted, measured, 4) == pytest.approx(2 / 1 - 1)
    assert top_k_regret(predicted, measured, 10) == 0.0  # every row picked
    assert top_k_regret(predicted, measured, 1) == top1_regret(predicted, measured)


def test_top10_regret_per_workload_is_the_mean_over_its_shapes_and_threads():
    rows = []
    # shape a: 12 kernels, measured 1..12 ms, the model ranks them in reverse: its ten first
    # picks are the 12, 11, ..., 3 ms kernels -> best of them 3 ms, regret 3/1 - 1 = 2
    for i in range(12):
        rows.append({"workload": "w", "shape": "a", "threads": 1, "latency_s": i + 1.0,
                     "calibrated_s": -i})
    # shape b: the model ranks the 2 ms kernel of 12 in its top ten: regret 2/1 - 1 = 1
    for i in range(12):
        rows.append({"workload": "w", "shape": "b", "threads": 2, "latency_s": i + 1.0,
                     "calibrated_s": 0.0 if i == 1 else 10.0 + i + (100 if i == 0 else 0)})
    frame = pd.DataFrame(rows)
    assert regret_by_workload(frame, "calibrated_s", 10) == {"w": pytest.approx((2 + 1) / 2)}
    assert regret_by_workload(frame, "calibrated_s", 1) == {
        "w": pytest.approx(((12 - 1) + (2 - 1)) / 2)}


def test_kernel_vs_blas_on_synthetic_rows():
    frame = pd.DataFrame([
        {"workload": "gemm-chain", "shape": "s1", "threads": 1, "latency_s": 4e-3,
         "blas_min_s": 1e-3},
        {"workload": "gemm-chain", "shape": "s1", "threads": 1, "latency_s": 2e-3,
         "blas_min_s": 1e-3},
        {"workload": "gemm-chain", "shape": "s2", "threads": 1, "latency_s": 8e-3,
         "blas_min_s": 1e-3},
        {"workload": "gemm-chain", "shape": "s1", "threads": 2, "latency_s": 3e-3,
         "blas_min_s": 2e-3},
    ])
    out = kernel_vs_blas(frame)
    one = out["gemm-chain"]["1"]
    assert one["shapes"] == {"s1": pytest.approx(2.0), "s2": pytest.approx(8.0)}
    assert one["geomean"] == pytest.approx(4.0)  # sqrt(2 * 8)
    assert (one["best"], one["worst"]) == (pytest.approx(2.0), pytest.approx(8.0))
    assert out["gemm-chain"]["2"]["shapes"] == {"s1": pytest.approx(1.5)}
    assert kernel_vs_blas(frame.drop(columns=["blas_min_s"])) == {}


def test_the_split_holds_out_whole_shapes_with_every_thread_count():
    shapes = [f"m={m}" for m in (128, 192, 256, 320, 384, 512)]
    frame = pd.DataFrame([{"workload": w, "shape": s, "threads": t}
                          for w in ("attention", "gemm-chain") for s in shapes
                          for t in (1, 2) for _ in range(5)])
    train, test, by = shape_split(frame, seed=4)
    assert by == "shapes"
    assert len(train) + len(test) == len(frame) and not set(train) & set(test)
    held = frame.iloc[test].groupby("workload")["shape"].unique()
    assert all(len(v) == 2 for v in held)  # round(6 x 0.3) shapes of each workload
    trained = set(zip(frame.workload.iloc[train], frame["shape"].iloc[train], strict=True))
    for r in frame.iloc[test].itertuples():
        assert (r.workload, r.shape) not in trained
    assert frame.iloc[test].groupby(["workload", "shape"]).threads.nunique().eq(2).all()


def test_one_shape_per_workload_falls_back_to_rows():
    frame = pd.DataFrame({"workload": ["a"] * 10, "shape": ["s"] * 10, "threads": 1})
    train, test, by = shape_split(frame, seed=0)
    assert by == "rows" and len(test) == 3 and len(np.union1d(train, test)) == 10
