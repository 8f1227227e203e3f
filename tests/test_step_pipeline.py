"""The lock-step pipeline (`overlap: lockstep`): each tensor's transfers on the steps where
they happen, slot s taking the largest of step s's loads, step s - 1's compute and step
s - 2's stores. Every figure below is derived by hand in the comments."""

from __future__ import annotations

from dataclasses import replace

from helpers import GEMM, small_arch, workload
from hypothesis import given, settings
from hypothesis import strategies as st
from scalar_step_pipeline import period, tensor_dims

from tileflow.cost import evaluate
from tileflow.tree import Dataflow, tile

W = workload(GEMM, m=4, n=4, k=4)  # C[m,n] += A[m,k] * B[k,n], 64 MACs on one MAC unit


def slow_writes(write_words_per_cycle: float):
    """small_arch with DRAM read at 4 words/cycle and write at the given rate."""
    arch = small_arch()
    dram = replace(arch.levels[0], write_words_per_cycle=write_words_per_cycle)
    return replace(arch, levels=(dram, *arch.levels[1:]))


# DRAM loops n:2 then k:2 (k innermost) over an L1 tile m:4 n:2 k:2: four DRAM steps of
# 64 / 4 = 16 MAC cycles. Each step loads a new A slice (4 x 2 = 8 words) and a new B slice
# (2 x 2 = 4 words): 12 words at 4 words/cycle = 3 cycles. C's slice (4 x 2 = 8 words) stays
# over the two k steps and is written back after steps 1 and 3: 8 words at 0.25 words/cycle
# = 32 cycles (the L1 side, 16 words/cycle, is faster on both links).
REDUCTION_INNER = Dataflow(tile("DRAM", "n:2 k:2", tile("L1", "m:4 n:2 k:2", "mm")))


def test_a_write_back_every_second_step_takes_its_slot_whole():
    """Slots: 0: load 3; 1: max(load 3, compute 16) = 16; 2: max(3, 16, store of step 0: 0)
    = 16; 3: max(3, 16, store of step 1: 32) = 32; 4: max(compute 16, store of step 2: 0)
    = 16; 5: store of step 3: 32. Total 3 + 16 + 16 + 32 + 16 + 32 = 115.
    Totals instead (loads 12, compute 64, stores 64): perfect max = 64; fill-drain
    64 + (12 + 64 + 64 - 64) / 4 = 83: the write-backs spread over the steps between them."""
    arch = slow_writes(0.25)
    assert evaluate(W, arch, REDUCTION_INNER, overlap="lockstep").cycles == 115
    assert evaluate(W, arch, REDUCTION_INNER, overlap="fill-drain").cycles == 83
    assert evaluate(W, arch, REDUCTION_INNER, overlap="perfect").cycles == 64
    assert evaluate(W, replace(arch, overlap="lockstep"), REDUCTION_INNER).cycles == 115


def test_a_single_buffered_write_back_joins_the_compute_of_its_step():
    """C single-buffered in L1: its 32-cycle write-backs add to the compute of steps 1 and 3
    (16 + 32 = 48) and leave the store stage empty. Slots: 3, 16, 48, 16, 48, then nothing:
    131; fill-drain gives the same here: max(12, 64 + 64, 64) + (12 + 64 + 64 - 128) / 4."""
    single = Dataflow(tile("DRAM", "n:2 k:2", tile("L1", "m:4 n:2 k:2", "mm",
                                                    buffering={"C": 1})))
    arch = slow_writes(0.25)
    assert evaluate(W, arch, single, overlap="lockstep").cycles == 131
    assert evaluate(W, arch, single, overlap="fill-drain").cycles == 131


def test_a_slice_loaded_once_per_period_is_charged_to_the_first_step():
    """DRAM loop n:2 (C and B indexed by n, A not): step 0 loads A whole (16 words) and
    B's first half (8): 24 / 4 = 6 cycles; step 1 loads B's other half: 2. Compute 32 a
    step; C's half (8 words) written after each step: 2. Slots: 6, max(2, 32), max(32, 2),
    2: 72. Fill-drain spreads the loads evenly: 64 + (8 + 64 + 4 - 64) / 2 = 70."""
    flow = Dataflow(tile("DRAM", "n:2", tile("L1", "m:4 n:2 k:4", "mm")))
    assert evaluate(W, small_arch(), flow, overlap="lockstep").cycles == 72
    assert evaluate(W, small_arch(), flow, overlap="fill-drain").cycles == 70
    # A refetched at every step (no_reuse): both steps load 16 + 8 words, 6 cycles, hidden
    # behind the compute after the first: 6 + 32 + 32 + 2 = 72 still
    again = Dataflow(tile("DRAM", "n:2", tile("L1", "m:4 n:2 k:4", "mm"), no_reuse=("A",)))
    assert evaluate(W, small_arch(), again, overlap="lockstep").cycles == 72


def test_periods_follow_the_innermost_loops_that_leave_a_tensor_unchanged():
    dims = tensor_dims(W)
    assert dims == {"A": {"m", "k"}, "B": {"k", "n"}, "C": {"m", "n"}}
    t = tile("DRAM", "n:2 m:3 k:5 m:2:Sp", "mm")
    assert period(t, "C", dims["C"]) == 5  # k (5 steps) inside, then m indexes C
    assert period(t, "A", dims["A"]) == 1  # k indexes A
    assert period(tile("DRAM", "k:5 n:2 n:2:Sp", "mm"), "A", dims["A"]) == 2 * 1
    assert period(tile("DRAM", "n:2 k:5", "mm", no_reuse=("C",)), "C", dims["C"]) == 1
    # a loop of one iteration moves nothing: m:1 inside k:5 leaves C's period at 5
    assert period(tile("DRAM", "n:2 k:5 m:1", "mm"), "C", dims["C"]) == 5


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]),
       st.sampled_from([0.25, 1.0, 4.0]))
def test_lock_step_is_never_faster_than_its_stages_nor_than_perfect_overlap(mo, no, ko, wr):
    """Every slot is at least each stage it holds, so the sum is at least each stage's total,
    hence at least perfect overlap's largest total; on one step it is the stages' sum."""
    flow = Dataflow(tile("DRAM", f"m:{mo} n:{no} k:{ko}",
                         tile("L1", f"m:{4 // mo} n:{4 // no} k:{4 // ko}", "mm")))
    arch = slow_writes(wr)
    lock = evaluate(W, arch, flow, overlap="lockstep")
    assert lock.cycles >= evaluate(W, arch, flow, overlap="perfect").cycles - 1e-9
    root = lock.latency_frame().set_index("path").loc["root"]
    if mo * no * ko == 1:
        assert lock.cycles == root.load_cycles + root.inner_cycles + root.store_cycles
