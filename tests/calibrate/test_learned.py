"""The learned cost model: operand strides and top-k regret by hand, held-out groups that
never see their own measurements, and a stored model refused on another machine."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("sklearn")

from tileflow.calibrate import learned, metrics  # noqa: E402
from tileflow.errors import InputError  # noqa: E402
from tileflow.kernels.c_source import generate_c  # noqa: E402
from tileflow.kernels.nest import analyse  # noqa: E402
from tileflow.kernels.trees import single_core  # noqa: E402
from tileflow.specs.arch import load_arch  # noqa: E402
from tileflow.specs.workload import load_workload  # noqa: E402
from tileflow.tree import Dataflow, tile  # noqa: E402

ARCH = single_core(load_arch("cpu"))
CAMPAIGN = "validate/cpu/measurements.csv"


def test_operand_strides_along_the_innermost_loop_are_counted_from_the_accesses():
    """gemm1 C[b,m,l] += A[b,m,k] * B[b,k,l] innermost over l: C and B move one word (l is
    their last axis), A does not move; gemm2 E[b,m,n] += C[b,m,l] * D[b,l,n] innermost
    over l: C unit, D strided (l is not its last axis), E invariant."""
    w = load_workload("gemm-chain", {"b": 1, "m": 4, "l": 16, "k": 8, "n": 8})
    flow = Dataflow(tile("DRAM", "m:4", tile("L1", "", tile("L1", "k:8 l:16", "gemm1"),
                                             tile("L1", "n:8 l:16", "gemm2"))))
    f = learned.operator_features(w, generate_c(analyse(w, ARCH, flow), threads=False,
                                                style="plain").text)
    assert (f["c0_inner_unit"], f["c0_inner_strided"], f["c0_inner_invariant"]) == (2, 0, 1)
    assert (f["c1_inner_unit"], f["c1_inner_strided"], f["c1_inner_invariant"]) == (1, 1, 1)
    assert (f["c0_inner_trip"], f["c0_inner_reduces"]) == (16, 0.0)
    assert (f["c1_inner_trip"], f["c1_inner_reduces"]) == (16, 1.0)
    assert f["c0_depth"] == f["c1_depth"] == 3


def test_top_k_regret():
    measured = np.array([4.0, 2.0, 3.0, 5.0])
    predicted = np.array([1.0, 4.0, 2.0, 3.0])  # picks: row 0 (4), then 2 (3), 3 (5), 1 (2)
    assert metrics.top_k_regret(predicted, measured, 1) == pytest.approx(4 / 2 - 1)
    assert metrics.top_k_regret(predicted, measured, 2) == pytest.approx(3 / 2 - 1)
    assert metrics.top_k_regret(predicted, measured, 4) == 0.0


def _campaign(rows_per_workload: int = 40) -> pd.DataFrame:
    frame = pd.read_csv(CAMPAIGN)
    return frame.groupby("workload").head(rows_per_workload).reset_index(drop=True)


def test_held_out_group_predictions_never_see_that_groups_measurements():
    frame = _campaign()
    groups = frame.workload
    first = learned.grouped_validation(frame, ARCH, groups).frame
    changed = frame.copy()
    attention = (changed.workload == "attention").to_numpy()
    changed.loc[attention, "min_s"] *= np.random.default_rng(1).uniform(0.5, 2, attention.sum())
    second = learned.grouped_validation(changed, ARCH, groups).frame
    for column in ("calibrated_s", "ridge_s", "learned_s"):
        assert np.allclose(first[column][attention], second[column][attention])
        assert not np.allclose(first[column][~attention], second[column][~attention])


def test_one_group_is_refused():
    frame = _campaign(10)
    with pytest.raises(InputError, match="at least two groups"):
        learned.grouped_validation(frame, ARCH, pd.Series(["one"] * len(frame)))


def test_a_model_for_another_machine_is_refused(tmp_path):
    frame = _campaign(20)
    frame["calibrated_s"] = frame.min_s
    columns = learned.feature_names(frame, ARCH)
    _, model = learned.learned_prediction(frame, columns, np.arange(len(frame)))
    here = {"cpu": "AMD EPYC", "compiler": "cc 12", "flags": "-O3", "kernel_style": "plain"}
    path = tmp_path / "model.pkl"
    learned.save(path, model, columns, here, {}, {})
    assert learned.load(path, here).features == columns
    with pytest.raises(InputError, match="cpu: trained on 'AMD EPYC', here 'Intel Xeon'"):
        learned.load(path, {**here, "cpu": "Intel Xeon"})
    with pytest.raises(InputError, match="kernel_style"):
        learned.load(path, {**here, "kernel_style": "registers"})
    assert learned.load(path, {"cpu": "AMD EPYC"}).fingerprint == here  # unrecorded: not compared
    with pytest.raises(InputError, match="no learned cost model"):
        learned.load(tmp_path / "absent.pkl", here)


def test_report_files_and_the_stored_model_carry_the_campaigns_fingerprint(tmp_path):
    from tileflow.calibrate import learned_report

    frame = _campaign(12)
    environment = {"cpu": "AMD EPYC", "compiler": "cc 12", "flags": "-O3"}
    result = learned_report.run(frame, ARCH, tmp_path, environment, "tileflow validate cpu",
                                folds=3)
    assert result["fingerprint"] == {**environment, "kernel_style": "plain"}
    ranked = frame.workload + " " + frame["shape"]
    if frame.threads.nunique() > 1:  # ranked per thread count, held out per shape
        ranked = ranked + " threads=" + frame.threads.astype(str)
    assert sorted(result["held_out_groups"]["learned"]["groups"]) == sorted(set(ranked))
    for name in ("learned.md", "learned.json", "learned-model.pkl", "learned-model.json"):
        assert (tmp_path / name).exists()
    text = (tmp_path / "learned.md").read_text()
    assert "a workload is predicted from the other workloads' kernels" in text
    model = learned.load(tmp_path / "learned-model.pkl", {"cpu": "AMD EPYC"})
    assert model.features == result["features"]


def test_tree_features_multiply_each_operators_loop_trips_per_level_and_dim():
    """Hand-read from the tree: qk under rows (m:4) and its L1 tile (k:8, m:2, l:4:Sp);
    pv under rows and its own tile (n:16); the innermost temporal loop of more than one
    step names the dim (in sorted order of the tree's dims: k, l, m, n)."""
    tree = {"root": {"level": "DRAM", "name": "rows", "loops": ["m:4"], "children": [
        {"level": "L1", "name": "qk-tile", "loops": ["k:8", "m:2", "l:4:Sp"],
         "children": [{"op": "qk"}]},
        {"level": "L1", "name": "pv-tile", "loops": ["n:16", "l:1"],
         "children": [{"op": "pv"}]}]}}
    assert learned.tree_features(tree) == {
        "t0_DRAM_m": 4, "t0_L1_k": 8, "t0_L1_m": 2, "t0_L1_l_sp": 4, "t0_inner_dim": 2,
        "t1_DRAM_m": 4, "t1_L1_n": 16, "t1_L1_l": 1, "t1_inner_dim": 3}


def test_the_trees_predict_relative_to_numpys_time_where_every_row_has_it():
    """Kernels 3x NumPy's time on every row: the target is then exactly log 3, and the
    prediction 3 x NumPy's time, whatever the calibration says; without NumPy's time the
    reference is the calibrated latency."""
    frame = _campaign(40)
    frame["calibrated_s"] = frame.min_s * np.random.default_rng(2).uniform(0.2, 5, len(frame))
    frame["blas_min_s"] = np.random.default_rng(3).uniform(1e-4, 1e-3, len(frame))
    frame["min_s"] = 3 * frame.blas_min_s
    assert learned.reference_of(frame) == "blas_min_s"
    columns = learned.feature_names(frame, ARCH)
    assert learned.RATIO in columns
    predicted, _ = learned.learned_prediction(frame, columns, np.arange(len(frame)))
    assert np.allclose(predicted, frame.min_s, rtol=1e-6)
    without = frame.drop(columns="blas_min_s")
    assert learned.reference_of(without) == "calibrated_s"
    assert learned.RATIO not in learned.feature_names(without, ARCH)


def test_a_stored_model_predicts_rows_lacking_some_features(tmp_path):
    """Rows of one workload lack another workload's operator columns: the stored model
    reads them as missing (NaN, as they were in training), not as an error."""
    frame = _campaign(20)
    frame["calibrated_s"] = frame.min_s
    frame["t6_L1_n"] = np.where(frame.workload == "attention", 4.0, np.nan)
    columns = learned.feature_names(frame, ARCH)
    assert "t6_L1_n" in columns
    _, model = learned.learned_prediction(frame, columns, np.arange(len(frame)))
    path = tmp_path / "model.pkl"
    learned.save(path, model, columns, {"cpu": "x"}, {}, {})
    stored = learned.load(path, {"cpu": "x"})
    gemm = frame[frame.workload == "gemm-chain"].drop(columns="t6_L1_n")
    assert np.isfinite(stored.predict(gemm, ARCH)).all()
