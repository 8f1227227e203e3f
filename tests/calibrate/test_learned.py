"""The learned cost model: operand strides and top-k regret by hand, held-out groups that
never see their own measurements, and a stored model refused on another machine."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("sklearn")

from tileflow.calibrate import learned  # noqa: E402
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
    assert learned.top_k_regret(predicted, measured, 1) == pytest.approx(4 / 2 - 1)
    assert learned.top_k_regret(predicted, measured, 2) == pytest.approx(3 / 2 - 1)
    assert learned.top_k_regret(predicted, measured, 4) == 0.0


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
    assert sorted(result["held_out_groups"]["learned"]["groups"]) == sorted(
        set(frame.workload + " " + frame["shape"]))
    for name in ("learned.md", "learned.json", "learned-model.pkl", "learned-model.json"):
        assert (tmp_path / name).exists()
    text = (tmp_path / "learned.md").read_text()
    assert "a workload is predicted from the other workloads' kernels" in text
    model = learned.load(tmp_path / "learned-model.pkl", {"cpu": "AMD EPYC"})
    assert model.features == result["features"]
