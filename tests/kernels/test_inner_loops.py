"""Each operator's innermost C loop and the loop the compiler vectorised around it: SIMD,
scalar or chained work and loop starts, against counts derived by hand."""

from __future__ import annotations

import pytest

from tileflow.kernels.c_source import generate_c
from tileflow.kernels.inner_loops import features, inner_loops, kernel_features
from tileflow.kernels.nest import analyse
from tileflow.kernels.trees import single_core
from tileflow.kernels.vectorised import op_loops, simd_loops
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, tile

ARCH = single_core(load_arch("cpu"))
W = load_workload("gemm-chain", {"b": 1, "m": 16, "l": 16, "k": 8, "n": 8})
OPS = 16 * 16 * 8  # MACs of each GEMM


def flow(gemm1: str, gemm2: str) -> Dataflow:
    return Dataflow(tile("DRAM", "m:16", tile("L1", "", tile("L1", gemm1, "gemm1"),
                                              tile("L1", gemm2, "gemm2"))))


def test_innermost_loops_and_their_starts():
    loops = {x.op: x for x in inner_loops(analyse(W, ARCH, flow("k:8 l:16", "n:8 l:16")), {})}
    assert (loops["gemm1"].dim, loops["gemm1"].trip, loops["gemm1"].reduction) == ("l", 16, False)
    assert (loops["gemm2"].dim, loops["gemm2"].trip, loops["gemm2"].reduction) == ("l", 16, True)
    f = features(analyse(W, ARCH, flow("k:8 l:16", "n:8 l:16")), {})
    # nothing vectorised: gemm1's independent iterations are scalar, gemm2's add chain
    assert f == {"simd_work": 0, "scalar_work": OPS, "chain_work": OPS,
                 "loop_starts": OPS / 16 + OPS / 16}


@pytest.mark.parametrize("trip, words, simd", [(16, 6, 12 / 16), (16, 16, 1.0), (8, 16, 0.0)])
def test_iterations_past_the_last_whole_vector_are_scalar_or_chained(trip, words, simd):
    f = features(analyse(W, ARCH, flow("k:8 l:16", "n:8 l:16")),
                 {"gemm1": (trip, words), "gemm2": (trip, words)})
    assert f["simd_work"] == pytest.approx(2 * OPS * simd)
    assert f["scalar_work"] == pytest.approx(OPS * (1 - simd))  # gemm1
    assert f["chain_work"] == pytest.approx(OPS * (1 - simd))  # gemm2 reduces over l


def test_the_loops_around_each_statement_are_read_from_the_source():
    source = generate_c(analyse(W, ARCH, flow("k:8 l:16", "n:8 l:16")), threads=False).text
    around = op_loops(source)
    assert [(d, f) for _, d, f in around["gemm1"].loops] == [("m", 16), ("k", 8), ("l", 16)]
    assert [(d, f) for _, d, f in around["gemm2"].loops] == [("m", 16), ("n", 8), ("l", 16)]
    lines = source.splitlines()
    for _, (line, dim, factor) in ((o, lp) for o, a in around.items() for lp in a.loops):
        assert f"/* {dim}:{factor}" in lines[line - 1]


def test_the_compiler_vectorises_a_loop_around_unit_stride_operands():
    # gemm1 over k inside l: C[b,m,l] and B[b,k,l] have l as their last axis, A is the same
    # for every l: the compiler vectorises a loop around the statement (the l loop, whose
    # k-chains become independent lanes, or the k loop)
    nest = analyse(W, ARCH, flow("l:16 k:8", "n:8 l:16"))
    simd = simd_loops(generate_c(nest, threads=False).text)
    assert "gemm1" in simd
    trip, words = simd["gemm1"]
    assert trip in (8, 16) and words in (4, 8, 16)
    f = kernel_features(nest)
    assert f["simd_work"] + f["scalar_work"] + f["chain_work"] == pytest.approx(2 * OPS)
    assert f["simd_work"] >= OPS * (trip // words * words) / trip
