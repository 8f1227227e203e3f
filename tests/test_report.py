"""The comparison the way a user reads it: an invalid row shows why it is invalid and no
speed-up or utilization (in the table, the JSON and the CSV), and the chart marks invalid
bars with a legend entry that says what the mark means."""

from __future__ import annotations

import json

import matplotlib
import pytest
from test_cli import REPO, tileflow

from tileflow.commands.report import (
    INVALID_LABEL,
    comparison_figure,
    comparison_rows,
    comparison_table,
    violation_reason,
)
from tileflow.cost import evaluate
from tileflow.dataflows import baselines_for, build
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload

matplotlib.use("Agg")

TINY = str(REPO / "docs" / "examples" / "tiny-npu.yaml")  # registers of 4 words per PE
SIZES = {"b": 1, "m": 8, "l": 8, "k": 4, "n": 4}


@pytest.fixture(scope="module")
def results():
    """The builders' dataflows on tiny-npu: FLAT fuses both GEMMs into each PE, which then
    holds one word each of A, B, C, D and E: 5 words in registers of 4."""
    w, arch = load_workload("gemm-chain", SIZES), load_arch(TINY)
    return [evaluate(w, arch, build(name, w, arch)) for name in baselines_for(w)]


def test_an_invalid_row_has_its_reason_and_no_speedup_or_utilization(results):
    rows = {r["dataflow"]: r for r in comparison_rows(results)}
    assert {n for n, r in rows.items() if not r["valid"]} == {"flat-hgran", "flat-rgran"}
    base = results[0].cycles
    for r, result in zip(rows.values(), results, strict=True):
        if r["valid"]:
            assert r["speedup"] == pytest.approx(base / result.cycles)
            assert r["utilization"] == result.utilization and r["reason"] is None
        else:
            assert r["speedup"] is None and r["utilization"] is None
            assert r["reason"] == "level Reg needs 5 words (A 1, B 1, C 1, D 1, E 1) but holds 4"


def test_the_table_prints_the_reason_in_place_of_speedup_and_utilization(results):
    table = comparison_table(results, "title").splitlines()
    assert table[1].split()[:3] == ["dataflow", "cycles", "speedup"]
    assert table[1].split()[9] == "util"  # after DRAM words, DRAM red., energy uJ
    for line in table[3:3 + len(results)]:
        cells = line.split()
        name = cells[0]
        if name.startswith("flat-"):
            assert cells[2] == "-" and cells[6] == "-"  # speed-up, utilization
            assert line.endswith("INVALID: level Reg needs 5 words (A 1, B 1, C 1, D 1, E 1) "
                                 "but holds 4")
        else:
            assert cells[2].endswith("x") and cells[6].endswith("%")
            assert "INVALID" not in line
    notes = "\n".join(table[3 + len(results):])
    assert "flat-hgran" not in notes  # no bottleneck line for a dataflow that cannot run


def test_no_speedups_when_the_reference_row_is_invalid(results):
    rows = comparison_rows([results[2], *results])
    assert all(r["speedup"] is None for r in rows)
    assert "no speed-ups: the first dataflow (flat-hgran) is invalid" in comparison_table(
        [results[2], *results], "t")


def test_the_chart_marks_invalid_bars_and_its_legend_says_so(results):
    import matplotlib.pyplot as plt

    fig = comparison_figure(results, "title")
    try:
        [legend] = fig.legends
        labels = [t.get_text() for t in legend.get_texts()]
        assert labels == ["valid dataflow", INVALID_LABEL]
        assert "invalid" in INVALID_LABEL and "no speed-up" in INVALID_LABEL
        valid_mark, invalid_mark = legend.legend_handles
        assert invalid_mark.get_hatch() and not valid_mark.get_hatch()
        speed, traffic, energy = fig.axes
        names = [r.dataflow for r in results]
        for ax in (traffic, energy):
            for bar, r in zip(ax.patches, results, strict=True):
                assert bool(bar.get_hatch()) == (not r.valid)
                assert bar.get_facecolor() == (invalid_mark if not r.valid
                                               else valid_mark).get_facecolor()
        # the speed-up panel: no bar for an invalid dataflow, a mark saying so instead
        heights = dict(zip(names, (b.get_height() for b in speed.patches), strict=True))
        assert heights["flat-hgran"] == heights["flat-rgran"] == 0
        marks = [t.get_text() for t in speed.texts]
        assert marks.count("invalid") == 2
    finally:
        plt.close(fig)


def test_the_legend_has_no_invalid_entry_when_every_dataflow_is_valid(results):
    import matplotlib.pyplot as plt

    fig = comparison_figure([r for r in results if r.valid], "title")
    try:
        assert [t.get_text() for t in fig.legends[0].get_texts()] == ["valid dataflow"]
    finally:
        plt.close(fig)


def test_compare_json_and_csv_carry_the_reason(tmp_path):
    out = tmp_path / "cmp.csv"
    sizes = [a for k, v in SIZES.items() for a in ("--set", f"{k}={v}")]
    proc = tileflow("compare", "--arch", TINY, "--workload", "gemm-chain", *sizes, "--json",
                    "--no-plot", "--csv", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert any(not r["valid"] for r in rows)
    for r in rows:
        if r["valid"]:
            assert r["reason"] is None and r["speedup"] == pytest.approx(
                rows[0]["cycles"] / r["cycles"])
            assert 0 < r["utilization"] <= 1
        else:
            assert r["speedup"] is None and r["utilization"] is None
            assert r["reason"].startswith("level Reg needs 5 words")
            assert r["violations"][0]["needed"] == 5 and r["violations"][0]["available"] == 4
    assert "reason" in out.read_text().splitlines()[0].split(",")


def test_reason_is_empty_for_a_valid_result(results):
    assert violation_reason(results[0]) == ""
