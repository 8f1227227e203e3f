"""A study of the user's own workload and chip files reloads from its folder alone (what the
explore notebook does): the sizes it was run for, the same found cycles, and still after the
input files have moved away (summary.json keeps their text)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from tileflow.cli import main
from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.explore.studies.reload import load_study

SUITE = Path("search/quality")
# sizes that differ from the file's own dims: a reload that forgets them evaluates another
# workload
SIZES = {"m": 16, "d": 32, "f": 64, "e": 32}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    folder = tmp_path_factory.mktemp("custom-study")
    inputs = folder / "inputs"
    inputs.mkdir()
    shutil.copy(SUITE / "workloads/swiglu.yaml", inputs / "swiglu.yaml")
    shutil.copy(SUITE / "chips/soc-l2.yaml", inputs / "my-chip.yaml")
    config = folder / "study.yaml"
    config.write_text("accelerator: inputs/my-chip.yaml\nworkload: inputs/swiglu.yaml\n"
                      f"sizes: {json.dumps(SIZES)}\nstructures: [layerwise]\n"
                      "budget: {evaluations: 24}\nbatch: 8\n")
    out = folder / "out"
    assert main(["explore", str(config), "--out", str(out), "--quiet"]) == 0
    return folder, out, json.loads((out / "summary.json").read_text())


def test_a_custom_workload_study_reloads_with_its_sizes(study):
    _, out, summary = study
    saved = load_study(out)
    assert saved.workload.name == "swiglu"  # not a shipped name: found through found_for
    assert {k: saved.workload.sizes[k] for k in SIZES} == SIZES
    assert saved.arch.name == "soc-l2"
    assert saved.best_result.cycles == pytest.approx(summary["found"]["cycles"], rel=1e-12)
    assert saved.best_result.energy_pj == pytest.approx(summary["found"]["energy_pj"],
                                                        rel=1e-12)
    assert len(saved.points()) == summary["evaluations"]


def test_it_still_reloads_after_the_input_files_have_gone(study, tmp_path):
    folder, out, summary = study
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    shutil.move(folder / "inputs", tmp_path / "elsewhere")
    try:
        assert set(summary["inputs"]) == {"workload", "accelerator"}
        saved = load_study(moved)
        assert {k: saved.workload.sizes[k] for k in SIZES} == SIZES
        assert saved.best_result.cycles == pytest.approx(summary["found"]["cycles"],
                                                         rel=1e-12)
        # an accelerator given by the caller replaces the recorded one
        other = load_study(moved, accelerator="edge")
        assert other.arch.name == "edge"
        assert other.best_result.cycles == evaluate(other.workload, other.arch,
                                                    other.best).cycles
    finally:
        shutil.move(tmp_path / "elsewhere", folder / "inputs")


def test_a_folder_without_a_summary_is_named(tmp_path):
    with pytest.raises(InputError, match="not a study folder"):
        load_study(tmp_path)


def test_the_notebook_reloads_through_load_study():
    nb = nbformat.read("notebooks/explore-study.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "load_study(" in code and "load_workload(summary" not in code


def test_a_summary_without_found_for_falls_back_on_best_yaml(study, tmp_path):
    """An older summary.json (no found_for, no inputs): best.yaml's found_for says the run."""
    _, out, summary = study
    copy = tmp_path / "older"
    shutil.copytree(out, copy)
    older = {k: v for k, v in summary.items() if k not in ("found_for", "inputs")}
    (copy / "summary.json").write_text(json.dumps(older))
    saved = load_study(copy)
    assert {k: saved.workload.sizes[k] for k in SIZES} == SIZES
    assert saved.best_result.cycles == pytest.approx(summary["found"]["cycles"], rel=1e-12)
