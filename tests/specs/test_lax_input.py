"""Inputs `evaluate` and `compare` used to take without a word: synonym keys given together
in a Timeloop file, a fan-out on the outermost level, a constant index (a TypeError in the
search's window forms), a chain of thousands of operators (minutes of analysis)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.interop.samples import ARCH_V03, GEMM_PROBLEM
from tileflow.cli import main

EDGE = (Path(__file__).resolve().parents[2] / "accelerators" / "edge.yaml").read_text()


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name, text, line", [
    ("bits.yaml", ARCH_V03.replace("word-bits: 16, read_bandwidth: 4",
                                   "word-bits: 16, datawidth: 8, read_bandwidth: 4"), 10),
    ("bits2.yaml", ARCH_V03.replace("word-bits: 16, meshX: 2", "word-bits: 16, "
                                    "word_bits: 8, meshX: 2"), 24),
    ("depth.yaml", ARCH_V03.replace("depth: 1024", "depth: 1024, entries: 2048"), 17),
])
def test_synonym_attributes_together_are_refused(name, text, line, tmp_path, capsys):
    (tmp_path / name).write_text(text)
    code, _, err = run(capsys, "evaluate", "--arch", str(tmp_path / name), "--workload",
                       "gemm", "--dataflow", "layerwise", "--json")
    assert code == 2 and f"{name}, line {line}" in err and "give one" in err, err


def test_synonym_attributes_with_one_value_are_read_once(tmp_path, capsys):
    """Some of Timeloop's example designs give `depth` and `entries` (or `word-bits` and
    `datawidth`) together with one value: nothing is ambiguous, the file is read."""
    text = ARCH_V03.replace("depth: 1024", "depth: 1024, entries: 1024").replace(
        "word-bits: 16, meshX: 2", "word-bits: 16, datawidth: 16, meshX: 2")
    (tmp_path / "same.yaml").write_text(text)
    code, out, err = run(capsys, "evaluate", "--arch", str(tmp_path / "same.yaml"),
                         "--workload", "gemm", "--dataflow", "layerwise", "--json")
    assert code == 0, err
    assert json.loads(out)["cycles"] > 0


def test_synonym_problem_keys_together_are_refused(tmp_path, capsys):
    (tmp_path / "arch.yaml").write_text(ARCH_V03)
    (tmp_path / "p.yaml").write_text(GEMM_PROBLEM.replace(
        "    data-spaces:", "    data_spaces: []\n    data-spaces:"))
    code, _, err = run(capsys, "evaluate", "--arch", str(tmp_path / "arch.yaml"),
                       "--workload", str(tmp_path / "p.yaml"), "--dataflow", "layerwise")
    assert code == 2 and "p.yaml, line 6" in err and "data-spaces" in err, err


@pytest.mark.parametrize("fanout", ["0", "4", "-1"])
def test_a_fanout_on_the_outermost_level_must_be_one(fanout, tmp_path, capsys):
    text = EDGE.replace("- {name: DRAM,", f"- {{name: DRAM, fanout: {fanout},", 1)
    assert f"fanout: {fanout}" in text
    (tmp_path / "a.yaml").write_text(text)
    code, _, err = run(capsys, "compare", "--arch", str(tmp_path / "a.yaml"), "--workload",
                       "G1", "--no-plot", "--json")
    assert code == 2 and "a.yaml, line" in err and "fanout" in err, err


def test_a_fanout_of_one_on_the_outermost_level_is_accepted(tmp_path, capsys):
    (tmp_path / "a.yaml").write_text(EDGE.replace("- {name: DRAM,", "- {name: DRAM, fanout: 1,"))
    code, out, _ = run(capsys, "evaluate", "--arch", str(tmp_path / "a.yaml"), "--workload",
                       "gemm-chain", "--dataflow", "layerwise", "--json")
    assert code == 0 and json.loads(out)["valid"]


def test_a_constant_index_is_counted_not_a_type_error(tmp_path, capsys):
    (tmp_path / "w.yaml").write_text(
        "name: constant\ndims: {m: 64, k: 32, n: 16}\nops:\n"
        "  - {name: g1, expr: \"C[m,n] += A[m,k] * B[k,n]\"}\n"
        "  - {name: g2, expr: \"E[m,n] += C[m,n] * D[0,n]\"}\n")
    code, out, err = run(capsys, "compare", "--arch", "edge", "--workload",
                         str(tmp_path / "w.yaml"), "--no-plot", "--json")
    assert code == 0, err
    rows = json.loads(out)
    # g1: m*k*n multiply-adds; g2: one product per (m, n) (D's row 0 only)
    assert all(r["macs"] == 64 * 32 * 16 + 64 * 16 for r in rows)


def test_a_constant_index_in_a_window_axis_is_counted(tmp_path, capsys):
    conv = (Path(__file__).resolve().parents[2] / "workloads" / "conv-chain.yaml").read_text()
    text = conv.replace("A[n,c1,p+t-pad2,q+u-pad2]", "A[n,c1,p+t-pad2,1]")
    assert text != conv
    (tmp_path / "c.yaml").write_text(text)
    code, out, err = run(capsys, "compare", "--arch", "edge", "--workload",
                         str(tmp_path / "c.yaml"), "--no-plot", "--json")
    assert code == 0 and "Traceback" not in err
    assert all(r["valid"] for r in json.loads(out))


def test_a_chain_of_thousands_of_operators_is_refused_quickly(tmp_path, capsys):
    ops = ['  - {name: g0, expr: "T0[m,n] += A[m,k] * B[k,n]"}'] + [
        f'  - {{name: o{i}, expr: "T{i}[m,n] = T{i - 1}[m,n] + C[m,n]"}}'
        for i in range(1, 3000)]
    (tmp_path / "long.yaml").write_text("name: long\ndims: {m: 64, k: 32, n: 64}\nops:\n"
                                        + "\n".join(ops) + "\n")
    start = time.monotonic()
    code, _, err = run(capsys, "evaluate", "--arch", "edge", "--workload",
                       str(tmp_path / "long.yaml"), "--dataflow", "layerwise", "--json")
    assert code == 2 and "long.yaml, line 3 (ops)" in err and "at most 64" in err
    assert time.monotonic() - start < 30
