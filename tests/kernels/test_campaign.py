"""A campaign saves every measured kernel as it goes and resumes without measuring again."""

from __future__ import annotations

import pandas as pd

from tileflow.kernels import campaign
from tileflow.kernels.campaign import CampaignConfig, run_campaign

TINY = {"gemm-chain": {"b": 1, "m": 16, "l": 16, "k": 8, "n": 8}}


def test_campaign_saves_as_it_goes_and_resumes(tmp_path, monkeypatch):
    config = CampaignConfig(workloads=TINY, points=4, traffic=False, repetitions=2)
    first = run_campaign(config, tmp_path)
    saved = pd.read_csv(tmp_path / "measurements.csv")
    assert len(first) == len(saved) == 4
    assert (saved.max_error < 1e-5).all() and (saved.min_s <= saved.measured_s).all()
    assert set(saved.kind) <= {"baseline", "random"}

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
