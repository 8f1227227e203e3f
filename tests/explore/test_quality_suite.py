"""The search-quality suite (search/quality/): every pair's chip, workload and trees load; each
best-known tree evaluates to the value committed for it (the committed values are the model's,
not typed in), never below the matrix units' floor and never above a hand-written tree of the
pair; the suite spans the chips the issue asks for; the runner judges seeds as documented."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from tileflow.cost import evaluate
from tileflow.explore.sweeps.sweep_config import (
    accelerator_document,
    check_parameters,
    load_sweep,
    point_arch,
)
from tileflow.interop.files import import_files, load_arch_any, load_workload_any
from tileflow.shipped import shipped
from tileflow.specs.dataflow import load_dataflow_file

QUALITY = Path(__file__).resolve().parents[2] / "search" / "quality"
sys.path.insert(0, str(QUALITY))

import run as runner  # noqa: E402
import suite  # noqa: E402

PAIRS = suite.load_pairs()
KNOWN = suite.load_best_known()


def loaded(pair: suite.Pair):
    return load_workload_any(pair.workload_ref, pair.sizes), load_arch_any(str(pair.chip_path))


def matrix_macs(workload) -> int:
    """MACs of the contractions (`+=` of a product): one per point of every dimension the
    operator names."""
    return sum(math.prod(workload.sizes[d] for d in op.dims) for op in workload.ops
               if op.update == "+=" and op.function == "mul")


def test_suite_has_a_best_known_value_for_every_pair():
    assert len(PAIRS) >= 8
    assert len({(p.chip, p.workload) for p in PAIRS}) == len(PAIRS)
    assert set(KNOWN) == {p.name for p in PAIRS}


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.name)
def test_best_known_tree_gives_the_committed_cycles(pair):
    workload, arch = loaded(pair)
    entry = KNOWN[pair.name]
    result = evaluate(workload, arch, load_dataflow_file(QUALITY / entry["tree"]))
    assert result.valid, result.violations
    assert result.cycles == pytest.approx(entry["cycles"], rel=1e-9)
    assert result.cycles >= matrix_macs(workload) / arch.total_macs_per_cycle * (1 - 1e-9)


def test_readme_table_gives_the_committed_values():
    text = (QUALITY / "README.md").read_text()
    for pair in PAIRS:
        [row] = [line for line in text.splitlines() if line.startswith(f"| {pair.name} |")]
        best, floor = (float(c.replace(",", "")) for c in row.split("|")[4:6])
        assert best == round(KNOWN[pair.name]["cycles"]), pair.name
        assert floor == round(KNOWN[pair.name]["matrix_floor_cycles"]), pair.name


@pytest.mark.parametrize("pair", [p for p in PAIRS if p.hand_trees()], ids=lambda p: p.name)
def test_hand_written_trees_are_valid_and_not_better_than_the_best_known(pair):
    workload, arch = loaded(pair)
    for path in pair.hand_trees():
        result = evaluate(workload, arch, load_dataflow_file(path))
        assert result.valid, (path.name, result.violations)
        assert result.cycles >= KNOWN[pair.name]["cycles"] * (1 - 1e-9), path.name


def test_suite_spans_the_chips_the_issue_asks_for():
    chips = {p.chip: load_arch_any(str(p.chip_path)) for p in PAIRS}
    assert not {a.name for a in chips.values()} & set(shipped("accelerators"))
    depths = {len(a.levels) for a in chips.values()}
    assert min(depths) == 2 and max(depths) == 5
    # a level shared by several instances of the level below it, under DRAM
    assert any(a.levels[i].fanout == 1 and a.levels[i + 1].fanout > 1
               for a in chips.values() for i in range(1, len(a.levels) - 1))
    assert any(a.matrix.rows != a.matrix.cols for a in chips.values())
    kinds = {p.workload for p in PAIRS}
    assert {"attention", "gemm-chain", "workloads/gqa.yaml", "workloads/swiglu.yaml",
            "workloads/dwpw.yaml"} <= kinds


def test_imported_chip_is_the_importers_output(tmp_path):
    [written] = import_files([str(QUALITY / "timeloop" / "ws-array.yaml")], str(tmp_path))
    assert written.read_text() == (QUALITY / "chips" / written.name).read_text()
    assert any(p.chip == f"chips/{written.name}" for p in PAIRS)


def test_runner_needs_four_of_five_seeds_within_one_percent_and_the_budget(tmp_path):
    assert [runner.needed(n) for n in (1, 2, 5, 10)] == [1, 2, 4, 8]
    pair = PAIRS[0]
    best = KNOWN[pair.name]["cycles"]
    # (found / best, wall s): ok, ok, 2 % above, over the budget, ok -> 3 of 5: not met
    seeds = [(1.0, 50), (1.005, 59), (1.02, 30), (1.0, 61), (0.999, 40)]
    for k, (ratio, wall) in enumerate(seeds):
        unit = {"pair": pair.name, "seed": k, "budget_s": 60, "wall_s": wall,
                "found_cycles": best * ratio}
        (tmp_path / "units").mkdir(exist_ok=True)
        (tmp_path / "units" / f"{pair.name}.seed-{k}.json").write_text(json.dumps(unit))
    summary = runner.summarise([pair], 5, 60, tmp_path)
    [row] = summary["pairs"]
    assert row["seeds_ok"] == 3 and not row["meets_target"]
    assert [u["within_1pct"] for u in row["units"]] == [True, True, False, True, True]
    assert row["units"][2]["gap"] == pytest.approx(0.02)
    (tmp_path / "units" / f"{pair.name}.seed-2.json").write_text(json.dumps(
        {"pair": pair.name, "seed": 2, "budget_s": 60, "wall_s": 10, "found_cycles": best}))
    assert runner.summarise([pair], 5, 60, tmp_path)["pairs"][0]["meets_target"]
    assert "4 / 4" not in runner.report(summary) and "3 / 4" in runner.report(summary)


SWEEPS = suite.load_sweeps()


@pytest.mark.parametrize("name", list(SWEEPS))
def test_sweep_grows_one_resource_of_a_pair_and_its_best_tree_never_slows(name):
    """The target asks each sweep's found latency to be monotone; that is reachable because a
    larger capacity or bandwidth runs the smaller point's dataflow no slower, checked here on
    the pair's best-known tree at every point."""
    config = load_sweep(SWEEPS[name])
    assert len(config.parameters) == 1 and len(config.parameters[0].values) >= 2
    document, source = accelerator_document(config.explore.accelerator)
    check_parameters(config, document)
    [pair] = [p for p in PAIRS if p.chip_path.resolve() == Path(source).resolve()
              and Path(p.workload_ref).name == Path(config.explore.workload).name
              and {k: config.explore.sizes.get(k) for k in p.sizes} == p.sizes]
    workload = load_workload_any(pair.workload_ref, pair.sizes)
    flow = load_dataflow_file(QUALITY / KNOWN[pair.name]["tree"])
    points = sorted(config.points(), key=lambda pt: list(pt.values()))
    results = [evaluate(workload, point_arch(config, document, source, pt)[1], flow)
               for pt in points]
    assert any(r.valid for r in results)
    for smaller, larger in zip(results, results[1:], strict=False):
        if smaller.valid:
            assert larger.valid and larger.cycles <= smaller.cycles * (1 + 1e-9)


def test_runner_calls_a_sweep_monotone_only_when_latency_never_rises():
    def pts(*pairs):
        return [{"parameters": {"L1.capacity_bytes": v}, "cycles": c} for v, c in pairs]

    assert runner.monotone(pts((256, 90), (64, 100), (128, 100)))  # any order, ties allowed
    assert runner.monotone(pts((64, 100), (128, 101), (256, 90))) is False
    assert runner.monotone(pts((64, None), (128, 100))) is None
    assert runner.monotone([]) is None
