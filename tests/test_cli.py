"""The command line end to end, through a subprocess, on the shipped files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tileflow.provenance import MODEL_VERSION

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
        assert r["model_version"] == MODEL_VERSION
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
    assert json.loads(first.stdout)["model_version"] == MODEL_VERSION


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
                    "--batch-rows", "64", "--search-evaluations", "100", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["dataflow"] for r in rows} == {"flat-rgran", "tileflow-pipe"}
    for r in rows:  # a rate from at least 5 timed evaluations, consistent with the median
        assert r["runs"] >= 5
        assert r["evals_per_second"] * r["median_us"] == pytest.approx(1e6)
        assert r["scalar_evals_per_s"] > 0 and r["batched_evals_per_s"] > 0
        assert r["batched_clipped_evals_per_s"] > 0 and r["batch_rows"] == 64
        assert r["model_version"] == MODEL_VERSION
        # the search's rate: its new points (the budget, or fewer where the space runs out)
        # over its wall-clock seconds
        assert 0 < r["search_points"] <= 100
        assert r["search_points_per_s"] * r["search_seconds"] == pytest.approx(
            r["search_points"])
    bad = tileflow("bench", "--arch", "edge", "--workload", "attention", "--batch-rows", "0")
    assert bad.returncode == 2 and "--batch-rows" in bad.stderr
    bad = tileflow("bench", "--arch", "edge", "--workload", "attention",
                   "--search-evaluations", "-1")
    assert bad.returncode == 2 and "--search-evaluations" in bad.stderr


def test_preset_of_another_workload():
    proc = tileflow("evaluate", "--arch", "edge", "--workload", "gemm-chain", "--preset", "G3",
                    "--dataflow", "chimera", "--json")
    assert proc.returncode == 0, proc.stderr
    b, m, n, k, l_ = 16, 512, 64, 64, 512  # G3
    assert json.loads(proc.stdout)["macs"] == b * m * l_ * k + b * m * l_ * n
    bad = tileflow("evaluate", "--arch", "edge", "--workload", "mlp", "--preset", "G3",
                   "--dataflow", "layerwise")
    assert bad.returncode == 2 and "unknown preset 'G3'" in bad.stderr


def assert_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2, one paragraph on stderr, nothing on stdout, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("tileflow: error: ") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    for word in words:
        assert word in proc.stderr, proc.stderr


@pytest.mark.parametrize("flags, words", [
    (["--tile", "z=64"], ["--tile z: the workload has no dimension 'z'", "b, m, l, k, n"]),
    (["--tile", "m=0"], ["--tile m: the value must be from 1"]),
    (["--tile", "m=1024"], ["--tile m=1024: larger than the dimension (512)"]),
    (["--set", "m=" + "1" + "0" * 100], ["--set m", "a number of 101 digits"]),
    (["--set", "m=9223372036854775808"], ["--set m", "2**31"]),
    (["--set", "m=2147483649"], ["--set m", "2**31"]),
    (["--set", "m=1e3"], ["--set expects NAME=INTEGER"]),
    (["--workload", "G3", "--preset", "G1"], ["--workload G3 is itself a preset",
                                             "--workload attention --preset G1"]),
])
def test_bad_flags(flags, words):
    args = {"--arch": "edge", "--workload": "attention", "--dataflow": "chimera"}
    extra = []
    for flag, value in zip(flags[::2], flags[1::2], strict=True):
        if flag in args:
            args[flag] = value
        else:
            extra += [flag, value]
    proc = tileflow("evaluate", *[x for kv in args.items() for x in kv], *extra)
    assert_error(proc, *words)


def test_same_preset_twice_is_fine():
    proc = tileflow("evaluate", "--arch", "edge", "--workload", "G4", "--preset", "G4",
                    "--dataflow", "layerwise", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["macs"] == 2 * 12 * 256 * 256 * 64  # G4's sizes


def test_zero_stride_from_the_command_line():
    proc = tileflow("evaluate", "--arch", "edge", "--workload", "conv-chain", "--set", "st1=0",
                    "--dataflow", "layerwise")
    assert_error(proc, "conv-chain.yaml, line", "division by zero in 'h // st1'", "st1 is 0")


def test_huge_clipped_sizes_are_refused_before_the_work(tmp_path):
    proc = tileflow("evaluate", "--arch", "edge", "--workload", "attention", "--dataflow",
                    "chimera", "--set", "m=2147483647", "--set", "l=2147483647")
    assert_error(proc, "attention.yaml, line", "do not tile it exactly", "at most 8,192")


def test_a_large_exact_size_still_evaluates():
    proc = tileflow("evaluate", "--arch", "edge", "--workload", "attention", "--set",
                    "m=1073741824", "--dataflow", "flat-rgran", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout, parse_constant=_reject)
    assert result["macs"] == 2 * 8 * 2**30 * 512 * 64


def _reject(token: str):
    raise AssertionError(f"non-finite number {token} in --json")


@pytest.mark.parametrize("flag, path, words", [
    ("--plot", "x", ["--plot: cannot write 'x'", ".png or .pdf or .svg"]),
    ("--plot", "/dev/full", ["--plot", "/dev/full"]),
    ("--plot", "missing/c.png", ["--plot: cannot write into 'missing': no such folder"]),
    ("--plot", ".", ["--plot"]),
])
def test_bad_plot_locations_fail_before_the_work(tmp_path, flag, path, words):
    proc = tileflow("compare", "--arch", "edge", "--workload", "G4", flag, path, cwd=tmp_path)
    assert_error(proc, *words)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("path, words", [
    ("flow", ["must end in .yaml or .yml"]),
    ("/dev/full", ["--save-dataflow", "/dev/full"]),
    ("nowhere/flow.yaml", ["no such folder"]),
])
def test_bad_save_dataflow_locations(tmp_path, path, words):
    proc = tileflow("evaluate", "--arch", "edge", "--workload", "G4", "--dataflow", "layerwise",
                    "--save-dataflow", path, cwd=tmp_path)
    assert_error(proc, *words)


def test_reproduce_out_that_is_a_file(tmp_path):
    (tmp_path / "out").write_text("x")
    assert_error(tileflow("reproduce", "--out", str(tmp_path / "out")), "--out", "not a folder")


def test_plot_writes_what_it_reports(tmp_path):
    proc = tileflow("compare", "--arch", "edge", "--workload", "G4", "--plot", "chart.svg",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "chart written to chart.svg" in proc.stdout
    assert os.listdir(tmp_path) == ["chart.svg"]
    assert (tmp_path / "chart.svg").read_text().lstrip().startswith("<?xml")


def test_closed_stdout_exits_quietly():
    proc = subprocess.Popen([sys.executable, "-m", "tileflow.cli", "compare", "--arch", "edge",
                             "--workload", "attention", "--json", "--no-plot"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    proc.stdout.close()  # like `| true`: the reader is gone before the output comes
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""


def test_ctrl_c_exits_130_without_traceback():
    """Ctrl-C while the command runs. Python's `-X importtime` reports each import as it
    completes, on stderr: the interrupt is sent once the benchmark module (imported by the
    command itself) is in, so the command is running however slowly the machine started.
    The child starts with Ctrl-C's default disposition, as from a shell, even where the test
    process inherited it ignored (Python then never raises KeyboardInterrupt)."""
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "tileflow.cli", "bench",
                             "--arch", "edge", "--workload", "attention", "--seconds", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.rstrip().endswith("| tileflow.commands.bench"):
            break
    assert lines and lines[-1].rstrip().endswith("| tileflow.commands.bench"), "".join(lines[-5:])
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    said = [line for line in err.splitlines() if not line.startswith("import time:")]
    assert said == ["tileflow: interrupted"]


def test_interrupted_report_leaves_only_complete_files(tmp_path, monkeypatch):
    """Ctrl-C while the second plot is being written: the CSV and the first plot are
    complete, the second plot and the report are absent, and no temporary file is left."""
    import matplotlib.figure

    from tileflow.commands.experiments import run_studies, write_report

    frame = run_studies([("edge", ["G4"]), ("cloud", ["G4"])], progress=False)
    real_savefig = matplotlib.figure.Figure.savefig
    calls = []

    def savefig(self, handle, **kw):
        calls.append(1)
        if len(calls) == 2:
            handle.write(b"\x89PNG half")
            raise KeyboardInterrupt
        return real_savefig(self, handle, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    with pytest.raises(KeyboardInterrupt):
        write_report(frame, tmp_path, "test")
    files = sorted(os.listdir(tmp_path))
    assert files == ["reference-edge-attention.png", "reference-experiments.csv"]
    assert (tmp_path / "reference-edge-attention.png").read_bytes()[:4] == b"\x89PNG"
    written = pd.read_csv(tmp_path / "reference-experiments.csv", dtype={"model_version": str})
    assert len(written) == len(frame) and (written.model_version == MODEL_VERSION).all()


def test_bench_times_a_dataflow_file(tmp_path):
    """`--dataflow` takes a YAML file, as evaluate's does: its row is named by the path."""
    path = str(REPO / "dataflows" / "attention-chimera.yaml")
    proc = tileflow("bench", "--arch", "edge", "--workload", "attention", "--dataflow", path,
                    "--seconds", "0.05", "--batch-rows", "4", "--search-evaluations", "0",
                    "--json")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    assert row["dataflow"] == path and row["scalar_evals_per_s"] > 0


@pytest.mark.parametrize("seconds", ["nan", "inf", "-1", "0"])
def test_bench_seconds_must_be_sane(seconds):
    assert_error(tileflow("bench", "--arch", "edge", "--workload", "G4", "--seconds", seconds),
                 "--seconds must be a number of seconds")


def test_usage_errors_are_one_paragraph():
    assert_error(tileflow("compare", "--arch", "edge", "--workload", "G4", "--double-buffer"),
                 "unrecognized arguments: --double-buffer", "--help")


def test_explore_names_the_shipped_studies_when_a_config_is_missing(tmp_path):
    proc = tileflow("explore", "no-such-study", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no such exploration config 'no-such-study'" in proc.stderr
    assert "quick" in proc.stderr  # a shipped study, runnable by name from any folder


def test_a_baseline_whose_sums_pass_the_bound_is_refused_cleanly(tmp_path):
    """A window slid over 9,001 clipped steps (X indexed p + r, X as long as Y) on Edge,
    Layerwise: the builder sizes its tiles with the model's checks, whose sums pass the
    search's grid; the command line names the bound the tree passes instead of a
    traceback."""
    from helpers import CLIPPED_WINDOW

    (tmp_path / "wl.yaml").write_text(CLIPPED_WINDOW)
    proc = tileflow("evaluate", "--arch", "edge", "--workload", str(tmp_path / "wl.yaml"),
                    "--set", "p=9001", "--dataflow", "layerwise")
    assert_error(proc, "wl.yaml", "do not tile it exactly", "at most 8,192")
