"""`tileflow explore --measure-top K`: the study's best points compiled, checked and timed on
this CPU, predicted beside measured, re-ranked by a learned model where one is given."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tileflow.calibrate import latency
from tileflow.calibrate.learned import LearnedModel
from tileflow.cli import main
from tileflow.commands import measure_top as mt
from tileflow.explore.studies.config import load_config
from tileflow.explore.studies.session import explore

STUDY = """accelerator: host
workload: gemm-chain
sizes: {b: 1, m: 16, l: 16, k: 8, n: 8}
objective: latency
structures: baselines
budget: {evaluations: 120}
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    folder = tmp_path_factory.mktemp("study")
    path = folder / "study.yaml"
    path.write_text(STUDY + f"out: {folder / 'out'}\n")
    return path, explore(load_config(path))


def test_top_points_are_measured_in_the_models_order(study):
    _, outcome = study
    result = mt.measure_top(outcome, 3, model_path=None, blas_seconds=0.05)
    rows = result["rows"]
    assert list(rows.model_rank) == [1, 2, 3]
    assert (np.diff(rows.model_s) >= 0).all()
    assert (rows.measured_min_s > 0).all() and (rows.max_error < 1e-4).all()
    best = int(np.argmin(rows.measured_min_s))
    assert result["best"]["model_rank"] == rows.model_rank[best]
    b = result["blas"]
    assert b["ratio_median"] == pytest.approx(b["kernel_median_s"] / b["blas_median_s"])
    assert "learned" not in " ".join(rows.columns)


class _Reverse:
    """Stands in for the trees: a residual that ranks the model's order backwards (the
    rows come in the model's order; the first term cancels the calibrated time)."""

    def predict(self, x):
        return -np.log(x[:, 0]) - np.arange(len(x))


def test_a_learned_model_re_ranks_the_models_first_points(study, monkeypatch):
    _, outcome = study
    arch = outcome.arch
    defaults = latency.parameter_set(arch).as_dict(latency.parameter_set(arch).defaults)
    model = LearnedModel(_Reverse(), ["calibrated_s", "model_s"], defaults, {})
    monkeypatch.setattr(mt, "learned_model", lambda path, style: (model, ""))
    result = mt.measure_top(outcome, 2, model_path=None, blas_seconds=0.05)
    shown = len(mt.ranked_points(outcome, 2 * mt.RERANK))
    rows = result["rows"]
    assert list(rows.model_rank) == [shown, shown - 1]  # the model's last points first
    assert (np.diff(rows.learned_s) >= 0).all()


def test_cli_prints_predicted_beside_measured_and_writes_the_csv(study, capsys):
    path, _ = study
    assert main(["explore", str(path), "--quiet", "--measure-top", "1", "--learned-model",
                 "none", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = data["measured"]["rows"]
    assert len(rows) == 1 and rows[0]["model_rank"] == 1
    assert (path.parent / "out" / "measured.csv").exists()


def test_measure_top_needs_the_host_as_accelerator(tmp_path, capsys):
    config = tmp_path / "edge.yaml"
    config.write_text(STUDY.replace("accelerator: host", "accelerator: edge")
                      + f"out: {tmp_path / 'out'}\n")
    assert main(["explore", str(config), "--measure-top", "2"]) == 2
    assert "accelerator must be 'host'" in capsys.readouterr().err


def test_measured_kernels_are_added_to_the_campaign_once(study, tmp_path, capsys):
    """--add-to-campaign appends the measured kernels in the campaign's columns (kind
    'measure-top', this machine's fingerprint); a second run adds no row twice; without
    --measure-top it is refused."""
    import pandas as pd

    path, _ = study
    campaign = tmp_path / "campaign"
    args = ["explore", str(path), "--quiet", "--measure-top", "2", "--learned-model", "none",
            "--add-to-campaign", str(campaign)]
    assert main(args) == 0
    assert "2 kernel(s) added" in capsys.readouterr().out
    rows = pd.read_csv(campaign / "measurements.csv")
    assert len(rows) == 2 and set(rows.kind) == {"measure-top"}
    assert (rows.threads == 1).all() and (rows.min_s > 0).all() and (rows.model_s > 0).all()
    assert rows.key.is_unique and rows.machine_cpu.notna().all()
    assert main(args) == 0
    assert "0 kernel(s) added" in capsys.readouterr().out
    assert len(pd.read_csv(campaign / "measurements.csv")) == 2
    assert main(["explore", str(path), "--add-to-campaign", str(campaign)]) == 2
    assert "give --measure-top" in capsys.readouterr().err
