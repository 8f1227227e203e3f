"""Processes sharing one study: a process resuming a study that another still runs joins it
(the other's running trial is not failed under it); processes creating one SQLite file at the
same moment take turns; `--workers` is capped by the cores, and a budget too small for a
worker to pay off starts none and says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState

from tests.explore.study_worker import candidates
from tests.explore.test_study import ROOT, points, worker
from tests.explore.test_sweep import TINY  # the tiny chip of the sweep tests
from tileflow.cli import main
from tileflow.explore.factors.space import Limits
from tileflow.explore.studies import study as studies
from tileflow.explore.studies import workers as pool
from tileflow.explore.studies.session import worker_entry


def _completed_points(url: str, worker_id: int) -> int:
    try:
        return sum(1 for _, _, w in points(url) if w == worker_id)
    except Exception:  # the database may be busy for a moment
        return 0


def test_resume_while_another_process_runs_joins_it(tmp_path):
    """This process holds a running trial with claimed rows while a second process resumes
    the study: the trial stays running, the second process evaluates none of its rows, and
    the trial completes afterwards (it was failed under it before: UpdateFinishedTrialError)."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    cands = candidates()
    storage = studies.open_storage(url)
    study = studies.create_or_load(storage, cands, "latency", Limits(), resume=False)
    held = studies.Worker(study, cands, "latency", Limits(), seed=0, worker=7, batch=8,
                          shared=True)
    seen: dict = {}

    def budget_left(in_flight: int) -> int:
        if not seen:  # our rows are claimed and our trial runs: now the other resumes
            seen["trial"] = held.trial._trial_id
            other = worker(url, 1, 24 + 8, batch=4, resume=True)
            deadline = time.monotonic() + 120
            while _completed_points(url, 1) < 8 and time.monotonic() < deadline:
                assert other.poll() is None, other.communicate()[1]
                time.sleep(0.2)
            state = storage.get_trial(seen["trial"]).state
            seen["state"], seen["other"] = state, other
        return 1 << 30

    done = held.run_trial(budget_left)  # before: UpdateFinishedTrialError here
    held.heartbeat.stop()
    assert seen["state"] == TrialState.RUNNING, "the resuming process failed a live trial"
    out, err = seen["other"].communicate(timeout=120)
    assert seen["other"].returncode == 0, err
    assert storage.get_trial(seen["trial"]).state == TrialState.COMPLETE and done >= 1
    got = points(url)
    keys = [(s, f) for s, f, _ in got]
    assert len(keys) == len(set(keys)), "a claimed point was evaluated by the other process"
    # the other process stops at its budget of 32 with the held trial's points counted (the
    # held trial itself was given no budget, so it may take more than its first claim)
    assert sum(w == 7 for _, _, w in got) == done
    assert len(keys) >= 24 + 8 and {w for _, _, w in got} == {1, 7}


RACE = """
import sys, time
sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
from study_worker import candidates
from tileflow.errors import InputError
from tileflow.explore.studies import study as studies
from tileflow.explore.factors.space import Limits
cands = candidates()
while time.time() < {start}:
    time.sleep(0.001)
try:
    studies.create_or_load(studies.open_storage({url!r}), cands, "latency", Limits(),
                           resume=False)
    print("created")
except InputError as exc:
    print("refused", exc)
"""


@pytest.mark.slow
def test_processes_creating_one_sqlite_file_at_once_take_turns(tmp_path):
    """Four processes open and create one new SQLite study at the same instant: one creates
    it, the others are told it exists (before: 'UNIQUE constraint failed' tracebacks)."""
    url = f"sqlite:///{tmp_path / 'new' / 'study.db'}"
    start = time.time() + 6  # after every process has imported its modules
    code = RACE.format(root=str(ROOT), tests=str(ROOT / "tests" / "explore"), start=start,
                       url=url)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0 and "UNIQUE" not in err, err
    outs = sorted(out.split()[0] for out, _ in results)
    assert outs == ["created", "refused", "refused", "refused"], results
    assert all("already exists" in out for out, _ in results if out.startswith("refused"))
    study = optuna.load_study(study_name=studies.STUDY_NAME,
                              storage=studies.open_storage(url))
    assert "provenance" in study.user_attrs


def test_workers_are_capped_by_the_cores_with_a_warning(monkeypatch, capsys):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.5, 0.5), raising=False)
    assert pool.usable_workers(64) == 2
    assert "more than the 2 cores" in capsys.readouterr().err
    assert pool.usable_workers(2) == 2 and capsys.readouterr().err == ""
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0), raising=False)
    assert pool.usable_workers(2) == 2 and "busy (load 9.0 on 2 cores)" in \
        capsys.readouterr().err
    assert pool.usable_workers(1) == 1 and capsys.readouterr().err == ""


def test_a_budget_too_small_for_a_worker_starts_none_and_says_why(tmp_path, capsys,
                                                                  monkeypatch):
    """Before, the second worker started, evaluated nothing and doubled the run's time."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    (tmp_path / "tiny.yaml").write_text(TINY)
    (tmp_path / "s.yaml").write_text("accelerator: tiny.yaml\nworkload: gemm-chain\n"
                                     "sizes: {b: 1, m: 8, l: 8, k: 4, n: 4}\n"
                                     "structures: [chimera]\nbatch: 4\n")
    code = main(["explore", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"),
                 "--quiet", "--workers", "2", "--budget-evals", "8"])
    err = capsys.readouterr().err
    assert code == 0, err
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["workers"]["processes"] == 1 and summary["workers"]["requested"] == 2
    assert "no worker process was started" in err
    assert summary["workers"]["notes"] and "pays off" in summary["workers"]["notes"][0]
    assert summary["workers"]["points_by_worker"] == {"0": summary["evaluations"]}


def test_the_pool_starts_workers_only_when_the_rest_outlasts_their_start_up():
    class Config:
        budget_evals, budget_seconds = 1000, None

    class Cache:
        evaluations = 100

    class Main:
        caches = [Cache()]
        completed_rows = 100

    started = []
    p = pool.Pool(Config(), None, 2, worker_entry)
    p._start = lambda: started.append(True)
    p.tend(Main(), pool.MEASURE_S / 2)  # too early to know the rate
    assert not p.decided
    # 100 points in 1 s, 900 left: 9 s of search, more than a worker's start-up
    p.tend(Main(), 1.0)
    assert p.decided and started == [True]
    q = pool.Pool(Config(), None, 2, worker_entry)
    q._start = lambda: started.append(False)
    Main.completed_rows = 1000 - 100 * int(pool.STARTUP_S) + 100  # under STARTUP_S left
    q.tend(Main(), 1.0)
    assert q.decided and started == [True] and "start-up" in q.why_not
