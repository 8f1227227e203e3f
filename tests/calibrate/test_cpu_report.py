"""`tileflow validate cpu --report-only` rebuilds the report from saved measurements, with
figures that match metrics computed here by hand; bad campaign input exits 2."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from tileflow.calibrate import latency
from tileflow.cli import main
from tileflow.kernels.trees import single_core
from tileflow.specs.arch import load_arch
from tileflow.tree import Dataflow, tile, to_dict

ARCH = single_core(load_arch("host"))


def saved_campaign(folder, n=40, seed=0):
    """A measurements.csv as the campaign writes it, made with the latency function itself."""
    rng = np.random.default_rng(seed)
    rows = []
    truth = latency.parameter_set(ARCH).defaults * 0.5
    tree = json.dumps(to_dict(Dataflow(tile("DRAM", "m:2", tile("L1", "", tile("Reg", "",
                                                                            "gemm1"))))))
    for i in range(n):
        feats = {c: float(rng.uniform(1e5, 1e7)) for c in latency.feature_columns(ARCH)}
        seconds = float(latency.cycles({k: np.array([v]) for k, v in feats.items()}, truth,
                                       ARCH)[0]) / (ARCH.clock_ghz * 1e9)
        model_bytes = float(rng.uniform(1e6, 1e7))
        rows.append({"key": f"k{i}", "workload": "gemm-chain" if i % 2 else "attention",
                     "shape": "m=2", "kind": "random", "dataflow": f"random-{i}", "point": i,
                     "model_valid": True, "model_s": seconds * 2, "model_bottleneck": "x",
                     "macs": 4096.0 * (1 + i % 4), "vector_work": 0.0, "leaf_steps": 128.0,
                     **feats, "model_first_level_bytes": model_bytes,
                     "model_last_level_bytes": model_bytes,
                     "measured_s": seconds * 1.1, "min_s": seconds, "max_s": seconds * 2,
                     "spread": 0.1, "repetitions": 5, "threads": 1, "max_error": 1e-7,
                     "measured_first_level_bytes": model_bytes * (1 + 0.01 * (i % 3)),
                     "measured_last_level_bytes": model_bytes * 2, "tree": tree})
    frame = pd.DataFrame(rows)
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_csv(folder / "measurements.csv", index=False)
    return frame


def test_report_regenerates_from_saved_measurements(tmp_path, capsys):
    frame = saved_campaign(tmp_path / "cpu")
    (tmp_path / "cpu" / "environment.json").write_text(json.dumps(
        {"cpu": "test", "config": {"warmup": 2, "repetitions": 3, "traffic": False},
         "model_version": "2000.1.1"}))
    assert main(["validate", "cpu", "--report-only", "--out", str(tmp_path / "cpu")]) == 0
    summary = json.loads((tmp_path / "cpu" / "summary.json").read_text())
    assert summary["points"] == {"attention": 20, "gemm-chain": 20}
    # the version of the model that made the saved predictions, not the one reporting
    assert summary["model_version"] == "2000.1.1"
    m, p = frame.measured_first_level_bytes, frame.model_first_level_bytes
    assert summary["traffic_r2"]["first_level"] == \
        1 - ((m - p) ** 2).sum() / ((m - m.mean()) ** 2).sum()
    assert summary["traffic_r2"]["last_level"] < 0  # measured twice the model: worse than mean
    # made with the latency function: the fit finds it, held-out error near zero
    assert summary["latency_mape_heldout"] < 0.01
    assert summary["latency_spearman_heldout"] > 0.99
    assert set(summary) >= {"points", "traffic_r2", "latency_spearman_heldout",
                            "latency_mape_heldout", "top1_regret", "bound_hits"}
    report = (tmp_path / "cpu" / "report.md").read_text()
    assert "latency.png" in report and "traffic.png" in report
    # a timing pass without cachegrind says how it timed, and that traffic came apart
    assert "warm up, then timed over 3 calls" in report and "separate pass" in report
    assert (tmp_path / "cpu" / "latency.png").exists()


def test_bad_campaign_input_exits_2(tmp_path, capsys):
    assert main(["validate", "cpu", "--report-only", "--out", str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["validate", "cpu", "--points", "0", "--report-only",
                 "--out", str(tmp_path)]) == 2
    config = tmp_path / "c.yaml"
    config.write_text("points: 3\nrepetitons: 5\n")
    assert main(["validate", "cpu", "--config", str(config), "--report-only",
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "repetitons" in err and "line 2" in err
    config.write_text("traffic: 'yes'\n")
    assert main(["validate", "cpu", "--config", str(config), "--report-only",
                 "--out", str(tmp_path)]) == 2


def test_report_fits_against_the_machine_the_rows_were_measured_on(tmp_path, monkeypatch):
    """A report rebuilt elsewhere: the folder's host.yaml (the measured machine) is the
    description the fit uses, not the caches of the machine rebuilding it."""
    from tileflow.calibrate import cpu
    from tileflow.specs import host

    frame = saved_campaign(tmp_path / "cpu")
    measured_on = host.host_description()
    measured_on["clock_ghz"] = 1.0  # another machine than this one
    measured_on["levels"][-2]["capacity_bytes"] = 49152
    from tileflow.calibrate.description import write_description

    write_description(measured_on, tmp_path / "cpu" / "host.yaml")

    def elsewhere(*args, **kwargs):
        raise AssertionError("the report read this machine's caches")

    monkeypatch.setattr(host, "host_description", elsewhere)
    assert main(["validate", "cpu", "--report-only", "--out", str(tmp_path / "cpu")]) == 0
    summary = json.loads((tmp_path / "cpu" / "summary.json").read_text())
    expected = cpu.study(frame, single_core(load_arch(str(tmp_path / "cpu" / "host.yaml"))))
    assert summary["latency_mape_heldout"] == expected.summary["latency_mape_heldout"]
    calibrated = (tmp_path / "cpu" / "host-calibrated.yaml").read_text()
    assert "clock_ghz: 1.0" in calibrated and "49152" in calibrated


def test_a_report_without_learn_keeps_the_last_learned_figures_in_the_summary(tmp_path):
    """--report-only without --learn: the learned model's held-out figures of the last
    --learn run (learned.json) stay in summary.json, as they stay in the report."""
    saved_campaign(tmp_path / "cpu")
    learned = {"held_out_groups": {"learned": {"mape": 0.25, "spearman_within_mean": 0.75,
                                               "groups": {}},
                                   "calibrated": {"mape": 0.5, "spearman_within_mean": 0.1,
                                                  "groups": {}},
                                   "ridge": {"mape": 0.4, "spearman_within_mean": 0.3,
                                             "groups": {}}},
               "groups": [], "rows": 40, "features": [], "fingerprint": {}}
    (tmp_path / "cpu" / "learned.json").write_text(json.dumps(learned))
    assert main(["validate", "cpu", "--report-only", "--out", str(tmp_path / "cpu")]) == 0
    summary = json.loads((tmp_path / "cpu" / "summary.json").read_text())
    assert summary["learned_model"] == {"mape": 0.25, "spearman_within_mean": 0.75}
