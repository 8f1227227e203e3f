"""A loop of one iteration changes nothing, wherever it sits; a loop over a dimension that
some operator below does not use is legal and repeats that operator's work."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CHAIN, CONV, GEMM, SOFTMAX, STRIDED, TWINS, level, small_arch, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trees import ARCH, trees, with_unit_loops

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import Result, evaluate
from tileflow.dataflows import baselines_for, build
from tileflow.specs.arch import Architecture, ComputeUnit, load_arch
from tileflow.specs.dataflow import load_dataflow_file
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, tile

REPO = Path(__file__).resolve().parents[2]


def _same(a: Result, b: Result) -> None:
    """Every figure of two results is equal (violations by their fields, not the text)."""
    da, db = a.to_dict(), b.to_dict()
    for d in (da, db):
        for v in d["violations"]:
            v.pop("message")
        d["bottleneck"].pop("message")
    assert da == db
    assert [f.by_tensor for f in a.footprints] == [f.by_tensor for f in b.footprints]


def _tiny() -> Architecture:
    """The issue's accelerator: DRAM -> L1 (2 instances) -> Reg (1 per L1) -> one MAC."""
    levels = (level("DRAM", float("inf"), 1, 1, 8.0, 200.0),
              level("L1", 1024, 2, 2, 32.0, 1.0),
              level("Reg", 64, 1, 2, 1000.0, 0.1))
    unit = ComputeUnit("matrix", "Reg", 1, 1.0, {"default": 1.0}, 1, 1)
    return Architecture("tiny2", levels, unit, unit, 1.0, 2, True)


def test_a_factor_1_spatial_loop_does_not_make_pipe_stages_disjoint():
    """m:4 at DRAM, g1 and g2 pipelined. Per step each Reg holds one element of each of its
    operator's three tensors (A, B, C and C, D, E): the two stages together hold 6 words.
    A spatial loop of one iteration spreads over nothing: still 6."""
    w = workload(CHAIN, m=4, k=2, l=2, n=2)
    arch = _tiny()

    def flow(extra: str) -> Dataflow:
        return Dataflow(tile("DRAM", "m:4",
                             tile("L1", f"l:2 k:2 {extra}", tile("Reg", "", "g1")),
                             tile("L1", f"n:2 l:2 {extra}", tile("Reg", "", "g2")),
                             primitive="Pipe"))

    plain, unit = evaluate(w, arch, flow("")), evaluate(w, arch, flow("m:1:Sp"))
    assert plain.peak_footprint("Reg") == 6
    assert unit.peak_footprint("Reg") == 6
    _same(plain, unit)


def test_twin_gemms_under_a_spatial_loop_over_a_dim_only_one_uses():
    """n:3:Sp above two independent GEMMs (g1 uses n, g2 does not): each of the 3 L1
    instances computes its n-column of C and the whole of E (replicated: 3 x the work).
    A and D are multicast to the instances, E is written back once per element."""
    w = workload(TWINS)  # m 4, n 3, k 3, j 2
    arch = small_arch(cores=4)
    flow = Dataflow(tile("DRAM", "n:3:Sp", tile("L1", "m:4 k:3", "g1"),
                         tile("L1", "m:4 j:2 k:3", "g2"), primitive="Shar"))
    r = evaluate(w, arch, flow)
    assert r.valid
    assert r.ops == {"g1": 4 * 3 * 3, "g2": 3 * (4 * 2 * 3)}
    dram, l1 = r.traffic["DRAM"], r.traffic["L1"]
    # both siblings need the same slice of A in L1: one load serves both (sibling input
    # sharing, docs/mechanisms.md), multicast once
    assert dram["A"].read == 4 * 3
    assert dram["D"].read == 3 * 2 and dram["B"].read == 3 * 3
    assert l1["D"].fill == 3 * (3 * 2)  # every instance holds all of D
    assert dram["E"].update == 4 * 2 and dram["C"].update == 4 * 3
    # each instance accumulates its own copy of E: no read on the first touch of each
    assert l1["E"].update == 3 * 24 and l1["E"].read == 3 * 24 - 3 * (4 * 2)


def test_a_factor_1_loop_over_a_reduction_at_a_chains_root_is_legal_and_neutral():
    """k (gemm1's reduction, unused by gemm2) with one iteration at the root of the shipped
    chimera chain: no dependency violation, nothing changes."""
    w, arch = load_workload("gemm-chain"), load_arch("edge")
    flow = load_dataflow_file(REPO / "dataflows" / "gemm-chain-chimera.yaml")
    with_k = with_unit_loops(flow, 0, ["k"])
    _same(evaluate(w, arch, flow), evaluate(w, arch, with_k))


def _shipped():
    pairs = {"attention-": ("edge", "attention", {}), "gemm-chain-": ("edge", "gemm-chain", {}),
             "conv-chain-": ("cloud", "C3", {}),
             "rtl-gemm": ("rtl-systolic-gemm", "gemm", {"m": 256, "n": 256, "k": 256}),
             "rtl-chain": ("rtl-systolic-chain", "gemm-chain",
                           {"b": 1, "m": 512, "l": 512, "k": 64, "n": 64})}
    out = []
    for path in sorted((REPO / "dataflows").glob("*.yaml")):
        arch, wl, sizes = next(v for k, v in pairs.items() if path.stem.startswith(k))
        out.append((path.stem, load_arch(arch), load_workload(wl, sizes),
                    load_dataflow_file(path)))
    return out


SHIPPED = _shipped()


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("case", SHIPPED, ids=lambda c: c[0])
def test_factor_1_loops_change_nothing_in_a_shipped_dataflow(case, seed):
    _, arch, w, flow = case
    _same(evaluate(w, arch, flow), evaluate(w, arch, with_unit_loops(flow, seed,
                                                                     sorted(w.sizes))))


@pytest.mark.parametrize("workload_name, arch_name", [
    ("attention", "edge"), ("gemm-chain", "cloud"), ("mlp", "tpu-like"), ("C3", "cloud"),
    ("C6", "edge")])
def test_factor_1_loops_change_nothing_in_a_baseline(workload_name, arch_name):
    w, arch = load_workload(workload_name), load_arch(arch_name)
    for seed, name in enumerate(baselines_for(w)):
        flow = build(name, w, arch)
        _same(evaluate(w, arch, flow), evaluate(w, arch, with_unit_loops(flow, seed,
                                                                         sorted(w.sizes))))


SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))
TEXTS = {"gemm": GEMM, "chain": CHAIN, "softmax": SOFTMAX, "conv": CONV, "strided": STRIDED,
         "twins": TWINS}


@pytest.mark.parametrize("name", TEXTS)
def test_factor_1_loops_change_nothing_in_random_trees(name):
    w = workload(TEXTS[name])

    @SETTINGS
    @given(trees(w), st.integers(0, 2**31))
    def check(flow, seed):
        try:
            plain = evaluate(w, ARCH, flow)
        except InvalidDataflow:
            return
        _same(plain, evaluate(w, ARCH, with_unit_loops(flow, seed, sorted(w.sizes))))

    check()
