"""`validate rtl --overlap` (study.run(overlap=...)): every row is predicted under the
convention asked for, checked row by row against evaluate() on a three-row dataset."""

from __future__ import annotations

from tileflow.cost import evaluate
from tileflow.rtl import study
from tileflow.rtl.mappings import chain_mapping, gemm_mapping
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload

GEMM_ROWS = [(64, 64, 32, 32, 32, 16), (64, 32, 64, 64, 32, 32), (32, 64, 64, 32, 64, 64)]
CHAIN_ROWS = [(64, 64, 32, 32, 16, 16, 32), (64, 64, 32, 32, 32, 32, 64),
              (128, 64, 32, 32, 64, 32, 16)]


def _dataset(folder):
    lines = ["M,N,K,tile_M,tile_N,tile_K,rtl_cycles"]
    lines += [",".join(map(str, r)) + ",10000" for r in GEMM_ROWS]
    (folder / "gemm_1152.csv").write_text("\n".join(lines) + "\n")
    head = ("M,L,K,N,tile_M,tile_K,tile_L,rtl_cycles,dram_to_buffer_bits,"
            "buffer_to_dram_bits,buffer_to_reg_bits,reg_to_buffer_bits")
    lines = [head] + [",".join(map(str, r)) + ",10000,1,1,1,1" for r in CHAIN_ROWS]
    (folder / "gemm_chain_131.csv").write_text("\n".join(lines) + "\n")


def test_the_overlap_asked_for_is_the_one_predicted(tmp_path):
    _dataset(tmp_path)
    seen = {}
    for overlap in ("perfect", "fill-drain", "lockstep"):
        results = study.run(tmp_path, overlap=overlap)
        seen[overlap] = list(results["gemm"].frame.predicted)
        arch = load_arch("rtl-systolic-gemm")
        for r, predicted in zip(GEMM_ROWS, results["gemm"].frame.predicted, strict=True):
            w = load_workload("gemm", {"m": r[0], "n": r[1], "k": r[2]})
            assert predicted == evaluate(w, arch, gemm_mapping(*r), overlap=overlap).cycles
        arch = load_arch("rtl-systolic-chain")
        for r, predicted in zip(CHAIN_ROWS, results["fused"].frame.predicted, strict=True):
            m, l_, k, n = r[:4]
            w = load_workload("gemm-chain", {"b": 1, "m": m, "l": l_, "k": k, "n": n})
            flow = chain_mapping(*r)
            assert predicted == evaluate(w, arch, flow, overlap=overlap).cycles
        for other in {"perfect", "fill-drain", "lockstep"} - {overlap}:
            assert f"predicted_{other.replace('-', '_')}" in results["gemm"].frame
    assert seen["perfect"] != seen["fill-drain"]  # the two conventions do differ here
