"""Contractions on tensor cores (TF32 WMMA m16n16k8) where an operator's SM-level tile fits
them: which trees use them, the code compiles with nvcc for sm_90, and (emulated on the
CPU, a warp's fragment operations done by its first lane) the results equal NumPy's with
the inputs of each contraction rounded to TF32."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tileflow.calibrate.gpu_results import MAX_REL_ERR, TF32_REL_ERR, tolerance
from tileflow.kernels.cuda_emulate import run_emulated
from tileflow.kernels.cuda_mma import mma_instructions
from tileflow.kernels.cuda_source import CudaGenerator, generate_cuda
from tileflow.kernels.gpu_trees import random_valid_gpu_trees
from tileflow.kernels.nest import analyse
from tileflow.kernels.reference import random_inputs, run_reference
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow

FITS = {"b": 2, "m": 32, "l": 32, "k": 16, "n": 16}


def tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 values to TF32 (10-bit mantissa), nearest, ties away from zero."""
    u = np.asarray(x, np.float32).view(np.uint32)
    return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def block_share(flow: Dataflow, w) -> dict[str, int]:
    """Per dim, the extent one thread block's operator tiles cover in a `random_gpu_tree`
    (the size over the root's loops on that dim)."""
    share = dict(w.sizes)
    for lp in flow.root.loops:
        share[lp.dim] //= lp.factor
    return share


def expected_mma(flow: Dataflow, w) -> set[str]:
    """The contractions whose SM tile fits (docs): one batch index, a multiple of 16 in
    each output dim, of 8 in the reduction (the ops' other dims are whole in the tile)."""
    share = block_share(flow, w)
    fits = (share["b"] == 1 and share["m"] % 16 == 0 and share["l"] % 16 == 0
            and share["n"] % 16 == 0 and share["k"] % 8 == 0)
    return {o.name for o in w.ops if o.unit == "matrix"} if fits else set()


def trees(workload: str, sizes=FITS, count: int = 6):
    w = load_workload(workload, sizes)
    arch = load_arch("gpu-h100")
    return w, arch, random_valid_gpu_trees(w, arch, count, seed=1, min_blocks=2)


@pytest.mark.parametrize("workload", ["gemm-chain", "attention"])
def test_trees_that_fit_use_tensor_cores_and_the_others_do_not(workload):
    w, arch, flows = trees(workload)
    used = 0
    for flow in flows:
        gen = CudaGenerator(analyse(w, arch, flow), "tf")
        source = gen.build()
        assert set(gen.mma_ops) == expected_mma(flow, w), flow.name
        assert ("mma_sync" in source.text) == bool(gen.mma_ops)
        assert source.precision == ("tf32" if gen.mma_ops else "fp32")
        used += bool(gen.mma_ops)
        scalar = generate_cuda(analyse(w, arch, flow), tensor_cores=False)
        assert "mma_sync" not in scalar.text and scalar.precision == "fp32"
    assert 0 < used < len(flows)  # both kinds among the trees


def test_a_share_not_a_multiple_of_16_stays_scalar():
    """m = 24: no block share of rows is a multiple of 16."""
    w, arch, flows = trees("gemm-chain", {"b": 2, "m": 24, "l": 32, "k": 16, "n": 16})
    for flow in flows:
        gen = CudaGenerator(analyse(w, arch, flow), "tf")
        assert "mma_sync" not in gen.build().text and not gen.mma_ops


def test_gemm_chain_on_tensor_cores_equals_numpy_with_tf32_inputs():
    w, arch, flows = trees("gemm-chain")
    x = random_inputs(w, 7)
    # C = A B, E = C D, every operand of each contraction rounded to TF32 first
    c = np.einsum("bmk,bkl->bml", tf32(x["A"]).astype(np.float64), tf32(x["B"]))
    e = np.einsum("bml,bln->bmn", tf32(c.astype(np.float32)).astype(np.float64),
                  tf32(x["D"]))
    checked = 0
    for flow in flows:
        source = generate_cuda(analyse(w, arch, flow))
        if not source.mma_ops:
            continue
        out = run_emulated(source, w.shapes, x)
        assert np.abs(out["E"] - e).max() <= 1e-5 * np.abs(e).max(), flow.name
        checked += 1
    assert checked


def test_attention_on_tensor_cores_within_the_tf32_tolerance():
    w, arch, flows = trees("attention")
    x = random_inputs(w, 7)
    ref = run_reference(w, x)
    checked = 0
    for flow in flows:
        source = generate_cuda(analyse(w, arch, flow))
        if not source.mma_ops:
            continue
        out = run_emulated(source, w.shapes, x)
        err = np.abs(out["O"] - ref["O"]).max() / np.abs(ref["O"]).max()
        assert err <= TF32_REL_ERR, flow.name
        checked += 1
    assert checked


def test_mma_instructions_count_16x16x8_blocks():
    w = load_workload("gemm-chain", FITS)
    gemm1 = w.op_by_name["gemm1"]  # b x m x l x k = 2 x 32 x 32 x 16
    assert mma_instructions(gemm1, w.sizes) == 2 * 2 * 2 * 2


def test_tolerance_by_precision():
    frame = pd.DataFrame({"precision": ["tf32", "fp32"]})
    assert list(tolerance(frame)) == [TF32_REL_ERR, MAX_REL_ERR]
    assert list(tolerance(pd.DataFrame({"x": [1]}))) == [MAX_REL_ERR]  # older campaigns


def test_half_the_campaign_trees_put_their_contractions_on_tensor_cores():
    w = load_workload("attention", {"b": 8, "m": 512, "l": 512, "k": 64, "n": 64})
    arch = load_arch("gpu-h100")
    flows = random_valid_gpu_trees(w, arch, 24, seed=0, min_blocks=32)
    share = np.mean([len(expected_mma(f, w)) / 2 for f in flows])
    assert 1 / 4 <= share <= 3 / 4
    for flow in flows[:6]:
        gen = CudaGenerator(analyse(w, arch, flow), "tf")
        gen.build()
        assert set(gen.mma_ops) == expected_mma(flow, w), flow.name


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_tensor_core_source_compiles_for_sm_90(tmp_path):
    for workload in ("gemm-chain", "attention"):
        w, arch, flows = trees(workload)
        flow = next(f for f in flows if expected_mma(f, w))
        source = generate_cuda(analyse(w, arch, flow))
        assert source.text.count("mma_sync(") == 2  # both contractions
        path = tmp_path / f"{workload}.cu"
        path.write_text(source.text)
        done = subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-c", str(path), "-o",
                               str(tmp_path / f"{workload}.o")], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]


def test_campaign_rows_say_which_kernels_use_tensor_cores_and_the_harness_checks_them(
        tmp_path):
    """A prepared campaign on a shape that fits: `mma_ops` and `precision` per row; its
    program built for the CPU runs every dataflow within its precision's tolerance."""
    from tileflow.calibrate.gpu_campaign import GpuCampaign, prepare_campaign
    from tileflow.kernels.cuda_harness import build_emulated

    folder = tmp_path / "prepared"
    prepare_campaign(GpuCampaign(shapes={"gemm-chain": [FITS]}, points=6, min_blocks=2,
                                 profile=0), folder, build_binaries=False,
                     progress=lambda m: None)
    campaign = pd.read_csv(folder / "campaign.csv")
    w = load_workload("gemm-chain", FITS)
    for row in campaign.itertuples():
        flow = parse_tree(row.tree)
        expected = expected_mma(flow, w) if row.kind == "random" else None
        if expected is not None:
            assert row.mma_ops == len(expected), row.dataflow
        assert row.precision == ("tf32" if row.mma_ops else "fp32")
    assert (campaign.mma_ops > 0).any() and (campaign.mma_ops == 0).any()
    binary = build_emulated((folder / "gemm-chain_0.cu").read_text(), tmp_path / "build")
    shutil.copy(binary, folder / "gemm-chain_0")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "OUT": str(tmp_path / "results"),
           "OMP_WAIT_POLICY": "passive"}
    done = subprocess.run(["bash", str(folder / "run.sh")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    timings = pd.read_csv(tmp_path / "results" / "timings.csv").merge(campaign, on="id")
    assert (timings.status == "ok").all()
    assert (timings.max_rel_err <= tolerance(timings)).all()
    assert (timings[timings.precision == "fp32"].max_rel_err < 1e-5).all()


def parse_tree(text: str) -> Dataflow:
    import json

    from tileflow.specs.dataflow import parse_dataflow
    from tileflow.specs.yamlfile import Field

    return parse_dataflow(Field(json.loads(text), "campaign.csv"))


def test_latency_counts_put_tensor_core_contractions_in_their_own_term():
    from tileflow.calibrate.gpu_latency import kernel_features
    from tileflow.kernels.gpu_trees import blocks_of

    w, arch, flows = trees("gemm-chain")
    flow = next(f for f in flows if expected_mma(f, w))
    nest = analyse(w, arch, flow)
    mma = kernel_features(nest)
    scalar = kernel_features(nest, tensor_cores=False)
    # gemm1 2x32x32x16 and gemm2 2x32x16x32 words: 16 + 16 steps of 16x16x8, over the blocks
    assert mma["mma_per_sm"] == pytest.approx((16 + 16) / min(blocks_of(flow), 132))
    assert scalar["mma_per_sm"] == 0
    # only the two contractions had scalar statements: none are left
    assert mma["serial_steps"] == 0 and mma["warp_steps_per_sm"] == 0
    assert scalar["serial_steps"] > 0


TRANSPOSED = """name: gemm-chain-t
dims: {b: 2, m: 32, l: 32, k: 16, n: 16}
ops:
  - {name: gemm1, expr: "C[b,m,l] += A[b,k,m] * B[b,l,k]"}
  - {name: gemm2, expr: "E[b,n,m] += C[b,m,l] * D[b,n,l]"}
"""


def test_column_major_operands_and_output(tmp_path):
    """A and B stored with their rows' dim last (col_major fragments), E with m last
    (mem_col_major): the same results as NumPy with TF32 operands."""
    path = tmp_path / "gemm-chain-t.yaml"
    path.write_text(TRANSPOSED)
    w = load_workload(str(path))
    arch = load_arch("gpu-h100")
    x = random_inputs(w, 5)
    c = np.einsum("bkm,blk->bml", tf32(x["A"]).astype(np.float64), tf32(x["B"]))
    e = np.einsum("bml,bnl->bnm", tf32(c.astype(np.float32)).astype(np.float64),
                  tf32(x["D"]))
    checked = 0
    for flow in random_valid_gpu_trees(w, arch, 6, seed=1, min_blocks=2):
        source = generate_cuda(analyse(w, arch, flow))
        if not source.mma_ops:
            continue
        assert "col_major" in source.text and "mem_col_major" in source.text
        out = run_emulated(source, w.shapes, x)
        assert np.abs(out["E"] - e).max() <= 1e-5 * np.abs(e).max(), flow.name
        if not checked and shutil.which("nvcc"):
            (tmp_path / "t.cu").write_text(source.text)
            done = subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-c", str(tmp_path / "t.cu"),
                                   "-o", str(tmp_path / "t.o")], capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-2000:]
        checked += 1
    assert checked


def test_rows_of_a_campaign_before_tensor_cores_are_read_as_scalar_kernels():
    import json

    from tileflow.calibrate.gpu_latency import features_of
    from tileflow.tree import to_dict

    w, arch, flows = trees("gemm-chain")
    flow = next(f for f in flows if expected_mma(f, w))
    rows = pd.DataFrame({"workload": ["gemm-chain"], "tree": [json.dumps(to_dict(flow))],
                         "shape": [" ".join(f"{d}={v}" for d, v in FITS.items())]})
    assert features_of(rows, arch)["mma_per_sm"][0] == 0  # no mma_ops column
    rows["mma_ops"] = 2
    assert features_of(rows, arch)["mma_per_sm"][0] > 0
