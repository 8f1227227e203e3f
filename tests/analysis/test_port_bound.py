"""An invariant no tree may break: DRAM is one instance with one read port and one write
port, so a run can never take fewer cycles than everything read from DRAM over its read
bandwidth, nor than everything written to it over its write bandwidth, whatever the tree
overlaps (children at once, tiles beside their children, units fed straight from DRAM
through a bypass). Random trees of every primitive, with bypass at random, under each
overlap convention; the scalar model and the batch alike."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from helpers import workload
from hypothesis import HealthCheck, given, settings
from trees import trees

from tests.explore.test_batch import CASES, TIMED, random_rows
from tests.explore.test_batch_mechanisms import CONVENTIONS, with_bypass
from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.structure import structure_of

# DRAM slow enough that its ports bind often (a word per 2 cycles in, 1 out)
ARCH = replace(TIMED, levels=(replace(TIMED.levels[0], read_words_per_cycle=0.5,
                                      write_words_per_cycle=1.0), *TIMED.levels[1:]))


def _port_bound(result) -> float:
    dram = result.traffic.get("DRAM", {})
    reads = sum(m.read for m in dram.values())
    writes = sum(m.update for m in dram.values())
    lv = ARCH.levels[0]
    return max(reads / lv.read_words_per_cycle, writes / lv.write_words_per_cycle)


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize("case", ["gemm", "chain", "independent twins", "conv-halo"])
def test_no_tree_runs_faster_than_dram_s_ports_allow(case: str, overlap: str) -> None:
    w = workload(CASES[case])
    arch = replace(ARCH, overlap=overlap)
    bypass = with_bypass(w)
    pick, rng = random.Random(61), np.random.default_rng(61)
    checked = [0]

    @settings(max_examples=40, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(original) -> None:
        flow = bypass(original, pick) if pick.random() < 0.7 else original
        try:
            result = evaluate(w, arch, flow)
        except InvalidDataflow:
            return
        assert result.cycles >= _port_bound(result) * (1 - 1e-9)
        structure = structure_of(w, arch, flow)
        rows = random_rows(structure, 6, rng)
        batch = evaluate_batch(structure, rows)
        for k, row in enumerate(rows):
            one = evaluate(w, arch, structure.dataflow(row))
            assert batch.cycles[k] >= _port_bound(one) * (1 - 1e-9)
        checked[0] += 1

    check()
    assert checked[0] >= 15, checked[0]
