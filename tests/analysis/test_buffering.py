"""Buffering depth per tensor: footprints double for depth 2, transfers of a depth-1 tensor
serialise with the compute. Every figure below is derived by hand in the test."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import GEMM, small_arch, workload
from ruamel.yaml import YAML

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.specs.arch import parse_arch
from tileflow.specs.dataflow import parse_dataflow
from tileflow.specs.yamlfile import Field
from tileflow.tree import Dataflow, tile, to_dict

W = workload(GEMM, m=4, n=4, k=4)
# DRAM loop n:2 over an L1 tile m:4 n:2 k:4 on one MAC (one L1 instance used).
# L1 holds A 4x4 = 16, B 4x2 = 8, C 4x2 = 8 words.
# Per run: A loaded once (16 words) and B twice (2 x 8): 32 words at 4 words/cycle = 8
# cycles; 64 MAC steps; C written back per step, 16 words at 4 words/cycle = 4 cycles.
LOAD, COMPUTE, STORE, STEPS = 8, 64, 4, 2


def flow(**buffering) -> Dataflow:
    return Dataflow(tile("DRAM", "n:2", tile("L1", "m:4 n:2 k:4", "mm",
                                             buffering=buffering or None)))


def with_l1_default(depth: int):
    arch = small_arch()
    l1 = replace(arch.levels[1], buffering=depth)
    return replace(arch, levels=(arch.levels[0], l1, arch.levels[2]))


def l1_words(result) -> float:
    return result.peak_footprint("L1")


def test_unset_depth_keeps_the_published_convention():
    r = evaluate(W, small_arch(), flow(), overlap="perfect")
    assert r.cycles == max(LOAD, COMPUTE, STORE)
    assert l1_words(r) == 16 + 8 + 8


def test_double_buffering_doubles_the_footprint_and_overlaps():
    r = evaluate(W, with_l1_default(2), flow(), overlap="perfect")
    assert l1_words(r) == 2 * (16 + 8 + 8)
    assert r.cycles == max(LOAD, COMPUTE, STORE)


def test_a_single_buffered_output_writes_back_in_series_with_the_compute():
    r = evaluate(W, with_l1_default(2), flow(C=1), overlap="perfect")
    assert l1_words(r) == 2 * 16 + 2 * 8 + 8
    assert r.cycles == COMPUTE + STORE
    assert "single-buffered" in str(r.bottleneck)
    fill_drain = evaluate(W, with_l1_default(2), flow(C=1))
    # the whole run's critical path is load + compute + store; the overlapped part is 68
    assert fill_drain.cycles == COMPUTE + STORE + (LOAD + COMPUTE + STORE - 68) / STEPS


def test_single_buffered_inputs_load_in_series_with_the_compute():
    r = evaluate(W, small_arch(), flow(A=1, B=1), overlap="perfect")
    assert r.cycles == COMPUTE + LOAD
    assert l1_words(r) == 16 + 8 + 8


def test_the_level_default_applies_and_a_tile_overrides_it():
    everything_single = evaluate(W, with_l1_default(1), flow(), overlap="perfect")
    assert everything_single.cycles == LOAD + COMPUTE + STORE
    assert l1_words(everything_single) == 32
    only_c = evaluate(W, with_l1_default(1), flow(A=2, B=2), overlap="perfect")
    assert only_c.cycles == COMPUTE + STORE
    assert l1_words(only_c) == 2 * 16 + 2 * 8 + 8


def test_the_global_double_buffer_flag_is_the_default_for_unset_depths():
    assert l1_words(evaluate(W, small_arch(), flow(), double_buffer=True)) == 64
    assert l1_words(evaluate(W, small_arch(), flow(C=1), double_buffer=True)) == 56
    assert l1_words(evaluate(W, with_l1_default(1), flow(), double_buffer=True)) == 32


def test_a_doubled_footprint_beyond_the_capacity_is_a_violation():
    arch = with_l1_default(2)
    small = replace(arch.levels[1], capacity_words=40)
    arch = replace(arch, levels=(arch.levels[0], small, arch.levels[2]))
    r = evaluate(W, arch, flow())
    assert not r.valid
    capacity = next(v for v in r.violations if v.kind == "capacity")
    assert (capacity.level, capacity.needed, capacity.available) == ("L1", 64, 40)
    assert evaluate(W, arch, flow(A=1, B=1, C=1)).valid


def _yaml(text: str) -> Field:
    return Field(YAML(typ="rt").load(text), "f.yaml")


def test_yaml_keys_round_trip_and_bad_values_name_the_line():
    text = ("root: {level: DRAM, loops: [n:2], children: [{level: L1, loops: [m:4, n:2, k:4],"
            " buffering: {C: 1}, children: [mm]}]}\n")
    parsed = parse_dataflow(_yaml(text))
    assert parsed.root.children[0].buffering == (("C", 1),)
    assert to_dict(parsed)["root"]["children"][0]["buffering"] == {"C": 1}
    with pytest.raises(InputError, match="from 1 to 2"):
        parse_dataflow(_yaml(text.replace("{C: 1}", "{C: 3}")))
    with pytest.raises(InputError, match="mapping tensor -> 1 or 2"):
        parse_dataflow(_yaml(text.replace("{C: 1}", "[C]")))
    with pytest.raises(InvalidDataflow, match="buffering"):
        evaluate(W, small_arch(), parse_dataflow(_yaml(text.replace("{C: 1}", "{Z: 1}"))))
    arch = ("levels:\n  - {name: DRAM, read_words_per_cycle: 4, write_words_per_cycle: 4}\n"
            "  - {name: L1, capacity_words: 64, read_words_per_cycle: 8, "
            "write_words_per_cycle: 8, buffering: 2}\n"
            "compute: {matrix: {rows: 1, cols: 1, level: L1}}\n")
    assert parse_arch(_yaml(arch)).levels[1].buffering == 2
    for bad in ("0", "true", "'2'"):
        with pytest.raises(InputError, match="buffering"):
            parse_arch(_yaml(arch.replace("buffering: 2", f"buffering: {bad}")))
