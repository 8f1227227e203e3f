"""The batched evaluator models Timeloop's conventions itself (no row by row) and equals the
scalar model on random trees and factor rows: whole-block energy (`block_words`: per
instance in use, each tensor's fills, reads and updates rounded up to whole blocks) and
Timeloop's delta rule for an input's fills (`deltas: timeloop`: sampled steps, whole
refills when a slice moves otherwise than at its last step, per-stage multicast). Counts,
footprints and violations are equal exactly, cycles and energy to 1e-9 relative
(`test_batch.assert_rows_equal`), under each overlap convention; the mechanism changes
a share of the rows, so that it is exercised."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from helpers import workload
from hypothesis import HealthCheck, given, settings
from trees import trees

from tests.explore.test_batch import CASES, TIMED, assert_rows_equal, random_rows
from tileflow.analysis.prepare import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.evaluator.batch import evaluate_batch, scalar_only
from tileflow.evaluator.structure import structure_of
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload

CONVENTIONS = ("fill-drain", "perfect", "lockstep")


def _agree(w: Workload, arch: Architecture, plain: Architecture, seed: int,
           examples: int = 20, rows: int = 10) -> tuple[int, int]:
    """Random trees of `w` on `arch`: the batch models them and equals the scalar model on
    random rows. Returns the rows compared and how many of them differ from the batch on
    `plain` (the accelerator without the convention) in cycles, energy or DRAM words."""
    rng = np.random.default_rng(seed)
    totals = [0, 0]

    @settings(max_examples=examples, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(flow) -> None:
        try:
            evaluate(w, arch, flow)
        except InvalidDataflow:
            return
        structure = structure_of(w, arch, flow)
        assert scalar_only(structure) == ""
        factors = random_rows(structure, rows, rng)
        totals[0] += assert_rows_equal(structure, factors)[0]
        mine = evaluate_batch(structure, factors)
        other = evaluate_batch(structure_of(w, plain, flow), factors)
        changed = (mine.cycles != other.cycles) | (mine.energy_pj != other.energy_pj) | \
            (mine.dram_words != other.dram_words)
        totals[1] += int(changed.sum())

    check()
    return totals[0], totals[1]


def _levels(arch: Architecture, **per_level) -> Architecture:
    """`arch` with each level's fields set from per-level tuples (outermost first)."""
    return replace(arch, levels=tuple(
        replace(lv, **{key: values[k] for key, values in per_level.items()})
        for k, lv in enumerate(arch.levels)))


# bits per element over the small accelerator's 16-bit word, drawn per tensor
BITS = (8, 16, 32)


def _precisions(w: Workload, seed: str) -> dict[str, int]:
    pick = random.Random(seed)
    return {t: pick.choice(BITS) for t in sorted(w.shapes)}


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize(("case", "blocks"), [
    ("gemm", (4, 2, 3)), ("chain", (8, None, 2)), ("softmax", (5, 3, None)),
    ("conv-halo", (None, 3, 2)), ("strided", (3, 5, 7)), ("independent twins", (4, 1, 4))])
def test_whole_blocks_in_the_batch(case: str, blocks, overlap: str) -> None:
    """Levels that charge whole blocks (`block_words`, per level, some unset): per instance
    in use and per tensor, fills, reads and updates are rounded up before the energy per
    word; with per-tensor precision on two cases (words in accelerator words)."""
    w = workload(CASES[case])
    if case in ("chain", "conv-halo"):
        w = replace(w, precision_bits=_precisions(w, case))
    plain = replace(TIMED, overlap=overlap)
    arch = _levels(plain, block_words=blocks)
    compared, changed = _agree(w, arch, plain, seed=41)
    assert compared >= 40 and changed >= compared // 4, (compared, changed)
