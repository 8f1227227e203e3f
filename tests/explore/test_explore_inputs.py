"""`tileflow explore` checks every input before the search starts: the output folder (from
--out or the config), the study storage, every count against the work it asks for, the
structures listed, and the config's sizes and preset, each error naming the flag or the
config's file and line. Its outputs get the same file mode as other commands' and
summary.json lists only this run's files."""

from __future__ import annotations

import json
import os
import stat

import pytest

import tileflow.explore.studies.session as session
from tileflow.cli import main
from tileflow.explore.structures.genetic import GAConfig
from tileflow.explore.studies.config import MAX_EVALUATIONS, genetic_work

CONFIG = """\
accelerator: edge
workload: gemm-chain
sizes: {b: 1, m: 64, l: 64, k: 16, n: 16}
structures: [layerwise]
budget: {evaluations: 8}
batch: 8
"""


@pytest.fixture
def no_search(monkeypatch):
    """The search itself fails the test: every check must come before it."""
    def search(*args, **kwargs):
        raise AssertionError("the search started")

    monkeypatch.setattr(session, "explore", search)


def explore(capsys, tmp_path, config: str, *flags: str) -> tuple[int, str]:
    path = tmp_path / "c.yaml"
    path.write_text(config)
    code = main(["explore", str(path), "--quiet", *flags])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("out", ["file", "/dev/null", "/proc/tileflow-out", "/proc/self/x"])
def test_an_output_folder_that_cannot_be_written_is_refused_first(out, tmp_path, capsys,
                                                                   no_search):
    if out == "file":
        out = str(tmp_path / "a-file")
        (tmp_path / "a-file").write_text("x")
    code, err = explore(capsys, tmp_path, CONFIG, "--out", out)
    assert code == 2 and "--out" in err and out in err and "Traceback" not in err


def test_a_read_only_output_folder_is_refused(tmp_path, capsys, no_search, unwritable_folder):
    folder = unwritable_folder
    code, err = explore(capsys, tmp_path, CONFIG, "--out", str(folder))
    assert code == 2 and "--out" in err and "permission denied" in err


def test_an_output_folder_from_the_config_is_named_by_its_line(tmp_path, capsys, no_search):
    code, err = explore(capsys, tmp_path, CONFIG + "out: /dev/null\n")
    assert code == 2 and "c.yaml, line 7 (out)" in err and "not a folder" in err


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:///",
                                 "sqlite:///:memory:?cache=shared"])
def test_an_in_memory_sqlite_storage_is_refused_with_a_word(url, tmp_path, capsys,
                                                            no_search):
    code, err = explore(capsys, tmp_path, CONFIG, "--out", str(tmp_path / "o"),
                        "--storage", url)
    assert code == 2 and "--storage" in err and ("in-memory" in err or "no database" in err)


@pytest.mark.parametrize("where", ["/proc/tileflow/s.db", "/proc/s.db", "file/s.db", "dir",
                                   "/dev/null/s.db"])
def test_a_storage_file_that_cannot_be_made_is_refused(where, tmp_path, capsys, no_search):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    if not where.startswith("/"):
        where = str(tmp_path / where)
    code, err = explore(capsys, tmp_path, CONFIG, "--out", str(tmp_path / "o"),
                        "--storage", f"sqlite:///{where}")
    assert code == 2 and "--storage" in err and "Traceback" not in err


@pytest.mark.parametrize("line, line_no", [
    ("batch: 1000000000", 6),  # replaces batch: 8
    ("genetic: {population: 1000000000}", 7),
    ("genetic: {rungs: 60}", 7),
    ("genetic: {population: 100000, generations: 1000}", 7),
    ("budget: {evaluations: 1000000000}", 5),
])
def test_every_count_is_bounded_by_the_work_it_asks_for(line, line_no, tmp_path, capsys,
                                                        no_search):
    key = line.split(":")[0]
    config = "".join(x for x in CONFIG.splitlines(keepends=True)
                     if not x.startswith(key + ":"))
    lines = config.splitlines(keepends=True)
    lines.insert(line_no - 1, line + "\n")
    code, err = explore(capsys, tmp_path, "".join(lines) + "structures: search\n"
                        if key == "genetic" else "".join(lines))
    if key == "genetic":  # `structures: search` replaced the list: one line fewer above it
        code, err = explore(capsys, tmp_path, "".join(lines).replace(
            "structures: [layerwise]\n", "") + "structures: search\n")
        line_no -= 1
    assert code == 2 and f"c.yaml, line {line_no}" in err, err


def test_the_genetic_work_bound_counts_every_rung_and_generation():
    # population 12, budget 32, eta 2, rungs 3: 12*32 + 6*64 + 3*128 = 1152 per generation,
    # plus one first-rung search of each structure found again (12*32)
    ga = GAConfig(population=12, generations=6, budget=32, rungs=3)
    assert genetic_work(ga) == (1152 + 384) * 7
    # rungs grow the budget eta-fold: the 60th rung alone is 2**59 * budget
    assert genetic_work(GAConfig(population=2, budget=1, rungs=60)) > MAX_EVALUATIONS


def test_budget_evals_flag_is_bounded(tmp_path, capsys, no_search):
    code, err = explore(capsys, tmp_path, CONFIG, "--budget-evals", str(10**12))
    assert code == 2 and "--budget-evals" in err


def test_a_structure_named_twice_is_refused(tmp_path, capsys, no_search):
    code, err = explore(capsys, tmp_path, CONFIG.replace("[layerwise]", "[chimera, chimera]"))
    assert code == 2 and "c.yaml, line 4" in err and "twice" in err


@pytest.mark.parametrize("edit, line, word", [
    ("sizes: {zz: 4}", 3, "zz"),
    ("preset: G99", 3, "G99"),
])
def test_sizes_and_preset_errors_name_the_config_line(edit, line, word, tmp_path, capsys,
                                                      no_search):
    config = CONFIG.replace("sizes: {b: 1, m: 64, l: 64, k: 16, n: 16}", edit)
    config = config.replace("gemm-chain", "attention")
    code, err = explore(capsys, tmp_path, config)
    assert code == 2, err
    assert f"c.yaml, line {line}" in err and word in err
    assert "--set" not in err and "--preset" not in err


def test_outputs_have_the_usual_mode_and_stale_files_are_not_listed(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / "front.csv").write_text("an earlier two-objective run's front\n")
    code, _ = explore(capsys, tmp_path, CONFIG, "--out", str(out))
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "front.csv" not in summary["files"]
    assert {"best.yaml", "points.csv", "summary.json", "summary.md"} <= set(summary["files"])
    mask = os.umask(0)
    os.umask(mask)
    for name in summary["files"]:
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o666 & ~mask, name


@pytest.mark.parametrize("edit, line", [("accelerator: edgy", 1),
                                        ('workload: "st1 * 0"', 2),
                                        ("accelerator: edge " + "x" * 5000, 1)])
def test_an_unknown_name_in_the_config_is_named_by_its_line(edit, line, tmp_path, capsys,
                                                            no_search):
    key = edit.split(":")[0]
    config = "\n".join(edit if x.startswith(key + ":") else x for x in CONFIG.splitlines())
    code, err = explore(capsys, tmp_path, config + "\n")
    assert code == 2 and f"c.yaml, line {line} ({key})" in err, err


def test_a_storage_name_too_long_is_refused(tmp_path, capsys, no_search):
    code, err = explore(capsys, tmp_path, CONFIG, "--out", str(tmp_path / "o"), "--storage",
                        "sqlite:///" + "d" * 300 + "/s.db")
    assert code == 2 and "--storage" in err and "too long" in err, err


def test_a_sweep_with_an_unknown_accelerator_names_the_config_line(tmp_path, capsys):
    config = CONFIG.replace("accelerator: edge", "accelerator: 'false'") + (
        "sweep:\n  parameters:\n    L1.capacity_bytes: [512, 4096]\n")
    (tmp_path / "s.yaml").write_text(config)
    code = main(["sweep", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "s.yaml, line 1 (accelerator)" in err, err


def test_a_storage_that_cannot_be_opened_names_the_flag(tmp_path, capsys):
    (tmp_path / "junk.db").write_bytes(b"not a database" * 100)
    code, err = explore(capsys, tmp_path, CONFIG, "--out", str(tmp_path / "o"), "--storage",
                        f"sqlite:///{tmp_path / 'junk.db'}")
    assert code == 2 and err.startswith("tileflow: error: --storage:"), err
