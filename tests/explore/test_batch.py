"""The batched evaluator equals the scalar model row by row: on random trees (every primitive,
spatial loops, clipped tiles, halos, strided windows, the softmax topology) and on every
shipped baseline structure, with random factor rows around each tree's own factors. Counts
(DRAM words, operations, footprints, validity) are equal exactly; cycles and energy to 1e-9
relative. Rows the scalar model rejects (factors that do not cover a dimension, a reduction
split in a common ancestor, a window not covered) are invalid in the batch, with the amount."""

from __future__ import annotations

import math
import zlib
from dataclasses import replace

import numpy as np
import pytest
from helpers import CHAIN, CONV, GEMM, SOFTMAX, STRIDED, TWINS, scalar_evaluate, workload
from hypothesis import HealthCheck, given, settings
from trees import ARCH, keep_halos, trees

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.commands.bench import exact_assignments
from tileflow.dataflows import build
from tileflow.dataflows.registry import baselines_for
from tileflow.evaluator.batch import evaluate_batch, footprint_words
from tileflow.evaluator.structure import Structure, structure_of
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, Op, render

REJECTED = ("coverage", "dependency", "window")


def random_rows(structure: Structure, rows: int, rng: np.random.Generator) -> np.ndarray:
    """Factor rows around the template's: a few slots per row changed to a neighbour, a
    half, a double or any value up to twice the factor (non-divisors and clipping included)."""
    base = structure.default_factors
    out = np.repeat(base[None, :], rows, axis=0)
    if not len(base):
        return out
    for r in range(1, rows):
        for s in rng.choice(len(base), size=min(len(base), rng.integers(1, 4)), replace=False):
            f = int(base[s])
            choices = [1, max(f - 1, 1), f + 1, max(f // 2, 1), 2 * f,
                       int(rng.integers(1, 2 * f + 2))]
            out[r, s] = choices[rng.integers(len(choices))]
    return out


def covering_rows(structure: Structure, rows: int, rng: np.random.Generator) -> np.ndarray:
    """Random rows of which most cover every dimension (candidates screened by the batch;
    a few screened-out rows stay in, so that the screening itself is checked)."""
    candidates = random_rows(structure, 20 * rows, rng)
    batch = evaluate_batch(structure, candidates)
    rejected = np.zeros(len(candidates), dtype=bool)
    for kind in REJECTED:
        rejected |= batch.violations.get(kind, np.zeros(len(candidates))) > 0
    keep = np.flatnonzero(~rejected)[:rows]
    return candidates[np.concatenate([keep, np.flatnonzero(rejected)[:3]])]


def model_amounts(result) -> dict[str, float]:
    """Per violation kind, the largest amount (needed - available) of the model's records;
    a record without amounts (a dependency) counts as present."""
    out: dict[str, float] = {}
    for v in result.violations:
        over = v.needed - v.available if v.needed is not None and v.available is not None \
            else math.inf
        out[v.kind] = max(out.get(v.kind, 0.0), over)
    return out


def assert_rows_equal(structure: Structure, factors: np.ndarray) -> tuple[int, int]:
    """Compare every row with the scalar model; returns (rows compared, rows rejected).
    Rows the model finds structurally wrong (coverage, dependency, window) are invalid in the
    batch with the same kinds; the others agree in every count and every violation amount."""
    batch = evaluate_batch(structure, factors)
    zero = np.zeros(len(factors))
    compared = rejected = 0
    for k, row in enumerate(factors):
        flow = structure.dataflow(row)
        where = f"row {list(row)}\n{render(flow.root)}"
        try:
            ref = scalar_evaluate(structure.workload, structure.arch, flow)
        except InvalidDataflow:
            ref = None
        amounts = model_amounts(ref) if ref is not None else {"dependency": math.inf}
        if ref is None or set(amounts) & set(REJECTED):
            rejected += 1
            assert not batch.valid[k], where
            for kind in set(amounts) & set(REJECTED):
                assert batch.violations.get(kind, zero)[k] > 0, f"{kind}: {where}"
            continue
        compared += 1
        assert batch.dram_words[k] == ref.dram_words, where
        assert batch.ops[k] == sum(ref.ops.values()), where
        assert {lv: v[k] for lv, v in batch.footprint_words.items()} == \
            {fp.level: fp.words for fp in ref.footprints}, where
        assert bool(batch.valid[k]) == ref.valid, where
        assert {kind: v[k] for kind, v in batch.violations.items() if v[k] > 0} == \
            pytest.approx(amounts), where
        assert batch.cycles[k] == pytest.approx(ref.cycles, rel=1e-9, abs=1e-9), where
        assert batch.energy_pj[k] == pytest.approx(ref.energy_pj, rel=1e-9), where
    return compared, rejected


# the random trees' accelerator with per-step overheads and first-word latencies (what the
# calibration fits), so that the batched latency covers them too
TIMED = replace(ARCH, levels=tuple(
    replace(lv, step_overhead_cycles=float(k + 2), latency_cycles=float(3 * k + 5))
    for k, lv in enumerate(ARCH.levels)))
SETTINGS = settings(max_examples=50, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))
CASES = {"gemm": GEMM, "chain": CHAIN, "softmax": SOFTMAX, "conv-halo": CONV,
         "strided": STRIDED, "independent twins": TWINS, "conv-halo kept": CONV}


@pytest.mark.parametrize("case", CASES)
def test_random_trees(case: str) -> None:
    """(`conv-halo kept`: trees that keep the halo.)"""
    w = workload(CASES[case])
    rng = np.random.default_rng(7)
    totals = [0, 0]
    kept = case.endswith("kept")

    @SETTINGS
    @given(trees(w).map(lambda flow: keep_halos(w, flow) if kept else flow))
    def check(flow) -> None:
        try:
            scalar_evaluate(w, TIMED, flow)
        except InvalidDataflow:
            return
        structure = structure_of(w, TIMED, flow)
        compared, rejected = assert_rows_equal(structure, random_rows(structure, 16, rng))
        totals[0] += compared
        totals[1] += rejected

    check()
    assert totals[0] >= 200, f"only {totals[0]} rows compared"


# the same accelerator with one shared port at every level and write-backs that take no
# read bandwidth (Timeloop's convention): the batch takes the same ports as the scalar model
PORTED = replace(TIMED, levels=tuple(
    replace(lv, ports="shared" if k % 2 == 0 else "separate", writeback_on_read_port=k > 0)
    for k, lv in enumerate(TIMED.levels)))


@pytest.mark.parametrize("case", ["gemm", "chain", "strided"])
def test_random_trees_with_shared_ports_and_free_write_backs(case: str) -> None:
    w = workload(CASES[case])
    rng = np.random.default_rng(11)
    totals = [0]

    @settings(max_examples=25, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(flow) -> None:
        try:
            scalar_evaluate(w, PORTED, flow)
        except InvalidDataflow:
            return
        structure = structure_of(w, PORTED, flow)
        totals[0] += assert_rows_equal(structure, random_rows(structure, 12, rng))[0]

    check()
    assert totals[0] >= 100, f"only {totals[0]} rows compared"


# the same accelerator with leakage on every level and on both units: the batch adds pJ per
# cycle x instances in use x cycles, as the scalar model does
LEAKY = replace(TIMED, levels=tuple(
    replace(lv, leakage_pj_per_cycle=0.5 + k) for k, lv in enumerate(TIMED.levels)),
    matrix=replace(TIMED.matrix, leakage_pj_per_cycle=0.25),
    vector=replace(TIMED.vector, leakage_pj_per_cycle=0.125))


@pytest.mark.parametrize("case", ["gemm", "chain", "softmax"])
def test_random_trees_with_leakage(case: str) -> None:
    w = workload(CASES[case])
    rng = np.random.default_rng(13)
    totals = [0, 0.0]

    @settings(max_examples=25, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(flow) -> None:
        try:
            ref = scalar_evaluate(w, LEAKY, flow)
        except InvalidDataflow:
            return
        totals[1] += sum(ref.leakage_pj.values())
        structure = structure_of(w, LEAKY, flow)
        totals[0] += assert_rows_equal(structure, random_rows(structure, 12, rng))[0]

    check()
    assert totals[0] >= 100, f"only {totals[0]} rows compared"
    assert totals[1] > 0


SMALL = {"attention": {"b": 2, "m": 64, "l": 48, "k": 16, "n": 16},
         "attention-online": {"b": 2, "m": 64, "l": 48, "k": 16, "n": 16},
         "gemm-chain": {"m": 64, "l": 96, "k": 32, "n": 32},
         "mlp": {"m": 64, "d": 48, "f": 192, "e": 32},
         "conv-chain": {"c0": 8, "c1": 16, "c2": 8, "h": 14, "w": 14}}
SHIPPED = [(wl, arch, name) for wl in SMALL for arch in ("edge", "cloud")
           for name in baselines_for(load_workload(wl))]


@pytest.mark.parametrize(("wl", "arch", "name"), SHIPPED)
def test_shipped_baselines(wl: str, arch: str, name: str) -> None:
    """Every baseline structure (built at small sizes, so that the scalar reference stays
    quick on clipped rows) with random rows around its factors."""
    w, a = load_workload(wl, SMALL[wl]), load_arch(arch)
    structure = structure_of(w, a, build(name, w, a))
    rng = np.random.default_rng(zlib.crc32(f"{wl} {arch} {name}".encode()))
    compared, _ = assert_rows_equal(structure, covering_rows(structure, 12, rng))
    assert compared >= 10


@pytest.mark.parametrize(("wl", "arch", "name"), [("G1", "edge", "tileflow-pipe"),
                                                  ("G1", "edge", "flat-rgran"),
                                                  ("C1", "cloud", "fused-layer")])
def test_full_size(wl: str, arch: str, name: str) -> None:
    """The benchmarked structures at full size, rows with exactly dividing factors and
    a few clipped ones."""
    w, a = load_workload(wl), load_arch(arch)
    structure = structure_of(w, a, build(name, w, a))
    rng = np.random.default_rng(3)
    compared, _ = assert_rows_equal(structure, covering_rows(structure, 4, rng))
    assert compared >= 3


def test_benchmark_rows_are_exactly_tiled() -> None:
    """The rows `tileflow bench` times as exactly tiled cover every dimension exactly (the
    product of each operator's factors of a dim is its size) and agree with the scalar
    model."""
    w, a = load_workload("G1"), load_arch("edge")
    structure = structure_of(w, a, build("tileflow-pipe", w, a))
    rows = exact_assignments(structure, 12, np.random.default_rng(5))
    assert len({tuple(r) for r in rows}) > 6
    for row in rows:
        flow = structure.dataflow(row)
        for op in w.ops:
            chain = _chain(flow.root, op.name)
            for d in op.dims:
                product = int(np.prod([lp.factor for t in chain for lp in t.loops
                                       if lp.dim == d]))
                assert product == w.sizes[d], (op.name, d, list(row))
    compared, _ = assert_rows_equal(structure, rows)
    assert compared == len(rows)


def _chain(node, op: str):
    """The tiles from `node` down to the leaf of `op`."""
    if isinstance(node, Op):
        return [] if node.op == op else None
    for child in node.children:
        below = _chain(child, op)
        if below is not None:
            return [node, *below]
    return None


@pytest.mark.parametrize("primitive", ["Shar", "Para", "Pipe"])
def test_siblings_reading_one_input_load_it_once_in_the_batch_too(primitive: str) -> None:
    """Two GEMMs reading A under one tile: the second loads nothing over the link below
    that tile in the rows where its slice of A equals the first's (same m and k extents),
    and loads it in the others; the batch agrees with the scalar model row by row."""
    from scalar_prepare import prepare
    from scalar_sharing import served_by_sibling

    from tileflow.tree import Dataflow, tile

    w = workload(TWINS)
    root = tile("DRAM", "m:2", tile("L1", "m:2 k:3 n:3", "g1"),
                tile("L1", "m:2 k:3 j:2", "g2"),
                primitive=primitive)
    structure = structure_of(w, ARCH, Dataflow(root, "twins"))
    rows = covering_rows(structure, 48, np.random.default_rng(5))
    served = [bool(served_by_sibling(prepare(w, ARCH, structure.dataflow(r)))) for r in rows]
    assert any(served) and not all(served)
    compared, _ = assert_rows_equal(structure, rows)
    assert compared >= 20


def test_a_kept_halo_is_modelled_by_the_batch() -> None:
    """A kept halo (`halo: cache`) runs in the batch itself, equal to the scalar model. At
    the template's factors (the split conv chain of `tests/analysis/test_halo_cache.py`)
    conv1 computes 5 rows instead of 9 (12 operations each) and conv2 its 5 x 12: 120
    operations instead of 168."""
    from tileflow.tree import Dataflow, tile

    w = workload(CONV)
    flow = Dataflow(tile("DRAM", "p:3",
                         tile("L1", "p:2:Sp", tile("Reg", "c1:2 p:2 c0:2 r:3", "conv1")),
                         tile("L1", "", tile("Reg", "c2:2 p:2 c1:2 t:3", "conv2"))))
    structure = structure_of(w, TIMED, keep_halos(w, flow))
    own = structure.default_factors[None, :]
    assert evaluate_batch(structure, own).ops[0] == 5 * 12 + 5 * 12
    assert evaluate_batch(structure_of(w, TIMED, flow), own).ops[0] == 9 * 12 + 5 * 12
    rows = covering_rows(structure, 16, np.random.default_rng(3))
    compared, _ = assert_rows_equal(structure, rows)
    assert compared >= 10


# the random trees' accelerator with outputs filled on their first touch at Reg and L1 (the
# RTL chips' partial sums read at every pass)
FILLING = replace(TIMED, levels=tuple(replace(lv, first_touch_fills=lv.name != "DRAM")
                                      for lv in TIMED.levels))


@pytest.mark.parametrize("case", ["gemm", "chain", "conv-halo", "strided"])
def test_first_touch_fills_in_the_batch(case: str) -> None:
    """Levels that fill outputs on their first touch too (`first_touch_fills`): the batch
    models them (no row by row) and equals the scalar model on random trees and rows; DRAM
    words and energy are at least those of the same row without the fills (a first touch
    adds a fill and the read above it, never removes one)."""

    w = workload(CASES[case])
    rng = np.random.default_rng(11)
    totals = [0, 0]

    @settings(max_examples=20, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(flow) -> None:
        try:
            scalar_evaluate(w, FILLING, flow)
        except InvalidDataflow:
            return
        structure = structure_of(w, FILLING, flow)
        rows = random_rows(structure, 12, rng)
        compared, _ = assert_rows_equal(structure, rows)
        totals[0] += compared
        plain = evaluate_batch(structure_of(w, TIMED, flow), rows)
        filled = evaluate_batch(structure, rows)
        ok = plain.valid & filled.valid
        assert (filled.dram_words[ok] >= plain.dram_words[ok]).all()
        assert (filled.energy_pj[ok] >= plain.energy_pj[ok] * (1 - 1e-12)).all()
        totals[1] += int((filled.energy_pj[ok] > plain.energy_pj[ok] * (1 + 1e-9)).sum())

    check()
    assert totals[0] >= 60, f"only {totals[0]} rows compared"
    assert totals[1] > 0, "the fills changed no row"


@pytest.mark.parametrize(("wl", "arch", "name"), [("conv-chain", "edge", "fused-layer"),
                                                  ("attention", "cloud", "tileflow-pipe"),
                                                  ("gemm-chain", "edge", "chimera")])
def test_footprints_alone_equal_the_full_evaluation(wl: str, arch: str, name: str) -> None:
    """`footprint_words` (what the search's capacity bounds read) is the full evaluation's
    footprint per level, row for row, also where rows differ in which spatial loops spread
    (one compiled structure for all of them, the factor-1 loops handled per row)."""
    w, a = load_workload(wl, SMALL[wl]), load_arch(arch)
    structure = structure_of(w, a, build(name, w, a))
    rows = random_rows(structure, 40, np.random.default_rng(11))
    spatial = [k for k, s in enumerate(structure.slots) if s.spatial]
    rows[::3, spatial[:1]] = 1  # some rows leave a spatial loop unspread
    full = evaluate_batch(structure, rows).footprint_words
    alone = footprint_words(structure, rows)
    assert set(alone) == set(full) and full
    for level, words in full.items():
        np.testing.assert_array_equal(alone[level], words)


def test_a_loop_of_one_iteration_claims_no_array_axis_row_by_row() -> None:
    """Two unmarked spatial loops of an L1 tile onto the 2 x 2 array of Reg instances (the
    small accelerator's PEs): the first loop of more than one iteration takes x, the next y.
    m:1 n:4 puts n on x (4 > 2: over by 2); m:4 n:1 puts m on x (over by 2); m:2 n:2 fits;
    m:1 n:2 and m:2 n:1 fit. One structure serves every row (no regrouping by which loops
    are 1), and each row agrees with the scalar model."""
    from tileflow.tree import Dataflow, tile

    w = workload(GEMM)
    flow = Dataflow(tile("DRAM", "", tile("L1", "m:2:Sp n:2:Sp",
                                          tile("Reg", "m:2 n:2 k:4", "mm"))))
    structure = structure_of(w, ARCH, flow)
    labels = [(s.dim, s.spatial) for s in structure.slots]
    spatial_m, spatial_n = labels.index(("m", True)), labels.index(("n", True))
    inner_m, inner_n = labels.index(("m", False)), labels.index(("n", False))
    cases = {(1, 4): 2, (4, 1): 2, (2, 2): 0, (1, 2): 0, (2, 1): 0}
    rows = np.repeat(structure.default_factors[None, :], len(cases), axis=0)
    for r, (m, n) in enumerate(cases):
        rows[r, [spatial_m, spatial_n, inner_m, inner_n]] = [m, n, 4 // m, 4 // n]
    batch = evaluate_batch(structure, rows)
    over = batch.violations.get("array", np.zeros(len(rows)))
    assert list(over) == list(cases.values())
    assert assert_rows_equal(structure, rows) == (len(rows), 0)


def _overlap_trees(arch, case: str, examples: int, rows: int) -> tuple[int, int]:
    """Random trees of `case` on `arch`: the batch models them (no row by row) and equals the
    scalar model on random rows; returns the rows compared and how many of them take other
    cycles than under fill-drain (so that the convention is exercised)."""

    w = workload(CASES[case])
    rng = np.random.default_rng(13)
    totals = [0, 0]
    drained = replace(arch, overlap="fill-drain")

    @settings(max_examples=examples, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(flow) -> None:
        try:
            scalar_evaluate(w, arch, flow)
        except InvalidDataflow:
            return
        structure = structure_of(w, arch, flow)
        factors = random_rows(structure, rows, rng)
        totals[0] += assert_rows_equal(structure, factors)[0]
        batch = evaluate_batch(structure, factors)
        other = evaluate_batch(structure_of(w, drained, flow), factors)
        totals[1] += int((batch.valid & (batch.cycles != other.cycles)).sum())

    check()
    return totals[0], totals[1]


# perfect overlap (the published model's): a tile takes its slowest phase, no fill or drain;
# on the timed accelerator, with shared ports and free write-backs, and first-touch fills
PERFECT = {"timed": replace(TIMED, overlap="perfect"),
           "ported": replace(PORTED, overlap="perfect"),
           "filling": replace(FILLING, overlap="perfect")}


@pytest.mark.parametrize("arch", PERFECT)
@pytest.mark.parametrize("case", ["gemm", "chain", "softmax", "conv-halo", "strided",
                                  "independent twins"])
def test_perfect_overlap_in_the_batch(arch: str, case: str) -> None:
    compared, changed = _overlap_trees(PERFECT[arch], case, 15, 10)
    assert compared >= 40 and changed > 0


def test_perfect_overlap_hides_fill_and_drain() -> None:
    """Per row, perfect overlap never takes longer than fill-drain on the same tree and
    factors, and is shorter on some rows (a tile with loads or stores saves its first load
    and last store); words and energy do not depend on the convention."""
    from tileflow.tree import Dataflow, tile

    w = workload(CHAIN)
    flow = Dataflow(tile("DRAM", "m:2",
                         tile("L1", "l:2", tile("Reg", "m:2 l:2 k:3", "g1")),
                         tile("L1", "", tile("Reg", "m:2 n:3 l:4", "g2"))))
    rows = random_rows(structure_of(w, TIMED, flow), 30, np.random.default_rng(2))
    drained = evaluate_batch(structure_of(w, TIMED, flow), rows)
    perfect = evaluate_batch(structure_of(w, PERFECT["timed"], flow), rows)
    np.testing.assert_array_equal(perfect.dram_words, drained.dram_words)
    np.testing.assert_array_equal(perfect.energy_pj, drained.energy_pj)
    assert (perfect.cycles <= drained.cycles).all()
    assert (perfect.cycles < drained.cycles).any()


# lock step (the RTL chips' convention): each transfer on the steps where its slice changes
LOCKSTEP = {"timed": replace(TIMED, overlap="lockstep"),
            "ported": replace(PORTED, overlap="lockstep"),
            "filling": replace(FILLING, overlap="lockstep")}


@pytest.mark.parametrize("arch", LOCKSTEP)
@pytest.mark.parametrize("case", ["gemm", "chain", "softmax", "conv-halo", "strided",
                                  "independent twins"])
def test_lockstep_overlap_in_the_batch(arch: str, case: str) -> None:
    compared, changed = _overlap_trees(LOCKSTEP[arch], case, 15, 10)
    assert compared >= 40 and changed > 0


RTL = ("accelerators/rtl-systolic-chain.yaml", "accelerators/rtl-systolic-gemm.yaml")


@pytest.mark.parametrize("arch", RTL)
@pytest.mark.parametrize("name", ["layerwise", "chimera", "tileflow-pipe"])
def test_rtl_chips_in_the_batch(arch: str, name: str) -> None:
    """The RTL-validated chips (lock step, first-touch fills) at GEMM-chain structures: the
    batch models them (no row by row) and equals the scalar model on rows around the
    structure's factors."""

    w, a = load_workload("gemm-chain", SMALL["gemm-chain"]), load_arch(arch)
    structure = structure_of(w, a, build(name, w, a))
    assert a.overlap == "lockstep"
    rows = random_rows(structure, 40, np.random.default_rng(zlib.crc32(name.encode())))
    compared, _ = assert_rows_equal(structure, rows)
    assert compared >= 5


def test_a_row_that_enumerates_too_many_steps_is_invalid_not_a_memory_error(monkeypatch):
    """A clipped sum over more loop combinations than a row may enumerate (the command
    line's bound) makes that row invalid with an 'enumeration' violation; the other rows
    of its batch are evaluated as if alone."""
    from explore.spaces import tiny_chain_space

    from tileflow.evaluator import lattice

    space = tiny_chain_space()
    structure = space.structure(space.random(np.random.default_rng(1)))
    rows = np.random.default_rng(2).integers(1, 4, size=(16, len(structure.slots)))
    alone = [evaluate_batch(structure, rows[i:i + 1]) for i in range(len(rows))]
    monkeypatch.setattr(lattice, "MAX_GRID_CELLS", 1)  # every batch of two or more splits
    split = evaluate_batch(structure, rows)
    assert list(split.cycles) == [a.cycles[0] for a in alone]
    monkeypatch.setattr(lattice, "MAX_GRID_PER_ROW", 0)  # every enumerating row is refused
    refused = evaluate_batch(structure, rows)
    enumerating = refused.violations.get("enumeration", np.zeros(len(rows))) > 0
    assert enumerating.any() and not refused.valid[enumerating].any()
    assert (refused.cycles[~enumerating] == split.cycles[~enumerating]).all()


@pytest.mark.parametrize("inner, refused", [(2, True), (1, False)])
def test_the_search_refuses_the_trees_the_command_line_refuses(inner, refused):
    """GEMM with m = 10,007 (a prime): m:5004 over m:2 clips its last tile, so the counts
    along m are sums over 10,008 steps, more than the 8,192 the command line enumerates:
    the batch marks the row invalid ('enumeration': 10,008 - 8,192). m:10007 over m:1
    tiles m exactly (closed forms): valid, as the command line agrees."""
    from tileflow.errors import InputError
    from tileflow.evaluator.workbound import MAX_ENUMERATED_STEPS, check_enumeration
    from tileflow.tree import tile

    w = workload(GEMM, m=10007, n=2, k=2)
    outer = 5004 if inner == 2 else 10007
    flow = Dataflow(tile("DRAM", f"m:{outer}", tile("L1", f"m:{inner} n:2 k:2", "mm")))
    structure = structure_of(w, TIMED, flow)
    result = evaluate_batch(structure, structure.default_factors[None, :])
    said = result.violations.get("enumeration", np.zeros(1))[0]
    if refused:
        assert not result.valid[0] and said == 5004 * 2 - MAX_ENUMERATED_STEPS
        with pytest.raises(InputError, match="10,008 steps") as raised:
            check_enumeration(structure)
        assert raised.value.where == "tile (root)"  # the loop of 5,004 iterations
    else:
        assert said == 0
        check_enumeration(structure)
