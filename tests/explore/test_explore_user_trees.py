"""`tileflow explore` with a user's own trees, outputs that say which run they are for, and a
tie-break among near-best points: `structures:` takes dataflow files (searched as they are,
their factors a point of the study, seeds of the structure search), best.yaml evaluates
alone to the study's numbers, and the best point is the least energy among those within the
tolerance of the least latency."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tileflow.cli import main
from tileflow.errors import InputError
from tileflow.explore.studies.config import TieBreak, parse_config
from tileflow.explore.studies.session import pick_best
from tileflow.specs.yamlfile import Field

# Sizes that differ from every gemm-chain preset: forgetting them evaluates another workload
SIZES = {"b": 2, "m": 256, "l": 128, "k": 32, "n": 32}
# A hand-written fused tree (the TileFlow-Pipe shape with its own factors) for these sizes
TREE = """\
name: my-tree
root:
  level: DRAM
  loops: [b:2, m:2, m:2:Sp]
  primitive: Pipe
  children:
  - level: L1
    loops: [m:4, l:4, k:32, l:32:SpX, m:16:SpY]
    children:
    - level: Reg
      children: [{op: gemm1}]
  - level: L1
    loops: [m:2, n:2, l:128, m:32:SpX, n:16:SpY]
    children:
    - level: Reg
      children: [{op: gemm2}]
"""


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def config_text(structures: str, extra: str = "") -> str:
    return (f"accelerator: edge\nworkload: gemm-chain\nsizes: {json.dumps(SIZES)}\n"
            f"structures: {structures}\nbudget: {{evaluations: 48}}\nbatch: 16\n{extra}")


def own_cycles(capsys, tree: Path) -> dict:
    sets = [x for d, v in SIZES.items() for x in ("--set", f"{d}={v}")]
    code, text, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "gemm-chain",
                          *sets, "--dataflow", str(tree), "--json")
    assert code == 0, err
    return json.loads(text)


@pytest.fixture(scope="module")
def explored(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user-trees")
    (folder / "trees").mkdir()
    (folder / "trees" / "my-tree.yaml").write_text(TREE)
    config = folder / "study.yaml"
    config.write_text(config_text("[trees/my-tree.yaml, chimera]"))
    out = folder / "out"
    assert main(["explore", str(config), "--out", str(out), "--json", "--quiet"]) == 0
    return folder, out, json.loads((out / "summary.json").read_text())


def test_a_users_tree_is_searched_from_its_own_factors(explored, capsys):
    folder, out, summary = explored
    points = pd.read_csv(out / "points.csv")
    mine = points[points["structure"] == "my-tree.yaml"]
    assert len(mine) > 1, "the file's structure is a candidate of the study"
    own = own_cycles(capsys, folder / "trees" / "my-tree.yaml")
    assert own["valid"]
    # the file's own factors are a point of the study, with the file's own cycles
    assert (mine["cycles"] - own["cycles"]).abs().min() <= 1e-9 * own["cycles"]
    assert summary["found"]["cycles"] <= own["cycles"] * (1 + 1e-12)
    assert summary["trees"] and summary["trees"][0].endswith("my-tree.yaml")


def test_best_yaml_evaluates_alone_to_the_studys_numbers(explored, capsys):
    _, out, summary = explored
    code, text, err = run(capsys, "evaluate", "--dataflow", str(out / "best.yaml"), "--json")
    assert code == 0, err
    result = json.loads(text)
    for key in ("cycles", "energy_pj", "dram_words"):
        assert result[key] == pytest.approx(summary["found"][key], rel=1e-12), key
    recorded = summary["found_for"]
    assert recorded["accelerator"] == "edge" and recorded["workload"] == "gemm-chain"
    assert recorded["objective"] == "latency"
    assert {k: recorded["sizes"][k] for k in SIZES} == SIZES


def test_best_yaml_of_files_relative_to_the_config_evaluates_from_anywhere(
        tmp_path, capsys, monkeypatch):
    repo = Path(__file__).resolve().parents[2]
    study = tmp_path / "study"
    study.mkdir()
    (study / "chip.yaml").write_text((repo / "accelerators" / "edge.yaml").read_text())
    (study / "work.yaml").write_text((repo / "workloads" / "gemm-chain.yaml").read_text())
    (study / "s.yaml").write_text(
        f"accelerator: chip.yaml\nworkload: work.yaml\nsizes: {json.dumps(SIZES)}\n"
        "structures: [chimera]\nbudget: {evaluations: 24}\nbatch: 8\n")
    monkeypatch.chdir(tmp_path)
    code, text, err = run(capsys, "explore", "study/s.yaml", "--out", "out", "--json",
                          "--quiet")
    assert code == 0, err
    found = json.loads(text)["found"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, text, err = run(capsys, "evaluate", "--dataflow", "../out/best.yaml", "--json")
    assert code == 0, err
    assert json.loads(text)["cycles"] == pytest.approx(found["cycles"], rel=1e-12)


def test_flags_given_to_evaluate_win_over_best_yaml(explored, capsys):
    _, out, _ = explored
    best = str(out / "best.yaml")
    code, text, err = run(capsys, "evaluate", "--dataflow", best, "--set", "m=512", "--json")
    assert code == 0, err
    sets = [x for d, v in {**SIZES, "m": 512}.items() for x in ("--set", f"{d}={v}")]
    code, full, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "gemm-chain",
                          *sets, "--dataflow", best, "--json")
    assert code == 0, err
    assert json.loads(text) == json.loads(full)
    # the tree's factors of m cover the study's 256, not 512: the override took effect
    assert not json.loads(text)["valid"]
    assert any("cover 256 of 512" in v["message"] for v in json.loads(text)["violations"])


def test_the_best_is_the_least_energy_within_the_tolerance(explored):
    _, out, summary = explored
    points = pd.read_csv(out / "points.csv")
    valid = points[points["valid"]]
    near = valid[valid["cycles"] <= valid["cycles"].min() * 1.001]  # default tolerance
    assert summary["found"]["energy_pj"] == pytest.approx(near["energy_pj"].min(), rel=1e-12)
    assert summary["tie_break"] == {"objective": "energy", "tolerance": 0.001}


def test_a_users_tree_seeds_the_structure_search(tmp_path, capsys):
    (tmp_path / "my-tree.yaml").write_text(TREE)
    config = tmp_path / "search.yaml"
    config.write_text(config_text(
        "[search, my-tree.yaml]",
        "genetic: {population: 2, generations: 0, evaluations: 2, rungs: 1, top: 1}\n"))
    code, text, err = run(capsys, "explore", str(config), "--out", str(tmp_path / "o"),
                          "--json", "--quiet")
    assert code == 0, err
    summary = json.loads(text)
    assert "my-tree.yaml" in summary["structure_search"]["baseline_seeds"]
    points = pd.read_csv(tmp_path / "o" / "points.csv")
    assert "my-tree.yaml" in set(points["structure"])


@pytest.mark.parametrize("tree,what", [
    (None, "no such dataflow file 'gone.yaml'"),
    (TREE.replace("op: gemm2", "op: nope"), "'nope' is not an operator"),
    (TREE.replace("level: Reg", "level: L7", 1), "L7"),
])
def test_a_bad_tree_file_names_the_config_line(tmp_path, capsys, tree, what):
    if tree is not None:
        (tmp_path / "gone.yaml").write_text(tree)
    config = tmp_path / "bad.yaml"
    config.write_text(config_text("[chimera, gone.yaml]"))
    code, _, err = run(capsys, "explore", str(config), "--out", str(tmp_path / "o"),
                       "--quiet")
    assert code == 2, err
    assert f"{config}, line 4" in err and what in err
    assert "Traceback" not in err


def test_a_baseline_name_next_to_search_is_refused(tmp_path):
    data = {"accelerator": "edge", "workload": "G1", "structures": ["search", "chimera"]}
    with pytest.raises(InputError, match="dataflow files only"):
        parse_config(Field(data, str(tmp_path / "c.yaml")))


def test_two_files_of_one_name_are_refused(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "t.yaml").write_text(TREE)
    data = {"accelerator": "edge", "workload": "G1", "structures": ["a/t.yaml", "b/t.yaml"]}
    with pytest.raises(InputError, match="two files named 't.yaml'"):
        parse_config(Field(data, str(tmp_path / "c.yaml")))


def test_evaluate_without_arch_needs_found_for(tmp_path, capsys):
    (tmp_path / "plain.yaml").write_text(TREE)
    code, _, err = run(capsys, "evaluate", "--dataflow", str(tmp_path / "plain.yaml"))
    assert code == 2 and "give --arch and --workload" in err and "Traceback" not in err


# ---- the tie-break on hand-made points -------------------------------------------------

def points(*rows: tuple[float, float]) -> pd.DataFrame:
    """(cycles, energy_pj) rows of a latency study: its cost is the cycles."""
    return pd.DataFrame({"cycles": [c for c, _ in rows], "energy_pj": [e for _, e in rows],
                         "cost": [c for c, _ in rows]})


def test_a_point_slower_by_a_hundredth_percent_wins_on_energy():
    # the latency-best uses twice the energy of a point 0.01 % slower; a third point is
    # 0.2 % slower and cheapest of all, outside the 0.1 % tolerance
    frame = points((1_000_000, 12.3e9), (1_000_100, 6.05e9), (1_002_000, 1.0e9))
    assert pick_best(frame, TieBreak("energy", 0.001)) == 1
    assert pick_best(frame, TieBreak("energy", 0.0)) == 0
    assert pick_best(frame, TieBreak(None)) == 0
    assert pick_best(frame, TieBreak("energy", 0.01)) == 2


@pytest.mark.parametrize("block,what", [
    ({"objective": "speed"}, "'objective' must be one of"),
    ({"tolerance": 2}, "tolerance"),
    ({"tolerance": -0.1}, "tolerance"),
    ({"tolerence": 0.1}, "unknown key"),
])
def test_a_bad_tie_break_is_refused(tmp_path, block, what):
    data = {"accelerator": "edge", "workload": "G1", "tie_break": block}
    with pytest.raises(InputError, match=what):
        parse_config(Field(data, str(tmp_path / "c.yaml")))


def test_the_default_tie_break_is_energy_after_latency_and_latency_after_energy(tmp_path):
    source = str(tmp_path / "c.yaml")
    latency = parse_config(Field({"accelerator": "edge", "workload": "G1"}, source))
    energy = parse_config(Field({"accelerator": "edge", "workload": "G1",
                                 "objective": "energy"}, source))
    assert latency.tie_break == TieBreak("energy", 0.001)
    assert energy.tie_break == TieBreak("latency", 0.001)
