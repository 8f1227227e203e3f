"""The component energy and area model: published anchor points, monotonicity, explicit
numbers winning over the model, and a per-component breakdown that adds up."""

from __future__ import annotations

import math
import textwrap

import pytest
from helpers import GEMM, workload
from hypothesis import given
from hypothesis import strategies as st

from tileflow.cli import main
from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.specs.arch import load_arch, parse_arch
from tileflow.specs.components import lane_cost, memory_cost, sram_access_pj
from tileflow.specs.yamlfile import Field, load_yaml
from tileflow.tree import Dataflow, tile

capacities = st.floats(64, 64 * 1024 * 1024)
widths = st.sampled_from([8, 16, 32, 64, 128, 256])
nodes = st.floats(5, 180)


def test_sram_reproduces_the_published_45nm_points():
    """Horowitz (ISSCC 2014): 64-bit reads of 8 KB, 32 KB and 1 MB SRAM: 10, 20, 100 pJ."""
    for kb, pj in ((8, 10.0), (32, 20.0), (1024, 100.0)):
        assert sram_access_pj(kb * 1024, 64, 45) == pytest.approx(pj)
    assert sram_access_pj(8 * 1024, 64, 22.5) == pytest.approx(5.0)  # linear in the node


@given(capacities, capacities, widths, nodes)
def test_sram_energy_and_area_grow_with_capacity(c1, c2, width, node):
    small, large = sorted((c1, c2))
    assert sram_access_pj(small, width, node) <= sram_access_pj(large, width, node)
    assert memory_cost("sram", small, 16, node).area_mm2 <= \
        memory_cost("sram", large, 16, node).area_mm2


@given(capacities, widths, widths, nodes)
def test_sram_access_energy_grows_with_width(capacity, w1, w2, node):
    narrow, wide = sorted((w1, w2))
    assert sram_access_pj(capacity, narrow, node) <= sram_access_pj(capacity, wide, node)


@given(capacities, widths, nodes, nodes)
def test_energy_and_area_shrink_with_the_node(capacity, width, n1, n2):
    fine, coarse = sorted((n1, n2))
    assert sram_access_pj(capacity, width, fine) <= sram_access_pj(capacity, width, coarse)
    for kind in ("sram", "regfile"):
        a, b = memory_cost(kind, capacity, 16, fine), memory_cost(kind, capacity, 16, coarse)
        assert a.read_pj <= b.read_pj and a.area_mm2 <= b.area_mm2
    for precision in ("int8", "fp16", "bf16", "fp32"):
        assert lane_cost(precision, fine)[0] <= lane_cost(precision, coarse)[0]
        assert lane_cost(precision, fine)[1] <= lane_cost(precision, coarse)[1]


def test_wider_precision_costs_more():
    energy = {p: lane_cost(p, 45)[0] for p in ("int8", "int16", "bf16", "fp16", "fp32")}
    assert energy["int8"] < energy["int16"] < energy["fp32"]
    assert energy["bf16"] < energy["fp16"] < energy["fp32"]
    assert energy["int8"] == pytest.approx(0.2 + 0.1)  # 8-bit multiply, 32-bit accumulate
    assert energy["fp32"] == pytest.approx(3.7 + 0.9)


def test_dram_energy_per_word_is_per_bit_times_word():
    assert memory_cost("dram", math.inf, 16, 45, dram_type="HBM2").read_pj == \
        pytest.approx(3.9 * 16)
    assert memory_cost("dram", math.inf, 8, 7, dram_type="DDR4").read_pj == \
        pytest.approx(15.0 * 8)


def test_a_wide_access_spreads_its_energy_over_its_words():
    one = memory_cost("sram", 65536, 16, 45, width_bits=16).read_pj
    four = memory_cost("sram", 65536, 16, 45, width_bits=64).read_pj
    assert four == pytest.approx(sram_access_pj(65536, 64, 45) / 4)
    assert four < one


ARCH = """
name: comp
technology_nm: 22
precision: int8
word_bits: 8
levels:
  - {name: DRAM, read_words_per_cycle: 8, write_words_per_cycle: 8, dram_type: LPDDR4}
  - {name: L1, capacity_bytes: 65536, fanout: 2, read_words_per_cycle: 16,
     write_words_per_cycle: 16, access_width_bits: 64}
  - {name: Reg, capacity_words: 8, fanout: 4, read_words_per_cycle: 2,
     write_words_per_cycle: 2}
compute:
  matrix: {rows: 2, cols: 2, level: Reg}
"""


def arch(text: str = ARCH, tmp_path=None):
    if tmp_path is None:
        from ruamel.yaml import YAML

        return parse_arch(Field(YAML(typ="rt").load(textwrap.dedent(text)), "a.yaml"))
    path = tmp_path / "a.yaml"
    path.write_text(textwrap.dedent(text))
    return parse_arch(Field(load_yaml(path), str(path)))


def test_levels_take_energy_and_area_from_the_named_components():
    a = arch()
    dram, l1, reg = a.levels
    assert dram.read_energy_pj == pytest.approx(8.0 * 8)  # LPDDR4, 8-bit words
    assert l1.read_energy_pj == pytest.approx(sram_access_pj(65536, 64, 22) / 8)
    cell_um2 = 0.346 / 0.7 * (22 / 45) ** 2
    assert l1.area_mm2 == pytest.approx(65536 * 8 * cell_um2 / 1e6)
    assert reg.component.startswith("register file")  # 8 bytes: a register file
    assert a.matrix.energy_pj_per_op == pytest.approx((0.2 + 0.1) * 22 / 45)


def test_explicit_numbers_win_over_the_component_model():
    text = ARCH.replace("access_width_bits: 64}", "access_width_bits: 64,\n"
                        "     energy_pj_per_word: 3.5}")
    text = text.replace("level: Reg}", "level: Reg, energy_pj_per_op: 0.25}")
    a = arch(text)
    assert a.levels[1].read_energy_pj == 3.5 and a.levels[1].area_mm2 > 0
    assert a.matrix.energy_pj_per_op == 0.25 and a.matrix.lane_area_mm2 > 0


def test_files_without_a_node_keep_their_numbers_and_have_no_area():
    edge = load_arch("edge")
    assert edge.levels[1].read_energy_pj == 100 and edge.levels[1].area_mm2 is None


def breakdown_total(result) -> float:
    return sum(c.energy_pj for c in result.components)


@pytest.mark.parametrize("name", ["component", "edge"])
def test_component_breakdown_adds_up_to_the_total(name):
    a = arch() if name == "component" else load_arch("edge")
    levels = [lv.name for lv in a.levels]
    w = workload(GEMM, m=8, n=8, k=8)
    flow = Dataflow(tile(levels[0], "m:2", tile(levels[1], "m:4 n:8 k:8",
                                                tile(levels[2], "", "mm"))))
    r = evaluate(w, a, flow)
    assert breakdown_total(r) == pytest.approx(r.energy_pj)
    matrix = next(c for c in r.components if c.kind == "matrix")
    assert matrix.energy_pj == pytest.approx(8 * 8 * 8 * a.matrix.energy_pj_per_op)
    if name == "component":
        l1 = next(c for c in r.components if c.component == "L1")
        assert l1.area_mm2 == pytest.approx(2 * a.levels[1].area_mm2)
        assert matrix.instances == 8  # 2 cores x 4 registers, one MAC each


@pytest.mark.parametrize("change, message", [
    ("technology_nm: 22", "technology_nm: 2"),
    ("technology_nm: 22", "technology_nm: .nan"),
    ("technology_nm: 22", "technology_nm: '22'"),
    ("precision: int8", "precision: int4"),
    ("dram_type: LPDDR4", "dram_type: DDR9"),
    ("access_width_bits: 64", "access_width_bits: 12"),
    ("access_width_bits: 64", "dram_type: HBM2"),
])
def test_bad_component_keys_name_the_line(tmp_path, change, message):
    text = ARCH.replace(*(change, message))
    with pytest.raises(InputError, match=r"a\.yaml, line \d+"):
        arch(text, tmp_path)


def test_component_keys_without_a_node_are_errors(tmp_path, capsys):
    text = ARCH.replace("technology_nm: 22\nprecision: int8\n", "")
    with pytest.raises(InputError, match="needs 'technology_nm'"):
        arch(text, tmp_path)
    path = tmp_path / "b.yaml"
    path.write_text(ARCH.replace("technology_nm: 22\n", ""))
    code = main(["evaluate", "--arch", str(path), "--workload", "gemm", "--dataflow",
                 "layerwise"])
    err = capsys.readouterr().err
    assert code == 2 and "b.yaml, line" in err and "technology_nm" in err


def test_detail_prints_the_component_table(tmp_path, capsys):
    path = tmp_path / "a.yaml"
    path.write_text(textwrap.dedent(ARCH))
    assert main(["evaluate", "--arch", str(path), "--workload", "gemm", "--set", "m=8",
                 "--set", "n=8", "--set", "k=8", "--dataflow", "layerwise", "--detail"]) == 0
    out = capsys.readouterr().out
    table = out.split("per component")[1]
    assert "SRAM 64 KB, 64-bit access, 22 nm" in table and "LPDDR4 DRAM" in table
    assert "int8 matrix lanes, 22 nm" in table
