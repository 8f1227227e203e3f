"""Small single-operator and fused cases whose counts are derived by hand in the test."""

from __future__ import annotations

from itertools import permutations
from math import ceil, prod

import pytest
from helpers import CHAIN as CHAIN_TEXT
from helpers import GEMM, small_arch, workload
from reference_sim import Oracle

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.tree import Dataflow, tile

ARCH = small_arch()


def gemm(M=12, N=10, K=8):
    return workload(GEMM, m=M, n=N, k=K)


def reuse_factor(order: tuple[str, ...], trips: dict[str, int], indexed: set[str]) -> int:
    """Times a tensor is fetched whole: each loop not indexing it that sits outside the
    innermost loop (with more than one trip) that does index it repeats the transfer."""
    moving = [i for i, d in enumerate(order) if d in indexed and trips[d] > 1]
    if not moving:
        return 1
    innermost = max(moving)
    return prod(trips[d] for i, d in enumerate(order) if i < innermost and d not in indexed)


@pytest.mark.parametrize("order", list(permutations("mnk")), ids="".join)
def test_gemm_dram_traffic_for_every_loop_order(order):
    M, N, K, TM, TN, TK = 12, 10, 8, 4, 5, 2
    tiles = {"m": TM, "n": TN, "k": TK}
    trips = {d: ceil(s / tiles[d]) for d, s in {"m": M, "n": N, "k": K}.items()}
    spec = " ".join(f"{d}:{trips[d]}" for d in order)
    flow = Dataflow(tile("DRAM", spec, tile("L1", f"m:{TM} n:{TN} k:{TK}", "mm")))
    dram = evaluate(gemm(M, N, K), ARCH, flow).traffic["DRAM"]
    assert dram["A"].read == M * K * reuse_factor(order, trips, {"m", "k"})
    assert dram["B"].read == K * N * reuse_factor(order, trips, {"k", "n"})
    writes = M * N * reuse_factor(order, trips, {"m", "n"})
    assert dram["C"].update == writes
    assert dram["C"].read == writes - M * N  # no read on an element's first touch


def test_partial_sums_spill_when_the_reduction_is_outermost():
    flow = Dataflow(tile("DRAM", "k:4 m:3", tile("L1", "m:4 n:10 k:2", "mm")))
    c = evaluate(gemm(), ARCH, flow).traffic["DRAM"]["C"]
    assert c.update == 12 * 10 * 4 and c.read == 12 * 10 * 3
    l1 = evaluate(gemm(), ARCH, flow).traffic["L1"]["C"]
    assert l1.fill == 12 * 10 * 3  # partial sums brought back for accumulation


def test_spatial_multicast_reads_once_and_fills_every_instance():
    """n split over the two cores: both need all of A (multicast), each its half of B."""
    flow = Dataflow(tile("DRAM", "n:2:Sp", tile("L1", "m:12 n:5 k:8", "mm")))
    r = evaluate(gemm(), ARCH, flow)
    assert r.traffic["DRAM"]["A"].read == 12 * 8
    assert r.traffic["L1"]["A"].fill == 2 * 12 * 8
    assert r.traffic["DRAM"]["B"].read == 8 * 10
    assert r.traffic["L1"]["B"].fill == 8 * 10
    assert r.traffic["DRAM"]["C"].update == 12 * 10


def test_spatial_reduction_updates_the_parent_once_per_element():
    """k split over the two cores: each holds partial sums of all of C, reduced on the way."""
    flow = Dataflow(tile("DRAM", "k:2:Sp", tile("L1", "m:12 n:10 k:4", "mm")))
    r = evaluate(gemm(), ARCH, flow)
    assert r.traffic["DRAM"]["C"].update == 12 * 10
    assert r.traffic["DRAM"]["C"].read == 0
    assert r.traffic["L1"]["C"].fill == 0


def test_compute_reads_operands_once_per_operation_and_skips_first_accumulator_read():
    flow = Dataflow(tile("DRAM", "", tile("L1", "m:12 n:10", tile("Reg", "k:8", "mm"))))
    r = evaluate(gemm(), ARCH, flow)
    ops = 12 * 10 * 8
    reg = r.traffic["Reg"]
    assert reg["A"].read == ops and reg["B"].read == ops
    assert reg["C"].update == ops and reg["C"].read == ops - 12 * 10
    # the register keeps C across k (output stationary): filled never, written back once
    assert reg["C"].fill == 0 and r.traffic["L1"]["C"].update == 12 * 10


CONV = """
name: conv1d
params: {h: 20}
dims: {c: 3, p: 16, r: 5}
ops:
  - {name: conv, expr: "Y[c,p] += X[p+r] * W[c,r]"}
"""


def test_sliding_window_reuses_the_overlap_of_consecutive_tiles():
    w = workload(CONV)
    # p tiled by 4 inside c: consecutive p tiles share r - 1 = 4 rows of X
    flow = Dataflow(tile("DRAM", "c:3 p:4", tile("L1", "c:1 p:4 r:5", "conv")))
    x = evaluate(w, ARCH, flow).traffic["DRAM"]["X"]
    per_sweep = 4 + 5 - 1 + 3 * 4  # first tile, then 4 new rows per step
    assert x.read == 3 * per_sweep  # c does not index X but resets the sweep
    flow = Dataflow(tile("DRAM", "p:4 c:3", tile("L1", "c:1 p:4 r:5", "conv")))
    assert evaluate(w, ARCH, flow).traffic["DRAM"]["X"].read == 16 + 5 - 1


HALO = """
name: conv-chain
dims: {c0: 2, c1: 3, c2: 2, p: 8, r: 1, t: 3}
ops:
  - {name: conv1, expr: "A[c1,p] += X[c0,p+r] * W1[c1,c0,r]"}
  - {name: conv2, expr: "B[c2,p] += A[c1,p+t-1] * W2[c2,c1,t]"}
shapes:
  X: [c0, p]
  A: [c1, p]
"""


def test_fused_convolutions_recompute_the_halo_rows():
    """Rows of A tiled by 4: the first conv computes rows [-1, 5) and [3, 9), clipped."""
    w = workload(HALO)
    flow = Dataflow(tile("DRAM", "p:2", tile("L1", "c1:3 p:6 c0:2", "conv1"),
                         tile("L1", "c2:2 p:4 c1:3 t:3", "conv2"), primitive="Shar"))
    r = evaluate(w, ARCH, flow)
    rows = 5 + 5
    assert r.ops["conv1"] == rows * 3 * 2
    assert r.ops["conv2"] == 8 * 2 * 3 * 3  # the usual count: padded taps are iterations too
    assert r.traffic["DRAM"]["X"].read == 2 * (5 + 3)  # rows 3 and 4 stay resident
    assert r.valid
    # conv1 producing only the 4 rows of a step where conv2 reads 4 + (3 - 1) = 6 of them
    short = evaluate(w, ARCH, Dataflow(tile("DRAM", "p:2", tile("L1", "c1:3 p:4 c0:2", "conv1"),
                                            tile("L1", "c2:2 p:4 c1:3 t:3", "conv2"))))
    assert not short.valid
    # and, shifted by the halo to start at row -1, its 2 x 4 rows stop short of row 7
    window, coverage = short.violations
    assert (window.kind, window.node, window.level, window.tensor, window.needed,
            window.available, window.unit) == ("window", "root.0", "L1", "A", 6, 4, "rows of p")
    assert (coverage.kind, coverage.node, coverage.needed, coverage.available) == \
        ("coverage", "root.0", 9, 8)


ATTN = """
name: attn
dims: {m: 8, l: 8, k: 4, n: 6}
ops:
  - {name: qk, expr: "S[m,l] += Q[m,k] * K[k,l]"}
  - {name: mx, expr: "M[m] max= S[m,l]"}
  - {name: sub, expr: "D[m,l] = S[m,l] - M[m]"}
  - {name: pv, expr: "O[m,n] += D[m,l] * V[l,n]"}
"""


def test_loop_over_a_consumer_private_dim_recomputes_the_producer():
    w = workload(ATTN)
    flow = Dataflow(tile("DRAM", "m:2 n:3",
                         tile("L1", "m:4 l:8 k:4", "qk"), tile("L1", "m:4 l:8", "mx"),
                         tile("L1", "m:4 l:8", "sub"), tile("L1", "m:4 n:2 l:8", "pv")))
    r = evaluate(w, ARCH, flow)
    assert r.ops["qk"] == 8 * 8 * 4 * 3
    assert r.ops["pv"] == 8 * 6 * 8


def test_reduction_of_a_producer_in_a_common_parent_is_a_dependency_violation():
    """l is the reduction of mx (M[m] max= S[m,l]); a root loop over it hands sub a partial
    maximum. Only M is affected: l is an output axis of qk and sub."""
    w = workload(ATTN)
    flow = Dataflow(tile("DRAM", "l:2",
                         tile("L1", "m:8 l:4 k:4", "qk"), tile("L1", "m:8 l:4", "mx"),
                         tile("L1", "m:8 l:4", "sub"), tile("L1", "m:8 n:6 l:4", "pv")))
    r = evaluate(w, ARCH, flow)
    assert not r.valid
    [v] = r.violations
    assert (v.kind, v.node, v.level, v.tensor) == ("dependency", "root", "DRAM", "M")
    assert "'l:2' is a reduction of 'mx'" in v.message


def test_footprint_over_capacity_names_level_and_amounts():
    arch = small_arch(l1_words=100)
    flow = Dataflow(tile("DRAM", "", tile("L1", "m:12 n:10 k:8", "mm")))
    r = evaluate(gemm(), arch, flow)
    assert not r.valid
    [v] = r.violations
    need = 12 * 8 + 8 * 10 + 12 * 10  # A, B and C whole
    assert (v.kind, v.node, v.level, v.tensor, v.needed, v.available, v.unit) == \
        ("capacity", "root.0", "L1", None, need, 100, "words")


def test_spatial_loop_beyond_fan_out_is_reported():
    flow = Dataflow(tile("DRAM", "n:5:Sp", tile("L1", "m:12 n:2 k:8", "mm")))
    r = evaluate(gemm(), ARCH, flow)
    assert not r.valid
    [v] = r.violations
    assert (v.kind, v.node, v.level, v.needed, v.available, v.unit) == \
        ("fanout", "root", "L1", 5, 2, "L1 instances")


def test_factors_that_do_not_cover_a_dimension_are_a_coverage_violation():
    flow = Dataflow(tile("DRAM", "m:2", tile("L1", "m:4 n:10 k:8", "mm")))
    r = evaluate(gemm(), ARCH, flow)
    assert not r.valid
    [v] = r.violations
    assert (v.kind, v.node, v.level, v.needed, v.available) == ("coverage", "root.0", "L1",
                                                                12, 8)


def test_dependent_para_children_are_a_dependency_violation():
    w = workload(CHAIN_TEXT)
    flow = Dataflow(tile("DRAM", "", tile("L1", "m:4 l:4 k:3", "g1"),
                         tile("L1", "m:4 n:3 l:4", "g2"), primitive="Para"))
    r = evaluate(w, ARCH, flow)
    assert [(v.kind, v.node, v.tensor) for v in r.violations] == [("dependency", "root", "C")]


@pytest.mark.parametrize("change, message", [
    (lambda f: tile("DRAM", "", tile("L1", "m:12 n:10 k:8", "summ")), "unknown operator"),
    (lambda f: tile("DRAM", "", tile("SRAM", "m:12 n:10 k:8", "mm")), "unknown level"),
    (lambda f: tile("DRAM", "", tile("L1", "m:12 n:10 k:8 z:2", "mm")), "loop over 'z'"),
    (lambda f: tile("DRAM", "", tile("L1", "m:12 n:10 k:8", "mm"), primitive="Sequence"),
     "unknown primitive"),
])
def test_malformed_trees_still_raise_with_the_place(change, message):
    with pytest.raises(InvalidDataflow, match=message) as info:
        evaluate(gemm(), ARCH, Dataflow(change(None)))
    assert info.value.where


def test_latency_of_a_compute_bound_leaf_is_its_temporal_steps():
    """4 PEs in parallel (m over 2, n over 2), everything else temporal."""
    flow = Dataflow(tile("DRAM", "", tile("L1", "m:6 n:5 k:8 m:2:Sp n:2:Sp", tile("Reg", "",
                                                                               "mm"))))
    r = evaluate(gemm(), small_arch(pes=4), flow, fill_drain=False)
    assert (r.bottleneck.kind, r.bottleneck.unit, r.bottleneck.level, r.bottleneck.node) == \
        ("compute", "matrix", None, "root.0.0.0")
    assert r.cycles == 6 * 5 * 8


def test_pipeline_fill_and_drain_are_paid_once():
    """m=n=k=4, two DRAM steps over n. Per run: loads A and B once (32 words at 4 words per
    cycle: 8 cycles), computes 64 steps on one unit, writes C back once (16 words: 4).
    Overlapped: max(8, 64, 4) = 64; the first load and last store are not hidden: spread
    over the 2 steps, (8 + 64 + 4 - 64) / 2 = 6 more."""
    w = gemm(4, 4, 4)
    flow = Dataflow(tile("DRAM", "n:2", tile("L1", "m:4 n:2 k:4", "mm")))
    assert evaluate(w, ARCH, flow, fill_drain=False).cycles == 64
    assert evaluate(w, ARCH, flow).cycles == 64 + 6


WINDOW = """
name: conv1d
dims: {p: 8, r: 3}
ops:
  - {name: conv, expr: "O[p] += I[p+r] * W[r]"}
"""


def test_a_window_split_over_instances_and_stepped_in_time_is_read_again():
    """p:4 (temporal) x p:2 (spatial) at DRAM, all of r in each L1 instance. Step 0 fills
    {0,1,2} and {1,2,3}: DRAM sends their union, 4 words. Each of the 3 later steps fills
    instance 0 with {2t+1, 2t+2} and instance 1 with {2t+2, 2t+3}: element 2t+1 was held only
    by the other instance, and instances do not pass data to each other, so DRAM sends 3.
    13 in all; each instance is filled 3 + 3 x 2 = 9 words."""
    w = workload(WINDOW)
    flow = Dataflow(tile("DRAM", "p:4 p:2:Sp", tile("L1", "r:3", tile("Reg", "", "conv"))))
    r = evaluate(w, ARCH, flow)
    assert r.traffic["DRAM"]["I"].read == 4 + 3 * 3
    assert r.traffic["L1"]["I"].fill == 2 * (3 + 3 * 2)
    oracle = Oracle(w, [lv.name for lv in ARCH.levels], flow)
    assert oracle.traffic[("DRAM", "I")][1] == 13


HALO_SPLIT = """
name: conv-chain
dims: {c0: 2, c1: 2, c2: 2, p: 5, r: 3, t: 3}
ops:
  - {name: conv1, expr: "A[c1,p] += X[c0,p+r-1] * W1[c1,c0,r]"}
  - {name: conv2, expr: "B[c2,p] += A[c1,p+t-1] * W2[c2,c1,t]"}
shapes:
  X: [c0, p]
  A: [c1, p]
"""


def test_halo_rows_computed_by_two_instances_are_each_written_back():
    """Rows of A in steps of 2 at DRAM; conv1 grown by the halo computes rows [2s-1, 2s+3)
    per step, split over two PE register files of 2 rows each: step 0 rows {0} and {1, 2},
    step 1 {1, 2} and {3, 4}, step 2 {3, 4} and nothing. A lives in L1 (where the two paths
    meet); each step is a new production of A, so rows 1, 2 (and 3, 4) computed again by the
    other instance are written back again: L1 is updated with (3 + 4 + 2) rows x 2 channels."""
    w = workload(HALO_SPLIT)
    flow = Dataflow(tile("DRAM", "p:3",
                         tile("L1", "p:2:Sp", tile("Reg", "c1:2 p:2 c0:2 r:3", "conv1")),
                         tile("L1", "", tile("Reg", "c2:2 p:2 c1:2 t:3", "conv2"))))
    r = evaluate(w, ARCH, flow)
    assert r.traffic["L1"]["A"].update == (3 + 4 + 2) * 2
    assert "A" not in r.traffic["DRAM"]


def test_a_fused_conv_chain_with_rows_spread_and_stepped_reads_its_input_half_again():
    """ISOS on Edge for C3 (56 x 56 rows and columns, 3 x 3 window, 64 input channels), one
    output row per core: 14 steps of 4 rows. Each core's 3 input rows are all new at every
    step (the window moves by 4), so DRAM sends per step the union of the cores' rows
    [4t - 1, 4t + 5), clipped: 5 + 12 x 6 + 5 = 82 rows of 56, where rows held by a neighbour
    core in the last step cannot be passed on. (Sharing between cores would give 56.)"""
    from tileflow.dataflows import build
    from tileflow.specs.arch import load_arch
    from tileflow.specs.workload import load_workload

    w, edge = load_workload("C3"), load_arch("edge")
    r = evaluate(w, edge, build("isos", w, edge, {"p": 1}))
    assert r.valid
    assert r.traffic["DRAM"]["X"].read == (5 + 12 * 6 + 5) * 64 * 56
