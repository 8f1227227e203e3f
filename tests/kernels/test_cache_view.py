"""The cache view: the same model on the tree a cache hierarchy realises. It keeps what fits
(one candidate tile per loop), never charges more than the tree where nothing more fits,
and adds one allocation of every on-chip buffer."""

from __future__ import annotations

import pytest

from tileflow.cost import evaluate
from tileflow.kernels.boundary import inbound_words
from tileflow.kernels.cache_view import buffer_words, cache_tree, cache_view_words, split_loops
from tileflow.kernels.trees import single_core
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, Op, tile, walk

CPU = single_core(load_arch("cpu"))


def workload(tmp_path, text: str):
    spec = tmp_path / "w.yaml"
    spec.write_text(text)
    return load_workload(str(spec))


def gemm(tmp_path):
    return workload(tmp_path, "name: gemm\ndims: {m: 64, k: 32, n: 48}\n"
                              "ops:\n  - {name: mm, expr: \"C[m,n] += A[m,k] * B[k,n]\"}\n")


GEMM_FLOW = Dataflow(tile("DRAM", "m:64 n:3", tile("L1", "k:32", tile("Reg", "n:16:SpY", "mm"))))


def test_split_gives_one_tile_per_loop_in_order():
    split = split_loops(GEMM_FLOW.root, "Reg")
    chain = [(n.level, [str(lp) for lp in n.loops]) for _, n in walk(split)
             if not isinstance(n, Op)]
    assert chain == [("DRAM", ["m:64"]), ("DRAM", ["n:3"]), ("L1", ["k:32"]),
                     ("Reg", ["n:16:SpY"])]


def test_a_problem_that_fits_lands_whole_in_the_cache(tmp_path):
    w = gemm(tmp_path)
    view = cache_tree(w, CPU, GEMM_FLOW, {"L1": 8192, "L2": 65536})
    levels = [n.level for _, n in walk(view.root) if not isinstance(n, Op)]
    # memory, then every loop's tile at L1 (6,656 words fit in 8,192), registers unchanged
    assert levels == ["DRAM", "L1", "L1", "L1", "Reg"]


def test_where_only_the_trees_tiles_fit_the_cache_view_is_the_tree(tmp_path):
    """L1 of 600 words: the k:32 tile (A 32 + B 512 + C 16 = 560 words) fits, its parent
    (a row of A and C and all of B: 1,616 words) does not; the cache keeps what the tree
    keeps: A once (its row is invariant over n), B 512 words per (m, n), C once."""
    w = gemm(tmp_path)
    model = evaluate(w, CPU, GEMM_FLOW)
    sizes = {t: w.tensor_words(t) for t in w.tensors}
    tree = inbound_words(model, "L1", sizes)
    assert tree == 2048 + 64 * 3 * 512 + 3072
    assert cache_view_words(w, CPU, GEMM_FLOW, model, "L1", {"L1": 600, "L2": 65536}) == tree


@pytest.mark.parametrize("l1", [600, 1700, 4000, 8192])
def test_a_larger_cache_never_brings_more_in(tmp_path, l1):
    w = gemm(tmp_path)
    model = evaluate(w, CPU, GEMM_FLOW)
    sizes = {t: w.tensor_words(t) for t in w.tensors}
    small = cache_view_words(w, CPU, GEMM_FLOW, model, "L1", {"L1": l1, "L2": 65536})
    large = cache_view_words(w, CPU, GEMM_FLOW, model, "L1", {"L1": 2 * l1, "L2": 65536})
    assert 2048 + 1536 + 3072 <= large <= small <= inbound_words(model, "L1", sizes)


def test_an_on_chip_intermediate_costs_one_allocation_of_its_buffer(tmp_path):
    """Y = exp(X), Z = exp(Y) fused per 16 elements: Y lives in a 16-word buffer the kernel
    reuses at every step; a cache allocates its line once. Traffic: X and Z, 32,768 words
    each, plus 16."""
    n = 32768
    w = workload(tmp_path, f"name: s2\ndims: {{i: {n}}}\nops:\n"
                           "  - {name: e, expr: \"Y[i] = exp(X[i])\"}\n"
                           "  - {name: f, expr: \"Z[i] = exp(Y[i])\"}\n")
    flow = Dataflow(tile("DRAM", f"i:{n // 256}", tile("L1", "i:16",
                                                       tile("Reg", "i:16:SpY", "e"),
                                                       tile("Reg", "i:16:SpY", "f"))))
    model = evaluate(w, CPU, flow)
    assert buffer_words(w, CPU, flow) == {"Y": 16}
    for level in ("L1", "L2"):
        assert cache_view_words(w, CPU, flow, model, level,
                                {"L1": 8192, "L2": 65536}) == 2 * n + 16
