"""The batched evaluator models the memory mechanisms itself (no row by row) and equals the
scalar model on random trees and factor rows: per-tensor precision, buffering depth (level
and tile), first-touch fills that read nothing above. Counts, footprints and violations are
equal exactly, cycles and energy to 1e-9 relative (`test_batch.assert_rows_equal`), under
each overlap convention."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from helpers import workload
from hypothesis import HealthCheck, given, settings
from trees import trees

from tests.explore.test_batch import CASES, TIMED, assert_rows_equal, random_rows
from tileflow.analysis.prepare import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.evaluator.batch import scalar_only
from tileflow.evaluator.structure import structure_of
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow

CONVENTIONS = ("fill-drain", "perfect", "lockstep")


def _agree(w: Workload, arch, mechanism: Callable[[Dataflow, random.Random], Dataflow],
           seed: int, examples: int = 20, rows: int = 10) -> int:
    """Random trees of `w` on `arch`, each changed by `mechanism`: the batch models them and
    equals the scalar model on random rows; returns the rows compared."""
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    totals = [0]

    @settings(max_examples=examples, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(flow) -> None:
        flow = mechanism(flow, pick)
        try:
            evaluate(w, arch, flow)
        except InvalidDataflow:
            return
        structure = structure_of(w, arch, flow)
        assert scalar_only(structure) == ""
        totals[0] += assert_rows_equal(structure, random_rows(structure, rows, rng))[0]

    check()
    return totals[0]


# bits per element over the small accelerator's 16-bit word: a quarter to twice a word
BITS = (4, 8, 16, 24, 32)


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize("case", ["gemm", "chain", "softmax", "conv-halo", "strided"])
def test_precision_in_the_batch(case: str, overlap: str) -> None:
    """Tensors with their own widths (`precision_bits`, drawn per case): footprints,
    transfer times and energy scale per tensor, counts stay in elements."""
    base = workload(CASES[case])
    pick = random.Random(case)
    w = replace(base, precision_bits={t: pick.choice(BITS) for t in sorted(base.shapes)})
    assert any(b != 16 for b in w.precision_bits.values())
    compared = _agree(w, replace(TIMED, overlap=overlap), lambda flow, _: flow, seed=5)
    assert compared >= 40, f"only {compared} rows compared"
