"""Bad input of every kind ends with one clear paragraph naming the file, the place and
what was expected, exit status 2, and no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tileflow.cli import main

REPO = Path(__file__).resolve().parents[2]


def run(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    err = capsys.readouterr().err
    return code, err


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


EDGE = str(REPO / "accelerators" / "edge.yaml")


def test_yaml_syntax_error_names_file_and_line(tmp_path, capsys):
    bad = write(tmp_path, "arch.yaml", "name: x\nlevels: [\n  {name: DRAM\n")
    code, err = run(capsys, "evaluate", "--arch", bad, "--workload", "attention",
                    "--dataflow", "layerwise")
    assert code == 2
    assert "arch.yaml" in err and "YAML syntax error" in err and "line" in err
    assert "Traceback" not in err


def test_missing_field_names_the_level(tmp_path, capsys):
    bad = write(tmp_path, "arch.yaml", """
        levels:
          - {name: DRAM, read_bandwidth_gbps: 10, write_bandwidth_gbps: 10}
          - {name: L1, fanout: 2, read_bandwidth_gbps: 10, write_bandwidth_gbps: 10}
        compute:
          matrix: {rows: 2, cols: 2, level: L1}
        """)
    code, err = run(capsys, "compare", "--arch", bad, "--workload", "attention", "--no-plot")
    assert code == 2
    assert "arch.yaml, line 4 (levels[1])" in err and "'capacity_bytes'" in err


def test_mistyped_field_says_what_was_expected(tmp_path, capsys):
    text = Path(EDGE).read_text().replace("capacity_bytes: 4194304", "capacity_bytes: big")
    bad = write(tmp_path, "arch.yaml", text)
    code, err = run(capsys, "compare", "--arch", bad, "--workload", "attention", "--no-plot")
    assert code == 2
    assert "'capacity_bytes' must be a number, got 'big'" in err and "line" in err


def test_unknown_key_is_an_error_not_ignored(tmp_path, capsys):
    text = Path(EDGE).read_text().replace("clock_ghz: 1.0", "clock_ghz: 1.0\nclock_mhz: 5")
    bad = write(tmp_path, "arch.yaml", text)
    code, err = run(capsys, "compare", "--arch", bad, "--workload", "attention", "--no-plot")
    assert code == 2 and "unknown key 'clock_mhz'" in err


DATAFLOW = """
name: mine
root:
  level: DRAM
  loops: [{loops}]
  children:
    - level: L1
      loops: [m:128, l:512, k:64]
      children: [{{op: gemm1}}]
    - level: L1
      loops: [m:128, n:64, l:512]
      children: [{{op: gemm2}}]
"""


def _dataflow(tmp_path, loops: str) -> str:
    return write(tmp_path, "flow.yaml", DATAFLOW.format(loops=loops))


def test_a_loop_over_an_unknown_dimension_names_the_node(tmp_path, capsys):
    flow = _dataflow(tmp_path, "b:8, m:4, q:2")
    code, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "gemm-chain",
                    "--dataflow", flow)
    assert code == 2
    assert "loop over 'q', which no operator below this tile" in err, err
    assert "flow.yaml, line" in err


@pytest.mark.parametrize("text, expected", [
    (DATAFLOW.format(loops="b:8, m:2"),
     {"kind": "coverage", "node": "root.0", "level": "L1", "tensor": None, "needed": 512,
      "available": 256, "unit": "iterations of m"}),
    (DATAFLOW.format(loops="b:8, m:4, k:2").replace("k:64", "k:32"),
     {"kind": "dependency", "node": "root", "level": "DRAM", "tensor": "C", "needed": None,
      "available": None, "unit": None}),
])
def test_a_dataflow_that_breaks_a_rule_is_an_invalid_result(tmp_path, capsys, text, expected):
    """Not covering a dimension, or a producer's reduction (k of gemm1) in the common
    ancestor of gemm1 and gemm2: evaluated, `valid: false`, the violation as a record."""
    flow = write(tmp_path, "flow.yaml", text)
    code = main(["evaluate", "--arch", "edge", "--workload", "gemm-chain", "--dataflow", flow,
                 "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["valid"] is False
    violation, *others = result["violations"]  # gemm2 falls short of m as gemm1 does
    assert [v["node"] for v in others] == (["root.1"] if expected["kind"] == "coverage" else [])
    message = violation.pop("message")
    assert violation == expected
    assert expected["kind"] != "dependency" or "'k:2' is a reduction of 'gemm1'" in message
    assert main(["evaluate", "--arch", "edge", "--workload", "gemm-chain", "--dataflow",
                 flow]) == 0
    assert "flow.yaml, line" in capsys.readouterr().out


def test_unknown_tensor_in_no_reuse(tmp_path, capsys):
    text = DATAFLOW.format(loops="b:8, m:4").replace("  loops: [b:8, m:4]",
                                                     "  loops: [b:8, m:4]\n  no_reuse: [Zz]")
    flow = write(tmp_path, "flow.yaml", text)
    code, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "gemm-chain",
                    "--dataflow", flow)
    assert code == 2 and "unknown tensor 'Zz'" in err


@pytest.mark.parametrize("args, message", [
    (["--set", "m=abc"], "--set expects NAME=INTEGER, got 'm=abc'"),
    (["--set", "zz=4"], "cannot set 'zz'"),
    (["--set", "m=0"], "dimension 'm' must be at least 1"),
])
def test_bad_sizes(capsys, args, message):
    code, err = run(capsys, "compare", "--arch", "edge", "--workload", "attention",
                    "--no-plot", *args)
    assert code == 2 and message in err


@pytest.mark.parametrize("flag, value, message", [
    ("--arch", "tpu-xl", "unknown accelerator 'tpu-xl'"),
    ("--workload", "G99", "unknown workload 'G99'"),
    ("--dataflow", "flat-xgran", "unknown dataflow 'flat-xgran'"),
    ("--dataflow", "missing.yaml", "no such dataflow file 'missing.yaml'"),
])
def test_unknown_names(capsys, flag, value, message):
    """The error names the flag whose value is unknown."""
    args = {"--arch": "edge", "--workload": "attention", "--dataflow": "layerwise"}
    args[flag] = value
    code, err = run(capsys, "evaluate", *[x for kv in args.items() for x in kv])
    assert code == 2 and f"{flag}: {message}" in err, err


def test_bad_operator_expression(tmp_path, capsys):
    bad = write(tmp_path, "w.yaml", """
        dims: {m: 4, k: 4}
        ops:
          - {name: a, expr: "C[m] += A[m,k] * B[q]"}
        """)
    code, err = run(capsys, "compare", "--arch", "edge", "--workload", bad, "--no-plot")
    assert code == 2
    assert "w.yaml, line 4 (ops[0].expr)" in err and "unknown name 'q'" in err


def test_errors_reach_the_shell_as_exit_status_2_without_traceback(tmp_path):
    bad = write(tmp_path, "arch.yaml", "levels: [")
    proc = subprocess.run([sys.executable, "-m", "tileflow.cli", "compare", "--arch", bad,
                           "--workload", "attention", "--no-plot"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("tileflow: error:") and "Traceback" not in proc.stderr


def test_home_for_a_tensor_that_is_not_an_intermediate(tmp_path, capsys):
    text = DATAFLOW.format(loops="b:8, m:4").replace("name: mine", "name: mine\nhomes: {A: L1}")
    flow = write(tmp_path, "flow.yaml", text)
    code, err = run(capsys, "evaluate", "--arch", "edge", "--workload", "gemm-chain",
                    "--dataflow", flow)
    assert code == 2 and "homes names 'A', which is not an intermediate" in err


@pytest.mark.parametrize("value, message", [
    ("dual", "'ports' must be one of separate, shared, got 'dual'"),
    ("true", "'ports' must be one of separate, shared"),
])
def test_a_levels_ports_must_be_separate_or_shared(tmp_path, capsys, value, message):
    text = Path(EDGE).read_text().replace("capacity_bytes: 4194304",
                                          f"capacity_bytes: 4194304, ports: {value}")
    bad = write(tmp_path, "arch.yaml", text)
    code, err = run(capsys, "evaluate", "--arch", bad, "--workload", "attention",
                    "--dataflow", "layerwise")
    assert code == 2 and message in err and "arch.yaml, line" in err
    assert "Traceback" not in err
