"""The command line end to end, through a subprocess, on the shipped files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def tileflow(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tileflow.cli", *args], capture_output=True,
                          text=True, cwd=cwd or REPO)


def test_compare_attention_on_edge_prints_table_and_writes_chart(tmp_path):
    proc = tileflow("compare", "--arch", "edge", "--workload", "attention", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name in ("layerwise", "uni-pipe", "flat-hgran", "flat-rgran", "chimera",
                 "tileflow-pipe"):
        assert name in proc.stdout
    chart = tmp_path / "compare-attention-b_8-m_512-l_512-k_64-n_64-edge.png"
    assert chart.exists() and chart.read_bytes()[:4] == b"\x89PNG"


def test_compare_json_has_one_object_per_baseline(tmp_path):
    proc = tileflow("compare", "--arch", "edge", "--workload", "G4", "--json",
                    "--plot", str(tmp_path / "g4.png"))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["dataflow"] for r in rows][0] == "layerwise"
    b, m, n, k, l_ = 12, 256, 64, 64, 256  # G4
    for r in rows:
        assert r["macs"] == b * m * l_ * k + b * m * l_ * n
        assert r["vector_ops"] == 5 * b * m * l_
        assert set(r) >= {"valid", "violations", "cycles", "energy_pj", "levels", "dataflow"}
    assert (tmp_path / "g4.png").exists()


def test_evaluate_json_levels_add_up():
    proc = tileflow("evaluate", "--arch", "edge", "--workload", "attention", "--dataflow",
                    "flat-rgran", "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["valid"] is True and r["violations"] == []
    assert set(r["levels"]) == {"DRAM", "L1", "Reg"}
    for level in r["levels"].values():
        tensors = level["per_tensor"].values()
        assert level["reads"] == pytest.approx(sum(t["reads"] for t in tensors))
        assert level["writes"] == pytest.approx(
            sum(t["writes"] for t in level["per_tensor"].values()))
    # inputs are read from DRAM at least once, the output written exactly once
    dram = r["levels"]["DRAM"]["per_tensor"]
    assert dram["Q"]["reads"] >= 8 * 512 * 64 and dram["O"]["writes"] == 8 * 512 * 64


def test_evaluate_readable_summary_and_saved_dataflow_round_trip(tmp_path):
    saved = tmp_path / "flow.yaml"
    proc = tileflow("evaluate", "--arch", "cloud", "--workload", "C3", "--dataflow",
                    "fused-layer", "--save-dataflow", str(saved))
    assert proc.returncode == 0, proc.stderr
    assert "bottleneck" in proc.stdout and "cycles" in proc.stdout
    again = tileflow("evaluate", "--arch", "cloud", "--workload", "C3", "--dataflow",
                     str(saved), "--json")
    first = tileflow("evaluate", "--arch", "cloud", "--workload", "C3", "--dataflow",
                     "fused-layer", "--json")
    assert json.loads(again.stdout)["cycles"] == json.loads(first.stdout)["cycles"]


SHIPPED = {  # dataflow file -> the accelerator and workload it was written for
    "attention-": ["--arch", "edge", "--workload", "attention"],
    "gemm-chain-": ["--arch", "edge", "--workload", "gemm-chain"],
    "conv-chain-": ["--arch", "cloud", "--workload", "C3"],
    "rtl-gemm": ["--arch", "rtl-systolic-gemm", "--workload", "gemm", "--set", "m=256",
                 "--set", "n=256", "--set", "k=256"],
    "rtl-chain": ["--arch", "rtl-systolic-chain", "--workload", "gemm-chain", "--set", "b=1",
                  "--set", "m=512", "--set", "l=512", "--set", "k=64", "--set", "n=64"],
}


@pytest.mark.parametrize("path", sorted((REPO / "dataflows").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_shipped_dataflows_evaluate_as_valid(path):
    args = next(v for prefix, v in SHIPPED.items() if path.stem.startswith(prefix))
    proc = tileflow("evaluate", *args, "--dataflow", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["valid"]


def test_help_shows_examples():
    proc = tileflow("--help")
    assert proc.returncode == 0 and "examples:" in proc.stdout and "tileflow compare" in proc.stdout


def test_bench_reports_evaluations_per_second():
    proc = tileflow("bench", "--arch", "edge", "--workload", "attention", "--seconds", "0.1",
                    "--batch-rows", "64", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["dataflow"] for r in rows} == {"flat-rgran", "tileflow-pipe"}
    for r in rows:
        assert r["scalar_evals_per_s"] > 0 and r["batched_evals_per_s"] > 0
        assert r["batched_clipped_evals_per_s"] > 0 and r["batch_rows"] == 64
    bad = tileflow("bench", "--arch", "edge", "--workload", "attention", "--batch-rows", "0")
    assert bad.returncode == 2 and "--batch-rows" in bad.stderr


def test_preset_of_another_workload():
    proc = tileflow("evaluate", "--arch", "edge", "--workload", "gemm-chain", "--preset", "G3",
                    "--dataflow", "chimera", "--json")
    assert proc.returncode == 0, proc.stderr
    b, m, n, k, l_ = 16, 512, 64, 64, 512  # G3
    assert json.loads(proc.stdout)["macs"] == b * m * l_ * k + b * m * l_ * n
    bad = tileflow("evaluate", "--arch", "edge", "--workload", "mlp", "--preset", "G3",
                   "--dataflow", "layerwise")
    assert bad.returncode == 2 and "unknown preset 'G3'" in bad.stderr
