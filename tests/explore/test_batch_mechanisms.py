"""The batched evaluator models the memory mechanisms itself (no row by row) and equals the
scalar model on random trees and factor rows: per-tensor precision, buffering depth (level
and tile), first-touch fills that read nothing above, bypass, and carried state (here the
online-softmax baselines; random sweeps are in `tests/analysis/test_carried.py`). Counts,
footprints and violations are equal exactly, cycles and energy to 1e-9 relative
(`test_batch.assert_rows_equal`), under each overlap convention."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from helpers import scalar_evaluate, workload
from hypothesis import HealthCheck, given, settings
from trees import ARCH, trees

from tests.explore.test_batch import (
    CASES,
    SMALL,
    TIMED,
    assert_rows_equal,
    covering_rows,
    random_rows,
)
from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.dataflows import build
from tileflow.dataflows.registry import baselines_for
from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.structure import structure_of
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import Workload, load_workload
from tileflow.tree import Dataflow, map_tiles

CONVENTIONS = ("fill-drain", "perfect", "lockstep")


def _agree(w: Workload, arch, mechanism: Callable[[Dataflow, random.Random], Dataflow],
           seed: int, plain: tuple[Workload, object], examples: int = 20,
           rows: int = 10) -> tuple[int, int]:
    """Random trees of `w` on `arch`, each changed by `mechanism`: the batch models them and
    equals the scalar model on random rows. Returns the rows compared and how many of them
    the mechanism changes (cycles, energy or a footprint differ from the batch of the
    unchanged tree on the `plain` workload and accelerator), so that it is exercised."""
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    totals = [0, 0]

    @settings(max_examples=examples, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(trees(w))
    def check(original) -> None:
        flow = mechanism(original, pick)
        try:
            scalar_evaluate(w, arch, flow)
        except InvalidDataflow:
            return
        structure = structure_of(w, arch, flow)
        factors = random_rows(structure, rows, rng)
        totals[0] += assert_rows_equal(structure, factors)[0]
        mine = evaluate_batch(structure, factors)
        other = evaluate_batch(structure_of(*plain, original), factors)
        changed = (mine.cycles != other.cycles) | (mine.energy_pj != other.energy_pj)
        for level, words in mine.footprint_words.items():
            changed |= words != other.footprint_words[level]
        totals[1] += int(changed.sum())

    check()
    return totals[0], totals[1]


# bits per element over the small accelerator's 16-bit word: a quarter to twice a word
BITS = (4, 8, 16, 24, 32)


def _precisions(w: Workload, seed: str) -> dict[str, int]:
    """A width per tensor, the word's own for at most one of them."""
    pick = random.Random(seed)
    names = sorted(w.shapes)
    same = pick.randrange(len(names) + 1)
    return {t: 16 if k == same else pick.choice([b for b in BITS if b != 16])
            for k, t in enumerate(names)}


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize("case", ["gemm", "chain", "softmax", "conv-halo", "strided"])
def test_precision_in_the_batch(case: str, overlap: str) -> None:
    """Tensors with their own widths (`precision_bits`, drawn per case): footprints,
    transfer times and energy scale per tensor, counts stay in elements."""
    base = workload(CASES[case])
    w = replace(base, precision_bits=_precisions(base, case))
    arch = replace(TIMED, overlap=overlap)
    compared, changed = _agree(w, arch, lambda flow, _: flow, seed=5, plain=(base, arch))
    assert compared >= 40 and changed >= compared // 2, (compared, changed)


def with_buffering(w: Workload) -> Callable[[Dataflow, random.Random], Dataflow]:
    """Now and then a tile sets a depth (1 or 2) for a few of the workload's tensors."""
    tensors = sorted(w.shapes)

    def change(flow: Dataflow, pick: random.Random) -> Dataflow:
        def one(_path: str, t):
            if pick.random() < 0.4:
                return t
            named = pick.sample(tensors, pick.randint(1, len(tensors)))
            return replace(t, buffering=tuple((n, pick.choice((1, 2))) for n in named))

        return replace(flow, root=map_tiles(flow.root, one))

    return change


def _with_level_depths(arch, depths: tuple[int | None, ...]):
    return replace(arch, levels=tuple(replace(lv, buffering=d)
                                      for lv, d in zip(arch.levels, depths, strict=True)))


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize("case", ["gemm", "chain", "softmax", "conv-halo", "independent twins"])
def test_tile_buffering_in_the_batch(case: str, overlap: str) -> None:
    """Tiles that set a buffering depth per tensor: a depth-2 tensor's footprint doubles, a
    depth-1 tensor's transfers run in series with the children (slot by slot in lock
    step)."""
    w = workload(CASES[case])
    arch = replace(TIMED, overlap=overlap)
    compared, changed = _agree(w, arch, with_buffering(w), seed=17, plain=(w, arch))
    assert compared >= 40 and changed >= compared // 4, (compared, changed)


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize(("case", "depths"), [("gemm", (None, 1, 2)), ("chain", (None, 2, 1)),
                                              ("softmax", (1, 1, None)),
                                              ("conv-halo", (None, 1, 1))])
def test_level_buffering_in_the_batch(case: str, depths, overlap: str) -> None:
    """Levels with a default depth, some tiles overriding it per tensor; with precision
    too (a single-buffered tensor's serial time is in its words)."""
    w = workload(CASES[case])
    w = replace(w, precision_bits=_precisions(w, f"{case} {depths}"))
    arch = _with_level_depths(replace(TIMED, overlap=overlap), depths)
    compared, changed = _agree(w, arch, with_buffering(w), seed=19, examples=15,
                               plain=(w, replace(TIMED, overlap=overlap)))
    assert compared >= 30 and changed >= compared // 4, (compared, changed)


# outputs filled on their first touch at L1 and Reg, the level above not read for them (a
# zeroed accumulator: `first_touch_reads_parent: false`)
ZEROED = replace(TIMED, levels=tuple(
    replace(lv, first_touch_fills=lv.name != "DRAM", first_touch_reads_parent=False)
    for lv in TIMED.levels))


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize("case", ["gemm", "chain", "conv-halo", "strided"])
def test_first_touch_fills_reading_nothing_above_in_the_batch(case: str, overlap: str) -> None:
    """The inner level is filled on a first touch (as `first_touch_fills`), the level above
    read only for partial sums (as without the fills): compared with the fills that read
    the parent, the rows differ in energy or cycles."""
    w = workload(CASES[case])
    arch = replace(ZEROED, overlap=overlap)
    reading = replace(arch, levels=tuple(replace(lv, first_touch_reads_parent=True)
                                         for lv in arch.levels))
    compared, changed = _agree(w, arch, lambda flow, _: flow, seed=23, plain=(w, reading))
    assert compared >= 40 and changed >= compared // 4, (compared, changed)


def with_bypass(w: Workload) -> Callable[[Dataflow, random.Random], Dataflow]:
    """Most on-chip tiles bypass one or two of the workload's tensors (inputs, outputs or
    intermediates; an intermediate at its home level keeps it), innermost tiles included
    (the unit is fed from above, by multicast over the spatial instances below)."""
    tensors = sorted(w.shapes)

    def change(flow: Dataflow, pick: random.Random) -> Dataflow:
        def one(_path: str, t):
            if t.level == "DRAM" or pick.random() < 0.3:
                return t
            return replace(t, bypass=tuple(pick.sample(tensors, pick.randint(1, 2))))

        return replace(flow, root=map_tiles(flow.root, one))

    return change


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize("case", ["gemm", "chain", "softmax", "conv-halo", "strided",
                                  "independent twins"])
def test_bypass_in_the_batch(case: str, overlap: str) -> None:
    """Tiles that bypass tensors: the tensor crosses from the nearest run above that holds
    it (the union of the spatial instances below), the bypassing level holds none of it,
    a unit fed from above reads the distinct elements of each step once."""
    w = workload(CASES[case])
    arch = replace(TIMED, overlap=overlap)
    compared, changed = _agree(w, arch, with_bypass(w), seed=29, plain=(w, arch))
    assert compared >= 40 and changed >= compared // 4, (compared, changed)


@pytest.mark.parametrize("case", ["gemm", "chain", "conv-halo"])
def test_bypass_with_the_other_mechanisms_in_the_batch(case: str) -> None:
    """Bypass with buffering depths, precision and first-touch fills reading nothing above,
    on shared ports and free write-backs, in lock step."""
    w = workload(CASES[case])
    w = replace(w, precision_bits=_precisions(w, f"{case} mixed"))
    arch = replace(ZEROED, overlap="lockstep", levels=tuple(
        replace(lv, ports="shared" if k % 2 == 0 else "separate",
                writeback_on_read_port=k > 0, buffering=(None, 1, 2)[k])
        for k, lv in enumerate(ZEROED.levels)))
    bypass, buffering = with_bypass(w), with_buffering(w)
    compared, changed = _agree(w, arch, lambda flow, pick: buffering(bypass(flow, pick), pick),
                               seed=31, plain=(w, arch))
    assert compared >= 40 and changed >= compared // 4, (compared, changed)


ONLINE_SHIPPED = [(arch, name) for arch in ("tpu-like", "gpu-a100", "cpu", "rtl-systolic-chain")
                  for name in baselines_for(load_workload("attention-online"))]


@pytest.mark.parametrize(("arch", "name"), ONLINE_SHIPPED)
def test_online_attention_baselines_in_the_batch(arch: str, name: str) -> None:
    """The online-softmax baselines (carried state: epochs across the carried loop, the
    rescaling's vector work) on the accelerators `test_batch` does not cover, lock step
    included, at small sizes with rows around their factors."""
    w, a = load_workload("attention-online", SMALL["attention-online"]), load_arch(arch)
    structure = structure_of(w, a, build(name, w, a))
    rng = np.random.default_rng(zlib.crc32(f"{arch} {name}".encode()))
    rows = covering_rows(structure, 12, rng)
    compared, rejected = assert_rows_equal(structure, rows)
    # flash-pipe on the RTL chip leaves the sweep with a result of the running value (its
    # exp tile): every row breaks the carried-state rule, in the batch as in the model
    assert compared >= 10 or rejected == len(rows), (compared, rejected)


SUMMED = {"tconv": """
name: tconv
dims: {p: 5, r: 3}
ops:
  - {name: tc, expr: "Y[p+r] += X[p] * W[r]"}
""", "tconv2": """
name: tconv2
dims: {p: 4, r: 3, c: 2, k: 3}
ops:
  - {name: tc, expr: "Y[p+2*r, k] += X[p, c] * W[r, c, k]"}
"""}


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize("case", SUMMED)
def test_summed_output_indices_in_the_batch(case: str, overlap: str) -> None:
    """Outputs written through a summed index (a transposed convolution): several
    iterations update one element, first touches counted per row; a spatial loop over a
    dim of that index is rejected (the model raises, the batch flags a dependency)."""
    w = workload(SUMMED[case])
    arch = replace(TIMED, overlap=overlap)
    compared, _ = _agree(w, arch, lambda flow, _: flow, seed=37, plain=(w, arch), rows=16)
    assert compared >= 40, compared


# constant indices (an axis without a dimension): in an input, in an output, in both ops of a
# chain; the closed forms read them through a dimension of one iteration
CONSTANT = {"input": """
name: const
dims: {m: 4, k: 3}
ops:
  - {name: mm, expr: "Y[m] += X[m, 0] * W[k]"}
""", "output": """
name: const-out
dims: {m: 5, k: 4}
ops:
  - {name: a, expr: "Y[m, 1] += X[m, k] * W[k, 2]"}
""", "chain": """
name: const-chain
dims: {m: 6, k: 4, n: 3}
ops:
  - {name: a, expr: "T[m] += X[m, k] * W[k, 2]"}
  - {name: b, expr: "Y[m, n] += T[m] * V[1, n]"}
"""}


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize("case", CONSTANT)
def test_constant_indices_in_the_batch(case: str, overlap: str) -> None:
    """A constant index reads one element along its axis (`D[0, n]`): the batch models it
    (no row by row) and equals the scalar model on random trees."""
    w = workload(CONSTANT[case])
    arch = replace(TIMED, overlap=overlap)
    compared, _ = _agree(w, arch, lambda flow, _: flow, seed=53, plain=(w, arch), rows=8)
    assert compared >= 40, compared


def _revisits() -> list[tuple[Workload, Dataflow, float]]:
    """Trees where an output stays resident across epochs whose steps are not consecutive
    (a Shar root's loop over a dim g2 does not use, inside one it uses), and a windowed
    intermediate at DRAM under overlapping instances; with their DRAM words by hand."""
    from helpers import CONV, TWINS

    from tileflow.tree import tile

    def twins(m: int, below: str) -> Dataflow:
        return Dataflow(tile("DRAM", f"{'m:2 ' if m == 3 else ''}k:2 n:2",
                             tile("L1", below, "g1"), tile("L1", below, "g2"),
                             primitive="Shar"))
    conv = Dataflow(tile("DRAM", "p:2:Sp",
                         tile("DRAM", "p:2", tile("L1", "r:3 p:2", "conv1")),
                         tile("DRAM", "t:2", tile("Reg", "t:2", "conv2")), primitive="Shar"))
    # twins m = 1: reads A 2 B 4 C 2 D 2, updates C 4 E 1 (E never read back);
    # m = 3: reads A 6 B 8 C 6 D 4, updates C 12 E 3; conv: reads A 3 W1 3 W2 3 X 2,
    # updates A 3 B 2
    return [(workload(TWINS, m=1, n=2, k=2, j=1), twins(1, ""), 15),
            (workload(TWINS, m=3, n=2, k=2, j=1), twins(3, "m:2"), 39),
            (workload(CONV, c0=1, c1=1, c2=1, p=2), conv, 16)]


@pytest.mark.parametrize("first", [False, True])
@pytest.mark.parametrize("case", range(3))
def test_revisited_epochs_and_overlapping_instances_in_the_batch(case: int, first: bool):
    """The batch gives the scalar model's counts on these trees, with and without
    first-touch fills in L1, at their own factors (the DRAM words by hand) and at rows
    around them (exact and clipped tilings)."""
    w, flow, dram = _revisits()[case]
    arch = replace(ARCH, levels=tuple(replace(lv, first_touch_fills=first and lv.name == "L1")
                                      for lv in ARCH.levels))
    structure = structure_of(w, arch, flow)
    if not first:
        assert scalar_evaluate(w, arch, flow).dram_words == dram
        assert evaluate_batch(structure, structure.default_factors[None, :]).dram_words[0] \
            == dram
    rows = random_rows(structure, 24, np.random.default_rng(case))
    compared, _ = assert_rows_equal(structure, rows)
    assert compared >= 5
