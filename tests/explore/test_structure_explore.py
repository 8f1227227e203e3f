"""`tileflow explore` with `structures: search`: the genetic search over structures runs in the
study (its fitness searches stored and replayed on resume, its structures read by workers),
the found dataflow evaluates unchanged under `tileflow evaluate` and is never worse than a
baseline's own factors, and two objectives give a Pareto front with no dominated point."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pandas as pd
import pytest
from explore.spaces import tiny_chain_space
from hypothesis import given, settings
from hypothesis import strategies as st

from tileflow.cli import main
from tileflow.explore.factors.space import Limits
from tileflow.explore.structures.genetic import GAConfig
from tileflow.explore.studies import study as studies
from tileflow.explore.studies.pareto import non_dominated
from tileflow.explore.studies.structure_study import STUDY_NAME, StoredSearch, tile_fit

CONFIG = """\
accelerator: edge
workload: gemm-chain
sizes: {b: 2, m: 256, l: 128, k: 32, n: 32}
structures: search
genetic: {population: 4, generations: 1, evaluations: 8, rungs: 2, top: 2}
budget: {evaluations: 96}
batch: 16
"""


def explore(tmp_path, capsys, text: str, *args: str) -> tuple[int, dict, str]:
    config = tmp_path / "study.yaml"
    config.write_text(text)
    out = tmp_path / "out"
    code = main(["explore", str(config), "--out", str(out), "--quiet", "--json", *args])
    stdout, err = capsys.readouterr()
    return code, (json.loads(stdout) if code == 0 else {}), err


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("structures")
    (folder / "study.yaml").write_text(CONFIG)
    out = folder / "out"
    assert main(["explore", str(folder / "study.yaml"), "--out", str(out), "--quiet"]) == 0
    return out, json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_the_structure_search_runs_and_hands_its_structures_to_the_study(searched):
    out, summary = searched
    search = summary["structure_search"]
    assert summary["structures"] == "search"
    assert search["structures"] >= 2 and search["evaluations"] > 0
    # seeded with every baseline that applies to a GEMM chain
    assert {"layerwise", "chimera", "tileflow-pipe"} <= set(search["baseline_seeds"])
    points = pd.read_csv(out / "points.csv")
    merged = summary.get("merged_structures", {})  # one structure, several sources
    names = {n for label in set(points["structure"]) for n in merged.get(label, [label])}
    assert {"searched-1", "searched-2"} <= names  # the found structures were searched
    assert "layerwise" in names  # and so were the baselines' structures


def test_the_found_dataflow_evaluates_to_the_same_numbers(searched, capsys):
    out, summary = searched
    code = main(["evaluate", "--arch", "edge", "--workload", "gemm-chain", "--set", "b=2",
                 "--set", "m=256", "--set", "l=128", "--set", "k=32", "--set", "n=32",
                 "--dataflow", str(out / "best.yaml"), "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    found = summary["found"]
    assert result["valid"]
    assert result["cycles"] == pytest.approx(found["cycles"], rel=1e-12)
    assert result["energy_pj"] == pytest.approx(found["energy_pj"], rel=1e-12)
    assert result["dram_words"] == pytest.approx(found["dram_words"], rel=1e-12)


def test_the_found_dataflow_is_never_worse_than_a_baseline_with_its_own_factors(searched):
    _, summary = searched
    own = [b["own_rule"]["cycles"] for b in summary["baselines"] if b["own_rule"]["valid"]]
    assert own and summary["found"]["cycles"] <= min(own) * (1 + 1e-12)


def test_a_resumed_search_replays_every_fitness_from_the_storage():
    """A second search on the same study (as after a kill) evaluates nothing anew and
    finds the same structures."""
    space = tiny_chain_space()
    config = GAConfig(population=6, generations=2, budget=8, rungs=2, seed=1)
    storage = studies.open_storage(None)
    study = optuna.create_study(study_name=STUDY_NAME, storage=storage)
    fit_for = tile_fit("latency", Limits())
    first = StoredSearch(space, config, fit_for, study)
    a = first.run()
    fits = len(study.get_trials())
    assert fits > 0 and first.replayed == 0
    again = StoredSearch(tiny_chain_space(), config, fit_for, study)
    b = again.run()
    assert len(study.get_trials()) == fits  # no fitness evaluated twice
    assert again.replayed == fits
    assert a.best.encoding == b.best.encoding and a.best.cost == b.best.cost
    assert [h["best_cost"] for h in a.history] == [h["best_cost"] for h in b.history]


def test_a_fixed_seed_gives_the_same_structure_search():
    config = GAConfig(population=6, generations=2, budget=8, rungs=2, seed=4)
    runs = []
    for _ in range(2):
        study = optuna.create_study(study_name=STUDY_NAME,
                                    storage=studies.open_storage(None))
        runs.append(StoredSearch(tiny_chain_space(), config, tile_fit("latency", Limits()),
                                 study).run())
    a, b = runs
    assert a.best.encoding == b.best.encoding and np.array_equal(a.best.factors, b.best.factors)
    assert sorted((p.encoding.into, p.cost) for p in a.points) == \
        sorted((p.encoding.into, p.cost) for p in b.points)


@pytest.mark.slow
def test_resume_reads_the_structures_back_and_workers_share_them(tmp_path, capsys):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    code, first, err = explore(tmp_path, capsys, CONFIG, "--storage", storage,
                               "--budget-evals", "48")
    assert code == 0, err
    code, second, err = explore(tmp_path, capsys, CONFIG, "--storage", storage,
                                "--budget-evals", "96", "--resume", "--workers", "2")
    assert code == 0, err
    assert second["structure_search"] == first["structure_search"]
    points = pd.read_csv(tmp_path / "out" / "points.csv")
    # the budget covers the whole run: the structure search's evaluations count against it
    spent = second["structure_search"]["evaluations"]
    assert 0 < spent <= 48 // 2
    assert len(points) == 96 - spent and not points.duplicated(["structure", "factors"]).any()
    assert set(points["worker"]) <= {0, 1}


def test_two_objectives_give_a_front_that_no_point_dominates(tmp_path, capsys):
    text = CONFIG.replace("structures: search", "structures: search\n"
                          "objective: [latency, energy]")
    code, summary, err = explore(tmp_path, capsys, text)
    assert code == 0, err
    points = pd.read_csv(tmp_path / "out" / "points.csv")
    front = pd.read_csv(tmp_path / "out" / "front.csv")
    assert (tmp_path / "out" / "front.png").read_bytes()[:4] == b"\x89PNG"
    assert len(front) == len(summary["front"]) >= 1
    valid = points[points["valid"]]
    c, e = valid["cycles"].to_numpy(), valid["energy_pj"].to_numpy()
    for fc, fe in zip(front["cycles"], front["energy_pj"], strict=True):
        beaten = (c <= fc) & (e <= fe) & ((c < fc) | (e < fe))
        assert not beaten.any(), (fc, fe)
    for pc, pe in zip(c, e, strict=True):  # every valid point is matched or beaten by it
        assert ((front["cycles"] <= pc) & (front["energy_pj"] <= pe)).any()
    # the tile search minimised their product
    assert summary["objective"] == "edp" and summary["objectives"] == ["latency", "energy"]


def test_a_run_stopped_during_the_structure_search_resumes(tmp_path, capsys):
    from tileflow.explore.studies.config import load_config
    from tileflow.explore.studies.structure_study import _open, fingerprint

    (tmp_path / "study.yaml").write_text(CONFIG)
    config = load_config(tmp_path / "study.yaml")
    w, arch = config.load()
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    # what a kill during the structure search leaves: its study, nothing found yet
    _open(studies.open_storage(storage), fingerprint(
        w, arch, config.objectives, config.limits, config.method, config.genetic_config,
        config.top), resume=False)
    code, _, err = explore(tmp_path, capsys, CONFIG, "--storage", storage)
    assert code == 2 and "--resume" in err
    code, summary, err = explore(tmp_path, capsys, CONFIG, "--storage", storage, "--resume")
    assert code == 0, err
    spent = summary["structure_search"]["evaluations"]  # counted against the whole budget
    assert summary["structure_search"]["structures"] >= 2 and 0 < spent <= 96 // 2
    assert summary["evaluations"] == 96 - spent


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(1, 6)), min_size=1, max_size=30))
def test_non_dominated_is_the_brute_force_set(pairs):
    a, b = (np.array(x, dtype=float) for x in zip(*pairs, strict=True))
    keep = non_dominated(a, b)
    for i in range(len(a)):
        dominated = any(a[j] <= a[i] and b[j] <= b[i] and (a[j] < a[i] or b[j] < b[i])
                        for j in range(len(a)))
        assert keep[i] == (not dominated)


@pytest.mark.parametrize("line,what", [
    ("structures: everything", "'search', 'baselines'"),
    ("objective: [latency, latency]", "two different"),
    ("objective: [latency, energy, dram]", "two different"),
    ("objective: [latency, speed]", "objective"),
    ("genetic: {population: 1}", "integer from 2"),
    ("genetic: {generations: 2.5}", "integer"),
    ("genetic: {children: 4}", "unknown key"),
])
def test_bad_structure_search_settings_exit_2(tmp_path, capsys, line, what):
    text = "accelerator: edge\nworkload: G1\n" + line + "\n"
    code, _, err = explore(tmp_path, capsys, text)
    assert code == 2
    assert "line 3" in err and what in err and "Traceback" not in err


def test_a_study_without_the_fitted_seeds_holds_only_its_own_points(tmp_path):
    """`explore(seed_fitted=False)` (the report's comparison of search methods): the baselines
    are fitted and compared as usual, but their fitted factors are not study points; with
    them (the default) every baseline's fitted factors are a point before any search."""
    from dataclasses import replace

    from tileflow.explore.studies.config import load_config
    from tileflow.explore.studies.session import explore as run

    path = tmp_path / "study.yaml"
    path.write_text(CONFIG.replace("structures: search", "structures: baselines"))
    config = replace(load_config(path), budget_evals=0, out="")
    seeded, bare = run(config, progress=False), run(config, progress=False, seed_fitted=False)
    fitted = {b.name: b.result.cycles for b in seeded.baselines if b.result.valid}
    assert fitted == {b.name: b.result.cycles for b in bare.baselines if b.result.valid}
    assert len(bare.points) == 0
    # baselines of one structure share a candidate, named after all of them
    label = {n: c for c, names in (seeded.merged or {}).items() for n in names}
    assert len(seeded.points) <= len(fitted)
    for name, cycles in fitted.items():
        costs = seeded.points.loc[seeded.points["structure"] == label.get(name, name), "cost"]
        assert np.isclose(costs.astype(float), cycles, rtol=1e-12).any(), name
