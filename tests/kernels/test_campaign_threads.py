"""The campaign's thread counts, near-pick dataflows and compile pass: config parsing with
clear errors, a row per (dataflow, thread count), resuming by both, near picks one valid
step from a pick."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.kernels import campaign
from tileflow.kernels.campaign import CampaignConfig, load_config, run_campaign
from tileflow.kernels.near_picks import near_pick_trees, perturb
from tileflow.kernels.trees import parallel_rows, random_valid_trees, single_core, threaded
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload

TINY = {"gemm-chain": {"b": 1, "m": 16, "l": 16, "k": 8, "n": 8}}


def write(tmp_path, text: str) -> str:
    path = tmp_path / "campaign.yaml"
    path.write_text(text)
    return str(path)


def test_threads_take_an_integer_or_a_list(tmp_path):
    assert load_config(write(tmp_path, "threads: 2\n")).threads == (2,)
    assert load_config(write(tmp_path, "threads: [1, 2]\n")).threads == (1, 2)
    assert load_config(write(tmp_path, "points: 3\n")).threads == (1,)
    config = load_config(write(tmp_path, "near_picks: 0.5\ntraffic_sample: 40\n"))
    assert (config.near_picks, config.traffic_sample) == (0.5, 40)


@pytest.mark.parametrize(("text", "line", "words"), [
    ("points: 3\nthreads: [1, 0]\n", 2, "'threads' must be an integer from 1"),
    ("threads: two\n", 1, "'threads' must be an integer from 1"),
    ("points: 3\nthreads: []\n", 2, "non-empty list"),
    ("threads: [2, 2]\n", 1, "twice"),
    ("points: 3\n\nnear_picks: 1.5\n", 3, "'near_picks' must be a number from 0 to 1"),
    ("near_picks: -0.1\n", 1, "from 0 to 1"),
    ("near_picks: half\n", 1, "from 0 to 1"),
    ("traffic_sample: -1\n", 1, "'traffic_sample' must be an integer from 0"),
])
def test_bad_values_name_the_file_and_line(tmp_path, text, line, words):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_config(path)
    message = str(err.value)
    assert words in message and "campaign.yaml" in message and f"line {line}" in message


def test_bad_config_exits_2_without_a_traceback(tmp_path, capsys):
    from tileflow.cli import main

    path = write(tmp_path, "threads: [1, 0]\n")
    assert main(["validate", "cpu", "--config", path, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "threads" in err


def test_every_dataflow_is_timed_at_each_thread_count_and_resumed_by_both(tmp_path,
                                                                          monkeypatch):
    config = CampaignConfig(workloads=TINY, points=7, traffic=False, repetitions=2,
                            threads=(1, 2), compile_workers=1)
    first = run_campaign(config, tmp_path)
    w = load_workload("gemm-chain", TINY["gemm-chain"])
    expected = set()
    for _, flow in campaign.choose_dataflows(w, single_core(load_arch("host")), 7, 0):
        for t in (1, 2):
            try:  # a dataflow is timed where its outer loop splits over the threads
                parallel_rows(w, flow, t)
                expected.add((campaign.tree_key(w, flow), t))
            except InputError:
                pass
    assert set(zip(first.key, first.threads, strict=True)) == expected == set(
        zip(first.key, first.threads, strict=True))
    assert len(first) == len(expected) and (first.threads == 2).sum() >= 1
    assert (first.max_error < 1e-5).all() and (first.blas_min_s > 0).all()
    assert first.machine_cpu.notna().all() and first.machine_flags.str.contains("-O3").all()
    # as if interrupted after the one-thread rows: only the two-thread rows are measured
    saved = pd.read_csv(tmp_path / "measurements.csv")
    kept = saved[saved.threads == 1]
    kept.to_csv(tmp_path / "measurements.csv", index=False)
    calls = []
    real = campaign.measure_one

    def counting(*args):
        calls.append(args[4])  # the thread count
        return real(*args)

    monkeypatch.setattr(campaign, "measure_one", counting)
    again = run_campaign(config, tmp_path)
    assert calls == [2] * int((saved.threads == 2).sum())
    assert sorted(zip(again.key, again.threads, strict=True)) == sorted(
        zip(saved.key, saved.threads, strict=True))


def test_rows_saved_before_thread_counts_count_as_one_thread(tmp_path, monkeypatch):
    config = CampaignConfig(workloads=TINY, points=2, traffic=False, repetitions=2,
                            compile_workers=1)
    saved = run_campaign(config, tmp_path).drop(columns=["threads"])
    saved.to_csv(tmp_path / "measurements.csv", index=False)
    monkeypatch.setattr(campaign, "measure_one", lambda *a: pytest.fail("measured again"))
    assert len(run_campaign(config, tmp_path)) == 2


def test_compile_pass_builds_every_kernel_before_timing(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEFLOW_CACHE", str(tmp_path / "cache"))
    config = CampaignConfig(workloads=TINY, points=7, traffic=False, repetitions=2,
                            threads=(1, 2), compile_workers=2)
    jobs = campaign.plan_jobs(config, set())
    assert {j.threads for j in jobs} == {1, 2}
    campaign.compile_pass(jobs, config)
    built = len(list((tmp_path / "cache").glob("*.so")))
    assert 0 < built <= len(jobs)  # one library per distinct source

    campaign.environment()  # the compiler's version, read once before the timing pass

    def refuse(*a, **k):
        raise AssertionError("compiled while timing")

    monkeypatch.setattr("tileflow.kernels.build.subprocess.run", refuse)
    run_campaign(config, tmp_path / "out")  # every library is already in the cache


def test_near_picks_are_valid_and_differ_from_their_pick():
    arch = single_core(load_arch("host"))
    w = load_workload("attention", {"b": 1, "m": 64, "l": 64, "k": 32, "n": 32})
    pool = random_valid_trees(w, arch, 12, seed=3)
    near = near_pick_trees(w, arch, pool, 10, seed=3)
    assert len(near) == 10
    pool_roots = {repr(f.root) for f in pool}
    assert len({repr(f.root) for f in near}) == 10
    for flow in near:
        assert repr(flow.root) not in pool_roots
        assert evaluate(w, arch, flow).valid
    rng = np.random.default_rng(0)
    for flow in pool:
        step = perturb(flow, rng)
        assert step is None or repr(step.root) != repr(flow.root)


def test_a_factor_moved_keeps_each_dimension_covered():
    """A moved prime factor leaves, along every chain of tiles, the product of each
    dimension's loops at the dimension's size."""
    arch = single_core(load_arch("host"))
    w = load_workload("gemm-chain", {"b": 1, "m": 32, "l": 32, "k": 16, "n": 16})
    rng = np.random.default_rng(1)
    for flow in random_valid_trees(w, arch, 8, seed=1):
        for _ in range(5):
            step = perturb(flow, rng)
            if step is not None:
                assert evaluate(w, arch, step).macs == evaluate(w, arch, flow).macs


def test_near_picks_split_the_random_dataflows():
    arch = single_core(load_arch("host"))
    w = load_workload("gemm-chain", {"b": 1, "m": 32, "l": 32, "k": 16, "n": 16})
    chosen = campaign.choose_dataflows(w, arch, 30, 0, near_picks=0.5)
    kinds = pd.Series([k for k, _ in chosen]).value_counts().to_dict()
    rest = 30 - kinds.get("baseline", 0)
    assert kinds["near-pick"] == round(rest * 0.5)
    assert kinds["random"] == rest - kinds["near-pick"]


def test_the_threaded_description_spreads_the_outer_level_over_the_threads():
    arch = load_arch("host")
    two = threaded(arch, 2)
    assert [lv.fanout for lv in two.levels][:2] == [1, 2]
    assert all(lv.fanout == 1 for lv in two.levels[2:])
    assert all(lv.instances == 2 for lv in two.levels[1:])
    assert threaded(arch, 1).levels == single_core(arch).levels


def test_traffic_sample_draws_the_same_dataflows_every_time():
    frame = pd.DataFrame({"key": [f"k{i}" for i in range(20) for _ in (1, 2)]})
    config = CampaignConfig(traffic_sample=5, seed=3)
    drawn = campaign.traffic_keys(frame, config)
    assert len(drawn) == 5 and drawn <= set(frame.key)
    assert campaign.traffic_keys(frame, config) == drawn
    assert campaign.traffic_keys(frame, CampaignConfig()) == set(frame.key)  # 0: all


@pytest.mark.skipif(campaign.valgrind_missing() is not None,
                    reason=f"{campaign.valgrind_missing()}")
def test_a_traffic_sample_measures_each_drawn_dataflow_once_for_all_its_rows(tmp_path,
                                                                             monkeypatch):
    config = CampaignConfig(workloads=TINY, points=7, traffic=False, repetitions=2,
                            threads=(1, 2), compile_workers=1, traffic_sample=2)
    run_campaign(config, tmp_path)
    calls = []
    real = campaign.measure_traffic
    monkeypatch.setattr(campaign, "measure_traffic",
                        lambda *a: calls.append(a) or real(*a))
    frame = campaign.remeasure(config, tmp_path)
    assert len(calls) == 2
    measured = frame[frame.traffic_measured_by == campaign.TRAFFIC_METHOD]
    assert measured.key.nunique() == 2
    assert (frame.groupby("key").measured_first_level_bytes.nunique(dropna=False) == 1).all()
    assert frame.measured_first_level_bytes.isna().sum() == len(frame) - len(measured)


def test_a_kernel_that_fails_is_recorded_and_not_tried_again(tmp_path, monkeypatch):
    from tileflow.kernels.cpu import WrongResult

    config = CampaignConfig(workloads=TINY, points=3, traffic=False, repetitions=2,
                            compile_workers=1)
    real = campaign.measure_one
    calls = []

    def second_fails(*args):
        calls.append(args[2].name)
        if len(calls) == 2:
            raise WrongResult("kernel differs from the reference by 1 (relative)")
        return real(*args)

    monkeypatch.setattr(campaign, "measure_one", second_fails)
    first = run_campaign(config, tmp_path)
    failed = pd.read_csv(tmp_path / campaign.FAILURES)
    assert len(first) == 2 and len(failed) == 1 and len(calls) == 3
    assert failed.stage.tolist() == ["time"] and "WrongResult" in failed.error[0]
    assert failed.key[0] not in set(first.key)
    calls.clear()
    assert len(run_campaign(config, tmp_path)) == 2 and calls == []  # nothing tried again


def test_a_kernel_the_compiler_rejects_is_left_out_of_the_timing(tmp_path, monkeypatch):
    config = CampaignConfig(workloads=TINY, points=3, traffic=False, repetitions=2,
                            compile_workers=1)
    jobs = campaign.plan_jobs(config, set())
    bad = jobs[0]
    real = campaign._compile
    monkeypatch.setattr(campaign, "_compile", lambda text: "cc failed: test" if text == (
        campaign.generate_c(campaign.analyse(bad.w, campaign.kernel_arch(config, 1), bad.timed),
                            threads=False, style=campaign.STYLES[-1]).text) else real(text))
    kept, failures = campaign.compile_pass(jobs, config)
    assert [f["stage"] for f in failures] == ["compile"] and failures[0]["key"] == bad.key
    assert bad not in kept and len(kept) == len(jobs) - 1


def test_measurements_from_another_machine_are_not_resumed(tmp_path):
    config = CampaignConfig(workloads=TINY, points=2, traffic=False, repetitions=2,
                            compile_workers=1)
    saved = run_campaign(config, tmp_path)
    csv = tmp_path / "measurements.csv"
    saved.assign(machine_cpu="Another CPU").to_csv(csv, index=False)
    with pytest.raises(InputError, match="machine_cpu 'Another CPU'"):
        run_campaign(config, tmp_path)
    saved.drop(columns=["machine_cpu"]).to_csv(csv, index=False)
    with pytest.raises(InputError, match="without the machine's fingerprint"):
        run_campaign(config, tmp_path)
