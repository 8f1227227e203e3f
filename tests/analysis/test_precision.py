"""Per-tensor precision (`precision_bits`): a tensor's footprint, its transfers' time and its
access energy scale by its bits over the accelerator's word; counts stay in elements.
GEMM m = n = k = 4 on DRAM -> L1 -> Reg with 16-bit words; A has 8-bit elements and the
accumulator C 32-bit ones. Every figure is derived by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import GEMM, scalar_evaluate, small_arch, workload

from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.structure import structure_of
from tileflow.specs.workload import parse_workload
from tileflow.specs.yamlfile import Field
from tileflow.tree import Dataflow, tile

W = workload(GEMM, m=4, n=4, k=4)
MIXED = replace(W, precision_bits={"A": 8, "C": 32})
FLOW = Dataflow(tile("DRAM", "", tile("L1", "m:4 n:4", tile("Reg", "k:4", "mm"))))


def test_footprints_count_accelerator_words():
    """L1 holds all of A, B and C (16 elements each): 8 + 16 + 32 words instead of 48. Reg
    holds a row of A and a column of B (4 elements each) and one C: 2 + 4 + 2."""
    r = evaluate(MIXED, small_arch(), FLOW)
    fp = {f.level: f.words for f in r.footprints}
    assert fp == {"L1": 8 + 16 + 32, "Reg": 2 + 4 + 2}


def test_counts_stay_in_elements_and_energy_scales():
    plain = evaluate(W, small_arch(), FLOW)
    mixed = evaluate(MIXED, small_arch(), FLOW)
    assert mixed.traffic == plain.traffic
    dram, base = mixed.energy_by_level_pj["DRAM"], plain.energy_by_level_pj["DRAM"]
    assert dram["A"] == pytest.approx(base["A"] / 2)
    assert dram["B"] == pytest.approx(base["B"])
    assert dram["C"] == pytest.approx(base["C"] * 2)
    assert mixed.energy_pj == pytest.approx(sum(c.energy_pj for c in mixed.components))


def test_transfers_take_time_by_their_words():
    """DRAM reads 4 words per cycle and writes 4: the root's loads move A (16 elements, 8
    words) and B (16 words): 6 cycles instead of 8; its stores write C (16 elements, 32
    words): 8 cycles instead of 4."""
    root = evaluate(MIXED, small_arch(), FLOW, overlap="perfect").latency_breakdown[0]
    assert (root.load_cycles, root.store_cycles) == (6, 8)
    plain = evaluate(W, small_arch(), FLOW, overlap="perfect").latency_breakdown[0]
    assert (plain.load_cycles, plain.store_cycles) == (8, 4)


def test_the_batched_evaluator_models_such_workloads():
    """The batch (not row by row) gives the hand-derived footprints and the scalar copy's
    cycles and energy; DRAM words stay in elements (A, B read once, C written once: 48)."""
    structure = structure_of(MIXED, small_arch(), FLOW)
    batch = evaluate_batch(structure, structure.default_factors[None, :])
    ref = scalar_evaluate(MIXED, small_arch(), FLOW)
    assert {lv: v[0] for lv, v in batch.footprint_words.items()} == \
        {"L1": 8 + 16 + 32, "Reg": 2 + 4 + 2}
    assert batch.dram_words[0] == 48
    assert batch.cycles[0] == pytest.approx(ref.cycles, rel=1e-9)
    assert batch.energy_pj[0] == pytest.approx(ref.energy_pj, rel=1e-9)


def _parse(extra: str):
    from ruamel.yaml import YAML

    return parse_workload(Field(YAML(typ="rt").load(GEMM + extra), "w.yaml"))


def test_roles_and_tensors_in_the_file():
    """`inputs: 8` gives A and B 8 bits; C's own entry wins over `outputs`."""
    w = _parse("precision_bits: {inputs: 8, outputs: 16, C: 32}\n")
    assert w.precision_bits == {"A": 8, "B": 8, "C": 32}


def test_an_unknown_name_is_an_error():
    with pytest.raises(InputError, match="'Q' is neither a tensor"):
        _parse("precision_bits: {Q: 8}\n")
