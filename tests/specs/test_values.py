"""Every value in a spec file is checked by type and range on load: a value that is not a
finite number, a count that is not an integer, a string posing as a boolean or a list, or a
size out of range ends with exit 2 and one paragraph naming the file, the line and what was
expected — never a traceback, and never a silently wrong number."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tileflow.cli import main

REPO = Path(__file__).resolve().parents[2]
EDGE = (REPO / "accelerators" / "edge.yaml").read_text()
ATTENTION = (REPO / "workloads" / "attention.yaml").read_text()
CONV = (REPO / "workloads" / "conv-chain.yaml").read_text()
CHIMERA = (REPO / "dataflows" / "gemm-chain-chimera.yaml").read_text()


def run(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.err


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line containing `needle` (the line an error must name)."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def edited(tmp_path: Path, name: str, text: str, old: str, new: str) -> tuple[str, int]:
    assert old in text, old
    changed = text.replace(old, new, 1)
    path = tmp_path / name
    path.write_text(changed)
    marker = next(line for line in new.splitlines() if line not in text)
    return str(path), line_of(changed, marker)


def assert_rejected(code: int, err: str, path: str, line: int, *words: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert f"{path}, line {line}" in err, err
    for word in words:
        assert word in err, err


ARCH_EDITS = [  # (old, new, words the message must contain)
    ("capacity_bytes: 4194304", "capacity_bytes: .nan", ["'capacity_bytes'", "finite"]),
    ("capacity_bytes: 4194304", "capacity_bytes: -4", ["'capacity_bytes'", "at least"]),
    ("capacity_bytes: 4194304", "capacity_bytes: 1e400", ["finite"]),
    ("read_bandwidth_gbps: 60", "read_bandwidth_gbps: 1e-320", ["'read_bandwidth_gbps'"]),
    ("read_bandwidth_gbps: 60", "read_bandwidth_gbps: .inf", ["finite"]),
    ("read_words_per_cycle: 3", "read_words_per_cycle: 0", ["at least"]),
    ("clock_ghz: 1.0", "clock_ghz: .inf", ["'clock_ghz'", "finite"]),
    ("clock_ghz: 1.0", "clock_ghz: '1.0'", ["'clock_ghz' must be a number"]),
    ("clock_ghz: 1.0", "clock_ghz: true", ["'clock_ghz' must be a number"]),
    ("fanout: 4,", "fanout: 2.5,", ["'fanout' must be an integer"]),
    ("fanout: 4,", "fanout: 10000000000000000000000000000000000000000000000000,",
     ["'fanout' must be an integer", "digits"]),
    ("fanout: 1024,", "fanout: 1048577,", ["'fanout'", "1,048,576"]),
    ("rows: 32", "rows: 0", ["'rows' must be an integer"]),
    ("lanes: 32", "lanes: -1", ["'lanes' must be an integer"]),
    ("energy_pj_per_word: 200", "energy_pj_per_word: -1", ["not negative"]),
    ("energy_pj_per_word: 200", "energy_pj_per_word: .nan", ["finite"]),
    ("exp: 4", "exp: -3", ["'exp'", "at least"]),
    ("exp: 4", "exp: 0", ["'exp'", "at least"]),
    ("exp: 4", "exp: .nan", ["'exp'", "finite"]),
    ("exp: 4", "exp: .inf", ["'exp'", "finite"]),
    ("cycles_per_op: {default: 1, exp: 4, div: 4}", "cycles_per_op: -3",
     ["'cycles_per_op'", "at least"]),
    ("word_bits: 16", "word_bits: 12", ["multiple of 8"]),
    ("word_bits: 16", "word_bits: !!python/object:os.system x", ["'word_bits' must be an"]),
    ("rows: 32", "rows: !!binary aGVsbG8=", ["'rows' must be an integer"]),
    ("clock_ghz: 1.0", "clock_ghz: 1.0\nvector_on_matrix: 'no'",
     ["'vector_on_matrix' must be true or false"]),
    ("clock_ghz: 1.0", "clock_ghz: 1.0\nvector_on_matrix: 'false'",
     ["'vector_on_matrix' must be true or false"]),
    ("clock_ghz: 1.0", "clock_ghz: 1.0\nvector_on_matrix: yes",
     ["'vector_on_matrix' must be true or false"]),
]


@pytest.mark.parametrize("old, new, words", ARCH_EDITS, ids=[e[1][:30] for e in ARCH_EDITS])
def test_accelerator_values(tmp_path, capsys, old, new, words):
    path, line = edited(tmp_path, "arch.yaml", EDGE, old, new)
    code, err = run(capsys, "evaluate", "--arch", path, "--workload", "attention",
                    "--dataflow", "layerwise", "--json")
    assert_rejected(code, err, path, line, *words)


WORKLOAD_EDITS = [  # (file, old, new, extra flags, words the message must contain)
    (ATTENTION, "  G1:  {b: 8,", "  G1: 5\n  G0:  {b: 8,", [], ["preset 'G1' must be a mapping"]),
    (ATTENTION, "  G2:  {b: 12,", "  G2:  {zz: 1, b: 12,", [], ["preset 'G2' sets 'zz'"]),
    (ATTENTION, "  G2:  {b: 12,", "  G2:  {b: 1.5,", ["--preset", "G2"],
     ["'b' must be an integer"]),
    (ATTENTION, "  G2:  {b: 12,", "  G2:  {b: 0,", ["--preset", "G2"],
     ["dimension 'b' must be at least 1", "set by preset G2"]),
    (ATTENTION, "dims: {b: 8,", "dims: {b: -8,", [], ["dimension 'b' must be at least 1"]),
    (ATTENTION, "dims: {b: 8,", "dims: {b: 4294967296,", [], ["at most 2,147,483,648"]),
    (ATTENTION, "dims: {b: 8,", "dims: {b: 8.0,", [], ["expected an integer"]),
    (ATTENTION, "dims: {b: 8,", "dims: {b: .nan,", [], ["expected an integer"]),
    (ATTENTION, "dims: {b: 8,", "dims: {b: '" + "*".join(["1024"] * 10) + "',", [],
     ["beyond"]),
    (CONV, "X: [n, c0, h, w]", "X: [n, c0, 64, -5]", [], ["extent 4 of 'X' must be at least 1"]),
    (CONV, "p: \"h // st1\"", "p: \"h // (st1 - 1)\"", [], ["division by zero"]),
]


@pytest.mark.parametrize("text, old, new, flags, words", WORKLOAD_EDITS,
                         ids=[e[2].strip()[:30] for e in WORKLOAD_EDITS])
def test_workload_values(tmp_path, capsys, text, old, new, flags, words):
    path, line = edited(tmp_path, "w.yaml", text, old, new)
    code, err = run(capsys, "evaluate", "--arch", "edge", "--workload", path,
                    "--dataflow", "layerwise", *flags)
    assert_rejected(code, err, path, line, *words)


def test_set_zero_stride_names_the_expression_and_the_flag(capsys):
    code, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "conv-chain",
                    "--set", "st1=0", "--dataflow", "layerwise")
    line = line_of(CONV, "p: \"h // st1\"")
    assert_rejected(code, err, "conv-chain.yaml", line, "division by zero in 'h // st1'",
                    "st1 is 0")


DATAFLOW_EDITS = [
    ("  loops: [b:2, b:4:Sp]", "  loops: [b:2, b:4:Sp]\n  no_reuse: AB",
     ["'no_reuse' must be a list of names"]),
    ("  loops: [b:2, b:4:Sp]", "  loops: [b:2, {dim: b, factor: 4, spatial: 'no'}]",
     ["'spatial' must be true or false"]),
    ("  loops: [b:2, b:4:Sp]", "  loops: [b:2, {dim: b, factor: 0}]",
     ["'factor' must be an integer"]),
    ("  loops: [b:2, b:4:Sp]", "  loops: [b:2, b:1099511627776:Sp]",
     ["factor of loop 'b:1099511627776:Sp' must be from 1"]),
    ("      - {op: gemm2}", "      - {op: summ}",
     ["leaf 'summ' is not an operator", "gemm1, gemm2"]),
    ("name: chimera\nroot:", "name: chimera\nhomes: {A: L1}\nroot:",
     ["homes names 'A', which is not an intermediate"]),
    ("name: chimera\nroot:", "name: chimera\nhomes: {C: 5}\nroot:", ["expected a level name"]),
]


@pytest.mark.parametrize("old, new, words", DATAFLOW_EDITS,
                         ids=[e[1].strip()[:30] for e in DATAFLOW_EDITS])
def test_dataflow_values(tmp_path, capsys, old, new, words):
    path, line = edited(tmp_path, "flow.yaml", CHIMERA, old, new)
    code, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "gemm-chain",
                    "--dataflow", path)
    assert_rejected(code, err, path, line, *words)


def test_a_dataflow_for_another_workload_names_what_is_missing(tmp_path, capsys):
    path = tmp_path / "flow.yaml"
    path.write_text(CHIMERA)
    code, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "attention",
                    "--dataflow", str(path))
    assert code == 2
    assert re.search(rf"{re.escape(str(path))}, line \d+ \(root\.0\.0\.0\): leaf 'gemm1' is "
                     "not an operator of the workload; its operators are qk, max", err), err


def test_an_operator_missing_from_the_tree_points_at_the_root(tmp_path, capsys):
    text = CHIMERA.replace("      - {op: gemm2}", "      - {op: gemm1}")
    path = tmp_path / "flow.yaml"
    path.write_text(text)
    code, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "gemm-chain",
                    "--dataflow", str(path))
    assert code == 2 and f"{path}, line" in err and "two leaves" in err, err
    path.write_text(text.replace("      - {op: gemm1}", "      - gemm1", 1))
    code, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "gemm-chain",
                    "--dataflow", str(path))
    assert code == 2 and "two leaves" in err, err


def test_true_booleans_are_still_accepted(tmp_path, capsys):
    path, _ = edited(tmp_path, "flow.yaml", CHIMERA, "  loops: [b:2, b:4:Sp]",
                     "  loops: [b:2, {dim: b, factor: 4, spatial: true}]")
    code, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "gemm-chain",
                    "--dataflow", path, "--json")
    assert code == 0, err


def test_an_edited_workload_that_no_longer_fits_a_baseline_names_its_operators(tmp_path,
                                                                               capsys):
    text = (REPO / "workloads" / "gemm-chain.yaml").read_text()
    text = text.replace('  - {name: gemm2, expr: "E[b,m,n] += C[b,m,l] * D[b,l,n]"}\n', "")
    path = tmp_path / "w.yaml"
    path.write_text(text)
    code, err = run(capsys, "evaluate", "--arch", "edge", "--workload", str(path),
                    "--dataflow", "chimera")
    assert_rejected(code, err, str(path), line_of(text, "ops:"), "does not apply")


def test_a_dataflow_file_with_tile_flags_is_refused(tmp_path, capsys):
    path = tmp_path / "flow.yaml"
    path.write_text(CHIMERA)
    code, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "gemm-chain",
                    "--dataflow", str(path), "--tile", "m=64")
    assert code == 2 and "--tile applies to a named baseline" in err


def test_a_huge_spatial_factor_is_refused_at_its_tile(tmp_path, capsys):
    path, _ = edited(tmp_path, "flow.yaml", CHIMERA, "  loops: [b:2, b:4:Sp]",
                     "  loops: [b:2147483648:Sp]")
    code, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "gemm-chain",
                    "--dataflow", path)
    assert_rejected(code, err, path, line_of(CHIMERA, "level: DRAM"), "tile (root)",
                    "make 2,147,483,648 steps", "at most 8,192")
