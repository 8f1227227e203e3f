"""Affine output indices (`Y[p+r]`, a transposed convolution): several iterations update one
element, which accumulates; counts derived by hand on a 1-D case (P = 4, R = 3, |Y| = 6)."""

from __future__ import annotations

import pytest
from helpers import small_arch, workload

from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.tree import Dataflow, tile

TCONV = """
name: tconv
dims: {p: 4, r: 3}
ops:
  - {name: tc, expr: "Y[p+r] += X[p] * W[r]"}
"""
W = workload(TCONV)


def moves(flow: Dataflow) -> dict:
    r = evaluate(W, small_arch(), flow)
    return {lv: {t: (m.fill, m.read, m.update) for t, m in d.items()}
            for lv, d in r.traffic.items()}, r.ops["tc"]


def test_the_output_hull_and_every_operation_are_counted():
    assert W.shapes["Y"] == (6,)
    traffic, ops = moves(Dataflow(tile("DRAM", "", tile("L1", "p:4 r:3", "tc"))))
    assert ops == 12
    # each of the 6 elements is written back once; in L1, 12 updates and 12 - 6 reads
    # (no read of an element on its first touch)
    assert traffic["DRAM"]["Y"] == (0, 0, 6)
    assert traffic["L1"]["Y"] == (0, 12 - 6, 12)


def test_a_sliding_output_window_stays_resident():
    """DRAM loop r:3, L1 tile p:4: Y's slice is [r, r + 4): 4 + 1 + 1 = 6 elements enter,
    each written back once when it leaves; X stays (4 words), W moves one word per step."""
    traffic, _ = moves(Dataflow(tile("DRAM", "r:3", tile("L1", "p:4", "tc"))))
    assert traffic["DRAM"]["Y"] == (0, 0, 6)
    assert traffic["DRAM"]["X"][1] == 4 and traffic["DRAM"]["W"][1] == 3


def test_without_reuse_the_overlap_is_written_back_and_read_again():
    """DRAM loop p:2 (slices [0, 4) and [2, 6)), refetched every step (no_reuse): 8 words
    written back, the 2 overlapping ones read back as partial sums before accumulating."""
    flow = Dataflow(tile("DRAM", "p:2", tile("L1", "p:2 r:3", "tc"), no_reuse=("Y",)))
    traffic, _ = moves(flow)
    assert traffic["DRAM"]["Y"] == (0, 2, 8)
    assert traffic["L1"]["Y"][0] == 2


def test_an_assignment_through_a_summed_index_is_an_error():
    with pytest.raises(InputError, match="use '\\+=' or 'max='"):
        workload(TCONV.replace("+=", "="))


def test_an_intermediate_through_a_summed_index_is_rejected_clearly():
    chain = TCONV.replace("ops:\n", "ops:\n") + '  - {name: id, expr: "Z[p] = Y[p]"}\n'
    with pytest.raises(InputError, match="final outputs only"):
        workload(chain)


TCONV_2D = """
name: tconv2d
dims: {c: 2, p: 5, r: 3, q: 3, s: 2}
ops:
  - {name: tc, expr: "Y[p+r,q+s] += X[c,p,q] * W[c,r,s]"}
"""


def test_random_trees_agree_with_the_enumerating_simulator():
    """The reference simulator keys an output element by its evaluated indices: the model's
    per-axis sums must agree with it on random trees (spatial loops, clipping included)."""
    from hypothesis import given
    from trees import trees

    from tests.analysis.test_reference_simulator import SETTINGS, _agree

    w = workload(TCONV_2D)
    seen: set[str] = set()

    @SETTINGS
    @given(trees(w))
    def check(flow: Dataflow) -> None:
        _agree(w, flow, seen)

    check()
    assert {"spatial", "clipping"} <= seen


def test_a_spatial_split_along_a_summed_output_index_is_rejected():
    """Two instances splitting r would hold overlapping partial sums of Y."""
    from tileflow.analysis.tree_checks import InvalidDataflow

    flow = Dataflow(tile("DRAM", "r:3:Sp", tile("L1", "p:4", "tc")))
    with pytest.raises(InvalidDataflow, match="splits 'tc' along 'r'"):
        evaluate(W, small_arch(cores=4), flow)


def test_kernels_are_not_generated_for_such_a_split():
    """The kernel generators refuse what the model refuses."""
    from tileflow.analysis.tree_checks import InvalidDataflow
    from tileflow.kernels.nest import analyse

    flow = Dataflow(tile("DRAM", "r:3:Sp", tile("L1", "p:4", "tc")))
    with pytest.raises(InvalidDataflow, match="splits 'tc' along 'r'"):
        analyse(W, small_arch(cores=4), flow)
