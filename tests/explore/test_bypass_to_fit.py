"""A PE with 1-word registers (Timeloop's simple weight-stationary shape): every register
keeps one tensor and the others bypass it, so the structure search starts from valid trees."""

from __future__ import annotations

import numpy as np

from tileflow.cost import evaluate
from tileflow.dataflows import build
from tileflow.explore.structures.fitness import measure
from tileflow.explore.structures.structure_space import StructureSpace
from tileflow.explore.tilesearch.bypass import forced_bypass, with_forced_bypass
from tileflow.explore.tilesearch.fit import fit_baseline
from tileflow.specs.arch import parse_arch
from tileflow.specs.workload import parse_workload
from tileflow.specs.yamlfile import Field
from tileflow.tree import Tile, ops_under, walk

CONV = {"name": "conv", "dims": {"N": 1, "M": 4, "C": 2, "P": 4, "Q": 4, "R": 3, "S": 3},
        "ops": [{"name": "conv", "expr": "Outputs[N,M,Q,P] += Weights[C,M,R,S] * "
                                         "Inputs[N,C,R+P,S+Q]"}]}


def level(name: str, capacity: float, fanout: int = 1) -> dict:
    return {"name": name, "fanout": fanout, "capacity_words": capacity,
            "read_words_per_cycle": 16.0, "write_words_per_cycle": 16.0}


def chip(registers: tuple[str, str, str], room: float = 1.0):
    """DRAM > glb (64 words: less than the conv's 208) > spad (4 PEs, 16 words) > three
    registers of `room` words each, the 1x1 MAC at the last."""
    levels = [{"name": "DRAM", "read_words_per_cycle": 64.0, "write_words_per_cycle": 64.0},
              level("glb", 64.0), level("spad", 16.0, fanout=4),
              *(level(r, room) for r in registers)]
    doc = {"name": "pe-registers", "word_bits": 16, "levels": levels,
           "compute": {"matrix": {"rows": 1, "cols": 1, "level": registers[-1]}}}
    return parse_arch(Field(doc, "pe-registers.yaml"))


NAMED = ("weight_reg", "input_activation_reg", "output_activation_reg")
CONV_W = parse_workload(Field(CONV, "conv.yaml"))


def kept_at_registers(flow, arch, registers) -> dict[str, set[str]]:
    """Per register level, the tensors its tiles keep (used below them, not bypassed)."""
    out: dict[str, set[str]] = {}
    for _, node in walk(flow.root):
        if isinstance(node, Tile) and node.level in registers:
            used = {t for o in ops_under(node) for t in CONV_W.op_by_name[o].tensors}
            out.setdefault(node.level, set()).update(used - set(node.bypass))
    return out


def test_each_named_register_keeps_the_tensor_it_is_named_for():
    arch = chip(NAMED)
    index = arch.level_index
    keep = {"weight_reg": "Weights", "input_activation_reg": "Inputs",
            "output_activation_reg": "Outputs"}
    expected = {(t, index[r]) for r, k in keep.items()
                for t in ("Weights", "Inputs", "Outputs") if t != k}
    assert forced_bypass(CONV_W, arch) == expected


def test_unnamed_registers_keep_the_output_at_the_mac_and_a_different_tensor_each():
    regs = ("reg_a", "reg_b", "reg_c")
    arch = chip(regs)
    skips = forced_bypass(CONV_W, arch)
    gone = {r: {t for t, lv in skips if lv == arch.level_index[r]} for r in regs}
    kept = {r: {"Weights", "Inputs", "Outputs"} - gone[r] for r in regs}
    assert kept["reg_c"] == {"Outputs"}  # the MAC accumulates there
    assert all(len(k) == 1 for k in kept.values())
    assert set.union(*kept.values()) == {"Weights", "Inputs", "Outputs"}


def test_registers_with_room_for_every_tensor_are_left_alone():
    arch = chip(NAMED, room=3.0)
    assert forced_bypass(CONV_W, arch) == set()
    flow = build("layerwise", CONV_W, arch)
    assert with_forced_bypass(flow, CONV_W, arch) is flow


def test_the_structure_space_starts_valid_with_one_tensor_per_register():
    arch = chip(NAMED)
    space = StructureSpace(CONV_W, arch)
    st = space.structure(space.unfused())
    assert measure(st, np.asarray(st.default_factors)[None]).valid[0]
    kept = kept_at_registers(st.dataflow(st.default_factors), arch, NAMED)
    assert kept == {"weight_reg": {"Weights"}, "input_activation_reg": {"Inputs"},
                    "output_activation_reg": {"Outputs"}}
    rng = np.random.default_rng(0)
    for _ in range(10):  # every random and mutated encoding keeps one tensor per register
        enc = space.mutate(space.random(rng), rng)
        flow = space.structure(enc).dataflow(space.structure(enc).default_factors)
        assert all(len(k) == 1 for k in kept_at_registers(flow, arch, NAMED).values())


def test_the_layerwise_baseline_fits_by_passing_registers_it_cannot_fill():
    """Layerwise keeps its loops in the tile above the MAC's register, so no factors fit a
    block of one element there: its fit lets the tensors whose block overflows pass by."""
    arch = chip(NAMED)
    flow = fit_baseline("layerwise", CONV_W, arch)
    assert evaluate(CONV_W, arch, flow).valid
    kept = kept_at_registers(flow, arch, NAMED)
    assert all(len(k) <= 1 for k in kept.values())
    assert kept.get("output_activation_reg") == {"Outputs"}
