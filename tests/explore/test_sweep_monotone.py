"""Sweeps that respect monotonicity: points run fewer resources first, each starts from its
neighbours' best dataflows re-evaluated on it, so a capacity sweep's best latency cannot rise;
a point worse than a neighbour with fewer resources is flagged (energy across capacities is
not, and the summary says why); each point's chip area is reported and can limit the sweep."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tileflow.cli import main
from tileflow.cost import evaluate
from tileflow.cost.components import chip_area
from tileflow.dataflows import build
from tileflow.explore.sweeps.monotone import compare, flags, neighbours, sweep_order
from tileflow.explore.sweeps.sweep import SweepState
from tileflow.explore.sweeps.sweep_config import apply_point, load_sweep
from tileflow.explore.sweeps.sweep_outputs import write_all
from tileflow.specs.arch import load_arch
from tileflow.specs.dataflow import load_dataflow_file
from tileflow.specs.workload import load_workload
from tileflow.specs.yamlfile import Field, load_yaml

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
SIZES = {"b": 1, "m": 8, "l": 8, "k": 4, "n": 4}


def config_text(parameters: str, budget: int = 24, extra: str = "") -> str:
    return (f"accelerator: tiny.yaml\nworkload: gemm-chain\nsizes: {json.dumps(SIZES)}\n"
            f"structures: [tileflow-pipe, chimera, layerwise]\n"
            f"budget: {{evaluations: {budget}}}\nbatch: 8\n{extra}"
            f"sweep:\n  parameters:\n{parameters}  bound: none\n")


def write(folder: Path, text: str, arch: str = TINY) -> Path:
    (folder / "tiny.yaml").write_text(arch)
    path = folder / "sweep.yaml"
    path.write_text(text)
    return path


def sweep(folder: Path, text: str, arch: str = TINY, *flags: str) -> dict:
    path = write(folder, text, arch)
    code = main(["sweep", str(path), "--out", str(folder / "out"), "--quiet", *flags])
    assert code == 0
    return json.loads((folder / "out" / "summary.json").read_text())


# ---- order and neighbours -----------------------------------------------------------------

def test_points_run_fewer_resources_first_and_neighbours_are_one_step_apart(tmp_path):
    config = load_sweep(write(tmp_path, config_text(
        "    L1.capacity_words: [96, 8, 24]\n    DRAM.bandwidth_gbps: [4, 1]\n")))
    points = config.points()  # grid: (96,4) (96,1) (8,4) (8,1) (24,4) (24,1)
    order = [(p["L1.capacity_words"], p["DRAM.bandwidth_gbps"])
             for p in (points[i] for i in sweep_order(config))]
    assert order == [(8, 1), (8, 4), (24, 1), (24, 4), (96, 1), (96, 4)]
    near = neighbours(config)
    index = {(p["L1.capacity_words"], p["DRAM.bandwidth_gbps"]): i
             for i, p in enumerate(points)}
    got = {k: sorted(index_key for index_key, i in index.items() if i in near[v])
           for k, v in index.items()}
    assert got[(24, 1)] == [(8, 1), (24, 4), (96, 1)]  # 8 and 96 are 24's sorted neighbours
    assert got[(8, 4)] == [(8, 1), (24, 4)]
    assert got[(96, 4)] == [(24, 4), (96, 1)]


def test_only_more_capacity_or_bandwidth_with_the_rest_equal_is_more_resources(tmp_path):
    config = load_sweep(write(tmp_path, config_text(
        "    L1.capacity_words: [8, 24]\n    DRAM.bandwidth_gbps: [1, 4]\n"
        "    matrix.size: [1, 2]\n")))
    a = {"L1.capacity_words": 8, "DRAM.bandwidth_gbps": 1, "matrix.size": 2}
    assert compare(config, a, {**a, "L1.capacity_words": 24}) == {"capacity"}
    assert compare(config, a, {**a, "DRAM.bandwidth_gbps": 4}) == {"bandwidth"}
    assert compare(config, a, {**a, "L1.capacity_words": 24, "DRAM.bandwidth_gbps": 4}) \
        == {"capacity", "bandwidth"}
    assert compare(config, a, {**a, "L1.capacity_words": 24, "DRAM.bandwidth_gbps": 0.5}) \
        is None  # more of one, less of the other
    assert compare(config, a, {**a, "matrix.size": 4}) is None  # not a resource here
    assert compare(config, a, a) is None


# ---- the model property the warm start rests on -------------------------------------------

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["layerwise", "tileflow-pipe", "chimera", "flat-rgran"]),
       m=st.sampled_from([4, 8, 16]), k=st.sampled_from([2, 4, 8]),
       grow=st.integers(1, 8), faster=st.sampled_from([1.5, 2.0, 8.0]))
def test_a_valid_dataflow_stays_valid_and_no_slower_with_more_capacity_or_bandwidth(
        name, m, k, grow, faster):
    w = load_workload("gemm-chain", {"b": 1, "m": m, "l": m, "k": k, "n": k})
    doc = load_yaml_text(TINY)
    arch = parse(doc)
    flow = build(name, w, arch)
    base = evaluate(w, arch, flow)
    if not base.valid:
        return
    bigger = parse(apply_level(doc, "L1", capacity_words=64 * grow))
    more = evaluate(w, bigger, flow)
    assert more.valid and more.cycles == base.cycles and more.dram_words == base.dram_words
    wider = parse(apply_level(doc, "DRAM", read_words_per_cycle=4 * faster,
                              write_words_per_cycle=4 * faster))
    fast = evaluate(w, wider, flow)
    assert fast.valid and fast.cycles <= base.cycles and fast.dram_words == base.dram_words


def load_yaml_text(text: str) -> dict:
    import yaml

    return yaml.safe_load(text)


def parse(doc: dict):
    from tileflow.specs.arch import parse_arch

    return parse_arch(Field(doc, "tiny.yaml"))


def apply_level(doc: dict, level: str, **values) -> dict:
    import copy

    new = copy.deepcopy(doc)
    for lv in new["levels"]:
        if lv["name"] == level:
            lv.update(values)
    return new


# ---- warm starts --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def capacity_sweep(tmp_path_factory):
    """Capacities written out of order: the sweep runs them ascending."""
    folder = tmp_path_factory.mktemp("monotone")
    data = sweep(folder, config_text("    L1.capacity_words: [96, 16, 32]\n"))
    return folder, data


def test_each_point_starts_from_its_smaller_neighbours_best_evaluated_on_it(capacity_sweep):
    folder, data = capacity_sweep
    rows = {r["label"]: r for r in data["points"]}  # p000: 96, p001: 16, p002: 32 words
    assert rows["p001"]["warm_starts"] == []  # the first point run has no neighbour done
    w = load_workload("gemm-chain", SIZES)
    for label, smaller in (("p002", "p001"), ("p000", "p002")):
        (warm,) = rows[label]["warm_starts"]  # the larger neighbour runs later
        assert warm["from"] == smaller and warm["valid"]
        arch = load_arch(str(folder / "out" / "accelerators" / f"{label}.yaml"))
        tree = load_dataflow_file(folder / "out" / "points" / smaller / "best.yaml")
        here = evaluate(w, arch, tree)
        assert warm["cycles"] == here.cycles and warm["dram_words"] == here.dram_words
        assert Path(warm["file"]).read_text() == \
            (folder / "out" / "points" / smaller / "best.yaml").read_text()
        # the tree was searched at the point: its own factors are a point of the study
        points = pd.read_csv(folder / "out" / "points" / label / "points.csv")
        # under its own name, or beside the baseline's whose structure it shares
        own = points[points["structure"].str.contains(f"warm-{smaller}.yaml", regex=False)]
        assert len(own) and own["cycles"].min() <= here.cycles
        assert rows[label]["cycles"] <= here.cycles * (1 + 1e-9)
        assert rows[label]["tie_break_ceiling"] == rows[smaller]["cycles"]


def test_a_capacity_sweeps_best_latency_never_rises(capacity_sweep):
    _, data = capacity_sweep
    by_capacity = sorted(data["points"], key=lambda r: r["parameters"]["L1.capacity_words"])
    cycles = [r["cycles"] for r in by_capacity]
    assert all(r["valid"] for r in by_capacity)
    assert all(b <= a * (1 + 1e-9) for a, b in zip(cycles, cycles[1:], strict=False)), cycles
    assert data["monotonicity"]["monotone"] and data["monotonicity"]["flags"] == []


def test_the_tie_break_may_not_pick_a_point_above_the_ceiling_it_can_reach():
    from tileflow.explore.studies.config import TieBreak
    from tileflow.explore.studies.session import pick_best

    valid = pd.DataFrame({"cost": [100.0, 100.05, 100.08], "energy_pj": [10.0, 5.0, 1.0]})
    assert pick_best(valid, TieBreak("energy", 0.001)) == 2  # all within 0.1 %: least energy
    assert pick_best(valid, TieBreak("energy", 0.001, ceiling=100.06)) == 1
    assert pick_best(valid, TieBreak("energy", 0.001, ceiling=100.0)) == 0
    # a ceiling below every point: the tie-break as without one
    assert pick_best(valid, TieBreak("energy", 0.001, ceiling=99.0)) == 2
    assert pick_best(valid, TieBreak(None, 0.001, ceiling=100.06)) == 0


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(capacities=st.lists(st.sampled_from([12, 16, 24, 32, 48, 64, 128]), min_size=3,
                           max_size=3, unique=True),
       seed=st.integers(0, 50))
def test_monotone_by_construction_for_any_capacities_and_seed(tmp_path_factory, capacities,
                                                              seed):
    """Any capacities, any seed, a budget too small to search much: never slower."""
    folder = tmp_path_factory.mktemp("any")
    data = sweep(folder, config_text(f"    L1.capacity_words: {capacities}\n", budget=8,
                                     extra=f"seed: {seed}\n"))
    rows = sorted(data["points"], key=lambda r: r["parameters"]["L1.capacity_words"])
    valid = [r["cycles"] for r in rows if r["valid"]]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(valid, valid[1:], strict=False)), valid
    assert data["monotonicity"]["flags"] == []
    first = next((k for k, r in enumerate(rows) if r["valid"]), len(rows))
    assert all(r["valid"] for r in rows[first:])  # a larger capacity runs the smaller's best


# ---- flags --------------------------------------------------------------------------------

def row(label: str, capacity: float, cycles: float, energy: float, dram: float = 100.0,
        key: str = "L1.capacity_words") -> dict:
    return {"label": label, "status": "done", "parameters": {key: capacity},
            "point": f"{key}={capacity:g}", "structure": "s", "valid": True,
            "cycles": cycles, "latency_ms": None, "dram_words": dram, "energy_pj": energy,
            "evaluations": 1, "seconds": 0.0, "files": {}}


def crafted(tmp_path, objective: str, parameter: str = "L1.capacity_words",
            values=(8, 16, 32)) -> SweepState:
    text = config_text(f"    {parameter}: {list(values)}\n", extra=f"objective: {objective}\n")
    config = load_sweep(write(tmp_path, text))
    return SweepState(dataclasses.replace(config, out=str(tmp_path / "o")), rows=[
        row("p000", values[0], 1000.0, 50.0, key=parameter),
        row("p001", values[1], 900.0, 60.0, key=parameter),
        row("p002", values[2], 950.0, 55.0, key=parameter),  # slower than p001
    ])


def test_a_point_slower_than_a_neighbour_with_less_capacity_is_flagged(tmp_path):
    data = write_all(crafted(tmp_path, "latency"))
    m = data["monotonicity"]
    assert m["monotone"] is False and m["flagged_points"] == ["p002"]
    (f,) = m["flags"]
    assert f["neighbour"] == "p001" and f["resources"] == ["capacity"]
    assert f["excess"] == pytest.approx(950 / 900 - 1) and not f["within_tie_break"]
    text = (tmp_path / "o" / "summary.md").read_text()
    assert "**Not monotone**" in text and "p002: 950 against p001's 900" in text
    table = pd.read_csv(tmp_path / "o" / "sweep.csv")
    assert table.set_index("label")["worse_than"].fillna("").to_dict() == \
        {"p000": "", "p001": "", "p002": "p001"}
    assert (tmp_path / "o" / "sweep.png").stat().st_size > 0


def test_energy_rising_with_capacity_is_not_flagged_and_the_summary_says_why(tmp_path):
    data = write_all(crafted(tmp_path, "energy"))  # 50, 60, 55 pJ: rises with capacity
    m = data["monotonicity"]
    assert m["flags"] == [] and "larger memory costs more" in m["not_compared"]
    text = (tmp_path / "o" / "summary.md").read_text()
    assert "Not flagged: energy is not compared across capacities" in text


def test_energy_rising_with_bandwidth_is_flagged(tmp_path):
    data = write_all(crafted(tmp_path, "energy", "DRAM.bandwidth_gbps", (1, 2, 4)))
    m = data["monotonicity"]
    assert m["flagged_points"] == ["p001"] and m["not_compared"] is None
    assert m["flags"][0]["resources"] == ["bandwidth"]


def test_dram_words_are_compared_with_the_dram_objective(tmp_path):
    state = crafted(tmp_path, "dram")
    state.rows[1]["dram_words"] = 90.0  # p001 moves fewer words than p002 (100)
    assert [f["point"] for f in flags(state.config, state.rows)] == ["p002"]


# ---- area ---------------------------------------------------------------------------------

AREA_TINY = "technology_nm: 45\nprecision: int8\n" + TINY


def test_area_is_the_component_models_storage_and_lanes(tmp_path):
    arch = parse(load_yaml_text(AREA_TINY))
    regfile_um2_per_bit = 4.5 * 1.5  # a flip-flop and its read multiplexers, 45 nm
    mac_um2 = 282 + 137  # int8 multiplier and 32-bit adder (Horowitz, 45 nm)
    l1 = 64 * 16 * regfile_um2_per_bit / 1e6  # 64 16-bit words: a register file (<= 1 KB)
    reg = 4 * 4 * 16 * regfile_um2_per_bit / 1e6  # four 4-word registers
    lanes = (4 + 2) * mac_um2 / 1e6  # a 2x2 array and 2 vector lanes
    area = chip_area(arch)
    assert area.total_mm2 == pytest.approx(l1 + reg + lanes)
    assert area.missing == ()
    assert chip_area(parse(load_yaml_text(TINY))).total_mm2 is None


def test_a_sweep_reports_each_points_area_and_skips_points_over_the_limit(tmp_path, capsys):
    one_word_um2 = 16 * 4.5 * 1.5  # a 16-bit register-file word
    base = chip_area(parse(load_yaml_text(AREA_TINY))).total_mm2 - 64 * one_word_um2 / 1e6
    limit = base + 40 * one_word_um2 / 1e6  # L1 of 16 and 32 words fit, 48 does not
    text = config_text("    L1.capacity_words: [16, 32, 48]\n").replace(
        "  bound: none\n", f"  bound: none\n  max_area_mm2: {limit!r}\n")
    data = sweep(tmp_path, text, AREA_TINY)
    rows = {r["label"]: r for r in data["points"]}
    for label, words in (("p000", 16), ("p001", 32), ("p002", 48)):
        assert rows[label]["area_mm2"] == pytest.approx(base + words * one_word_um2 / 1e6)
    assert rows["p002"]["status"] == "over_area_limit" and rows["p002"]["cycles"] is None
    assert data["points_over_area_limit"] == ["p002"] and data["points_done"] == 2
    assert not (tmp_path / "out" / "points" / "p002").exists()
    text = (tmp_path / "out" / "summary.md").read_text()
    assert "p002 over it, not run" in text and "over the area limit" in text


def test_an_area_limit_without_an_area_model_is_an_error_naming_the_line(tmp_path, capsys):
    path = write(tmp_path, config_text("    L1.capacity_words: [16]\n").replace(
        "  bound: none\n", "  bound: none\n  max_area_mm2: 1.0\n"))
    code = main(["sweep", str(path), "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "technology_nm" in err and str(path) in err
    assert "line 11" in err and "Traceback" not in err


def test_points_keep_the_base_accelerator_area_keys(tmp_path):
    config = load_sweep(write(tmp_path, config_text("    L1.capacity_words: [16]\n"),
                              AREA_TINY))
    doc = load_yaml(tmp_path / "tiny.yaml")
    new = apply_point(doc, config.points()[0], config.parameters)
    assert new["technology_nm"] == 45 and new["precision"] == "int8"


@pytest.mark.parametrize("value, message", [("-1", "at least"), ("big", "must be a number"),
                                            (".nan", "finite")])
def test_a_bad_area_limit_names_the_file_and_line(tmp_path, capsys, value, message):
    path = write(tmp_path, config_text("    L1.capacity_words: [16]\n").replace(
        "  bound: none\n", f"  bound: none\n  max_area_mm2: {value}\n"), AREA_TINY)
    code = main(["sweep", str(path), "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and str(path) in err and "line 11" in err
