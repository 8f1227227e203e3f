"""`tileflow explore`: the config is validated with file and line, the outputs are complete
and consistent, and the best dataflow's YAML gives the same numbers under `evaluate`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from tileflow.cli import main

SIZES = {"b": 2, "m": 256, "l": 128, "k": 32, "n": 32}
CONFIG = f"""\
accelerator: edge
workload: gemm-chain
sizes: {json.dumps(SIZES)}
structures: [tileflow-pipe, chimera]
budget: {{evaluations: 80}}
batch: 16
"""


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def explored(tmp_path_factory):
    folder = tmp_path_factory.mktemp("explore")
    config = folder / "small.yaml"
    config.write_text(CONFIG)
    out = folder / "out"
    code = main(["explore", str(config), "--out", str(out), "--json", "--quiet"])
    assert code == 0
    return out, json.loads((out / "summary.json").read_text())


def test_every_output_file_is_written(explored):
    out, summary = explored
    for name in ("best.yaml", "points.csv", "convergence.png", "summary.md", "summary.json",
                 "timeline.png", "timeline.json"):
        assert (out / name).stat().st_size > 0, name
    assert not list(out.glob(".*")), "a temporary file was left behind"


def test_points_table_holds_each_point_once_and_the_best_is_its_minimum(explored):
    """The best is the least-energy point within the tie-break's tolerance of the fewest
    cycles (energy after latency, 0.1 % by default)."""
    out, summary = explored
    points = pd.read_csv(out / "points.csv")
    assert len(points) == summary["evaluations"] == 80
    assert not points.duplicated(["structure", "factors"]).any()
    valid = points[points["valid"]]
    fewest = valid["cycles"].min()
    near = valid[valid["cycles"] <= fewest * (1 + 0.001)]
    assert fewest <= summary["found"]["cycles"] <= fewest * (1 + 0.001)
    assert summary["found"]["energy_pj"] == pytest.approx(near["energy_pj"].min(), rel=1e-12)
    assert set(points["structure"]) <= {"tileflow-pipe", "chimera"}
    assert ((points["cost"] == points["cycles"]) | ~points["valid"]).all()


def test_best_dataflow_yaml_gives_the_same_numbers_under_evaluate(explored, capsys):
    out, summary = explored
    sets = [x for d, v in SIZES.items() for x in ("--set", f"{d}={v}")]
    code, text, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "gemm-chain",
                          *sets, "--dataflow", str(out / "best.yaml"), "--json")
    assert code == 0, err
    result = json.loads(text)
    found = summary["found"]
    assert result["valid"]
    for key in ("cycles", "energy_pj", "dram_words"):
        assert result[key] == pytest.approx(found[key], rel=1e-12), key


def test_summary_compares_with_every_baseline(explored):
    out, summary = explored
    names = {b["dataflow"] for b in summary["baselines"]}
    assert names == {"layerwise", "uni-pipe", "flat-hgran", "flat-rgran", "chimera",
                     "tileflow-pipe"}
    layer = next(b for b in summary["baselines"] if b["dataflow"] == "layerwise")
    found = summary["found"]
    assert found["speedup_over_layerwise"] == pytest.approx(
        layer["own_rule"]["cycles"] / found["cycles"])
    for b in summary["baselines"]:
        if "searched" in b:  # its structure was searched: the found point is at least as good
            assert found["cycles"] <= b["searched"]["cycles"] * (1 + 1e-12)
            assert b["searched"]["cycles"] <= b["own_rule"]["cycles"] * (1 + 1e-12) or \
                not b["own_rule"]["valid"]
    text = (out / "summary.md").read_text()
    assert "| layerwise | own rule |" in text
    # the found tree is described in words, with how its root's children run
    runs = {"chimera": "one after another", "tileflow-pipe": "as a pipeline"}
    assert runs[found["structure"]] in text and "runs 'gemm2'" in text


def test_timeline_trace_opens_as_chrome_trace_events(explored):
    out, _ = explored
    trace = json.loads((out / "timeline.json").read_text())
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert events and all(e["dur"] > 0 and e["ts"] >= 0 for e in events)
    assert any(n.startswith("matrix unit") for n in names)
    assert any("<->" in n for n in names), "transfers between levels are on the timeline"


@pytest.mark.parametrize("text,where,what", [
    ("accelerator: edge\nworkload: G1\nbudjet: {evaluations: 5}\n", "line 3", "unknown key"),
    ("accelerator: edge\nworkload: G1\nobjective: speed\n", "line 3", "objective"),
    ("accelerator: edge\nworkload: G1\nbudget: {evaluations: -4}\n", "line 3", "integer from 1"),
    ("accelerator: edge\nworkload: G1\nbudget: {seconds: .nan}\n", "line 3", "finite"),
    ("accelerator: edge\nworkload: G1\nlimits: {dram_words: yes}\n", "line 3", "number"),
    ("accelerator: edge\nworkload: G1\nstructures: [tileflow-pipe, fused-layer]\n", None,
     "does not apply"),
    ("accelerator: edge\nworkload: G1\nlimits: {footprint_words: {L9: 10}}\n", None, "L9"),
    ("workload: G1\n", None, "missing required key 'accelerator'"),
])
def test_bad_configs_name_file_and_line_and_exit_2(tmp_path, capsys, text, where, what):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    code, out, err = run(capsys, "explore", str(config), "--out", str(tmp_path / "o"),
                         "--quiet")
    assert code == 2
    assert str(config) in err and what in err
    assert where is None or where in err
    assert "Traceback" not in err


@pytest.mark.parametrize("args", [["--budget-evals", "0"], ["--budget-seconds", "nan"],
                                  ["--workers", "0"], ["--resume"]])
def test_bad_flags_exit_2(tmp_path, capsys, args):
    config = tmp_path / "ok.yaml"
    config.write_text(CONFIG)
    code, _, err = run(capsys, "explore", str(config), "--out", str(tmp_path / "o"), "--quiet",
                       *args)
    assert code == 2 and "error" in err


def test_a_footprint_limit_is_respected_by_every_valid_point(tmp_path, capsys):
    limit = 20_000
    config = tmp_path / "limited.yaml"
    config.write_text(CONFIG.replace("batch: 16", f"batch: 16\nlimits: "
                                     f"{{footprint_words: {{L1: {limit}}}}}"))
    code, _, err = run(capsys, "explore", str(config), "--out", str(tmp_path / "o"), "--quiet",
                       "--budget-evals", "48")
    assert code == 0, err
    points = pd.read_csv(tmp_path / "o" / "points.csv")
    assert (points.loc[points["valid"], "footprint_L1"] <= limit).all()
    over = points["footprint_L1"] > limit
    assert over.any() and not points.loc[over, "valid"].any()
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert not summary["found"] or summary["found"]["footprint_words"]["L1"] <= limit
    assert math.isfinite(summary["seconds"])


def test_config_keys_are_declared_for_the_docs():
    from tileflow.explore.studies.config import CONFIG_KEYS

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for key in CONFIG_KEYS:
        assert f"`{key}`" in readme, key


def test_an_existing_study_needs_resume(tmp_path, capsys):
    config = tmp_path / "small.yaml"
    config.write_text(CONFIG)
    storage = f"sqlite:///{tmp_path / 'db' / 'study.db'}"
    args = ("explore", str(config), "--out", str(tmp_path / "o"), "--quiet", "--storage",
            storage, "--budget-evals", "8")
    code, _, err = run(capsys, *args)
    assert code == 0, err
    code, _, err = run(capsys, *args)
    assert code == 2 and "--resume" in err
    code, _, err = run(capsys, *args[:-1], "12", "--resume")
    assert code == 0, err
    points = pd.read_csv(tmp_path / "o" / "points.csv")
    assert len(points) == 12 and not points.duplicated(["structure", "factors"]).any()
