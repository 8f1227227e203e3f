"""A campaign saves every measured kernel as it goes and resumes without measuring again."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tileflow.kernels import campaign
from tileflow.kernels.cachegrind import valgrind_missing
from tileflow.kernels.campaign import CampaignConfig, remeasure, run_campaign
from tileflow.provenance import MODEL_VERSION

TINY = {"gemm-chain": {"b": 1, "m": 16, "l": 16, "k": 8, "n": 8}}


def test_campaign_saves_as_it_goes_and_resumes(tmp_path, monkeypatch):
    config = CampaignConfig(workloads=TINY, points=4, traffic=False, repetitions=2)
    first = run_campaign(config, tmp_path)
    saved = pd.read_csv(tmp_path / "measurements.csv")
    assert len(first) == len(saved) == 4
    assert (saved.max_error < 1e-5).all() and (saved.min_s <= saved.measured_s).all()
    assert set(saved.kind) <= {"baseline", "random"}
    # the model whose predictions the rows hold, for the report's summary
    assert json.loads((tmp_path / "environment.json").read_text())["model_version"] == \
        MODEL_VERSION

    saved.iloc[:2].to_csv(tmp_path / "measurements.csv", index=False)  # as if interrupted
    calls = []
    real = campaign.measure_one

    def counting(*args):
        calls.append(args[2].name)
        return real(*args)

    monkeypatch.setattr(campaign, "measure_one", counting)
    again = run_campaign(config, tmp_path)
    assert len(calls) == 2  # only the two kernels the interrupted run had not saved
    assert sorted(again.key) == sorted(saved.key)


@pytest.mark.skipif(valgrind_missing() is not None, reason=f"{valgrind_missing()}")
def test_remeasuring_traffic_keeps_timings_and_measures_each_kernel_once(tmp_path,
                                                                          monkeypatch):
    config = CampaignConfig(workloads=TINY, points=3, traffic=False, repetitions=2)
    timed = run_campaign(config, tmp_path)
    again = remeasure(config, tmp_path)
    saved = pd.read_csv(tmp_path / "measurements.csv")
    assert list(saved.min_s) == list(timed.min_s) == list(again.min_s)
    assert (saved.traffic_measured_by == campaign.TRAFFIC_METHOD).all()
    # every kernel reads its inputs at least once: at least the compulsory lines come in
    inputs = 16 * 8 + 8 * 16 + 16 * 8  # A, B, D words
    assert (saved.measured_last_level_bytes >= 4 * inputs).all()
    assert (saved.model_cache_last_level_bytes > 0).all()
    calls = []
    monkeypatch.setattr(campaign, "measure_traffic", lambda *a: calls.append(a) or {})
    remeasure(config, tmp_path)
    assert calls == []  # already measured by the current method: only the model is redone


def test_several_shapes_of_one_workload_are_measured_apart(tmp_path):
    path = tmp_path / "campaign.yaml"
    path.write_text("workloads:\n  gemm-chain:\n    - {b: 1, m: 16, l: 16, k: 8, n: 8}\n"
                    "    - {b: 1, m: 8, l: 32, k: 8, n: 8}\npoints: 2\ntraffic: false\n"
                    "repetitions: 2\n")
    config = campaign.load_config(str(path))
    assert config.shapes() == [("gemm-chain", {"b": 1, "m": 16, "l": 16, "k": 8, "n": 8}),
                               ("gemm-chain", {"b": 1, "m": 8, "l": 32, "k": 8, "n": 8})]
    saved = run_campaign(config, tmp_path)
    assert sorted(saved.groupby("shape").size().to_dict().items()) == [
        ("b=1 m=16 l=16 k=8 n=8", 2), ("b=1 m=8 l=32 k=8 n=8", 2)]
    assert campaign.shape_sizes("b=1 m=8 l=32 k=8 n=8") == {"b": 1, "m": 8, "l": 32, "k": 8,
                                                            "n": 8}
