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
    chart = tmp_path / "compare-attention-edge.png"
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


TINY = {
    "arch.yaml": """
name: tiny
levels:
  - {name: DRAM, read_words_per_cycle: 8, write_words_per_cycle: 8, energy_pj_per_word: 200}
  - {name: L1, capacity_words: 64, fanout: 2, read_words_per_cycle: 32,
     write_words_per_cycle: 32, energy_pj_per_word: 1}
  - {name: Reg, capacity_words: 64, fanout: 1, read_words_per_cycle: 1000,
     write_words_per_cycle: 1000, energy_pj_per_word: 0.1}
compute:
  matrix: {rows: 1, cols: 1, level: Reg}
""",
    "wl.yaml": """
name: conv1d
dims: {p: 8, r: 3}
ops:
  - {name: conv, expr: "O[p] += I[p+r] * W[r]"}
""",
    "df.yaml": """
name: repro
root: {level: DRAM, loops: [p:4, p:2:Sp], children: [{level: L1, loops: [r:3],
       children: [{level: Reg, children: [{op: conv}]}]}]}
""",
}


def test_evaluate_json_gives_the_hand_derived_counts(tmp_path):
    """p:4 x p:2:Sp at DRAM over O[p] += I[p+r] * W[r] (p 8, r 3), all of r per L1
    instance. DRAM: I read 4 + 3 x 3 = 13 (an element leaving one instance's window for the
    other's is read again), W 3 (multicast), O updated 8; 24 words at 200 pJ. L1: each
    instance filled with 9 of I and 3 of W; the one-word register under it takes I[p+r] and
    W[r] for each r: W anew at every MAC (3 x 4 per instance), I too except where the next
    p step starts on the element the last r ended on (3 + 3 x 2 per instance). 24 MACs."""
    for name, text in TINY.items():
        (tmp_path / name).write_text(text)
    proc = tileflow("evaluate", "--arch", str(tmp_path / "arch.yaml"), "--workload",
                    str(tmp_path / "wl.yaml"), "--dataflow", str(tmp_path / "df.yaml"), "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["valid"] is True and r["violations"] == []
    dram = r["levels"]["DRAM"]
    assert dram["per_tensor"]["I"]["reads"] == 13 and dram["per_tensor"]["W"]["reads"] == 3
    assert dram["per_tensor"]["O"]["writes"] == dram["per_tensor"]["O"]["updates"] == 8
    assert (dram["reads"], dram["writes"]) == (16, 8)
    assert dram["energy_pj"] == (13 + 3 + 8) * 200
    l1 = r["levels"]["L1"]["per_tensor"]
    assert l1["I"]["fills"] == 18 and l1["W"]["fills"] == 6
    assert l1["I"]["reads"] == 2 * (3 + 3 * 2) and l1["W"]["reads"] == 2 * 3 * 4
    assert r["macs"] == 24 and r["ops"] == {"conv": 24}
    assert r["dram_words"] == 24
    assert set(r["bottleneck"]) == {"kind", "level", "unit", "node", "message"}


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
    proc = tileflow("bench", "--arch", "edge", "--workload", "attention", "--seconds", "0.2",
                    "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["dataflow"] for r in rows} == {"flat-rgran", "tileflow-pipe"}
    for r in rows:  # a rate from at least 5 timed evaluations, consistent with the median
        assert r["runs"] >= 5
        assert r["evals_per_second"] * r["median_us"] == pytest.approx(1e6)


def test_preset_of_another_workload():
    proc = tileflow("evaluate", "--arch", "edge", "--workload", "gemm-chain", "--preset", "G3",
                    "--dataflow", "chimera", "--json")
    assert proc.returncode == 0, proc.stderr
    b, m, n, k, l_ = 16, 512, 64, 64, 512  # G3
    assert json.loads(proc.stdout)["macs"] == b * m * l_ * k + b * m * l_ * n
    bad = tileflow("evaluate", "--arch", "edge", "--workload", "mlp", "--preset", "G3",
                   "--dataflow", "layerwise")
    assert bad.returncode == 2 and "unknown preset 'G3'" in bad.stderr
