"""Generated C kernels compute the workload (against the NumPy reference) and follow the
tree: loops, factors, order and strides read back from the source."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from tileflow.dataflows import build
from tileflow.dataflows.registry import baselines_for
from tileflow.kernels.c_source import generate_c
from tileflow.kernels.cpu import build_checked
from tileflow.kernels.nest import analyse
from tileflow.kernels.reference import random_inputs, run_reference
from tileflow.kernels.trees import random_valid_trees, single_core
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, Op, Tile, tile

SMALL = {
    "gemm-chain": {"b": 2, "m": 24, "l": 20, "k": 8, "n": 12},
    "attention": {"b": 2, "m": 24, "l": 20, "k": 8, "n": 12},
    "mlp": {"m": 12, "d": 8, "f": 20, "e": 6},
    "conv-chain": {"c0": 3, "c1": 4, "c2": 5, "h": 9, "w": 9, "st1": 2, "k1": 3, "k2": 3},
}
HOST = single_core(load_arch("cpu"))


def _cases():
    for name, sizes in SMALL.items():
        w = load_workload(name, sizes)
        for arch_name in ("edge", "cpu"):
            for flow in baselines_for(w):
                yield pytest.param(name, arch_name, flow, id=f"{name}-{arch_name}-{flow}")


@pytest.mark.parametrize("workload,arch_name,flow", list(_cases()))
def test_baseline_kernel_matches_reference(workload, arch_name, flow):
    w = load_workload(workload, SMALL[workload])
    arch = load_arch(arch_name)
    checked = build_checked(w, arch, build(flow, w, arch), threads=2)
    assert checked.max_error < 1e-5


@pytest.mark.parametrize("workload", ["gemm-chain", "attention", "mlp"])
def test_random_cache_level_trees_match_reference(workload):
    w = load_workload(workload, SMALL[workload])
    flows = random_valid_trees(w, HOST, 6, seed=7)
    assert len(flows) == 6
    for flow in flows:
        levels = {n.level for n in _tiles(flow.root)}
        assert levels & {"L2", "L3"}  # tiles at the cache levels, not only DRAM/L1/Reg
        assert build_checked(w, HOST, flow).max_error < 1e-5


def test_reference_conv_matches_direct_loops():
    """The reference's strided, padded window against a direct loop over the definition."""
    w = load_workload("conv-chain", {"c0": 2, "c1": 3, "c2": 2, "h": 7, "w": 7, "st1": 2,
                                     "k1": 3, "k2": 3})
    x = random_inputs(w, 3)
    ref = run_reference(w, x)
    X, W1 = x["X"].astype(float), x["W1"].astype(float)
    P = w.sizes["p"]
    A = np.zeros((1, 3, P, P))
    for c1 in range(3):
        for p in range(P):
            for q in range(P):
                for c0 in range(2):
                    for r in range(3):
                        for s in range(3):
                            i, j = 2 * p + r - 1, 2 * q + s - 1
                            if 0 <= i < 7 and 0 <= j < 7:
                                A[0, c1, p, q] += X[0, c0, i, j] * W1[c1, c0, r, s]
    assert np.allclose(ref["A"], A)


def test_clipped_factors_are_bounded_not_overrun():
    """Factors that do not divide a dim (7 rows in tiles of 3) clip the last step."""
    w = load_workload("gemm", {"m": 7, "n": 5, "k": 4})
    arch = load_arch("cpu")
    flow = Dataflow(tile("DRAM", "m:3 n:2", tile("L1", "m:3 k:4 n:3", tile("Reg", "", "gemm"))))
    assert build_checked(w, arch, flow).max_error < 1e-6


def _tiles(node):
    if isinstance(node, Tile):
        yield node
        for c in node.children:
            yield from _tiles(c)


def _expected_loops(flow: Dataflow):
    """Depth-first: every loop with factor > 1, with its stride derived independently for an
    exactly tiled tree: the product of the factors of the same dim nested inside it."""
    out = []

    def inside(node, dim):
        if isinstance(node, Op):
            return 1
        own = math.prod(lp.factor for lp in node.loops if lp.dim == dim)
        return own * max(inside(c, dim) for c in node.children)

    def go(node):
        if isinstance(node, Op):
            return
        for i, lp in enumerate(node.loops):
            later = math.prod(x.factor for x in node.loops[i + 1:] if x.dim == lp.dim)
            stride = later * max(inside(c, lp.dim) for c in node.children)
            if lp.factor > 1:
                out.append((str(lp), stride))
        for c in node.children:
            go(c)

    go(flow.root)
    return out


@pytest.mark.parametrize("workload", ["gemm-chain", "attention"])
def test_generated_loops_follow_the_tree(workload):
    w = load_workload(workload, {"b": 2, "m": 32, "l": 24, "k": 8, "n": 16})
    for flow in random_valid_trees(w, HOST, 5, seed=11):
        text = generate_c(analyse(w, HOST, flow)).text
        found = [(m.group(1), int(m.group(2))) for m in
                 re.finditer(r"/\* (\w+:\d+(?::Sp[XY]?)?)(?: parallel)? stride (\d+) \*/", text)]
        assert found == _expected_loops(flow)


def test_spatial_loop_above_cores_is_parallel_and_reduction_is_not():
    w = load_workload("gemm", {"m": 8, "n": 8, "k": 8})
    arch = load_arch("cpu")  # L2 is the first level with several instances: the cores
    flow = Dataflow(tile("DRAM", "", tile("L3", "m:2:Sp k:2:Sp", tile(
        "L2", "m:4 n:8 k:4", tile("L1", "", tile("Reg", "", "gemm"))))))
    text = generate_c(analyse(w, arch, flow)).text
    assert re.search(r"omp parallel for[^\n]*\n[^\n]*/\* m:2:Sp parallel", text)
    assert "k:2:Sp parallel" not in text
    assert build_checked(w, arch, flow, threads=2).max_error < 1e-6


def test_on_chip_intermediate_is_a_local_buffer_of_its_tile_size():
    w = load_workload("gemm-chain", {"b": 1, "m": 16, "l": 8, "k": 4, "n": 4})
    arch = load_arch("cpu")
    flow = Dataflow(tile("DRAM", "m:4", tile("L2", "", tile("L1", "m:4 l:8 k:4",
                                                           tile("Reg", "", "gemm1")),
                                             tile("L1", "m:4 n:4 l:8", tile("Reg", "", "gemm2")),
                                             primitive="Seq")))
    source = generate_c(analyse(w, arch, flow))
    assert "C" not in source.arguments
    assert source.local_words == {"C": 1 * 4 * 8}  # one (b, m) step: 1 x 4 rows x 8 columns
    assert build_checked(w, arch, flow).max_error < 1e-6


def test_rows_of_64_words_are_padded_and_results_unchanged():
    w = load_workload("gemm-chain", {"b": 1, "m": 8, "l": 64, "k": 16, "n": 64})
    flows = random_valid_trees(w, HOST, 2, seed=3)
    for flow in flows:
        checked = build_checked(w, HOST, flow)
        assert checked.source.layouts["B"] == (1, 16, 64 + 16)  # rows of 64 get one line
        assert checked.source.layouts["A"] == (1, 8, 16)
        assert checked.max_error < 1e-5


def _for_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith("for (int i")]


def test_register_tile_holds_the_lanes_in_an_accumulator_over_the_reduction():
    """gemm m x n x k = 8 x 32 x 16, tree m:8 / k:16 / n:32 lanes: the 32 outputs of a row
    stay in a 32-word accumulator across the 16 steps of k; every trip is a constant; the
    lane loop (32 >= half the host's 16-word vector) is an `omp simd` loop."""
    w = load_workload("gemm", {"m": 8, "n": 32, "k": 16})
    flow = Dataflow(tile("DRAM", "m:8", tile("L1", "k:16", tile("Reg", "n:32:SpY", "gemm"))))
    text = generate_c(analyse(w, HOST, flow), threads=False).text
    assert re.search(r"float acc\d+\[32\]", text)
    loops = _for_lines(text)
    assert [re.search(r"< (\w+);", ln).group(1) for ln in loops] == ["8", "16", "32"]
    assert re.search(r"#pragma omp simd\n\s*for \(int \w+ = 0; \w+ < 32;", text)
    assert re.search(r"acc\d+\[\w+\] \+= ", text)
    assert build_checked(w, HOST, flow).max_error < 1e-6


def test_register_tile_of_rows_and_lanes_is_unrolled_and_laid_out_like_the_output():
    """m:4 rows x n:16 lanes inside k: a 64-word accumulator, row-major as C[m, n] (index
    row * 16 + lane), its row loop unrolled whole."""
    w = load_workload("gemm", {"m": 8, "n": 16, "k": 8})
    flow = Dataflow(tile("DRAM", "m:2", tile("L1", "k:8 m:4", tile("Reg", "n:16:SpY",
                                                                   "gemm"))))
    text = generate_c(analyse(w, HOST, flow), threads=False).text
    assert re.search(r"float acc\d+\[64\]", text)
    assert re.search(r"acc\d+\[\(i\d+\) \* 16 \+ i\d+\] \+=", text)
    assert re.search(r"#pragma GCC unroll 4\n\s*for \(int \w+ = 0; \w+ < 4;", text)
    assert build_checked(w, HOST, flow).max_error < 1e-6


def test_clipped_loops_keep_run_time_bounds_and_plain_style_has_no_accumulator():
    w = load_workload("gemm", {"m": 7, "n": 5, "k": 4})
    flow = Dataflow(tile("DRAM", "m:3 n:2", tile("L1", "m:3 k:4 n:3", tile("Reg", "", "gemm"))))
    text = generate_c(analyse(w, HOST, flow), threads=False).text
    bounds = [re.search(r"< (\w+);", ln).group(1) for ln in _for_lines(text)]
    assert bounds[:2] == ["3", "2"]  # the outer steps are whole: 3 x 3 >= 7, 2 x 3 >= 5
    assert all(not b.isdigit() for b in (bounds[2], bounds[4]))  # m:3, n:3 clipped inside
    plain = generate_c(analyse(w, HOST, flow), threads=False, style="plain").text
    assert "acc" not in plain and "omp simd" not in plain
    with pytest.raises(ValueError, match="unknown kernel style"):
        generate_c(analyse(w, HOST, flow), style="fast")


def test_the_compiler_reports_the_lane_loop_vectorised():
    """-fopt-info-vec names the `omp simd` lane loop (32 lanes of n) as vectorised, with
    vectors of at least 8 words (AVX2 or AVX-512 on an x86 host)."""
    from tileflow.kernels.vectorised import simd_loops

    w = load_workload("gemm", {"m": 8, "n": 32, "k": 16})
    flow = Dataflow(tile("DRAM", "m:8", tile("L1", "k:16", tile("Reg", "n:32:SpY", "gemm"))))
    text = generate_c(analyse(w, HOST, flow), threads=False).text
    trip, words = simd_loops(text)["gemm"]
    assert trip == 32 and words >= 4


def test_lanes_over_rows_are_left_to_the_compiler():
    """Lanes over m (rows of C[m, n], 32 words apart) are not forced into vectors: the
    compiler decides; the row loop of the 16-word accumulator is unrolled instead."""
    w = load_workload("gemm", {"m": 8, "n": 2, "k": 16})
    flow = Dataflow(tile("DRAM", "", tile("L1", "k:16", tile("Reg", "n:2:SpX m:8:SpY",
                                                             "gemm"))))
    text = generate_c(analyse(w, HOST, flow), threads=False).text
    assert "omp simd" not in text
    assert re.search(r"#pragma GCC unroll 8\n\s*for \(int \w+ = 0; \w+ < 8;", text)
    assert build_checked(w, HOST, flow).max_error < 1e-6
