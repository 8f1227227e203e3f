"""The model's latency (every overlap convention) and energy agree exactly with the
enumerating oracle's (`tests/reference_timing.py`, built from docs/latency.md,
docs/mechanisms.md and docs/energy.md) on random small trees and random bandwidths,
request overheads, first-word latencies, cycles and energies per operation and per word.
Where the model departs from the written conventions, the smallest tree that shows it is
an expected failure naming the difference."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from helpers import CHAIN, CONV, GEMM, SOFTMAX, STRIDED, TWINS, small_arch, workload
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from reference_sim import Oracle
from reference_timing import OVERLAPS, Timing, energy, leakage
from trees import ARCH, trees

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.specs.arch import Architecture
from tileflow.specs.dataflow import load_dataflow_file
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, render, tile

NAMES = [lv.name for lv in ARCH.levels]
EXAMPLES = "docs/examples"


def _timing(w, arch: Architecture, flow: Dataflow, overlap: str) -> Timing:
    return Timing(Oracle(w, [lv.name for lv in arch.levels], flow), arch, overlap)


# ---- the oracle reproduces the docs' worked examples -------------------------------------

@pytest.mark.parametrize(("workload_name", "dataflow", "overlap", "cycles"), [
    ("gemm", "gemm-spatial", "fill-drain", 63.125),  # latency.md, worked example
    ("gemm", "gemm-spatial", "perfect", 32.0),
    ("chain", "chain-seq", "fill-drain", 98.375),  # latency.md, Seq children
    ("chain", "chain-pipe", "fill-drain", 73.75),  # latency.md, Pipe stages
])
def test_the_oracle_gives_the_documented_cycles(workload_name, dataflow, overlap, cycles):
    from tileflow.specs.arch import load_arch

    arch = load_arch(f"{EXAMPLES}/tiny-npu.yaml")
    w = load_workload(f"{EXAMPLES}/{workload_name}.yaml")
    flow = load_dataflow_file(f"{EXAMPLES}/{dataflow}.yaml")
    assert _timing(w, arch, flow, overlap).cycles == cycles


def test_the_oracle_gives_the_documented_energy():
    """energy.md: 8,000 + 3,040 + 736 + 128 = 11,904 pJ."""
    from tileflow.specs.arch import load_arch

    arch = load_arch(f"{EXAMPLES}/tiny-npu.yaml")
    w = load_workload(f"{EXAMPLES}/gemm.yaml")
    flow = load_dataflow_file(f"{EXAMPLES}/gemm-spatial.yaml")
    total, by_level, compute = energy(Oracle(w, [lv.name for lv in arch.levels], flow), arch)
    assert (total, compute) == (11904.0, 128.0)
    assert {lv: sum(t.values()) for lv, t in by_level.items()} == {
        "DRAM": 8000.0, "L1": 3040.0, "Reg": 736.0}


def test_lock_step_slots_of_the_documented_pipeline():
    """mechanisms.md: four DRAM steps of 3 load and 16 compute cycles, a 32-cycle write-back
    after every second one: 3 + 16 + 16 + 32 + 16 + 32 = 115 (fill-drain 83, perfect 64)."""
    w = workload(GEMM, m=4, n=4, k=4)
    arch = small_arch()
    arch = replace(arch, levels=(replace(arch.levels[0], write_words_per_cycle=0.25),
                                 *arch.levels[1:]))
    flow = Dataflow(tile("DRAM", "n:2 k:2", tile("L1", "m:4 n:2 k:2", "mm")))
    got = {ov: _timing(w, arch, flow, ov).cycles for ov in OVERLAPS}
    assert got == {"lockstep": 115.0, "fill-drain": 83.0, "perfect": 64.0}


# ---- random agreement -----------------------------------------------------------------------

@st.composite
def arches(draw) -> Architecture:
    """small_arch with random bandwidths, per-step overheads, first-word latencies, cycles
    and energies per operation, and energies per word (fill, read, update apart)."""
    levels = []
    for lv in ARCH.levels:
        pj = draw(st.sampled_from([0.5, 1.0, 3.0]))
        levels.append(replace(
            lv, read_words_per_cycle=draw(st.sampled_from([0.5, 1.0, 3.0, 8.0])),
            write_words_per_cycle=draw(st.sampled_from([0.25, 1.0, 2.0, 16.0])),
            step_overhead_cycles=draw(st.sampled_from([0.0, 0.0, 3.0])),
            latency_cycles=draw(st.sampled_from([0.0, 0.0, 7.0])),
            read_energy_pj=pj, write_energy_pj=2 * pj, update_energy_pj=3 * pj))
    matrix = replace(ARCH.matrix, cycles_per_op={"default": draw(st.sampled_from([1.0, 2.0]))},
                     energy_pj_per_op=draw(st.sampled_from([1.0, 2.5])))
    vector = replace(ARCH.vector, cycles_per_op={"default": 1.0, "exp": 3.0, "div": 2.0},
                     energy_pj_per_op=draw(st.sampled_from([0.5, 4.0])))
    return replace(ARCH, levels=tuple(levels), matrix=matrix, vector=vector)


SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))
CASES = {"gemm": GEMM, "chain": CHAIN, "softmax": SOFTMAX, "conv-halo": CONV,
         "strided": STRIDED, "independent twins": TWINS}


def _analysed(w, arch: Architecture, flow: Dataflow):
    """(the model's result, the oracle, whether their counts agree) for a tree both judge;
    None where the model refuses it or finds a coverage, dependency or window violation."""
    try:
        result = evaluate(w, arch, flow)
    except InvalidDataflow:
        return None
    if any(v.kind in ("coverage", "dependency", "window") for v in result.violations):
        return None
    oracle = Oracle(w, NAMES, flow)
    counts = {(lv, t): (m.fill, m.read, m.update) for lv, d in result.traffic.items()
              for t, m in d.items() if m.fill or m.read or m.update}
    return result, oracle, counts == {k: tuple(v) for k, v in oracle.traffic.items() if any(v)}


def _nonzero(by_level: dict) -> dict:
    """{(level, tensor): pJ} of a per-level, per-tensor table, zeros left out."""
    return {(lv, t): e for lv, d in by_level.items() for t, e in d.items() if e}


def _assert_close(got: dict, want: dict, context: str) -> None:
    assert got.keys() == want.keys(), (got, want, context)
    assert all(math.isclose(got[k], want[k], rel_tol=1e-9) for k in got), (got, want, context)


def _agree(w, arch: Architecture, flow: Dataflow, tally: dict) -> None:
    analysed = _analysed(w, arch, flow)
    if analysed is None:
        return
    result, oracle, same_counts = analysed
    if not same_counts:
        tally["counts differ"] += 1  # see test_a_windowed_read_of_an_intermediate_...
        return
    total, by_level, _ = energy(oracle, arch)
    assert math.isclose(result.energy_pj, total, rel_tol=1e-9), render(flow.root)
    _assert_close(_nonzero(result.energy_by_level_pj), _nonzero(by_level), render(flow.root))
    tally["energy"] += 1
    for overlap in OVERLAPS:
        timing = Timing(oracle, arch, overlap)
        timed = evaluate(w, arch, flow, overlap=overlap)
        assert math.isclose(timed.cycles, timing.cycles, rel_tol=1e-9), (
            f"{overlap}: model {timed.cycles} oracle {timing.cycles}\n{render(flow.root)}\n"
            f"oracle tiles (load, inner, store, cycles): {timing.tiles}")
        assert_tiles(timed, timing, overlap, render(flow.root))
        tally[overlap] += 1


def assert_tiles(result, timing: Timing, overlap: str, shown: str) -> None:
    """The per-tile latency records equal the oracle's tile by tile: the loads, the
    children and the stores alone, and the tile's cycles (the root's apart: its total is the
    run's, one-instance ports included), under every convention: the loads and stores
    alone are the busiest port over the run also under lock step, whose slots only time
    the tile."""
    assert {n.path for n in result.latency_breakdown} == set(timing.tiles), shown
    for node in result.latency_breakdown:
        load, inner, store, cycles = timing.tiles[node.path]
        mine = [(node.load_cycles, load), (node.inner_cycles, inner),
                (node.store_cycles, store)]
        if node.path != "root":
            mine.append((node.cycles, cycles))
        assert all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) for a, b in mine), (
            overlap, node, timing.tiles[node.path], shown)


@pytest.mark.parametrize("case", CASES)
def test_latency_and_energy_match_the_oracle(case: str) -> None:
    w = workload(CASES[case])
    tally: dict = dict.fromkeys(["energy", "counts differ", *OVERLAPS], 0)

    @SETTINGS
    @given(trees(w), arches())
    def check(flow: Dataflow, arch: Architecture) -> None:
        _agree(w, arch, flow, tally)

    check()
    assert tally["energy"] >= 30, tally
    # count disagreements with the oracle stay rare
    assert tally["counts differ"] <= 3, tally
    assert min(tally[ov] for ov in OVERLAPS) >= 15, tally


@st.composite
def static_arches(draw) -> Architecture:
    """`arches` with whole accesses (`block_words`) and leakage drawn on every level and
    unit."""
    arch = draw(arches())
    levels = tuple(replace(lv, block_words=draw(st.sampled_from([None, 1, 4, 8])),
                           leakage_pj_per_cycle=draw(st.sampled_from([0.0, 0.5, 2.0])))
                   for lv in arch.levels)
    matrix, vector = (replace(u, leakage_pj_per_cycle=draw(st.sampled_from([0.0, 0.25])))
                      for u in (arch.matrix, arch.vector))
    return replace(arch, levels=levels, matrix=matrix, vector=vector)


@pytest.mark.parametrize("case", ["gemm", "chain", "softmax", "conv-halo"])
def test_whole_accesses_and_leakage_match_the_oracle(case: str) -> None:
    """Energy with whole-block accesses, and leakage over the oracle's own cycles, equal
    the oracle's per level, tensor and component (the model is the engine at one row)."""
    w = workload(CASES[case])
    checked = []

    @SETTINGS
    @given(trees(w), static_arches())
    def check(flow: Dataflow, arch: Architecture) -> None:
        analysed = _analysed(w, arch, flow)
        if analysed is None or not analysed[2]:
            return  # counts the oracle disagrees on are test_latency_and_energy_...'s
        result, oracle, _ = analysed
        timing = Timing(oracle, arch, arch.overlap)
        assert math.isclose(result.cycles, timing.cycles, rel_tol=1e-9)
        total, by_level, _ = energy(oracle, arch)
        static = leakage(oracle, arch, timing.cycles)
        _assert_close(_nonzero(result.energy_by_level_pj), _nonzero(by_level), render(flow.root))
        _assert_close(result.leakage_pj, static, render(flow.root))
        assert math.isclose(result.energy_pj, total + sum(static.values()), rel_tol=1e-9)
        checked.append(bool(static) and any(lv.block_words not in (None, 1)
                                            for lv in arch.levels))

    check()
    assert len(checked) >= 25 and sum(checked) >= 10, checked


# ---- where the model departs from the docs ------------------------------------------------

def test_transfers_that_overlap_on_a_one_instance_port_share_it():
    """TWINS m = n = k = j = 2 on small_arch with DRAM writing 0.25 words per cycle, perfect
    overlap: g1 in an L1 tile (8 cycles), g2 in a DRAM tile over an L1 tile whose store of E
    (4 words) takes 16 cycles: inner 8 + 16 = 24; the root's store of C (4 words) takes 16.
    Tile by tile max(2, 24, 16) = 24, but DRAM's one write port takes all 8 words at 0.25
    per cycle: 32 (docs/latency.md, one-instance ports)."""
    w = workload(TWINS, m=2, n=2, k=2, j=2)
    arch = small_arch()
    arch = replace(arch, levels=(replace(arch.levels[0], write_words_per_cycle=0.25),
                                 *arch.levels[1:]))
    flow = Dataflow(tile("DRAM", "", tile("L1", "m:2 n:2 k:2", "g1"),
                         tile("DRAM", "", tile("L1", "m:2 j:2 k:2", "g2"))))
    assert _timing(w, arch, flow, "perfect").cycles == 32.0
    assert evaluate(w, arch, flow, overlap="perfect").cycles == 32.0


def test_lock_step_overhead_on_a_step_that_moves_nothing_follows_the_docs():
    """GEMM m = n = k = 2 on small_arch with 20 cycles of step overhead on Reg: an L1
    tile k:2 over a Reg tile m:2 n:2. Per step 4 words enter the registers (4 / 3 cycles)
    and the leaf computes 4 cycles; C (4 words, period 2: k does not index it) leaves the
    registers after the second step only: 4 / 3 + 20 cycles. Slots: 4/3, max(4/3, 4),
    max(4, nothing stored), 4/3 + 20: 30 2/3; the root adds its load (8 words at 4 per
    cycle: 2) and store (1): 33 2/3, the oracle's figure and the model's."""
    w = workload(GEMM, m=2, n=2, k=2)
    arch = small_arch()
    arch = replace(arch, levels=(*arch.levels[:2],
                                 replace(arch.levels[2], step_overhead_cycles=20.0)))
    flow = Dataflow(tile("DRAM", "", tile("L1", "k:2", tile("Reg", "m:2 n:2", "mm"))))
    expected = _timing(w, arch, flow, "lockstep").cycles
    assert math.isclose(expected, 33.0 + 2 / 3)
    assert math.isclose(evaluate(w, arch, flow, overlap="lockstep").cycles, expected)


def test_a_windowed_read_of_an_intermediate_at_dram_takes_the_union_of_the_instances():
    """CONV with one channel each and p = 2: A[p] (2 rows, its home DRAM: L1 and Reg are on
    different paths) is read by conv2 through A[p+t-1], t < 3, split t:2 over t:2, under a
    root p:2:Sp. Outer t step 0: instance p=0 needs row 0 (row -1 is padding), p=1 rows 0
    and 1: DRAM reads the union, 2 words. Step 1 (t = 2): p=0 needs row 1, p=1 row 2
    (outside A): 1 word. 3 reads. conv1's instances (offset by 1 row, 4 rows each) write
    A's rows back, and none is filled with a partial sum: DRAM reads none back for them."""
    w = workload(CONV, c0=1, c1=1, c2=1, p=2)
    flow = Dataflow(tile("DRAM", "p:2:Sp",
                         tile("DRAM", "p:2", tile("L1", "r:3 p:2", "conv1")),
                         tile("DRAM", "t:2", tile("Reg", "t:2", "conv2")), primitive="Shar"))
    oracle = Oracle(w, NAMES, flow)
    assert oracle.traffic[("DRAM", "A")] == [0, 3, 3]
    assert evaluate(w, ARCH, flow).traffic["DRAM"]["A"].read == 3


def test_the_timing_oracle_shares_no_code_with_the_model():
    """It imports the oracle, the tree and the accelerator's dataclasses, nothing else."""
    import ast

    import reference_timing

    tree = ast.parse(open(reference_timing.__file__).read())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m.startswith("tileflow")} <= {"tileflow.tree",
                                                                 "tileflow.specs.arch"}
