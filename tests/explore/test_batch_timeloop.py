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
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
from helpers import scalar_evaluate, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scalar_movement import timeloop_words_moved
from trees import keep_halos, trees

from tests.explore.test_batch import (
    CASES,
    TIMED,
    assert_rows_equal,
    covering_rows,
    random_rows,
)
from tests.explore.test_batch_mechanisms import with_bypass
from tileflow.analysis.movement import AxisRec, DimRec, LoopRec
from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.dataflows import build
from tileflow.evaluator import timeloop_deltas
from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.lattice import VDim, VLoop
from tileflow.evaluator.structure import structure_of
from tileflow.specs.arch import Architecture, load_arch
from tileflow.specs.workload import Workload, load_workload
from tileflow.tree import Dataflow, tile

CONVENTIONS = ("fill-drain", "perfect", "lockstep")


def _agree(w: Workload, arch: Architecture, plain: Architecture, seed: int,
           examples: int = 20, rows: int = 10,
           change: Callable[[Dataflow, random.Random], Dataflow] | None = None
           ) -> tuple[int, int]:
    """Random trees of `w` on `arch` (each changed by `change`, if given): the batch models
    them and equals the scalar model on random rows. Returns the rows compared and how
    many of them differ from the batch on `plain` (the accelerator without the convention)
    in cycles, energy or DRAM words."""
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    totals = [0, 0]

    @settings(max_examples=examples, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(flow) -> None:
        if change is not None:
            flow = change(flow, pick)
        try:
            scalar_evaluate(w, arch, flow)
        except InvalidDataflow:
            return
        structure = structure_of(w, arch, flow)
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


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize("case", ["gemm", "chain", "conv-halo", "strided", "independent twins"])
def test_timeloop_deltas_in_the_batch(case: str, overlap: str) -> None:
    """Every level counts an input's fills by Timeloop's delta rule: where the tiles do not
    cover a dimension exactly (clipped tiles, windows, strides) the sampled steps and
    whole refills differ from TileFlow's own rule."""
    w = workload(CASES[case])
    plain = replace(TIMED, overlap=overlap)
    arch = _levels(plain, deltas=("timeloop",) * 3)
    compared, changed = _agree(w, arch, plain, seed=43)
    assert compared >= 40 and changed >= compared // 4, (compared, changed)


@st.composite
def _nests(draw):
    """A tensor of one to three axes (plain, offset, or summed as a window or a stride) and
    up to six loops above the buffer (some dropping the tensor), then per row the dims'
    extents in the buffer and shifted starts and each loop's trip count (one included)
    and stride: (axes, dims per row, loops per row)."""
    names = ("a", "b", "c")
    sizes = {d: draw(st.integers(1, 9)) for d in names}
    axes = []
    for _ in range(draw(st.integers(1, 3))):
        terms = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
        coefs = tuple((d, draw(st.integers(1, 2))) for d in terms)
        axes.append(AxisRec(coefs, draw(st.integers(0, 1)), draw(st.integers(2, 12))))
    skeleton = [(draw(st.sampled_from(names)), draw(st.integers(0, 4)) == 0)
                for _ in range(draw(st.integers(0, 6)))]
    rows = []
    for _ in range(draw(st.integers(1, 8))):
        dims = {d: DimRec(size, draw(st.integers(1, 4)), draw(st.integers(-2, 0)))
                for d, size in sizes.items()}
        loops = [LoopRec(d, draw(st.integers(1, 4)), draw(st.integers(1, 4)), drop)
                 for d, drop in skeleton]
        rows.append((dims, loops))
    return tuple(axes), rows


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(_nests(), st.sampled_from([(1 << 20, 1 << 16), (8, 1 << 16), (1, 1 << 16), (8, 4),
                                  (1 << 20, 2), (3, 1)]))
def test_sampled_steps_equal_the_scalar_rule(nest, limits) -> None:
    """The rule itself on random loop nests, several rows at once: equal to the scalar rule
    row by row, all sampled steps at once, with rows grouped by their loops of more than
    one iteration, or (a row of more steps than allowed) in chunks of steps that carry the
    rule's state from one to the next (`limits`: the most rows x steps at once, the most
    steps of a row at once)."""
    cells, steps = limits
    axes, rows = nest
    dims, loops = rows[0]
    vdims = {d: VDim(rec.size, np.array([mine[d].extent for mine, _ in rows]),
                     np.array([mine[d].shift for mine, _ in rows])) for d, rec in dims.items()}
    vloops = [VLoop(lp.dim, np.array([mine[k].n for _, mine in rows]),
                    np.array([mine[k].stride for _, mine in rows]), lp.drop)
              for k, lp in enumerate(loops)]
    expected = [timeloop_words_moved(axes, d, lps) for d, lps in rows]
    with patch.object(timeloop_deltas, "CELLS", cells), \
            patch.object(timeloop_deltas, "STEPS_PER_ROW", steps):
        got = timeloop_deltas.words_moved(axes, vdims, vloops, len(rows))
    assert got.tolist() == expected


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize("case", ["gemm", "chain", "conv-halo", "strided"])
def test_timeloop_conventions_with_bypass_in_the_batch(case: str, overlap: str) -> None:
    """What a Timeloop import sets, all at once (as an imported chip: blocks of 4, 8 and 1
    words, write-backs on the parent's write port only, the delta rule), on trees whose
    tiles bypass tensors (a bypassed input crosses from the run above, its fan-out stages
    those of the whole run)."""
    w = workload(CASES[case])
    plain = replace(TIMED, overlap=overlap)
    arch = _levels(plain, deltas=("timeloop",) * 3, block_words=(4, 8, 1),
                   writeback_on_read_port=(False,) * 3)
    bypass = with_bypass(w)
    compared, changed = _agree(w, arch, plain, seed=47, change=bypass)
    assert compared >= 40 and changed >= compared // 4, (compared, changed)


QUALITY = Path(__file__).resolve().parents[2] / "search" / "quality"
IMPORTED = {"dwpw": (QUALITY / "workloads" / "dwpw.yaml", {"c": 4, "k": 8, "h": 6, "w": 6}),
            "gemm-chain": ("gemm-chain", {"b": 1, "m": 16, "l": 16, "k": 8, "n": 8})}


@pytest.mark.parametrize("name", ["layerwise", "flat-rgran", "tileflow-pipe", "chimera"])
@pytest.mark.parametrize("wl", IMPORTED)
def test_an_imported_timeloop_chip_in_the_batch(wl: str, name: str) -> None:
    """The search-quality suite's chip imported from Timeloop (`ws-array`: the delta rule
    and whole blocks of 4, 8 and 1 words on its three levels), its pairs' workloads at
    small sizes, baseline structures with rows around their factors."""
    arch = load_arch(QUALITY / "chips" / "ws-array.arch.yaml")
    assert all(lv.deltas == "timeloop" and lv.block_words for lv in arch.levels)
    source, sizes = IMPORTED[wl]
    w = load_workload(source, sizes)
    structure = structure_of(w, arch, build(name, w, arch))
    rows = covering_rows(structure, 12, np.random.default_rng(zlib.crc32(f"{wl} {name}".encode())))
    compared, _ = assert_rows_equal(structure, rows)
    assert compared >= 6, compared


def test_a_kept_halo_under_the_delta_rule_in_the_batch() -> None:
    """A producer that keeps its halo (`halo: cache`) on an accelerator with the delta rule:
    past the first slide its slice starts after the kept rows, and the sampled steps count
    the shortened slices. The batch equals the scalar model and moves fewer words than the
    same tree without the kept halo."""
    w = workload(CASES["conv-halo"])
    flow = Dataflow(tile("DRAM", "p:3",
                         tile("L1", "p:2:Sp", tile("Reg", "c1:2 p:2 c0:2 r:3", "conv1")),
                         tile("L1", "", tile("Reg", "c2:2 p:2 c1:2 t:3", "conv2"))))
    arch = _levels(TIMED, deltas=("timeloop",) * 3)
    kept = structure_of(w, arch, keep_halos(w, flow))
    rows = random_rows(kept, 8, np.random.default_rng(3))
    compared, _ = assert_rows_equal(kept, rows)
    assert compared >= 1
    plain = structure_of(w, arch, flow)
    defaults = np.array([kept.default_factors])
    assert evaluate_batch(kept, defaults).energy_pj[0] < \
        evaluate_batch(plain, defaults).energy_pj[0]


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize("case", ["conv-halo", "strided"])
def test_kept_halos_under_the_delta_rule_on_random_trees(case: str, overlap: str) -> None:
    """Random trees with every intermediate's halo kept, every level counting by the delta
    rule: the batch equals the scalar model row by row under every overlap convention."""
    w = workload(CASES[case])
    plain = replace(TIMED, overlap=overlap)
    arch = _levels(plain, deltas=("timeloop",) * 3)
    compared, _ = _agree(w, arch, plain, seed=47, change=lambda flow, _: keep_halos(w, flow))
    assert compared >= 40, compared


@pytest.mark.parametrize("case", ["conv-halo", "strided"])
def test_kept_halos_under_the_delta_rule_in_chunks_of_steps(case: str) -> None:
    """The same with every row's sampled steps walked two at a time (each chunk carries the
    rule's state to the next, kept halos' shortened slices included): equal to the scalar
    model row by row."""
    w = workload(CASES[case])
    arch = _levels(TIMED, deltas=("timeloop",) * 3)
    with patch.object(timeloop_deltas, "CELLS", 4), \
            patch.object(timeloop_deltas, "STEPS_PER_ROW", 2):
        compared, _ = _agree(w, arch, TIMED, seed=53,
                             change=lambda flow, _: keep_halos(w, flow))
    assert compared >= 40, compared
