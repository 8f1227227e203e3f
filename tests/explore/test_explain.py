"""The explain pass (`cost.explain`: the cost model's full `Result` from the batched
engine at one row) equals the scalar model's `scalar_evaluate()` field by field: traffic per level
and tensor, footprints per tensor, energy per level and tensor, per-tile latency, the
bottleneck, utilization, components and leakage (floats to 1e-9 relative, records equal).
On every shipped baseline structure of every shipped workload and accelerator (the RTL chips
with lock step and first-touch fills, the search-quality suite's imported Timeloop chip),
on random trees under each overlap convention and mechanism, and with `scalar_evaluate()`'s
options (`double_buffer`, `overlap`, `fill_drain`)."""

from __future__ import annotations

import random
import zlib
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest
from helpers import CLIPPED_WINDOW, scalar_evaluate, workload
from hypothesis import HealthCheck, given, settings
from reference_sim import Oracle
from trees import ARCH, keep_halos, trees

from tests.explore.test_batch import (
    CASES,
    FILLING,
    LEAKY,
    PORTED,
    SMALL,
    TIMED,
    covering_rows,
    random_rows,
)
from tests.explore.test_batch_mechanisms import with_buffering, with_bypass
from tests.explore.test_violation_records import shrunk
from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.cost.explain import explain, explain_dataflow, leaf_work
from tileflow.dataflows import build
from tileflow.dataflows.registry import baselines_for
from tileflow.evaluator.structure import Structure, structure_of
from tileflow.evaluator.violations import violation_records
from tileflow.specs.arch import load_arch
from tileflow.specs.dataflow import load_dataflow_file
from tileflow.specs.workload import load_workload
from tileflow.tree import render

REL = 1e-9
FLOATS = ("cycles", "energy_pj", "compute_energy_pj", "utilization")


def _close(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=REL, abs=1e-12)


def _close_maps(a, b) -> bool:
    """Two (nested) mappings of floats with the same keys and values within REL."""
    if set(a) != set(b):
        return False
    return all(_close_maps(a[k], b[k]) if isinstance(a[k], dict) else _close(a[k], b[k])
               for k in a)


def assert_same(ref, got, where: str) -> None:
    """`got` (the explain pass) equals `ref` (the scalar model) in every field."""
    checked = set()
    for name in FLOATS:
        assert _close(getattr(got, name), getattr(ref, name)), (name, where)
    for name in ("dataflow", "valid", "violations", "clock_ghz", "macs", "vector_ops", "ops",
                 "bottleneck", "levels"):
        assert getattr(got, name) == getattr(ref, name), (name, getattr(got, name),
                                                          getattr(ref, name), where)
    checked.update(FLOATS, ("dataflow", "valid", "violations", "clock_ghz", "macs",
                            "vector_ops", "ops", "bottleneck", "levels"))
    movements = {lv: {t: (m.fill, m.read, m.update) for t, m in per.items()}
                 for lv, per in ref.traffic.items()}
    mine = {lv: {t: (m.fill, m.read, m.update) for t, m in per.items()}
            for lv, per in got.traffic.items()}
    assert set(mine) == set(movements), where
    for lv, per in movements.items():
        assert set(mine[lv]) == set(per), (lv, where)
        for t, triple in per.items():
            assert all(_close(a, b) for a, b in zip(mine[lv][t], triple, strict=True)), \
                (lv, t, mine[lv][t], triple, where)
    assert _close_maps(got.energy_by_level_pj, ref.energy_by_level_pj), where
    assert _close_maps(got.leakage_pj, ref.leakage_pj), where
    assert [(f.level, f.capacity_words) for f in got.footprints] == \
        [(f.level, f.capacity_words) for f in ref.footprints], where
    for a, b in zip(got.footprints, ref.footprints, strict=True):
        # a tensor held with no words is one not held (the scalar model lists some such)
        held = {t: n for t, n in b.by_tensor.items() if n}
        assert _close(a.words, b.words) and _close_maps(a.by_tensor, held), (a, b, where)
    assert [(n.path, n.label, n.depth) for n in got.latency_breakdown] == \
        [(n.path, n.label, n.depth) for n in ref.latency_breakdown], where
    for a, b in zip(got.latency_breakdown, ref.latency_breakdown, strict=True):
        for f in ("load_cycles", "inner_cycles", "store_cycles", "fill_drain_cycles",
                  "shared_port_cycles", "serial_cycles", "cycles"):
            assert _close(getattr(a, f), getattr(b, f)), (a.path, f, a, b, where)
    assert [(c.component, c.level, c.kind, c.instances, c.area_mm2, c.model)
            for c in got.components] == [(c.component, c.level, c.kind, c.instances,
                                          c.area_mm2, c.model) for c in ref.components], where
    assert all(_close(a.energy_pj, b.energy_pj)
               for a, b in zip(got.components, ref.components, strict=True)), where
    checked.update(("traffic", "energy_by_level_pj", "leakage_pj", "footprints",
                    "latency_breakdown", "components"))
    assert checked == {f.name for f in fields(ref)}, "a Result field is not compared"


def agree(structure: Structure, rows: np.ndarray, **options) -> int:
    """Each row explained equals the scalar model on the row's dataflow (or both refuse
    the tree); returns the rows compared."""
    compared = 0
    for row in rows:
        flow = structure.dataflow(row)
        where = f"row {list(row)} {options}\n{render(flow.root)}"
        try:
            ref = scalar_evaluate(structure.workload, structure.arch, flow, **options)
        except InvalidDataflow:
            with pytest.raises(InvalidDataflow):
                explain(structure, row, **options)
            continue
        assert_same(ref, explain(structure, row, **options), where)
        compared += 1
    return compared


ARCHS = ("edge", "cloud", "tpu-like", "gpu-a100", "cpu", "rtl-systolic-chain",
         "rtl-systolic-gemm")
WORKLOADS = ("attention", "attention-online", "conv-chain", "gemm-chain", "gemm", "mlp")


def _small(wl: str):
    return load_workload(wl, SMALL[wl]) if wl in SMALL else load_workload(wl)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("wl", WORKLOADS)
def test_every_shipped_baseline(wl: str, arch: str) -> None:
    """Every baseline of the workload on the accelerator, at its own factors and at a few
    rows around them."""
    w, a = _small(wl), load_arch(arch)
    compared = 0
    for name in baselines_for(w):
        structure = structure_of(w, a, build(name, w, a))
        rng = np.random.default_rng(zlib.crc32(f"{wl} {arch} {name}".encode()))
        rows = np.concatenate([structure.default_factors[None, :],
                               covering_rows(structure, 2, rng)])
        compared += agree(structure, rows)
    assert compared >= len(baselines_for(w))


QUALITY = Path(__file__).resolve().parents[2] / "search" / "quality"


@pytest.mark.parametrize("name", ["layerwise", "flat-rgran", "tileflow-pipe", "chimera"])
def test_the_imported_timeloop_chip(name: str) -> None:
    """The search-quality suite's `ws-array` chip (the delta rule, whole blocks)."""
    arch = load_arch(QUALITY / "chips" / "ws-array.arch.yaml")
    w = load_workload("gemm-chain", {"b": 1, "m": 16, "l": 16, "k": 8, "n": 8})
    structure = structure_of(w, arch, build(name, w, arch))
    rows = np.concatenate([structure.default_factors[None, :],
                           covering_rows(structure, 4, np.random.default_rng(3))])
    assert agree(structure, rows) >= 3


def test_full_size_g1_on_edge() -> None:
    w, a = load_workload("G1"), load_arch("edge")
    for name in baselines_for(w):
        flow = build(name, w, a)
        assert_same(scalar_evaluate(w, a, flow), explain_dataflow(w, a, flow), name)


MECHANISMS = {"plain": lambda w: (lambda flow, _: flow), "buffering": with_buffering,
              "bypass": with_bypass}
ARCHES = {"timed": TIMED, "ported": PORTED, "leaky": LEAKY, "filling": FILLING}


@pytest.mark.parametrize("overlap", ["fill-drain", "perfect", "lockstep"])
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("case", ["gemm", "chain", "softmax", "conv-halo", "strided",
                                  "independent twins", "conv-halo kept"])
def test_random_trees(case: str, arch: str, overlap: str) -> None:
    """Random trees (every primitive, spatial loops, clipped tiles, halos kept or not) on
    the small accelerator with per-step overheads, shared ports, leakage or first-touch
    fills, under each overlap convention, with rows around each tree's factors."""
    w = workload(CASES[case])
    chip = replace(ARCHES[arch], overlap=overlap)
    rng = np.random.default_rng(zlib.crc32(f"{case} {arch} {overlap}".encode()))
    kept = case.endswith("kept")
    total = [0]

    @settings(max_examples=8, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w).map(lambda flow: keep_halos(w, flow) if kept else flow))
    def check(flow) -> None:
        structure = structure_of(w, chip, flow)
        total[0] += agree(structure, random_rows(structure, 3, rng))

    check()
    assert total[0] >= 8


@pytest.mark.parametrize("mechanism", ["buffering", "bypass"])
@pytest.mark.parametrize("case", ["gemm", "chain", "softmax", "conv-halo"])
def test_random_trees_with_mechanisms(case: str, mechanism: str) -> None:
    """Tiles that set buffering depths, tensors that bypass levels, in lock step and
    fill-drain."""
    w = workload(CASES[case])
    change = MECHANISMS[mechanism](w)
    pick = random.Random(case)
    rng = np.random.default_rng(5)
    total = [0]

    @settings(max_examples=10, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(original) -> None:
        flow = change(original, pick)
        for overlap in ("fill-drain", "lockstep"):
            structure = structure_of(w, replace(TIMED, overlap=overlap), flow)
            total[0] += agree(structure, random_rows(structure, 3, rng))

    check()
    assert total[0] >= 10


OPTIONS = [{"double_buffer": True}, {"overlap": "perfect"}, {"overlap": "lockstep"},
           {"overlap": "fill-drain"}, {"fill_drain": False}, {"fill_drain": True},
           {"double_buffer": True, "overlap": "lockstep"}]


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_the_options_of_evaluate(options) -> None:
    """`double_buffer`, `overlap` and `fill_drain` as `scalar_evaluate()` takes them, on shipped
    baselines (one a chip whose own convention is lock step) and random trees."""
    for wl, arch in (("gemm-chain", "edge"), ("gemm-chain", "rtl-systolic-chain"),
                     ("conv-chain", "cloud")):
        w, a = _small(wl), load_arch(arch)
        for name in baselines_for(w)[:4]:
            structure = structure_of(w, a, build(name, w, a))
            assert agree(structure, structure.default_factors[None, :], **options) == 1
    w = workload(CASES["chain"])
    rng = np.random.default_rng(9)

    @settings(max_examples=10, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(flow) -> None:
        structure = structure_of(w, TIMED, flow)
        agree(structure, random_rows(structure, 2, rng), **options)

    check()


def test_a_malformed_tree_raises_as_evaluate_does() -> None:
    from tileflow.tree import Dataflow, tile

    w = workload(CASES["gemm"])
    flow = Dataflow(tile("DRAM", "", tile("L1", "m:2 n:2 k:4", "nope")))
    with pytest.raises(InvalidDataflow):
        scalar_evaluate(w, TIMED, flow)
    with pytest.raises(InvalidDataflow):
        explain_dataflow(w, TIMED, flow)


# the small accelerator with slow DRAM and L1 ports: transfers bound the latency
SLOW = replace(TIMED, levels=tuple(
    lv if lv.name == "Reg" else replace(lv, read_words_per_cycle=0.05,
                                        write_words_per_cycle=0.05)
    for lv in TIMED.levels))


def test_a_leaf_bound_by_its_bypassing_tensors() -> None:
    """Tensors that bypass the innermost level, read straight from a slow level above:
    some rows are bound by those transfers ('(bypass)'), explained as the model does."""
    w = workload(CASES["chain"])
    change = with_bypass(w)
    pick = random.Random(1)
    rng = np.random.default_rng(1)
    bound = [0]
    original = assert_same

    @settings(max_examples=30, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(tree) -> None:
        flow = change(tree, pick)
        structure = structure_of(w, SLOW, flow)
        for row in random_rows(structure, 2, rng):
            try:
                ref = scalar_evaluate(w, SLOW, structure.dataflow(row))
            except InvalidDataflow:
                continue
            original(ref, explain(structure, row), render(flow.root))
            bound[0] += "(bypass)" in ref.bottleneck.message

    check()
    assert bound[0] > 0


# the same with only DRAM slow
SLOW_DRAM = replace(TIMED, levels=tuple(
    replace(lv, read_words_per_cycle=0.05, write_words_per_cycle=0.05) if lv.name == "DRAM"
    else lv for lv in TIMED.levels))


def test_a_root_bound_by_the_shared_dram_port() -> None:
    """Two GEMMs at once (Para) under the root, each a DRAM tile of its own streaming its
    operands from a slow DRAM (one instance): together they need DRAM's read port longer
    than either alone, so the root's `shared_port_cycles` is the difference and the
    bottleneck is that port at the root."""
    from tileflow.tree import Dataflow, tile

    w = workload(CASES["independent twins"])
    flow = Dataflow(tile("DRAM", "", tile("DRAM", "m:2", tile("L1", "m:2 k:3 n:3", "g1")),
                         tile("DRAM", "m:2", tile("L1", "m:2 k:3 j:2", "g2")),
                         primitive="Para"))
    ref = scalar_evaluate(w, SLOW_DRAM, flow)
    root = next(n for n in ref.latency_breakdown if n.path == "root")
    assert root.shared_port_cycles > 0 and ref.bottleneck.level == "DRAM"
    assert ref.bottleneck.node == "root"
    assert_same(ref, explain_dataflow(w, SLOW_DRAM, flow), "twins")


def test_a_constant_index_and_a_kept_halo_under_the_delta_rule() -> None:
    """Two cases the engine once left to the scalar rules, explained from its own arrays,
    equal to `scalar_evaluate()`: a constant index (read through a dimension of one
    iteration) and a kept halo under Timeloop's delta rule."""
    from tests.explore.test_batch_timeloop import _levels
    from tileflow.tree import Dataflow, tile

    w = workload("""
name: const
dims: {m: 4, k: 3}
ops:
  - {name: mm, expr: "Y[m] += X[m, 0] * W[k]"}
""")
    flow = Dataflow(tile("DRAM", "m:2", tile("L1", "m:2 k:3", "mm")))
    reference = scalar_evaluate(w, TIMED, flow)
    w_halo = workload(CASES["conv-halo"])
    arch = _levels(TIMED, deltas=("timeloop",) * 3)
    flow_halo = keep_halos(w_halo, Dataflow(tile("DRAM", "p:3",
                                                 tile("L1", "p:2:Sp",
                                                      tile("Reg", "c1:2 p:2 c0:2 r:3", "conv1")),
                                                 tile("L1", "", tile("Reg", "c2:2 p:2 c1:2 t:3",
                                                                     "conv2")))))
    reference_halo = scalar_evaluate(w_halo, arch, flow_halo)
    assert_same(reference, explain_dataflow(w, TIMED, flow), "constant")
    assert_same(reference_halo, explain_dataflow(w_halo, arch, flow_halo), "kept halo")


@pytest.mark.parametrize("arch", ["edge", "cloud", "rtl-systolic-chain"])
@pytest.mark.parametrize("wl", ["attention", "conv-chain", "gemm-chain"])
def test_with_the_engine_s_own_violation_records(wl: str, arch: str) -> None:
    """The whole Result from the engine, its violation records included
    (`evaluator.violations.violation_records`), equals the scalar model's, on every
    baseline with buffers 16 times smaller (most rows invalid, each kind of record)."""
    w, a = _small(wl), shrunk(load_arch(arch), 16)
    invalid = 0
    for name in baselines_for(w):
        structure = structure_of(w, a, build(name, w, a))
        rng = np.random.default_rng(zlib.crc32(f"{wl} {arch} {name} small".encode()))
        for row in np.concatenate([structure.default_factors[None, :],
                                   covering_rows(structure, 2, rng)]):
            flow = structure.dataflow(row)
            ref = scalar_evaluate(w, a, flow)
            assert_same(ref, explain(structure, row, violations=violation_records),
                        f"{name} row {list(row)}\n{render(flow.root)}")
            invalid += not ref.valid
    assert invalid >= 1


def test_a_row_past_the_search_s_grid_is_explained_by_the_engine(monkeypatch) -> None:
    """A window slid over 9,000 clipped steps: more combinations than the search lets one
    row enumerate (8,192; its rows are refused there, as the command line refuses the
    tree), but one row alone is summed on a grid of up to 4 M cells: explained from the
    engine's arrays, equal to `scalar_evaluate()`. Past the grid's cells, `evaluate()`
    refuses the tree, naming it and what to change, rather than give a number."""
    from tileflow.evaluator import batch
    from tileflow.evaluator.lattice import MAX_GRID_PER_ROW
    from tileflow.tree import Dataflow, tile

    w = workload(CLIPPED_WINDOW, p=9000)
    assert 9000 > MAX_GRID_PER_ROW
    flow = Dataflow(tile("DRAM", "p:9000", tile("L1", "r:3", "c")))
    reference = scalar_evaluate(w, TIMED, flow)
    assert_same(reference, explain_dataflow(w, TIMED, flow), "9,000 steps")
    monkeypatch.setattr(batch, "MAX_GRID_CELLS", 1000)
    with pytest.raises(InvalidDataflow, match="enumerate up to .* combinations per row, more "
                       "than the model takes at once"):
        evaluate(w, TIMED, flow)


@pytest.mark.parametrize("overlap", ["perfect", "fill-drain", "lockstep"])
def test_a_port_only_the_units_use_bounds_the_tree_in_the_records_too(overlap: str) -> None:
    """The one-port bound of a register file that no tile's transfer reads, only the two
    units at once (`test_bypass.one_register_file_for_two_units`): the same cycles, root
    record and bottleneck as `scalar_evaluate()`."""
    from tests.analysis.test_bypass import one_register_file_for_two_units

    w, arch, tree = one_register_file_for_two_units()
    assert_same(scalar_evaluate(w, arch, tree, overlap=overlap),
                explain_dataflow(w, arch, tree, overlap=overlap), overlap)


def test_the_work_of_each_leaf_in_the_counting_example() -> None:
    """gemm-spatial (docs/examples): every one of the m x n x k = 4 x 4 x 8 = 128
    multiply-accumulates once, over the L1 tile's temporal loops n:4 x k:4 = 16 steps (the
    spatial loops add instances, not steps)."""
    examples = Path(__file__).resolve().parents[2] / "docs" / "examples"
    w = load_workload(str(examples / "gemm.yaml"))
    arch = load_arch(str(examples / "tiny-npu.yaml"))
    flow = load_dataflow_file(examples / "gemm-spatial.yaml")
    assert leaf_work(w, arch, flow) == {"mm": (128, 16)}


@pytest.mark.parametrize("case", ["gemm", "chain", "softmax", "conv-halo", "strided"])
def test_the_work_of_each_leaf_is_the_oracle_s(case: str) -> None:
    """On random trees, each operator's operations (recomputation included) and leaf steps
    equal those the enumerating oracle counts by running every loop."""
    w = workload(CASES[case])
    names = [lv.name for lv in ARCH.levels]
    seen = [0]

    @settings(max_examples=25, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(flow) -> None:
        try:
            work = leaf_work(w, ARCH, flow)
        except InvalidDataflow:
            return
        oracle = Oracle(w, names, flow)
        assert {op: tuple(v) for op, v in work.items()} == \
            {op: (oracle.ops[op], oracle.leaf[op]["steps"]) for op in oracle.ops}
        seen[0] += 1

    check()
    assert seen[0] >= 15
