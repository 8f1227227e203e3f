"""The batched evaluator models halo caching itself (`halo: cache` on the common ancestor of a
producer and a consumer that reads it through a window; no row by row) and equals the scalar
model on random trees and factor rows, under each overlap convention: the producer's
shortened regions past the first iteration of the slide (operations, its inputs' traffic, its
write-backs, its leaf's steps, its buffers' footprints) and the line buffer of kept rows at
the intermediate's home. Counts, footprints and violations exactly, cycles and energy to 1e-9
relative (`test_batch.assert_rows_equal`)."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from helpers import CONV, scalar_evaluate, workload
from hypothesis import HealthCheck, given, settings
from trees import keep_halos, trees

from tests.explore.test_batch import TIMED, random_rows
from tests.explore.test_batch_mechanisms import (
    CONVENTIONS,
    ZEROED,
    _agree,
    _precisions,
    with_buffering,
    with_bypass,
)
from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.evaluator.batch import evaluate_batch, footprint_words
from tileflow.evaluator.structure import structure_of
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow

# a chain of two 2-D convolutions: the second reads the first's output through a window
# along both rows (p) and columns (q), so a kept halo may slide along either or both
CONV2D = """
name: conv2d
dims: {c0: 2, c1: 2, c2: 1, p: 4, q: 3, r: 3, s: 2, t: 3, u: 2}
ops:
  - {name: conv1, expr: "A[c1,p,q] += X[c0,p+r-1,q+s-1] * W1[c1,c0,r,s]"}
  - {name: conv2, expr: "B[c2,p,q] += A[c1,p+t-1,q+u-1] * W2[c2,c1,t,u]"}
shapes:
  X: [c0, p, q]
  A: [c1, p, q]
"""

# a wider window on a longer row, so that the kept rows are more than one step's stride
WIDE = """
name: conv-wide
dims: {c0: 2, c1: 3, c2: 2, p: 9, r: 3, t: 5}
ops:
  - {name: conv1, expr: "A[c1,p] += X[c0,p+r-1] * W1[c1,c0,r]"}
  - {name: conv2, expr: "B[c2,p] += A[c1,p+t-2] * W2[c2,c1,t]"}
shapes:
  X: [c0, p]
  A: [c1, p]
"""

HALO_CASES = {"conv": CONV, "conv2d": CONV2D, "wide": WIDE}


def keeping(w: Workload):
    """The tree with every intermediate's halo kept (`trees.keep_halos`)."""
    def change(flow: Dataflow, _pick: random.Random) -> Dataflow:
        return keep_halos(w, flow)

    return change


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize("case", HALO_CASES)
def test_kept_halos_in_the_batch(case: str, overlap: str) -> None:
    """Random trees that keep every halo: equal to the scalar model row by row, and the kept
    halo changes the cycles, energy or a footprint of many rows (against the same trees
    recomputing the halo)."""
    w = workload(HALO_CASES[case])
    arch = replace(TIMED, overlap=overlap)
    compared, changed = _agree(w, arch, keeping(w), seed=41, plain=(w, arch), examples=40)
    assert compared >= 40 and changed >= compared // 5, (compared, changed)


@pytest.mark.parametrize("case", HALO_CASES)
def test_kept_halos_with_the_other_mechanisms_in_the_batch(case: str) -> None:
    """Kept halos with bypass, buffering depths, precision and first-touch fills reading
    nothing above, on shared ports and free write-backs, in lock step."""
    w = workload(HALO_CASES[case])
    w = replace(w, precision_bits=_precisions(w, f"{case} halo"))
    arch = replace(ZEROED, overlap="lockstep", levels=tuple(
        replace(lv, ports="shared" if k % 2 == 0 else "separate",
                writeback_on_read_port=k > 0, buffering=(None, 1, 2)[k])
        for k, lv in enumerate(ZEROED.levels)))
    bypass, buffering, keep = with_bypass(w), with_buffering(w), keeping(w)

    def change(flow: Dataflow, pick: random.Random) -> Dataflow:
        return keep(buffering(bypass(flow, pick), pick), pick)

    compared, changed = _agree(w, arch, change, seed=43, plain=(w, arch))
    assert compared >= 40, compared


@pytest.mark.parametrize("case", HALO_CASES)
def test_footprints_alone_under_a_kept_halo(case: str) -> None:
    """`footprint_words` (what the search's capacity bounds use, without counting data
    movement) equals the full batch's footprints on trees that keep their halo, the line
    buffer of kept rows included."""
    w = workload(HALO_CASES[case])
    rng = np.random.default_rng(47)
    checked = [0]

    @settings(max_examples=20, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(original: Dataflow) -> None:
        flow = keep_halos(w, original)
        try:
            scalar_evaluate(w, TIMED, flow)
        except InvalidDataflow:
            return
        structure = structure_of(w, TIMED, flow)
        rows = random_rows(structure, 12, rng)
        alone = footprint_words(structure, rows)
        full = evaluate_batch(structure, rows).footprint_words
        assert alone.keys() == full.keys()
        for level, words in full.items():
            np.testing.assert_array_equal(alone[level], words)
        checked[0] += len(rows)

    check()
    assert checked[0] >= 100, checked
