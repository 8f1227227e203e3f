"""A study knows what it was built from: resuming it after the accelerator's or workload's
contents changed (their names kept), or under another model version, is refused with exit 2
(`--restart` starts anew); a damaged storage is an exit-2 message naming what is wrong."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from tests.explore.test_sweep import TINY  # the tiny chip of the sweep tests
from tileflow import provenance
from tileflow.cli import main
from tileflow.cost import evaluate
from tileflow.specs.arch import load_arch
from tileflow.specs.dataflow import load_dataflow_file
from tileflow.specs.workload import load_workload

CHAIN = """\
name: chain
dims: {b: 1, m: 8, l: 8, k: 4, n: 4}
ops:
  - {name: gemm1, expr: "C[b,m,l] += A[b,m,k] * B[b,k,l]"}
  - {name: gemm2, expr: "E[b,m,n] += C[b,m,l] * D[b,l,n]"}
"""
CONFIG = """\
accelerator: tiny.yaml
workload: chain.yaml
structures: [tileflow-pipe, chimera]
budget: {evaluations: 24}
batch: 8
"""


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def explore(folder: Path, capsys, *extra: str) -> tuple[int, str]:
    code, _, err = run(capsys, "explore", str(folder / "study.yaml"), "--out",
                       str(folder / "out"), "--quiet", "--storage", str(folder / "study.db"),
                       *extra)
    return code, err


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "tiny.yaml").write_text(TINY)
    (tmp_path / "chain.yaml").write_text(CHAIN)
    (tmp_path / "study.yaml").write_text(CONFIG)
    return tmp_path


@pytest.mark.parametrize("file, old, new, what", [
    ("tiny.yaml", "capacity_words: 64", "capacity_words: 16", "accelerator's contents"),
    ("chain.yaml", "D[b,l,n]", "D[b,n,l]", "workload's contents"),
    ("study.yaml", "batch: 8", "batch: 8\nlimits: {dram_words: 400}", "settings"),
])
def test_resume_after_editing_a_file_but_not_its_name_is_refused(folder, capsys, file, old,
                                                                 new, what):
    code, err = explore(folder, capsys)
    assert code == 0, err
    path = folder / file
    path.write_text(path.read_text().replace(old, new))
    code, err = explore(folder, capsys, "--resume", "--budget-evals", "40")
    assert code == 2 and what in err and "--restart" in err and "Traceback" not in err


def test_restart_discards_the_old_points_and_the_best_matches_the_new_accelerator(folder,
                                                                                  capsys):
    assert explore(folder, capsys)[0] == 0
    arch_file = folder / "tiny.yaml"
    arch_file.write_text(arch_file.read_text().replace("capacity_words: 64",
                                                       "capacity_words: 16"))
    code, err = explore(folder, capsys, "--restart", "--budget-evals", "16")
    assert code == 0, err
    points = pd.read_csv(folder / "out" / "points.csv")
    summary = json.loads((folder / "out" / "summary.json").read_text())
    # only this study's points: the baselines' two seeds are among the 16 of the budget
    assert summary["evaluations"] == len(points) <= 16 + 2
    arch = load_arch(str(arch_file))
    best = evaluate(load_workload(str(folder / "chain.yaml")), arch,
                    load_dataflow_file(str(folder / "out" / "best.yaml")))
    assert best.cycles == pytest.approx(summary["found"]["cycles"], rel=1e-12)
    assert best.cycles == pytest.approx(points["cycles"][points["valid"]].min(), rel=1e-12)


def test_another_model_version_is_refused_and_the_version_is_in_the_summary(folder, capsys,
                                                                            monkeypatch):
    assert explore(folder, capsys)[0] == 0
    summary = json.loads((folder / "out" / "summary.json").read_text())
    assert summary["model_version"] == provenance.MODEL_VERSION
    monkeypatch.setattr(provenance, "MODEL_VERSION", "0.0-older")
    code, err = explore(folder, capsys, "--resume", "--budget-evals", "40")
    assert code == 2 and "model version" in err and "0.0-older" in err


def test_a_copy_of_a_file_elsewhere_is_the_same_contents(folder):
    other = folder / "copy"
    other.mkdir()
    shutil.copy(folder / "tiny.yaml", other / "tiny.yaml")
    a, b = load_arch(str(folder / "tiny.yaml")), load_arch(str(other / "tiny.yaml"))
    assert provenance.digest(a) == provenance.digest(b)
    w = load_workload(str(folder / "chain.yaml"))
    assert provenance.marks(a, w, [1]) == provenance.marks(b, w, [1])
    assert provenance.marks(a, w, [1]) != provenance.marks(a, w, [2])


# ---- damaged storages -------------------------------------------------------------------

def _sql(path: Path, statement: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute(statement)


def _points(value: str) -> str:
    """An UPDATE giving the second trial's points a stored value (Optuna keeps JSON text)."""
    return (f"UPDATE trial_user_attributes SET value_json = '{value}' WHERE key = 'points' "
            "AND trial_id = 2")


def _poke(path: Path, offset: int) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(b"\xde\xad\xbe\xef" * 2048)


DAMAGE = [
    ("points not JSON", lambda p: _sql(p, _points('"not json {"')), "not JSON"),
    ("points a list", lambda p: _sql(p, _points('"[1, 2, 3]"')), "expected an object"),
    ("a factor a string", lambda p: _sql(p, _points(
        '"{\\"rows\\": [[\\"a\\"]], \\"cost\\": [1], \\"valid\\": [true], '
        '\\"metrics\\": {}}"')), "wrong type"),
    ("valid not booleans", lambda p: _sql(p, _points(
        '"{\\"rows\\": [], \\"cost\\": [], \\"valid\\": 3, \\"metrics\\": {}}"')), "damaged"),
    ("a stored value not JSON at all", lambda p: _sql(p, _points("{{{")), "not JSON"),
    ("the study's record", lambda p: _sql(
        p, "UPDATE study_user_attributes SET value_json = '[1]' WHERE key = 'provenance'"),
     "record of what it was started from"),
    ("garbage inside the file", lambda p: _poke(p, p.stat().st_size // 2), "malformed"),
    ("garbage over the file", lambda p: p.write_bytes(b"\x00garbage" * 4096), "not a database"),
]


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("stored")
    (folder / "tiny.yaml").write_text(TINY)
    (folder / "chain.yaml").write_text(CHAIN)
    (folder / "study.yaml").write_text(CONFIG)
    assert main(["explore", str(folder / "study.yaml"), "--out", str(folder / "out"),
                 "--quiet", "--storage", str(folder / "study.db")]) == 0
    with sqlite3.connect(folder / "study.db") as db:  # everything in the file itself
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return folder


@pytest.mark.parametrize("what, damage, message", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_a_damaged_storage_is_an_exit_2_message(stored, tmp_path, capsys, what, damage,
                                                message):
    for name in ("tiny.yaml", "chain.yaml", "study.yaml", "study.db"):
        shutil.copy(stored / name, tmp_path / name)
    damage(tmp_path / "study.db")
    code, err = explore(tmp_path, capsys, "--resume", "--budget-evals", "40")
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert "damaged" in err or "cannot open" in err or "other contents" in err
