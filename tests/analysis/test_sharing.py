"""Sibling input sharing: children of Shar, Para or Pipe that read the same slice of an
input into the same level load it once. Two GEMMs reading A (m = 4, k = 3), tiled by
m:2 at DRAM: A's slice is 2 x 3 = 6 words per step, 12 words for the run."""

from __future__ import annotations

import pytest
from helpers import TWINS, small_arch, workload
from hypothesis import given
from scalar_prepare import prepare
from scalar_sharing import served_by_sibling

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.tree import Dataflow, tile

W = workload(TWINS)  # g1: C[m,n] += A[m,k] * B[k,n];  g2: E[m,j] += A[m,k] * D[k,j]


def twins(primitive: str, second_level: str = "L1") -> Dataflow:
    return Dataflow(tile("DRAM", "m:2",
                         tile("L1", "m:2 n:3 k:3", "g1"),
                         tile(second_level, "m:2 j:2 k:3", "g2"), primitive=primitive))


@pytest.mark.parametrize("primitive", ["Shar", "Para", "Pipe"])
def test_one_load_serves_both_siblings(primitive):
    r = evaluate(W, small_arch(), twins(primitive))
    assert r.traffic["DRAM"]["A"].read == 2 * 6
    assert r.traffic["L1"]["A"].fill == 2 * 6
    # each GEMM's MACs still read it: 4 x 3 x 3 for g1, 4 x 2 x 3 for g2
    assert r.traffic["L1"]["A"].read == 36 + 24
    # the other operands are each one sibling's own, kept across the m steps (Shar, Para
    # and Pipe keep data; m does not index them): B 3 x 3 and D 3 x 2, once
    assert r.traffic["DRAM"]["B"].read == 9 and r.traffic["DRAM"]["D"].read == 6


def test_seq_siblings_each_load_their_copy():
    assert evaluate(W, small_arch(), twins("Seq")).traffic["DRAM"]["A"].read == 2 * 2 * 6


def test_siblings_holding_the_tensor_in_different_levels_do_not_share():
    r = evaluate(W, small_arch(), twins("Shar", second_level="Reg"))
    assert r.traffic["DRAM"]["A"].read == 2 * 2 * 6


def test_the_saved_loads_shorten_the_tiles_load_time():
    """DRAM at 4 words/cycle: A 12 + B 9 + D 6 = 27 words over the run (not 39)."""
    r = evaluate(W, small_arch(), twins("Shar"), overlap="perfect")
    root = next(n for n in r.latency_breakdown if n.path == "root")
    assert root.load_cycles == pytest.approx((12 + 9 + 6) / 4)


def test_random_trees_exercise_sharing():
    """The reference simulator checks the counts on random trees of these two GEMMs
    (tests/analysis/test_reference_simulator.py); make sure such trees do share."""
    from trees import ARCH, trees

    from tests.analysis.test_reference_simulator import SETTINGS

    found = []

    @SETTINGS
    @given(trees(W))
    def check(flow: Dataflow) -> None:
        try:
            plan = prepare(W, ARCH, flow)
        except InvalidDataflow:  # trees the model rightly rejects
            return
        found.extend(served_by_sibling(plan))

    check()
    assert found



def test_a_sibling_that_bypasses_the_level_neither_serves_nor_is_served():
    """g1 bypasses A at L1: its 4 x 3 x 3 MACs read A from DRAM one by one (36); g2 holds A
    in L1 on its own: 2 root steps x 6 words filled (12 DRAM reads) and read by its
    4 x 2 x 3 MACs (24). DRAM sends A 36 + 12 = 48 times, not 36 with g2's load taken as
    served by g1's (absent) copy."""
    flow = Dataflow(tile("DRAM", "m:2", tile("L1", "m:2 n:3 k:3", "g1", bypass=("A",)),
                         tile("L1", "m:2 j:2 k:3", "g2"), primitive="Shar"))
    r = evaluate(W, small_arch(), flow)
    assert r.traffic["DRAM"]["A"].read == 36 + 12
    assert (r.traffic["L1"]["A"].fill, r.traffic["L1"]["A"].read) == (12, 24)
