"""Timeloop's delta rule (`deltas: timeloop`, set by Timeloop imports): counts derived by
hand from each mapping's loop nest, against TileFlow's own rule (`deltas: exact`)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from helpers import GEMM, scalar_evaluate, workload
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_sim import Oracle
from trees import ARCH

from tests.interop.samples import (
    ARCH_16_PES,
    ARCH_ONE_PE,
    ARCH_TWO_STAGES,
    ARCH_V03,
    CONV_CP_MAPPING,
    CONV_OC_IC_PROBLEM,
    CONV_OC_PROBLEM,
    CONV_PROBLEM,
    CONV_SLIDING_MAPPING,
    CONV_STATIONARY_MAPPING,
    CONV_TWO_STAGES_PROBLEM,
    MAPPING_TWO_STAGES,
    write,
)
from tileflow.cli import main
from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.interop.export import timeloop_mapping
from tileflow.interop.files import load_arch_any, load_dataflow_any, load_workload_any
from tileflow.specs.arch import Architecture, parse_arch
from tileflow.specs.yamlfile import Field
from tileflow.tree import Dataflow, tile


def _with_deltas(arch: Architecture, deltas: str) -> Architecture:
    return replace(arch, levels=tuple(replace(lv, deltas=deltas) for lv in arch.levels))


def _traffic(tmp_path, arch_text: str, problem: str, mapping: str, deltas: str):
    arch = load_arch_any(write(tmp_path, "arch.yaml", arch_text))
    assert all(lv.deltas == "timeloop" for lv in arch.levels)  # the import's convention
    w = load_workload_any(write(tmp_path, "prob.yaml", problem))
    chip = _with_deltas(arch, deltas)
    flow = load_dataflow_any(write(tmp_path, "map.yaml", mapping), w, chip)
    return evaluate(w, chip, flow).traffic


@pytest.mark.parametrize(("deltas", "fills"), [("timeloop", 18_432), ("exact", 4_544)])
def test_window_that_jumps_back_is_refilled_whole(tmp_path, deltas, fills):
    """The 2020 tutorial's exercise 4, mapping `cp`. Each PE holds one channel c and the
    16 input rows [r, r + 15] (P:16 in its register); the Buffer runs C:2, K:32, R:3.
    Timeloop: at each (c, k) the window starts again at r = 0, a jump back (-2 rows) after
    two steps of +1, so it is refilled whole: 16 + 1 + 1 = 18 rows per (c, k), and
    2 x 32 x 18 = 1,152 per PE, 18,432 over the 16 PEs (Timeloop's reference output).
    TileFlow's own rule keeps the rows the windows share: per c, 18 at the first k, then
    rows 0 and 1 (back to [0, 15]) and one row at each of r = 1, 2: 18 + 31 x 4 = 142, so
    2 x 142 x 16 = 4,544. The PEs hold different channels: the Buffer reads what they are
    filled with under both rules."""
    t = _traffic(tmp_path, ARCH_16_PES, CONV_OC_IC_PROBLEM, CONV_CP_MAPPING, deltas)
    assert t["Reg"]["Inputs"].fill == fills
    assert t["Buffer"]["Inputs"].read == fills
    assert t["Buffer"]["Inputs"].fill == 32 * 18  # every input once
    assert t["Reg"]["Inputs"].read == 32 * 32 * 3 * 16  # one per MAC


@pytest.mark.parametrize(("deltas", "reads"), [("timeloop", 10 + 10), ("exact", 10 + 8)])
def test_window_that_stands_still_then_moves_is_refilled_whole(tmp_path, deltas, reads):
    """CONV_PROBLEM (stride 2, 3 taps, 2 channels) with DRAM loops P:2 (outer) and K:2: the
    Buffer holds both channels' rows [4p, 4p + 4], 10 words. Steps (p, k): (0, 0) fills 10;
    (0, 1) does not move the window (K does not index the inputs), a move of zero that
    Timeloop's releases up to 2024 take as the window's step; (1, 0) moves it by 4 rows,
    another step: refilled whole, 10 (TileFlow's rule keeps row 4: 8 new words); (1, 1)
    stands still again. DRAM is read what the Buffer is filled with."""
    t = _traffic(tmp_path, ARCH_V03, CONV_PROBLEM, CONV_STATIONARY_MAPPING, deltas)
    assert t["Buffer"]["Inputs"].fill == reads
    assert t["DRAM"]["Inputs"].read == reads


@pytest.mark.parametrize(("deltas", "fills"), [("timeloop", 25), ("exact", 18)])
def test_steps_past_the_second_count_as_the_second(tmp_path, deltas, fills):
    """CONV_OC_PROBLEM (rows p + r) with DRAM loops P:8 (outer) and R:3: the Buffer holds
    rows [2p + r, 2p + r + 1]. Timeloop evaluates iterations 0 and 1 of each loop and
    counts iteration 1's delta for every later one: steps (p, r) = (0, 0) fills 2 rows;
    (0, 1) x 2 moves +1 (its first move): 1 row each; (1, 0) x 7 comes after (0, 1), so
    the window moves +1 from [1, 2] to [2, 3], the same step: 1 row each; (1, 1) x 14:
    +1, 1 row each. 2 + 2 + 7 + 14 = 25. TileFlow's rule keeps every row held: the 18
    input rows once (at p > 0, r = 0 repeats the window r = 2 left)."""
    t = _traffic(tmp_path, ARCH_ONE_PE, CONV_OC_PROBLEM, CONV_SLIDING_MAPPING, deltas)
    assert t["Buffer"]["Inputs"].fill == fills
    assert t["DRAM"]["Inputs"].read == fills


@pytest.mark.parametrize(("deltas", "reads"), [("timeloop", 2 * 2 * 2), ("exact", 3 + 3)])
def test_each_fan_out_stage_multicasts_on_its_own(tmp_path, deltas, reads):
    """2 columns (inter_column_spatial: P) of 2 PEs (inter_PE_spatial: R) under the glb,
    which runs P:2: PE (q, r) holds input row 2p + q + r, one row, a new one at each of
    the 2 glb steps: 4 PEs x 2 = 8 register fills. Timeloop multicasts within a stage
    only what its instances share whole: the columns' windows (rows 2p + q .. 2p + q + 1)
    differ, and so do the PEs' rows within a column, so the glb sends 2 x 2 rows per step,
    8 in all, though PEs (0, 1) and (1, 0) take the same row. TileFlow's own rule sends the
    union of the 4 rows, rows 2p .. 2p + 2: 3 per step (none held before by every PE
    holding it now)."""
    t = _traffic(tmp_path, ARCH_TWO_STAGES, CONV_TWO_STAGES_PROBLEM, MAPPING_TWO_STAGES,
                 deltas)
    assert t["reg"]["Inputs"].fill == 4 * 2
    assert t["glb"]["Inputs"].read == reads
    assert t["glb"]["Inputs"].fill == t["DRAM"]["Inputs"].read == 5  # rows 0 .. 4


def test_fan_out_stages_export_as_the_level_spatial_directive(tmp_path):
    """The second stage is a tile of the glb's level holding only spatial loops: exported,
    its loops join the glb's spatial directive (R and P across the 4 PEs)."""
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_TWO_STAGES))
    w = load_workload_any(write(tmp_path, "prob.yaml", CONV_TWO_STAGES_PROBLEM))
    flow = load_dataflow_any(write(tmp_path, "map.yaml", MAPPING_TWO_STAGES), w, arch)
    spatial = [d for d in timeloop_mapping(flow, w, arch)["mapping"]
               if d["type"] == "spatial"]
    assert [(d["target"], sorted(d["factors"].split())) for d in spatial] == [
        ("glb", ["K=1", "P=2", "R=2"])]


def test_the_batched_evaluator_models_the_rule(tmp_path):
    """The batch counts Timeloop's sampled steps itself (no row by row): at the mapping's
    own factors it gives the 18,432 register fills of exercise 4 (their energy), and on
    rows around them it equals the scalar model, whole blocks included."""
    import numpy as np

    from tests.explore.test_batch import assert_rows_equal, covering_rows
    from tileflow.evaluator.batch import evaluate_batch
    from tileflow.evaluator.structure import structure_of

    v03 = load_arch_any(write(tmp_path, "arch.yaml", ARCH_16_PES))
    arch = replace(v03, levels=tuple(replace(lv, first_touch_fills=False,  # as v0.4 reads
                                             first_touch_reads_parent=True)
                                     for lv in v03.levels))
    w = load_workload_any(write(tmp_path, "prob.yaml", CONV_OC_IC_PROBLEM))
    flow = load_dataflow_any(write(tmp_path, "map.yaml", CONV_CP_MAPPING), w, arch)
    structure = structure_of(w, arch, flow)
    batch = evaluate_batch(structure, np.array([structure.default_factors]))
    ref = scalar_evaluate(w, arch, flow)
    assert ref.traffic["Reg"]["Inputs"].fill == 18_432
    exact = scalar_evaluate(w, _with_deltas(arch, "exact"), flow)
    assert batch.energy_pj[0] == pytest.approx(ref.energy_pj)
    assert batch.energy_pj[0] != pytest.approx(exact.energy_pj)  # the rule is in it
    assert batch.cycles[0] == pytest.approx(ref.cycles)
    rows = covering_rows(structure, 16, np.random.default_rng(4))
    compared, _ = assert_rows_equal(structure, rows)
    assert compared >= 12


def test_conventions_flag_sets_the_rule_and_the_default_keeps_it_off(tmp_path, capsys):
    """Exercise 4 `cp` imported (`tileflow import`), then written without the key: TileFlow's
    own rule (4,544 register fills); `--conventions timeloop` gives Timeloop's 18,432."""
    files = [write(tmp_path, "arch.yaml", ARCH_16_PES),
             write(tmp_path, "prob.yaml", CONV_OC_IC_PROBLEM),
             write(tmp_path, "map.yaml", CONV_CP_MAPPING)]
    assert main(["import", *files, "--out", str(tmp_path / "out")]) == 0
    arch = tmp_path / "out" / "arch.arch.yaml"
    assert "deltas: timeloop" in arch.read_text()
    arch.write_text(arch.read_text().replace("deltas: timeloop, ", ""))
    assert "deltas" not in arch.read_text()
    capsys.readouterr()
    fills = []
    for extra in ([], ["--conventions", "timeloop"]):
        assert main(["evaluate", "--arch", str(arch), "--workload",
                     str(tmp_path / "out" / "prob.workload.yaml"), "--dataflow",
                     str(tmp_path / "out" / "map.dataflow.yaml"), "--json", *extra]) == 0
        levels = json.loads(capsys.readouterr().out)["levels"]
        fills.append(levels["Reg"]["per_tensor"]["Inputs"]["fills"])
    assert fills == [4_544, 18_432]


NATIVE_ARCH = """
name: tiny
levels:
  - {name: DRAM, read_words_per_cycle: 4, write_words_per_cycle: 4}
  - {name: L1, capacity_words: 4096, read_words_per_cycle: 16, write_words_per_cycle: 16%s}
compute:
  matrix: {rows: 1, cols: 1, level: L1}
"""


def test_the_level_key_is_read_and_checked():
    from ruamel.yaml import YAML

    def parsed(extra: str) -> Architecture:
        return parse_arch(Field(YAML(typ="rt").load(NATIVE_ARCH % extra), "a.yaml"))

    assert [lv.deltas for lv in parsed("").levels] == ["exact", "exact"]
    assert parsed(", deltas: timeloop").levels[1].deltas == "timeloop"
    with pytest.raises(InputError, match="'deltas' must be one of exact, timeloop"):
        parsed(", deltas: sampled")


@st.composite
def _exactly_tiled(draw):
    """A GEMM under loops over m, k and n at DRAM and one step of each below, every
    dimension tiled exactly (a loop steps by the span of the loops inside it), in any
    interleaving: (workload, dataflow)."""
    sizes, per_dim, inner = {}, [], []
    for d in ("m", "k", "n"):
        extent = draw(st.integers(1, 2))
        factors = draw(st.lists(st.integers(2, 3), max_size=2))
        sizes[d] = extent * math.prod(factors)
        per_dim.append([f"{d}:{f}" for f in factors])
        inner.append(f"{d}:{extent}")
    nest = []
    while any(per_dim):
        pool = draw(st.sampled_from([p for p in per_dim if p]))
        nest.append(pool.pop(0))
    flow = Dataflow(tile("DRAM", " ".join(nest), tile("L1", " ".join(inner), "mm")))
    return workload(GEMM, **sizes), flow


@settings(max_examples=100, deadline=None)
@given(_exactly_tiled())
def test_both_rules_agree_on_tensors_tiled_exactly(case):
    """A slice of a tensor tiled exactly along whole dimensions is either the one before or
    disjoint from it: refilling it whole changes nothing, and steps past the second move it
    as the second did, so Timeloop's rule fills what TileFlow's does (docs/mechanisms.md:
    it only changes inputs whose slices overlap). The enumerating oracle under each rule;
    the model, which takes its closed forms on such tensors under either rule, agrees."""
    w, flow = case
    names = [lv.name for lv in ARCH.levels]
    sampled = Oracle(w, names, flow, timeloop=frozenset(names[1:]))
    assert sampled.traffic == Oracle(w, names, flow).traffic
    timeloop = evaluate(w, _with_deltas(ARCH, "timeloop"), flow).traffic
    assert {(lv, t): (m.fill, m.read, m.update) for lv, d in timeloop.items()
            for t, m in d.items()} == {k: tuple(v) for k, v in sampled.traffic.items()}
