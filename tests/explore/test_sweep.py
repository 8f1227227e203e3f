"""`tileflow sweep`: the config is validated with file and line, each point's accelerator is
the base one with the point's values, every point gets the explorer's best dataflow and the
bound at its capacity (the dataflow reaching the bound evaluates to it), the outputs are
complete, and `--resume` repeats nothing finished."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from tileflow.cli import main
from tileflow.cost import evaluate
from tileflow.explore.sweeps.sweep import SweepState
from tileflow.explore.sweeps.sweep_config import apply_point, load_sweep
from tileflow.explore.sweeps.sweep_outputs import write_all
from tileflow.specs.arch import load_arch
from tileflow.specs.dataflow import load_dataflow_file
from tileflow.specs.workload import load_workload
from tileflow.specs.yamlfile import load_yaml

TINY = """\
name: tiny
levels:
  - {name: DRAM, read_words_per_cycle: 4, write_words_per_cycle: 4, energy_pj_per_word: 200}
  - {name: L1, capacity_words: 64, read_words_per_cycle: 8, write_words_per_cycle: 8,
     energy_pj_per_word: 10}
  - {name: Reg, capacity_words: 4, fanout: 4, read_words_per_cycle: 2,
     write_words_per_cycle: 2, energy_pj_per_word: 1}
compute:
  matrix: {rows: 2, cols: 2, level: Reg}
  vector: {lanes: 2, level: L1}
"""
SIZES = {"b": 1, "m": 4, "l": 4, "k": 2, "n": 2}
CONFIG = f"""\
accelerator: tiny.yaml
workload: gemm-chain
sizes: {json.dumps(SIZES)}
structures: [tileflow-pipe, chimera]
budget: {{evaluations: 40}}
batch: 16
sweep:
  parameters:
    L1.capacity_words: [8, 24, 96]
"""
CAPACITIES = (8, 24, 96)


def write(folder: Path, text: str, name: str = "sweep.yaml") -> Path:
    (folder / "tiny.yaml").write_text(TINY)
    path = folder / name
    path.write_text(text)
    return path


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    config = write(folder, CONFIG)
    out = folder / "out"
    code = main(["sweep", str(config), "--out", str(out), "--quiet"])
    assert code == 0
    return folder, config, out, json.loads((out / "summary.json").read_text())


def test_every_output_is_written_and_the_table_has_a_row_per_point(swept):
    _, _, out, summary = swept
    for name in ("sweep.csv", "summary.md", "summary.json", "sweep.png", "bound.png"):
        assert (out / name).stat().st_size > 0, name
    assert not list(out.rglob(".*.tmp")), "a temporary file was left behind"
    table = pd.read_csv(out / "sweep.csv")
    assert list(table["label"]) == ["p000", "p001", "p002"]
    assert list(table["L1.capacity_words"]) == list(CAPACITIES)
    assert summary["points_done"] == summary["points_total"] == 3
    for k in range(3):
        assert (out / "accelerators" / f"p{k:03d}.yaml").exists()
        assert (out / "studies" / f"p{k:03d}.db").exists()
        assert (out / "points" / f"p{k:03d}" / "best.yaml").exists()


def test_each_point_runs_on_the_accelerator_with_its_value(swept):
    _, _, out, summary = swept
    for row, words in zip(summary["points"], CAPACITIES, strict=True):
        arch = load_arch(str(out / "accelerators" / f"{row['label']}.yaml"))
        assert arch.level("L1").capacity_words == words
        assert arch.level("Reg").capacity_words == 4  # the rest is the base accelerator
        assert row["capacity_bytes"] == words * 2


def test_the_best_dataflow_of_a_point_gives_its_numbers_under_evaluate(swept):
    _, _, out, summary = swept
    w = load_workload("gemm-chain", SIZES)
    for row in summary["points"]:
        arch = load_arch(str(out / "accelerators" / f"{row['label']}.yaml"))
        result = evaluate(w, arch, load_dataflow_file(str(out / "points" / row["label"] /
                                                     "best.yaml")))
        assert result.valid
        assert result.cycles == pytest.approx(row["cycles"], rel=1e-9)
        assert result.dram_words == row["dram_words"]


def test_the_dataflow_reaching_the_bound_moves_exactly_the_bound(swept):
    _, _, out, summary = swept
    w = load_workload("gemm-chain", SIZES)
    for row in summary["points"]:
        arch = load_arch(str(out / "accelerators" / f"{row['label']}.yaml"))
        result = evaluate(w, arch, load_dataflow_file(str(out / "points" / row["label"] /
                                                     "bound.yaml")))
        assert result.valid  # it fits the point's capacity
        assert result.dram_words == row["bound_dram_words"]


def test_bound_is_between_compulsory_traffic_and_the_found_dataflow(swept):
    _, _, _, summary = swept
    rows = summary["points"]
    compulsory = 4 * 2 + 2 * 4 + 4 * 2 + 4 * 2  # A, B, D read once; E written once
    bounds = [r["bound_dram_words"] for r in rows]
    assert all(r["compulsory_words"] == compulsory for r in rows)
    assert all(b >= compulsory for b in bounds)
    assert bounds == sorted(bounds, reverse=True)  # capacities ascend
    for r in rows:
        assert r["dram_words"] >= r["bound_dram_words"]
        assert r["gap"] == pytest.approx(r["dram_words"] / r["bound_dram_words"])


def test_without_resume_an_existing_sweep_is_not_overwritten(swept, capsys):
    _, config, out, _ = swept
    code, _, err = run(capsys, "sweep", str(config), "--out", str(out), "--quiet")
    assert code == 2 and "already exists" in err and "--resume" in err


def test_resume_runs_only_the_points_not_finished(swept, capsys, tmp_path):
    folder, config, out, summary = swept
    copy_out = tmp_path / "out"
    import shutil

    shutil.copytree(out, copy_out)
    partial = copy.deepcopy(summary)
    partial["points"] = partial["points"][:2]  # as if stopped during the third point
    (copy_out / "summary.json").write_text(json.dumps(partial))
    kept = (copy_out / "points" / "p000" / "summary.json").stat().st_mtime_ns
    code, out_text, _ = run(capsys, "sweep", str(config), "--out", str(copy_out), "--resume",
                            "--json", "--quiet")
    assert code == 0
    data = json.loads(out_text)
    assert [r["label"] for r in data["points"]] == ["p000", "p001", "p002"]
    assert (copy_out / "points" / "p000" / "summary.json").stat().st_mtime_ns == kept
    # the third point's study was complete: resuming it evaluates nothing new
    assert data["points"][2]["evaluations"] == summary["points"][2]["evaluations"]
    assert data["points"][2]["dram_words"] == summary["points"][2]["dram_words"]


def test_help_shows_an_example(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["sweep", "--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    assert "example" in text and "L1.capacity_bytes" in text


# ---- validation -----------------------------------------------------------------------

BAD = [
    ("    L1.size: [8]\n", "unknown key 'L1.size'", 9),
    ("    L1.capacity_words: [8, '16KB']\n", "must be a number", 9),
    ("    L1.capacity_words: [8, -4]\n", "at least", 9),
    ("    L1.capacity_words: [.nan]\n", "finite", 9),
    ("    L1.capacity_words: [true]\n", "must be a number", 9),
    ("    L1.fanout: [2.5]\n", "must be an integer", 9),
    ("    L1.capacity_words: []\n", "at least one value", 9),
    ("    L1.capacity_words: [8, 8]\n", "twice", 9),
    ("    L9.capacity_words: [8]\n", "names level 'L9'", 9),
    ("    DRAM.fanout: [2]\n", "outermost level has no fan-out", 9),
    ("    L1.capacity_words: [8]\n  mode: cartesian\n", "'mode' must be one of", 10),
    ("    L1.capacity_words: [8]\n  bound: DRAM\n", "must be an on-chip level", 10),
    ("    L1.capacity_words: [8]\n  bound: 'false'\n", "must be an on-chip level", 10),
    ("    L1.capacity_words: [8]\n  colour: red\n", "unknown key 'colour'", 10),
    ("    L1.capacity_words: [8]\n    Reg.capacity_words: [2, 4]\n  mode: zip\n",
     "as many values", 8),
    ("    DRAM.read_bandwidth_gbps: [1.0e-9]\n", "the accelerator rejects the point", None),
]


@pytest.mark.parametrize("lines, message, line", BAD)
def test_bad_sweep_sections_name_the_file_and_line(tmp_path, capsys, lines, message, line):
    head = CONFIG.split("    L1.capacity_words")[0]
    path = write(tmp_path, head + lines)
    code, _, err = run(capsys, "sweep", str(path), "--out", str(tmp_path / "o"), "--quiet")
    assert code == 2, err
    assert message in err and str(path) in err and "Traceback" not in err
    if line is not None:
        assert f"line {line}" in err


def test_a_config_without_sweep_is_an_error(tmp_path, capsys):
    path = write(tmp_path, CONFIG.split("sweep:")[0])
    code, _, err = run(capsys, "sweep", str(path), "--quiet")
    assert code == 2 and "missing required key 'sweep'" in err


def test_grid_takes_every_combination_and_zip_the_ith_values(tmp_path):
    head = CONFIG.split("    L1.capacity_words")[0]
    grid = load_sweep(write(tmp_path, head + "    L1.capacity_words: [8, 16]\n"
                            "    DRAM.bandwidth_gbps: [1, 2, 4]\n", "grid.yaml"))
    assert len(grid.points()) == 6
    assert grid.bound_level == "L1"
    zipped = load_sweep(write(tmp_path, head + "    L1.capacity_words: [8, 16]\n"
                              "    DRAM.bandwidth_gbps: [1, 2]\n  mode: zip\n", "zip.yaml"))
    assert zipped.points() == [{"L1.capacity_words": 8, "DRAM.bandwidth_gbps": 1},
                               {"L1.capacity_words": 16, "DRAM.bandwidth_gbps": 2}]
    none = load_sweep(write(tmp_path, head + "    DRAM.bandwidth_gbps: [1, 2]\n", "n.yaml"))
    assert none.bound_level is None  # no capacity swept: no bound unless asked


# ---- applying a point ---------------------------------------------------------------------

def test_points_write_their_values_into_the_accelerator(tmp_path):
    head = CONFIG.split("    L1.capacity_words")[0]
    config = load_sweep(write(tmp_path, head + "    L1.capacity_bytes: [1024]\n"
                              "    DRAM.bandwidth_gbps: [30]\n    matrix.size: [4]\n"
                              "    L1.fanout: [2]\n"))
    doc = load_yaml(tmp_path / "tiny.yaml")
    doc["levels"][1]["mesh"] = [1, 1]
    point = config.points()[0]
    new = apply_point(doc, point, config.parameters)
    l1, dram, reg = new["levels"][1], new["levels"][0], new["levels"][2]
    assert l1["capacity_bytes"] == 1024 and "capacity_words" not in l1
    assert l1["fanout"] == 2 and "mesh" not in l1
    assert dram["read_bandwidth_gbps"] == dram["write_bandwidth_gbps"] == 30
    assert "read_words_per_cycle" not in dram and "write_words_per_cycle" not in dram
    assert new["compute"]["matrix"]["rows"] == new["compute"]["matrix"]["cols"] == 4
    assert reg["fanout"] == 16  # one register per PE, as before
    assert doc["levels"][1]["capacity_words"] == 64  # the base document is untouched
    assert not math.isnan(l1["capacity_bytes"])


def test_no_bound_sweeps_a_bandwidth_and_prints_json(tmp_path, capsys):
    head = CONFIG.split("sweep:")[0].replace("evaluations: 40", "evaluations: 16")
    path = write(tmp_path, head + "sweep:\n  parameters:\n    DRAM.bandwidth_gbps: [2, 8]\n")
    code, out, _ = run(capsys, "sweep", str(path), "--out", str(tmp_path / "o"), "--json",
                       "--quiet", "--no-bound")
    assert code == 0
    data = json.loads(out)
    assert data["bound_level"] is None and data["bounds"] == {}
    assert [r["parameters"]["DRAM.bandwidth_gbps"] for r in data["points"]] == [2, 8]
    assert all("bound_dram_words" not in r for r in data["points"])
    assert not (tmp_path / "o" / "bound.png").exists()
    slow, fast = (load_arch(str(tmp_path / "o" / "accelerators" / f"p00{k}.yaml"))
                  for k in (0, 1))
    assert fast.levels[0].read_words_per_cycle == 4 * slow.levels[0].read_words_per_cycle


def test_plots_and_summaries_are_written_before_any_point_is_valid(tmp_path):
    head = CONFIG.split("    L1.capacity_words")[0]
    config = load_sweep(write(tmp_path, head + "    L1.capacity_words: [8]\n"))
    config = dataclasses.replace(config, out=str(tmp_path / "o"))
    row = {"label": "p000", "status": "done", "parameters": {"L1.capacity_words": 8.0},
           "point": "L1.capacity_words=8", "structure": None, "valid": False, "cycles": None,
           "latency_ms": None, "dram_words": None, "energy_pj": None, "evaluations": 0,
           "seconds": 0.0, "files": {}}
    data = write_all(SweepState(config, rows=[row]))
    assert data["points_done"] == 1
    assert (tmp_path / "o" / "sweep.png").stat().st_size > 0
    assert "| p000 |" in (tmp_path / "o" / "summary.md").read_text()


def test_a_sweep_says_its_work_before_it_starts_and_quiet_silences_it(tmp_path, capsys,
                                                                       monkeypatch):
    from tileflow.explore.studies import heartbeat

    monkeypatch.setattr(heartbeat, "HEARTBEAT_INTERVAL_S", 0.0)  # a progress line per beat
    config = write(tmp_path, CONFIG)
    code, _, err = run(capsys, "sweep", str(config), "--out", str(tmp_path / "out"))
    assert code == 0
    points = len(CAPACITIES)  # 3 points of 40 evaluations each
    first = err.splitlines()[0]
    assert first.startswith(f"sweep sweep: {points} of {points} points to run, each within "
                            f"40 evaluations: at most {points * 40} evaluations in all")
    assert "tile-factor search, " in err and "s elapsed" in err  # each point's progress
    code, _, err = run(capsys, "sweep", str(config), "--out", str(tmp_path / "quiet"),
                       "--quiet")
    assert code == 0 and "points to run" not in err and "elapsed" not in err
