"""Kill -9 at the worst moments, then `--resume`: `tileflow explore` on a PostgreSQL server,
a spawned worker killed under its main process, a main process killed under its worker (it
ends with it; the study resumes on SQLite), and a sweep killed during a point's structure
search.
Real processes and signals; every wait is bounded."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from tests.explore.test_study import points, postgres  # noqa: F401 - a fixture
from tileflow.explore.studies.storage import _alive

ROOT = Path(__file__).resolve().parents[2]
CHAIN = """\
accelerator: edge
workload: gemm-chain
sizes: {b: 2, m: 256, l: 128, k: 32, n: 32}
structures: [tileflow-pipe, chimera]
batch: 8
"""
pytestmark = pytest.mark.slow


def tileflow(*args: str, eager_workers: bool = False) -> subprocess.Popen:
    """`tileflow ARGS` in a process of its own; `eager_workers`: its workers start as soon
    as the main process has searched for a moment, whatever the budget left (here the
    budget must be small, and the worker must take part)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = ("import sys; from tileflow.explore.studies import workers; "
            f"workers.STARTUP_S = {0 if eager_workers else 'workers.STARTUP_S'}; "
            "from tileflow.cli import main; sys.exit(main(sys.argv[1:]))")
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 180) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return err


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen, what: str,
             timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the process ended before {what}: {proc.communicate()}")
        try:
            if condition():
                return
        except sqlite3.Error:  # the database is busy or not made yet
            pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"timed out waiting for {what}")


def query(db: Path, sql: str) -> list[tuple]:
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as c:
        return c.execute(sql).fetchall()


def completed(db: Path) -> list[tuple[int, int, int]]:
    """(trial, worker, points) of the completed trials' points."""
    rows = query(db, "SELECT t.number, a.value_json FROM trials t JOIN "
                     "trial_user_attributes a ON a.trial_id = t.trial_id WHERE "
                     "a.key = 'points' AND t.state = 'COMPLETE'")
    out = []
    for number, value in rows:
        data = json.loads(json.loads(value))
        out.append((number, data["worker"], len(data["rows"])))
    return out


def server_trials(url: str) -> int:
    """Completed trials on the PostgreSQL server."""
    import psycopg2

    try:
        with psycopg2.connect(url) as c, c.cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'")
            return int(cursor.fetchone()[0])
    except psycopg2.Error:  # the tables are not made yet
        return 0


def owners(db: Path) -> set[int]:
    return {json.loads(v)["pid"] for (v,) in query(
        db, "SELECT value_json FROM trial_user_attributes WHERE key = 'owner'")}


def unique_points(folder: Path) -> pd.DataFrame:
    table = pd.read_csv(folder / "points.csv")
    assert not table.duplicated(["structure", "factors"]).any(), "a point evaluated twice"
    return table


def config(folder: Path) -> Path:
    path = folder / "chain.yaml"
    path.write_text(CHAIN)
    return path


def test_a_killed_explore_on_postgresql_resumes_without_losing_or_repeating_a_point(
        tmp_path, postgres):  # noqa: F811 - the fixture
    """(On SQLite: the killed main process below, with its worker.)"""
    url = postgres
    path, out = config(tmp_path), tmp_path / "out"
    args = ["explore", str(path), "--out", str(out), "--quiet", "--storage", url]
    proc = tileflow(*args, "--budget-evals", "100000")
    wait_for(lambda: server_trials(url) >= 6, proc, "6 trials on the server")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = {(s, " ".join(map(str, f))) for s, f, _ in points(url)}
    assert len(before) >= 8, "the run was killed before it completed a trial"
    budget = len(before) + 48
    finish(tileflow(*args, "--resume", "--budget-evals", str(budget)))
    after = unique_points(out)
    assert len(after) == budget
    assert before <= set(zip(after["structure"], after["factors"], strict=True)), "a point lost"


def test_a_killed_worker_hands_back_its_points_and_the_run_writes_its_outputs(tmp_path):
    """Before: the main process spent its whole budget, then exited 2 with nothing written."""
    path, out, db = config(tmp_path), tmp_path / "out", tmp_path / "study.db"
    budget = 4000  # long enough for a worker to start and claim points on a fast search
    proc = tileflow("explore", str(path), "--out", str(out), "--quiet", "--storage",
                    f"sqlite:///{db}", "--workers", "2", "--budget-evals", str(budget),
                    eager_workers=True)
    wait_for(lambda: any(w == 1 for _, w, _ in completed(db)), proc, "worker 1's first trial")
    (victim,) = owners(db) - {proc.pid}
    os.kill(victim, signal.SIGKILL)
    err = finish(proc)
    assert f"process {victim}) stopped" in err
    table = unique_points(out)
    assert len(table) == budget  # the dead worker's claimed points were evaluated by main
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluations"] == budget and any("stopped" in n for n in
                                                    summary["workers"]["notes"])
    assert (out / "best.yaml").exists()


def test_a_killed_main_process_takes_its_workers_with_it_and_resumes(tmp_path):
    """Before: the worker kept running as an orphan, writing trials. The resumed run loses
    no completed point and evaluates none twice."""
    path, out, db = config(tmp_path), tmp_path / "out", tmp_path / "study.db"
    args = ["explore", str(path), "--out", str(out), "--quiet", "--storage", f"sqlite:///{db}"]
    proc = tileflow(*args, "--workers", "2", "--budget-evals", "100000")
    wait_for(lambda: any(w == 1 for _, w, _ in completed(db)), proc, "worker 1's first trial")
    (child,) = owners(db) - {proc.pid}
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the worker outlived its main process"
    trials = len(completed(db))
    time.sleep(1.5)
    assert len(completed(db)) == trials, "a trial was written after the processes died"
    before = {(s, " ".join(map(str, f))) for s, f, _ in points(f"sqlite:///{db}")}
    finish(tileflow(*args, "--resume", "--budget-evals", str(len(before) + 24)))
    after = unique_points(out)
    assert len(after) == len(before) + 24
    assert before <= set(zip(after["structure"], after["factors"], strict=True)), "a point lost"


SWEEP = """\
accelerator: edge
workload: gemm-chain
sizes: {b: 1, m: 64, l: 64, k: 16, n: 16}
structures: search
genetic: {population: 4, generations: 2, evaluations: 8, top: 2}
budget: {evaluations: 16}
batch: 8
sweep:
  parameters:
    L1.capacity_words: [4096]
  bound: none
"""


def test_a_sweep_killed_during_a_structure_search_resumes(tmp_path):
    """Before: the point's storage held only the structure search, the resumed point started
    its study anew and found the search there: 'a study already exists', exit 2, for ever."""
    path, out = tmp_path / "sweep.yaml", tmp_path / "out"
    path.write_text(SWEEP.replace("  bound: none\n", ""))
    args = ["sweep", str(path), "--out", str(out), "--quiet", "--no-bound"]
    proc = tileflow(*args)
    db = out / "studies" / "p000.db"

    def searching() -> bool:
        names = {n for (n,) in query(db, "SELECT study_name FROM studies")}
        done = query(db, "SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'")
        return names == {"tileflow-structures"} and done[0][0] >= 1

    wait_for(searching, proc, "the first point's structure search")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    code = tileflow(*args, "--resume", "--json")
    out_text, err = code.communicate(timeout=300)
    assert code.returncode == 0, err
    data = json.loads(out_text)
    assert [r["label"] for r in data["points"]] == ["p000"]
    assert all(r["status"] == "done" and 0 < r["evaluations"] <= 16 for r in data["points"])


class _Killed(BaseException):
    """Stands for the process dying between two writes."""


def test_a_kill_between_the_structure_search_s_two_last_writes_resumes(tmp_path, monkeypatch):
    """The search records its summary and its structures in two writes; the structures mark
    it complete. Killed between them, the storage must resume (the search runs again), not
    be 'damaged' for ever: that happened when the structures were written first."""
    import optuna

    from tileflow.cli import main

    path, out = tmp_path / "sweep.yaml", tmp_path / "out"
    path.write_text(SWEEP)
    real = optuna.study.Study.set_user_attr
    writes: list[str] = []

    def dying(self, key, value):
        real(self, key, value)
        if key in ("found", "summary"):  # the first of the two is written, then the end
            writes.append(key)
            raise _Killed

    monkeypatch.setattr(optuna.study.Study, "set_user_attr", dying)
    args = ["sweep", str(path), "--out", str(out), "--quiet", "--no-bound"]
    with pytest.raises(_Killed):
        main(args)
    assert len(writes) == 1, writes
    monkeypatch.setattr(optuna.study.Study, "set_user_attr", real)
    assert main([*args, "--resume"]) == 0
    assert (out / "sweep.csv").exists()
