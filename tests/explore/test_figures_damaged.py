"""`tileflow figures FOLDER` on a study folder whose saved files were damaged or edited: each
is an exit-2 message naming the file and the place in it (the key of summary.json, the line
and column of points.csv, the tile of best.yaml), and the figures already there are left as
they were; never a traceback, never a figure drawn from what is not there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.explore.test_budget_figures import CONFIG as TIMED
from tileflow.cli import main

CONFIG = TIMED.replace("budget: {seconds: 5}", "budget: {evaluations: 48}")


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("study")
    (root / "study.yaml").write_text(CONFIG)
    assert main(["explore", str(root / "study.yaml"), "--out", str(root / "out"),
                 "--quiet"]) == 0
    return root / "out"


def _summary(edit):
    def damage(folder: Path) -> None:
        path = folder / "summary.json"
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return damage


def _points(edit):
    def damage(folder: Path) -> None:
        path = folder / "points.csv"
        lines = path.read_text().splitlines()
        path.write_text("\n".join(edit(lines)) + "\n")
    return damage


def _cost(value: str):
    def edit(lines: list[str]) -> list[str]:
        header = lines[0].split(",")
        at = header.index("cost")
        row = lines[1].split(",")  # factors hold spaces, never commas
        row[at] = value
        return [lines[0], ",".join(row), *lines[2:]]
    return edit


def _replace_dir(name: str):
    def damage(folder: Path) -> None:
        (folder / name).unlink()
        (folder / name).mkdir()
    return damage


DAMAGES = {
    "empty summary": (lambda f: (f / "summary.json").write_text(""),
                      "summary.json: the file is empty"),
    "cut summary": (lambda f: (f / "summary.json").write_text(
        (f / "summary.json").read_text()[:300]), "summary.json, line"),
    "summary a list": (lambda f: (f / "summary.json").write_text("[]"),
                       "summary.json: expected a JSON object"),
    "NaN in summary": (lambda f: (f / "summary.json").write_text('{"objective": NaN}'),
                       "summary.json: not JSON (NaN"),
    "negative size": (_summary(lambda d: d["found_for"]["sizes"].update(b=-8)),
                      "summary.json, found_for.sizes.b: expected a positive integer size"),
    "fractional size": (_summary(lambda d: d["found_for"]["sizes"].update(b=8.7)),
                        "found_for.sizes.b: expected a positive integer size"),
    "accelerator a number": (_summary(lambda d: d["found_for"].update(accelerator=5)),
                             "found_for.accelerator: expected a name or a path"),
    "unknown objective": (_summary(lambda d: d.update(objective="speed")),
                          "summary.json, objective: expected one of"),
    "three objectives": (_summary(lambda d: d.update(objectives=["latency"] * 3)),
                         "summary.json, objectives: expected a list of one or two"),
    "baselines a string": (_summary(lambda d: d.update(baselines="x")),
                           "summary.json, baselines: expected a list"),
    "a baseline without figures": (
        _summary(lambda d: d.update(baselines=[{"dataflow": "x", "own_rule": {"valid": True}}])),
        "baselines[0].own_rule.cycles: expected a finite number >= 0"),
    "no points": (lambda f: (f / "points.csv").unlink(), "points.csv: cannot read the file"),
    "empty points": (lambda f: (f / "points.csv").write_text(""), "points.csv: the file is empty"),
    "a ragged row": (_points(lambda lines: [lines[0], lines[1] + ",x,y", *lines[2:]]),
                     "points.csv, line 2: "),
    "a cost that is text": (_points(_cost("abc")), "points.csv, line 2, column 'cost'"),
    "a negative cost": (_points(_cost("-5")), "points.csv, line 2, column 'cost'"),
    "a cost of NaN": (_points(_cost("nan")), "points.csv, line 2, column 'cost'"),
    "no cost column": (_points(lambda lines: [lines[0].replace("cost", "price"), *lines[1:]]),
                       "points.csv, line 1: missing column cost"),
    "no column of the objective": (
        _points(lambda lines: [lines[0].replace(",cycles,", ",clocks,"), *lines[1:]]),
        "points.csv, line 1: missing column cycles"),
    "an unknown level in best.yaml": (
        lambda f: (f / "best.yaml").write_text((f / "best.yaml").read_text().replace(
            "level: L1", "level: L9")), "best.yaml, tile"),
    "a figure's name taken by a folder": (_replace_dir("convergence.png"),
                                          "is not a regular file"),
}


@pytest.mark.parametrize("case", DAMAGES)
def test_a_damaged_study_folder_is_refused_naming_the_place(study, tmp_path, capsys, case):
    folder = tmp_path / "copy"
    shutil.copytree(study, folder)
    damage, expected = DAMAGES[case]
    damage(folder)
    before = {p.name: p.read_bytes() for p in folder.glob("*.png") if p.is_file()}
    capsys.readouterr()
    assert main(["figures", str(folder)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err
    assert {p.name: p.read_bytes() for p in folder.glob("*.png") if p.is_file()} == before


def test_the_undamaged_copy_redraws(study, tmp_path):
    """The copy the damages start from is itself good: every case above fails for its
    damage alone."""
    folder = tmp_path / "copy"
    shutil.copytree(study, folder)
    assert main(["figures", str(folder)]) == 0
    assert (folder / "convergence.png").read_bytes()[:4] == b"\x89PNG"


def test_an_unknown_accelerator_given_names_the_flag(study, capsys):
    assert main(["figures", str(study), "--accelerator", "nope"]) == 2
    assert "--accelerator: unknown accelerator 'nope'" in capsys.readouterr().err
