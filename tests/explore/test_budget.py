"""The budget caps the whole `tileflow explore` run, structure search included: the structure
search stops at its share (`budget.structure_share`), the tile-factor study gets the rest,
no tile search evaluates past its budget, summary.json states the split and what each phase
used, and a run whose stderr is not a terminal prints a progress line every few seconds."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from explore.spaces import tiny_chain_space

from tileflow.cli import OUTPUTS_RESERVE_S, OUTPUTS_RESERVE_SHARE, main
from tileflow.explore.factors.space import Space
from tileflow.explore.structures.fitness import random_fit
from tileflow.explore.structures.genetic import GAConfig, GeneticSearch
from tileflow.explore.studies import heartbeat
from tileflow.explore.studies.heartbeat import ProgressLine, interval_for
from tileflow.explore.tilesearch import search as tilesearch

# A genetic search that alone asks for thousands of evaluations (8 structures x 16, 32, 64
# and 128 evaluations per generation, 5 generations): far more than the budgets below.
CONFIG = """\
accelerator: edge
workload: gemm-chain
sizes: {b: 2, m: 256, l: 128, k: 32, n: 32}
structures: search
genetic: {population: 8, generations: 4, evaluations: 16, rungs: 4, top: 2}
batch: 16
"""


def run(tmp_path, budget: str, *args: str) -> tuple[int, dict, pd.DataFrame, float]:
    config = tmp_path / "study.yaml"
    config.write_text(CONFIG + f"budget: {budget}\n")
    out = tmp_path / "out"
    start = time.perf_counter()
    code = main(["explore", str(config), "--out", str(out), *args])
    wall = time.perf_counter() - start
    summary = json.loads((out / "summary.json").read_text()) if code == 0 else {}
    points = pd.read_csv(out / "points.csv") if code == 0 else pd.DataFrame()
    return code, summary, points, wall


@pytest.mark.parametrize("evaluations, share", [(200, 0.5), (150, 0.2), (120, 0.9)])
def test_points_evaluated_never_exceed_the_budget(tmp_path, capsys, evaluations, share):
    code, summary, points, _ = run(
        tmp_path, f"{{evaluations: {evaluations}, structure_share: {share}}}", "--quiet")
    assert code == 0
    cap = int(evaluations * share)  # the structure search's share, rounded down
    search = summary["structure_search"]["evaluations"]
    assert search <= cap
    assert search + len(points) <= evaluations
    budget = summary["budget"]
    phases = budget["phases"]
    assert phases["structure_search"]["evaluations_cap"] == cap
    assert phases["structure_search"]["evaluations"] == search
    # the tile-factor study gets the rest, what the structure search left included
    assert phases["tile_search"]["evaluations_cap"] == evaluations - search
    assert phases["tile_search"]["evaluations"] == len(points)
    assert budget["evaluations_used"] == search + len(points) <= evaluations
    # the genetic search asks for far more than its share: its cap is what stopped it
    assert summary["structure_search"]["stopped_by"] == "evaluations"
    md = (tmp_path / "out" / "summary.md").read_text()
    assert f"split {share:.0%} to the structure search ({cap:,} evaluations" in md


TOLERANCE_S = 1.0  # a loaded machine: the last batch, the interpreter's exit


def test_wall_time_stays_within_the_seconds_budget(tmp_path, capsys):
    """The budget caps the whole command: loading, both searches, the baselines' fits and
    writing the outputs, for which the search leaves `reserve` of the seconds."""
    budget_s = 6.0
    reserve = OUTPUTS_RESERVE_S + OUTPUTS_RESERVE_SHARE * budget_s
    code, summary, _, wall = run(tmp_path, f"{{seconds: {budget_s}}}", "--quiet")
    assert code == 0
    assert wall <= budget_s + TOLERANCE_S
    budget = summary["budget"]
    assert budget["seconds"] == budget_s and budget["reserved_for_outputs_s"] == reserve
    phases = budget["phases"]
    assert phases["structure_search"]["seconds_cap"] == pytest.approx((budget_s - reserve) / 2)
    # a fitness search is cut at the deadline too: only a batch may pass it
    assert phases["structure_search"]["seconds"] <= (budget_s - reserve) / 2 + TOLERANCE_S
    assert budget["seconds_used"] <= budget_s - reserve + TOLERANCE_S


@pytest.mark.slow
def test_the_command_ends_within_its_seconds_from_the_process_start(tmp_path):
    """Through the real command line: the interpreter's start-up counts too."""
    config = tmp_path / "study.yaml"
    config.write_text(CONFIG + "budget: {seconds: 6}\n")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tileflow.cli", "explore", str(config),
                           "--out", str(tmp_path / "out"), "--quiet"], capture_output=True)
    assert done.returncode == 0, done.stderr
    assert time.perf_counter() - start <= 6 + TOLERANCE_S


class Greedy:
    """A sampler that proposes three times the rows it is asked for."""

    def __init__(self, space: Space, seed: int = 0, **_):
        self.space, self.rng = space, np.random.default_rng(seed)

    def step(self, evaluate, n: int) -> None:
        root = self.space.root_state()
        evaluate(np.array([self.space.random_completion(root, self.rng)
                           for _ in range(3 * n)]))


@pytest.mark.parametrize("budget, batch", [(10, 4), (7, 64), (33, 16)])
def test_a_tile_search_never_evaluates_past_its_budget(monkeypatch, budget, batch):
    space = Space(tiny_chain_space().structure(tiny_chain_space().random(
        np.random.default_rng(0))))
    monkeypatch.setattr(tilesearch, "make_sampler", lambda m, s, seed, *a, **k: Greedy(s, seed))
    cache = tilesearch.search(space, budget_evals=budget, batch=batch)
    assert cache.evaluations == len(cache.rows) <= budget


@pytest.mark.parametrize("cap", [1, 20, 75])
def test_the_genetic_search_stops_at_its_evaluation_cap(cap):
    space = tiny_chain_space()
    config = GAConfig(population=6, generations=5, budget=8, rungs=3, seed=2)
    calls = []
    search = GeneticSearch(space, config, random_fit, max_evaluations=cap,
                           on_fit=lambda s: calls.append(s.evaluations))
    result = search.run()
    assert result.evaluations <= cap and search.stopped == "evaluations"
    assert calls == sorted(calls) and all(c <= cap for c in calls)


def test_the_genetic_search_stops_at_its_deadline():
    search = GeneticSearch(tiny_chain_space(), GAConfig(population=6, generations=50,
                                                        budget=8, seed=1), random_fit,
                           deadline=time.perf_counter() + 0.5)
    start = time.perf_counter()
    search.run()
    assert search.stopped == "seconds" and time.perf_counter() - start < 5.0


def test_a_progress_line_at_most_once_per_interval():
    now = [0.0]
    out = io.StringIO()
    line = ProgressLine("explore x", 10.0, out, clock=lambda: now[0])
    for t in range(0, 35):  # a beat every second for 35 s: lines at 10, 20 and 30 s
        now[0] = float(t)
        line.beat("tile-factor search", t * 100, 5.0)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0] == "explore x: tile-factor search, 1,000 points, best 5, 10 s elapsed"
    silent = io.StringIO()
    ProgressLine("x", None, silent).beat("p", 1, 1.0, force=True)
    assert silent.getvalue() == ""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_lines_only_when_stderr_is_not_a_terminal_and_not_quiet():
    assert interval_for(False, io.StringIO()) == heartbeat.HEARTBEAT_INTERVAL_S
    assert interval_for(False, Terminal()) is None
    assert interval_for(True, io.StringIO()) is None


def test_explore_prints_progress_lines_and_quiet_silences_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(heartbeat, "HEARTBEAT_INTERVAL_S", 0.0)  # a line at every beat
    code, *_ = run(tmp_path, "{evaluations: 80}")
    err = capsys.readouterr().err
    assert code == 0
    assert "study: structure search, " in err and "study: tile-factor search, " in err
    assert "s elapsed" in err
    (tmp_path / "q").mkdir()
    code, *_ = run(tmp_path / "q", "{evaluations: 80}", "--quiet")
    assert code == 0 and "elapsed" not in capsys.readouterr().err


@pytest.mark.parametrize("share", ["0", "1", "1.5", "-0.2", "half"])
def test_a_bad_structure_share_exits_2(tmp_path, capsys, share):
    code, *_ = run(tmp_path, f"{{evaluations: 80, structure_share: {share}}}", "--quiet")
    err = capsys.readouterr().err
    assert code == 2 and "structure_share" in err and "Traceback" not in err
