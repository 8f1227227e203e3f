"""The RTL dataset's mappings: hand-derived data movement, and the report regenerates."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from math import ceil

import pytest

from tileflow.cost import evaluate
from tileflow.provenance import MODEL_VERSION
from tileflow.rtl.mappings import chain_mapping, gemm_mapping
from tileflow.rtl.study import DEFAULT_DATA, load_dataset
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload

CHAIN_ARCH = load_arch("rtl-systolic-chain")
GEMM_ARCH = load_arch("rtl-systolic-gemm")
HAVE_DATA = (DEFAULT_DATA / "gemm_chain_131.csv").exists()


def chain(M, L, K, N, tile_M, tile_K, tile_L):
    w = load_workload("gemm-chain", {"b": 1, "m": M, "l": L, "k": K, "n": N})
    return evaluate(w, CHAIN_ARCH, chain_mapping(M, L, K, N, tile_M, tile_K, tile_L))


@pytest.mark.parametrize("row", [
    (512, 512, 64, 64, 16, 16, 16),
    (256, 256, 80, 80, 64, 16, 128),
    (1024, 512, 48, 48, 32, 16, 256),
    (768, 384, 48, 48, 16, 16, 96),
])
def test_fused_dram_traffic_by_hand(row):
    """A once; B and D once per row block of M; E written once; C never leaves the chip."""
    M, L, K, N, tM, tK, tL = row
    r = chain(*row)
    blocks = ceil(M / tM)
    assert r.level_reads("DRAM") == M * K + K * L * blocks + L * N * blocks
    assert r.level_writes("DRAM") == M * N
    assert "C" not in r.traffic["DRAM"]
    # C's row block stays in the buffer between the two GEMMs
    assert r.valid


def test_gemm_programs_reload_operands_every_dram_step():
    """no_reuse: A and B tiles come in at every DRAM step, even when K/tile_K = 1."""
    M, N, K, tM, tN, tK = 128, 64, 32, 32, 64, 32
    w = load_workload("gemm", {"m": M, "n": N, "k": K})
    r = evaluate(w, GEMM_ARCH, gemm_mapping(M, N, K, tM, tN, tK))
    steps = ceil(M / tM) * ceil(N / tN) * ceil(K / tK)
    assert r.traffic["DRAM"]["A"].read == steps * tM * tK
    assert r.traffic["DRAM"]["B"].read == steps * tK * tN
    assert r.traffic["DRAM"]["C"].update == M * N


@pytest.mark.parametrize("row", [
    (256, 256, 64, 64, 32, 32, 64),
    (512, 256, 48, 48, 16, 16, 128),
])
def test_partial_sums_are_read_from_the_buffer_at_every_pass(row):
    """The reduction over K (GEMM1) and L (GEMM2) runs along the PE rows in passes of 16: each
    pass reads the partial sum from the buffer, the first (zeros) included, and writes it
    back: C is read M L K/16 times as a partial sum and M L times whole by GEMM2 (its stationary
    operand), E M N L/16 times; both are written back once per pass. B and D stream once per
    16-row block of M."""
    M, L, K, N, tM, tK, tL = row
    buffer = chain(*row).traffic["Buffer"]
    assert buffer["C"].read == M * L * K // 16 + M * L
    assert buffer["E"].read == M * N * L // 16
    assert buffer["C"].update == M * L * K // 16
    assert buffer["E"].update == M * N * L // 16
    assert buffer["B"].read == K * L * M // 16 and buffer["D"].read == L * N * M // 16


@pytest.mark.skipif(not HAVE_DATA, reason="../shared/datasets/rtl-systolic is not here")
def test_model_matches_measured_dram_traffic_on_sample_rows():
    fused = load_dataset()["fused"].iloc[::17]
    for r in fused.itertuples():
        res = chain(r.M, r.L, r.K, r.N, r.tile_M, r.tile_K, r.tile_L)
        assert res.level_reads("DRAM") * 16 == r.dram_to_buffer_bits
        assert res.level_writes("DRAM") * 16 == r.buffer_to_dram_bits


@pytest.mark.skipif(not HAVE_DATA, reason="../shared/datasets/rtl-systolic is not here")
def test_report_regenerates_from_the_dataset(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tileflow.cli", "validate", "rtl", "--out",
                           str(tmp_path), "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert summary["model_version"] == MODEL_VERSION
    for name in ("report.md", "cycles.png", "error-distribution.png", "error-vs-tiling.png",
                 "transfers.png"):
        assert (tmp_path / name).exists()
    assert summary["fused_dram_exact_rows"] == 131
    assert summary["fused_mape"] < 0.03 and summary["fused_r2"] >= 0.99  # the targets
    # every parameter that ended at one of its declared bounds is reported, and only those
    from tileflow.rtl.study import DECLARED

    for kind in ("gemm", "fused"):
        expected = set()
        for half, values in enumerate(summary[f"{kind}_calibrated_dram_parameters"], 1):
            for p in DECLARED.parameters:
                v = values[p.name]
                scale = (lambda x: math.log(x)) if p.log_scale else (lambda x: x)
                span = scale(p.upper) - scale(p.lower)
                for side, bound in (("lower", p.lower), ("upper", p.upper)):
                    if abs(scale(v) - scale(bound)) <= 1e-3 * span:
                        expected.add(f"{p.name} ({side}, half {half})")
        assert set(summary[f"{kind}_bound_hits"]) == expected
    for kind in ("gemm", "fused"):
        assert summary[f"{kind}_top1_regret_max"] >= summary[f"{kind}_top1_regret_mean"] >= 0
        assert -1 <= summary[f"{kind}_spearman_within_shape_mean"] <= 1
        before = summary[f"{kind}_before"]  # the model without first_touch_fills
        assert set(before) == {"mape", "r2", "spearman_within_shape_mean", "top1_regret_mean",
                               "top1_regret_max"}
    # partial sums read at every pass add buffer reads only: DRAM traffic stays exact, and
    # the buffer reads come closer to the measured ones
    assert summary["fused_dram_exact_rows_before"] == 131
    assert summary["fused_buffer_to_reg_mape"] < summary["fused_buffer_to_reg_mape_before"]
    # what remains of the buffer-register words is exactly the two program properties the
    # report names (A refetched per DRAM step of L, C through the registers once more)
    remainder = summary["fused_buffer_register_remainder"]
    assert remainder["reads_exact"] and remainder["updates_exact"]


def test_missing_dataset_says_where_to_put_it(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tileflow.cli", "validate", "rtl", "--data",
                           str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "gemm_1152.csv" in proc.stderr and "gemm_chain_131.csv" in proc.stderr
    assert "--data" in proc.stderr


def test_a_row_the_model_cannot_enumerate_names_its_file_and_row(monkeypatch):
    """A dataset row whose sums would enumerate more than the model takes at once is an
    input error that names the file and the row, not a traceback."""
    import numpy as np
    import pandas as pd

    from tileflow.errors import InputError
    from tileflow.evaluator.lattice import GridTooLarge
    from tileflow.rtl import study

    def refuse(*_args, **_kwargs):
        raise GridTooLarge(np.array([5_000_000]))

    frame = pd.DataFrame({"M": [64, 64], "N": [64, 64], "K": [64, 64], "tile_M": [16, 16],
                          "tile_N": [16, 16], "tile_K": [16, 16], "rtl_cycles": [1, 1]})
    assert len(study.analyse("gemm", frame.iloc[:1], load_arch("rtl-systolic-gemm"))) == 1
    monkeypatch.setattr(study, "traced", refuse)
    with pytest.raises(InputError, match=r"gemm_1152.csv, data row 1: .* 5,000,000 "):
        study.analyse("gemm", frame, load_arch("rtl-systolic-gemm"))
