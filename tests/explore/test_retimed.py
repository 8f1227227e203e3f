"""`evaluator.retime`: the cycles of a traced row on an accelerator of other timings
(bandwidths, request overheads, first-word latencies, cycles per operation, overlap
convention) equal a whole new pass of the model on that accelerator, on random trees with
bypassed tensors, shared ports, first-touch fills, one-instance levels and every overlap
convention; anything else changed is refused."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest
from helpers import workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trees import trees

from tests.explore.test_batch import CASES, FILLING, PORTED, TIMED
from tests.explore.test_batch_mechanisms import with_bypass
from tileflow.evaluator.batch import evaluate_batch, traced
from tileflow.evaluator.retime import retimed, retimed_many
from tileflow.evaluator.structure import structure_of
from tileflow.specs.arch import OVERLAPS, Architecture
from tileflow.tree import Dataflow, tile

# one instance of every level: the units' own reads and writes share the ports too
SINGLE = replace(TIMED, levels=tuple(replace(lv, instances=1, fanout=1) for lv in TIMED.levels))
CHIPS = {"timed": TIMED, "ported": PORTED, "filling": FILLING, "single": SINGLE}


def other_timing(arch: Architecture, pick: random.Random) -> Architecture:
    """`arch` with every level's bandwidths, overheads and latencies, the units' cycles per
    operation and the overlap convention drawn anew."""
    levels = tuple(replace(lv, read_words_per_cycle=pick.choice([0.5, 1.0, 3.0, 16.0]),
                           write_words_per_cycle=pick.choice([0.25, 2.0, 8.0]),
                           step_overhead_cycles=float(pick.randint(0, 9)),
                           latency_cycles=float(pick.randint(0, 40)))
                   for lv in arch.levels)
    units = {u: replace(getattr(arch, u), cycles_per_op={
        **getattr(arch, u).cycles_per_op, "default": pick.choice([0.5, 1.0, 3.0])})
        for u in ("matrix", "vector")}
    return replace(arch, levels=levels, overlap=pick.choice(OVERLAPS), **units)


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("case", ["gemm", "chain", "softmax", "conv-halo"])
def test_retimed_cycles_equal_a_new_pass(case: str, chip: str) -> None:
    w = workload(CASES[case])
    bypass = with_bypass(w)
    compared = [0]

    @settings(max_examples=12, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w), st.randoms(use_true_random=False))
    def check(flow, pick) -> None:
        flow = bypass(flow, pick) if pick.random() < 0.5 else flow
        arch = replace(CHIPS[chip], overlap=pick.choice(OVERLAPS))
        structure = structure_of(w, arch, flow)
        row = structure.default_factors.reshape(1, -1)
        trace = traced(structure, row)
        for _ in range(3):
            other = other_timing(arch, pick)
            again = structure_of(w, other, flow)
            want = evaluate_batch(again, again.default_factors.reshape(1, -1)).cycles[0]
            assert math.isclose(retimed(trace, other)[0], want, rel_tol=1e-12), other
        assert retimed(trace, arch)[0] == trace.result.cycles[0]
        compared[0] += 1

    check()
    assert compared[0] >= 10


def test_workloads_that_differ_in_a_tensor_s_indices_are_not_retimed_together() -> None:
    """Lock step moves a tensor on the steps where its slice changes, which its indices
    decide: B[k] and B[k,n] under the same tree, re-timed together, each equal a new pass."""
    gemm = workload(CASES["gemm"])
    vector = workload(CASES["gemm"].replace("B[k,n]", "B[k]"))
    flow = Dataflow(tile("DRAM", "m:2 n:2", tile("L1", "n:2 k:4", tile("Reg", "", "mm"))))
    chip = replace(TIMED, overlap="lockstep")
    traces, want = [], []
    for w in (gemm, vector):
        structure = structure_of(w, chip, flow)
        traces.append(traced(structure, structure.default_factors.reshape(1, -1)))
        want.append(traces[-1].result.cycles[0])
    assert want[0] != want[1]
    for order in ([0, 1], [1, 0]):
        got = retimed_many([traces[k] for k in order], chip)
        assert list(got) == pytest.approx([want[k] for k in order], rel=1e-12)


def test_a_change_beyond_the_timing_is_refused() -> None:
    """Capacities, energies, fan-outs or first-touch fills change what is counted: the
    counts must be made again, not re-timed."""
    w = workload(CASES["gemm"])
    flow = Dataflow(tile("DRAM", "m:2", tile("L1", "n:2 k:2", tile("Reg", "", "mm"))))
    structure = structure_of(w, TIMED, flow)
    trace = traced(structure, structure.default_factors.reshape(1, -1))
    for changed in (replace(TIMED.levels[1], capacity_words=64.0),
                    replace(TIMED.levels[1], read_energy_pj=7.0),
                    replace(TIMED.levels[1], first_touch_fills=True)):
        levels = tuple(changed if lv.name == changed.name else lv for lv in TIMED.levels)
        with pytest.raises(ValueError, match="differs only in its timing"):
            retimed(trace, replace(TIMED, levels=levels))
    with pytest.raises(ValueError, match="differs only in its timing"):
        retimed(trace, replace(TIMED, matrix=replace(TIMED.matrix, energy_pj_per_op=9.0)))
    assert np.isfinite(retimed(trace, replace(TIMED, overlap="lockstep"))[0])


def test_many_rows_of_one_mapping_at_many_sizes_are_retimed_as_one_batch() -> None:
    """The RTL study's rows: one GEMM mapping and one fused-chain mapping at random sizes and
    tile sizes, mixed, re-timed together under random DRAM timings and every overlap
    convention, equal each row re-timed alone (and so a new pass, above)."""
    from tileflow.rtl.mappings import chain_mapping, gemm_mapping
    from tileflow.rtl.study import _chain_workload, _gemm_workload, with_dram
    from tileflow.specs.arch import load_arch

    pick = random.Random(5)
    gemm_chip, chain_chip = load_arch("rtl-systolic-gemm"), load_arch("rtl-systolic-chain")
    traces, chips = [], []
    for _ in range(24):
        m, n, k, l = (pick.choice([16, 32, 48, 64]) for _ in range(4))  # noqa: E741
        if pick.random() < 0.5:
            chip, w = gemm_chip, _gemm_workload(m, n, k)
            flow = gemm_mapping(m, n, k, *(pick.choice([16, 32]) for _ in range(3)))
        else:
            chip, w = chain_chip, _chain_workload(m, l, k, n)
            flow = chain_mapping(m, l, k, n, *(pick.choice([16, 32]) for _ in range(3)))
        structure = structure_of(w, chip, flow)
        traces.append(traced(structure, structure.default_factors.reshape(1, -1)))
        chips.append(chip)
    for chip in (gemm_chip, chain_chip):
        mine = [t for t, c in zip(traces, chips, strict=True) if c is chip]
        for _ in range(4):
            other = replace(with_dram(chip, [pick.uniform(0.5, 64), pick.uniform(0.5, 64),
                                             pick.uniform(0, 100), pick.uniform(0, 1000)]),
                            overlap=pick.choice(OVERLAPS))
            alone = [retimed(t, other)[0] for t in mine]
            assert retimed_many(mine, other) == pytest.approx(alone, rel=1e-12)
