"""Studies in storage: a killed run resumes without losing or repeating a point, and two
worker processes share one study (SQLite, and a PostgreSQL server started here) without
evaluating any point twice."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pytest

from tileflow.explore.studies import study as studies

WORKER = Path(__file__).with_name("study_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def worker(url: str, k: int, budget: int, batch: int = 8, resume: bool = False,
           meet: tuple[Path, int] | None = None) -> subprocess.Popen:
    """A worker process; with `meet` (folder, workers), it pauses after its first trial
    until every worker has completed one (see study_worker.py)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    extra = [str(meet[0]), str(meet[1])] if meet else []
    return subprocess.Popen([sys.executable, str(WORKER), url, str(k), str(budget),
                             str(batch), "1" if resume else "0", *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 120) -> None:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err


def points(url: str) -> list[tuple[str, tuple[int, ...], int]]:
    """(structure, factors, worker) of every point of every completed trial."""
    study = optuna.load_study(study_name=studies.STUDY_NAME, storage=studies.open_storage(url))
    out = []
    for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        if "points" in t.user_attrs:
            rows, _ = studies.decode(t.user_attrs["points"])
            who = studies.worker_of(t.user_attrs["points"])
            out += [(t.user_attrs["structure"], tuple(int(x) for x in r), who) for r in rows]
    return out


def create(url: str) -> None:
    finish(worker(url, -1, 0))


@pytest.mark.slow
def test_a_killed_run_resumes_without_losing_or_repeating_a_point(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    create(url)
    proc = worker(url, 1, 100_000, batch=4)
    deadline = time.time() + 90
    before: list = []
    while time.time() < deadline:
        time.sleep(0.5)
        try:
            before = points(url)
        except Exception:  # the database may be busy for a moment
            continue
        if len(before) >= 12:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = points(url)
    assert len(before) >= 12, "the run was killed before it completed three trials"
    budget = len(before) + 40
    finish(worker(url, 1, budget, batch=4, resume=True))
    after = points(url)
    keys = [(s, f) for s, f, _ in after]
    assert len(keys) == len(set(keys)), "a point was evaluated twice"
    assert {(s, f) for s, f, _ in before} <= set(keys), "a completed point was lost"
    assert len(keys) == budget


def _two_workers(url: str, meet: Path) -> None:
    """Both workers take a share whatever the load: each one waits, after its first trial,
    for the other's first (a slow start cannot leave one of them without work), and then
    they run side by side on one study."""
    create(url)
    budget = 96
    meet.mkdir()
    procs = [worker(url, k, budget, meet=(meet, 2)) for k in (1, 2)]
    for p in procs:
        finish(p)
    got = points(url)
    keys = [(s, f) for s, f, _ in got]
    assert len(keys) == len(set(keys)), "two workers evaluated the same point"
    assert len(keys) == budget
    assert {w for _, _, w in got} == {1, 2}, "both workers should have taken a share"


@pytest.mark.slow
def test_two_workers_share_a_sqlite_study(tmp_path):
    _two_workers(f"sqlite:///{tmp_path / 'study.db'}", tmp_path / "meet")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def postgres():
    """A throw-away PostgreSQL server in a temporary folder on a free loopback port, run by
    an unprivileged user when the tests run as root (initdb refuses root); skipped, saying
    why, where that cannot be done."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if not (initdb and pg_ctl):
        pytest.skip("PostgreSQL's initdb and pg_ctl are not on PATH")
    pytest.importorskip("psycopg2", reason="the 'distributed' extra (psycopg2) is missing")
    folder = Path(tempfile.mkdtemp(prefix="tileflow-pg-", dir="/tmp"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if not runuser:
            shutil.rmtree(folder, ignore_errors=True)
            pytest.skip("running as root without runuser: cannot start PostgreSQL as "
                        "another user")
        try:
            shutil.chown(folder, "nobody")
        except (LookupError, OSError) as exc:
            shutil.rmtree(folder, ignore_errors=True)
            pytest.skip(f"running as root and cannot hand a folder to user 'nobody': {exc}")
        prefix = [runuser, "-u", "nobody", "--"]
    port = _free_port()
    data = folder / "data"
    try:
        subprocess.run([*prefix, initdb, "-D", str(data), "-A", "trust", "-U", "tileflow"],
                       check=True, capture_output=True, text=True, timeout=120)
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-l", str(folder / "log"), "-w",
                        "-o", f"-p {port} -k {folder} -c listen_addresses=127.0.0.1",
                        "start"], check=True, capture_output=True, text=True, timeout=120)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        detail = getattr(exc, "stderr", "") or ""
        pytest.skip(f"cannot start a throw-away PostgreSQL server: {exc} {detail[-300:]}")
    try:
        yield f"postgresql://tileflow@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_two_workers_share_a_postgresql_study(postgres, tmp_path):
    _two_workers(postgres, tmp_path / "meet")
