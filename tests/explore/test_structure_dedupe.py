"""One structure is searched once: a baseline, a user's tree and the structure search that
give the same tree (factors and names aside) become one candidate carrying every name and
every source's factors as warm starts and study points (`structure_key`, `merge_duplicates`,
`candidates_for`, `seed_rows`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tileflow.cli import main
from tileflow.dataflows import build
from tileflow.explore.structures.canonical import structure_key
from tileflow.explore.studies.config import candidate_structures, load_config
from tileflow.explore.studies.session import candidates_for, seed_rows, user_trees
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, Loop, Op, Tile, to_dict

CHIPS = Path(__file__).resolve().parents[2] / "search" / "quality" / "chips"
SIZES = {"b": 2, "m": 256, "l": 128, "k": 32, "n": 32}
LEAF_A = Tile("L1", (Loop("m", 4), Loop("l", 8, spatial=True)), (Op("gemm1"),), name="a")
LEAF_B = Tile("L1", (Loop("n", 2), Loop("m", 8)), (Op("gemm2"),), name="b")
ROOT = Tile("DRAM", (Loop("b", 2), Loop("m", 4)), (LEAF_A, LEAF_B), "Pipe", name="root")
FLOW = Dataflow(ROOT, "flow")


def refactored(node, factor):
    """`node` with every loop factor set by `factor(old)` and every tile renamed."""
    if isinstance(node, Op):
        return node
    return replace(node, name=f"{node.name}-x",
                   loops=tuple(replace(lp, factor=factor(lp.factor)) for lp in node.loops),
                   children=tuple(refactored(c, factor) for c in node.children))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 64))
def test_the_key_ignores_factors_and_tile_names(scale):
    other = Dataflow(refactored(ROOT, lambda f: f * scale), "another name")
    assert structure_key(other) == structure_key(FLOW)


@pytest.mark.parametrize("changed", [
    replace(ROOT, primitive="Seq"),                                     # primitive
    replace(ROOT, primitive="Para"),
    replace(ROOT, bypass=("S",)),                                       # bypass
    replace(ROOT, loops=(Loop("m", 4), Loop("b", 2))),                  # loop order
    replace(ROOT, loops=(Loop("b", 2), Loop("m", 4, spatial=True))),    # spatial mark
    replace(ROOT, children=(replace(LEAF_A, level="Reg"), LEAF_B)),     # level
    replace(ROOT, children=(LEAF_B, LEAF_A)),                           # child order
    replace(ROOT, no_reuse=("A",)),
    replace(ROOT, buffering=(("A", 1),)),
], ids=["seq", "para", "bypass", "loop-order", "spatial", "level", "children", "no-reuse",
        "buffering"])
def test_the_key_tells_structures_apart(changed):
    assert structure_key(Dataflow(changed, "flow")) != structure_key(FLOW)


def test_the_key_tells_homes_apart():
    assert structure_key(Dataflow(ROOT, "flow", {"S": "L2"})) != structure_key(FLOW)


def test_a_single_childs_primitive_is_no_part_of_the_key():
    """One child runs alone whatever the primitive (Pipe of one stage is its stage)."""
    one = Tile("DRAM", (Loop("b", 2),), (LEAF_A,), "Seq")
    assert structure_key(Dataflow(one, "x")) == \
        structure_key(Dataflow(replace(one, primitive="Pipe"), "x"))


@pytest.fixture(scope="module")
def chip():
    w = load_workload("gemm-chain", SIZES)
    return w, load_arch("edge")


def pipe_tree(w, arch) -> dict:
    """TileFlow-Pipe's tree for these sizes with other factors (m split 2 x 4 x 2 x 16 for
    gemm1 and 2 x 4 x 1 x 32 for gemm2 where the builder has 1 x 4 x 4 x 16 and
    1 x 4 x 2 x 32) and other tile names."""
    tree = to_dict(build("tileflow-pipe", w, arch))
    tree["name"] = "mine"
    root = tree["root"]
    assert root["loops"] == ["b:2", "m:1", "m:4:Sp"]
    root["loops"] = ["b:2", "m:2", "m:4:Sp"]
    gemm1, gemm2 = (c["children"][0] for c in root["children"])
    assert gemm1["loops"][1] == "m:4" and gemm2["loops"][1] == "m:2"
    gemm1["loops"][1], gemm2["loops"][1] = "m:2", "m:1"
    for c in root["children"]:
        c["name"] = "my-" + c["name"]
    return tree


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory, chip):
    folder = tmp_path_factory.mktemp("dedupe")
    (folder / "pipe.yaml").write_text(yaml.safe_dump(pipe_tree(*chip), sort_keys=False))
    (folder / "study.yaml").write_text(
        f"accelerator: edge\nworkload: gemm-chain\nsizes: {json.dumps(SIZES)}\n"
        "structures: [pipe.yaml, tileflow-pipe, chimera]\nbudget: {evaluations: 48}\n"
        "batch: 16\n")
    return folder


def test_a_users_tree_equal_to_a_baseline_is_one_candidate(study_dir, chip):
    w, arch = chip
    config = load_config(study_dir / "study.yaml")
    merged = candidate_structures(config, w, arch)
    assert [m.names for m in merged] == [("pipe.yaml", "tileflow-pipe"), ("chimera",)]
    assert merged[0].name == "pipe.yaml (= tileflow-pipe)"
    pipe = build("tileflow-pipe", w, arch)
    users = user_trees(config, w, arch)
    fitted = {"tileflow-pipe": pipe}
    candidates = candidates_for(config, w, arch, fitted, seed=0)
    first = candidates[0]
    assert first.names == ("pipe.yaml", "tileflow-pipe")
    mine = [lp.factor for _, t in _tiles(users["pipe.yaml"]) for lp in t.loops]
    builders = [lp.factor for _, t in _tiles(pipe) for lp in t.loops]
    assert mine != builders
    warm = [list(r) for r in first.warm]
    assert mine in warm and builders in warm  # both sources' factors start the search
    rows = seed_rows(w, arch, candidates, fitted, None, users)
    held = [list(r) for r in rows[first.name]]
    assert mine in held and builders in held  # and both are points of the study


def _tiles(flow):
    from tileflow.tree import walk

    return [(p, n) for p, n in walk(flow.root) if isinstance(n, Tile)]


def test_the_study_searches_the_merged_structure_once(study_dir, capsys):
    out = study_dir / "out"
    assert main(["explore", str(study_dir / "study.yaml"), "--out", str(out), "--json",
                 "--quiet"]) == 0
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    points = pd.read_csv(out / "points.csv")
    assert set(points["structure"]) <= {"pipe.yaml (= tileflow-pipe)", "chimera"}
    merged = points[points["structure"] == "pipe.yaml (= tileflow-pipe)"]
    # the baseline's own-rule point and the user's own point are both in the study
    pipe = next(b for b in summary["baselines"] if b["dataflow"] == "tileflow-pipe")
    assert "searched" in pipe, "the baseline's structure was searched under its other name"
    own = pipe["own_rule"]["cycles"]
    assert np.isclose(merged["cycles"], own, rtol=1e-9).any() or not pipe["own_rule"]["valid"]
    assert summary["found"]["cycles"] <= merged["cycles"][merged["valid"]].min() * (1 + 1e-12)
    assert "pipe.yaml (= tileflow-pipe)" in (out / "summary.md").read_text() or \
        summary["found"]["structure"] == "chimera"


def marked(*axes: str) -> Dataflow:
    """FLOW with gemm1's two spatial L1 loops marked `axes` (k:2 spread too)."""
    loops = (Loop("m", 4), Loop("l", 8, spatial=True, axis=axes[0]),
             Loop("k", 2, spatial=True, axis=axes[1]))
    return Dataflow(replace(ROOT, children=(replace(LEAF_A, loops=loops), LEAF_B)), "flow")


def test_axis_marks_that_change_nothing_on_square_arrays_are_no_part_of_the_key():
    """On square arrays, loops marked one x and one y check the same two groups against the
    same size as unmarked loops (first x, the other y); two x marks put both on one axis."""
    square = load_arch("edge")
    wide = load_arch(str(CHIPS / "wide-5level.yaml"))
    assert square.matrix.rows == square.matrix.cols
    assert wide.matrix.rows != wide.matrix.cols
    plain = structure_key(marked("", ""), square)
    assert structure_key(marked("x", "y"), square) == plain
    assert structure_key(marked("y", "x"), square) == plain
    assert structure_key(marked("x", "x"), square) != plain
    assert structure_key(marked("x", ""), square) != plain
    assert structure_key(marked("x", "y"), wide) != structure_key(marked("", ""), wide)
    assert structure_key(marked("x", "y")) != structure_key(marked("", ""))  # no chip


def test_every_baseline_is_its_structure_search_copy_on_a_square_chip():
    """The structure search's encoding of a baseline decodes to the baseline's structure
    (tile names and axis marks aside): on soc-l2 each is one candidate, not two."""
    from tileflow.explore.structures.structure_space import StructureSpace

    w = load_workload("attention", {"b": 8, "m": 256, "l": 256, "k": 64, "n": 64})
    arch = load_arch(str(CHIPS / "soc-l2.yaml"))
    space = StructureSpace(w, arch)
    copies = space.baselines()
    assert {"tileflow-pipe", "chimera", "layerwise"} <= set(copies)
    for name, enc in copies.items():
        assert structure_key(space.structure(enc).template, arch) == \
            structure_key(build(name, w, arch), arch), name


def test_the_summary_names_every_source_of_a_merged_structure(study_dir):
    out = study_dir / "out"  # written by test_the_study_searches_the_merged_structure_once
    if not (out / "summary.json").exists():
        assert main(["explore", str(study_dir / "study.yaml"), "--out", str(out),
                     "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["merged_structures"] == {
        "pipe.yaml (= tileflow-pipe)": ["pipe.yaml", "tileflow-pipe"]}
    assert "`pipe.yaml (= tileflow-pipe)`" in (out / "summary.md").read_text()
