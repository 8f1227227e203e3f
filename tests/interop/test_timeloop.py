"""Timeloop architecture, problem and mapping files evaluate directly; the counts are
derived by hand in each test from the loop nest the mapping writes."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.interop.samples import (
    ARCH_ARRAY,
    ARCH_ONE_PE,
    ARCH_V03,
    ARCH_V04,
    CONV_MAPPING_SPATIAL,
    CONV_MAPPING_TEMPORAL,
    CONV_OC_MAPPING,
    CONV_OC_PROBLEM,
    CONV_PROBLEM,
    GEMM_64,
    GEMM_64_BYPASS,
    GEMM_MAPPING,
    GEMM_PROBLEM,
    write,
)
from tileflow.cli import main
from tileflow.cost import evaluate
from tileflow.interop.files import load_arch_any, load_dataflow_any, load_workload_any
from tileflow.specs.components import DRAM_PJ_PER_BIT


@pytest.fixture
def arch(tmp_path):
    return load_arch_any(write(tmp_path, "arch.yaml", ARCH_V03))


def run(tmp_path, arch, problem: str, mapping: str):
    w = load_workload_any(write(tmp_path, "prob.yaml", problem))
    flow = load_dataflow_any(write(tmp_path, "map.yaml", mapping), w, arch)
    return w, flow, evaluate(w, arch, flow)


def test_v03_architecture_levels_fanouts_and_units(arch):
    dram, buf, reg = arch.levels
    assert [lv.name for lv in arch.levels] == ["DRAM", "Buffer", "Reg"]
    assert buf.capacity_words == 1024 * 4  # depth x block_size
    assert reg.capacity_words == 16 and reg.fanout == 4 and reg.instances == 4  # PE[0..3]
    assert (arch.matrix.rows, arch.matrix.cols, arch.matrix.level) == (2, 2, "Reg")
    assert buf.read_words_per_cycle == 16 and dram.write_words_per_cycle == 4
    assert dram.read_energy_pj == pytest.approx(DRAM_PJ_PER_BIT["LPDDR4"] * 16)
    assert arch.technology_nm == 45 and buf.area_mm2 > 0


def test_v04_layout_gives_the_same_machine(tmp_path, arch):
    v04 = load_arch_any(write(tmp_path, "v04.yaml", ARCH_V04))
    # only the first-touch convention differs: Timeloop's releases that read v0.3 files
    # fill an output's first touch below the outermost level (without reading above)
    assert [(lv.first_touch_fills, lv.first_touch_reads_parent) for lv in arch.levels] == \
        [(False, True), (True, False), (True, False)]
    assert not any(lv.first_touch_fills for lv in v04.levels)
    assert v04.levels == tuple(replace(lv, first_touch_fills=False,
                                       first_touch_reads_parent=True) for lv in arch.levels)
    assert (v04.matrix.rows, v04.matrix.cols) == (2, 2)


def test_gemm_counts(tmp_path, arch):
    """DRAM loops M:2 (outer), N:3; the Buffer tile is M 4 x N 2 x K 4 (K:4, M:2 temporal,
    M:2 and N:2 across the PEs). A[M,K] does not change along N: read once (8 x 4); B[K,N]
    is swept again for each of the 2 M steps (2 x 4 x 6); each Z element is written once.
    Inside a DRAM step the Buffer visits each of its 16 A elements once (6 steps: 96) and
    each of its 8 B elements once (M is innermost and does not index B: 6 x 8 = 48)."""
    _, _, r = run(tmp_path, arch, GEMM_PROBLEM, GEMM_MAPPING)
    dram, buf = r.traffic["DRAM"], r.traffic["Buffer"]
    assert dram["A"].read == 8 * 4
    assert dram["B"].read == 2 * 4 * 6
    assert dram["Z"].update == 8 * 6 and dram["Z"].read == 0
    assert buf["A"].fill == 32 and buf["B"].fill == 48
    assert buf["A"].read == 6 * 16 and buf["B"].read == 6 * 8
    assert r.macs == 8 * 6 * 4
    dram_pj = (32 + 48 + 48) * DRAM_PJ_PER_BIT["LPDDR4"] * 16
    assert sum(r.energy_by_level_pj["DRAM"].values()) == pytest.approx(dram_pj)


def test_strided_convolution_reuses_the_window_overlap_over_time(tmp_path, arch):
    """Outputs P = 4 in two DRAM steps of 2; with stride 2 and 3 taps the steps need input
    rows [0, 4] and [4, 8]: 5 rows, then 4 new ones, for both channels: 2 x (5 + 4)."""
    w, _, r = run(tmp_path, arch, CONV_PROBLEM, CONV_MAPPING_TEMPORAL)
    assert w.shapes["Inputs"] == (2, 2 * (4 - 1) + 3)
    assert r.traffic["DRAM"]["Inputs"].read == 2 * (5 + 4)
    assert r.traffic["DRAM"]["Weights"].read == 2 * 2 * 3
    assert r.traffic["DRAM"]["Outputs"].update == 2 * 4


def test_overlapping_windows_on_two_instances(tmp_path, arch):
    """Buffer steps (c, k, po), outputs 2po and 2po + 1 on two PEs: windows [4po, 4po + 2]
    and [4po + 2, 4po + 4]. Each step moves both windows past what either PE held, so each
    PE is filled with its 3 rows at each of the 8 steps: 2 x 3 x 8 = 48 register fills.
    Timeloop's rule (the import's `deltas: timeloop`) sends each PE its own window (they
    differ, so nothing is multicast): the Buffer reads the 48 rows the registers take.
    TileFlow's own (`deltas: exact`) reads the union of the two windows once (5 rows, the
    shared row multicast): 5 rows x 4 steps per channel. Weights do not depend on P: both
    PEs take the same ones, multicast under either rule."""
    assert all(lv.deltas == "timeloop" for lv in arch.levels)
    for deltas, buffer_reads in (("timeloop", 2 * 3 * 8), ("exact", 2 * (5 + 5 + 5 + 5))):
        chip = replace(arch, levels=tuple(replace(lv, deltas=deltas) for lv in arch.levels))
        _, _, r = run(tmp_path, chip, CONV_PROBLEM, CONV_MAPPING_SPATIAL)
        assert r.traffic["Buffer"]["Inputs"].read == buffer_reads
        assert r.traffic["Reg"]["Inputs"].fill == 2 * 3 * 8
        assert r.traffic["Buffer"]["Weights"].read == 2 * 2 * 3  # multicast to both PEs
        assert r.traffic["Reg"]["Weights"].fill == 2 * (2 * 2 * 3)


def test_convolution_with_output_channels_on_one_pe(tmp_path):
    """Buffer loops K:16 (outer), P:16; the register holds Weights[2 k, 3 r], Inputs[3 rows],
    Outputs[2 k, 1 p] and runs K:2, R:3. Every MAC (32 x 3 x 16 = 1536) reads a weight and
    an input. Weights change with K only: 16 x 6 fills. Inputs slide along P: 3 rows, then
    1 new per step, again for each of the 16 K steps: 16 x 18. Each output is updated once
    per tap (1536) and read back except on its first touch (1536 - 512). Everything sits in
    the Buffer once: 96 weights, 18 input rows, 512 outputs. The file is v0.3, read with
    the conventions of Timeloop's releases of that time: each output's first touch is
    a fill at the register and at the Buffer (512 each), with nothing read above."""
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_ONE_PE))
    _, _, r = run(tmp_path, arch, CONV_OC_PROBLEM, CONV_OC_MAPPING)
    reg, buf, dram = r.traffic["Reg"], r.traffic["Buffer"], r.traffic["DRAM"]
    assert reg["Weights"].read == reg["Inputs"].read == 1536
    assert reg["Weights"].fill == 16 * 6 and reg["Inputs"].fill == 16 * 18
    assert reg["Outputs"].update == 1536 and reg["Outputs"].read == 1536 - 512
    assert reg["Outputs"].fill == 512 and buf["Outputs"].fill == 512
    assert buf["Outputs"].read == 0 and dram["Outputs"].read == 0
    assert buf["Weights"].read == 96 and buf["Inputs"].read == 16 * 18
    assert buf["Inputs"].fill == 18 and buf["Outputs"].update == 512
    assert dram["Weights"].read == 96 and dram["Inputs"].read == 18
    assert dram["Outputs"].update == 512
    assert arch.levels[1].capacity_words == 8192 * 32 and arch.technology_nm == 40


def test_loops_of_a_level_that_keeps_nothing_iterate_in_the_next_level_out(tmp_path):
    """Exercise 3's mapping with a Buffer that keeps no tensor: its loops K:16, P:16 run
    at the innermost position of DRAM (which has none of its own), and the register is
    filled from DRAM at each of their steps: the counts of the one-PE test above, with
    the Buffer's reads now DRAM's (weights 16 x 6 = 96, inputs 16 x 18 = 288, 512 output
    updates) and nothing at the Buffer. The same tree as the loops written at DRAM; the
    import's report notes the move."""
    from tileflow.interop.report import collecting

    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_ONE_PE))
    keeps_nothing = CONV_OC_MAPPING + (
        "- {target: Buffer, type: bypass, bypass: [Weights, Inputs, Outputs]}\n")
    with collecting() as found:
        _, flow, r = run(tmp_path, arch, CONV_OC_PROBLEM, keeps_nothing)
    assert any("'Buffer' keeps no tensor but has loops K:16 P:16" in n for n in found.notes)
    reg, dram = r.traffic["Reg"], r.traffic["DRAM"]
    assert "Buffer" not in r.traffic
    assert reg["Weights"].fill == 96 and reg["Inputs"].fill == 288
    assert reg["Weights"].read == reg["Inputs"].read == 1536
    assert dram["Weights"].read == 96 and dram["Inputs"].read == 288
    assert dram["Outputs"].update == 512 and dram["Outputs"].read == 0
    at_dram = keeps_nothing.replace("target: Buffer, type: temporal",
                                    "target: DRAM, type: temporal")
    _, written, same = run(tmp_path, arch, CONV_OC_PROBLEM, at_dram)
    assert flow.root == written.root and same.traffic == r.traffic


def test_evaluate_command_reads_the_three_files(tmp_path, capsys):
    args = ["evaluate", "--arch", write(tmp_path, "a.yaml", ARCH_V03),
            "--workload", write(tmp_path, "p.yaml", GEMM_PROBLEM),
            "--dataflow", write(tmp_path, "m.yaml", GEMM_MAPPING), "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["levels"]["DRAM"]["reads"] == 32 + 48
    assert sum(c["energy_pj"] for c in out["components"]) == pytest.approx(out["energy_pj"])


BAD = [
    (GEMM_MAPPING.replace("factors: M=2 N=3 K=1", "factors: M=? N=3 K=1"), "map",
     "'M=?' is not a number"),
    (GEMM_MAPPING + "- {target: DRAM, type: bypass, keep: [A, B], bypass: [Z]}\n", "map",
     "cannot bypass one"),
    (GEMM_MAPPING.replace("target: Reg", "target: L9"), "map", "unknown target 'L9'"),
    (GEMM_MAPPING.replace("permutation: KNM", "permutation: K"), "map",
     "does not place M, N"),
    (GEMM_MAPPING.replace("type: spatial", "type: diagonal"), "map", "'diagonal'"),
    (GEMM_MAPPING.replace("M=2 N=3 K=1", "M=3 N=3 K=1"), "map", "factors"),
    (ARCH_V03.replace("class: SRAM", "class: XY_NoC"), "arch", "class 'XY_NoC'"),
    (ARCH_V03.replace("version: 0.3", "version: 0.9"), "arch", "version 0.9"),
    (GEMM_PROBLEM.replace("read-write: True", "read-write: 'yes'"), "prob",
     "'read-write' must be true or false"),
    (GEMM_PROBLEM.replace("[[[M]], [[K]]]", "[[[M]], [[Q]]]"), "prob", "'Q'"),
    (GEMM_PROBLEM.replace("projection: [[[M]], [[N]]]", "projection: [[[M, 2]], [[N]]]"),
     "prob", "output index '2*M'"),
]


@pytest.mark.parametrize("text, kind, message", BAD, ids=[m for _, _, m in BAD])
def test_unsupported_constructs_are_errors_naming_file_and_line(tmp_path, capsys, text, kind,
                                                                 message):
    files = {"arch": ARCH_V03, "prob": GEMM_PROBLEM, "map": GEMM_MAPPING, kind: text}
    paths = {k: write(tmp_path, f"{k}.yaml", v) for k, v in files.items()}
    code = main(["evaluate", "--arch", paths["arch"], "--workload", paths["prob"],
                 "--dataflow", paths["map"]])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{kind}.yaml" in err and message in err and "Traceback" not in err
    if "factors" != message:
        assert "line" in err


def test_operands_that_bypass_the_registers_are_multicast_from_the_buffer(tmp_path):
    """64^3 MACs on 16 x 16 PEs: 4 x 4 x 64 = 1,024 steps. At each step the PEs need 16
    distinct A words (A[m, k] is shared along N) and 16 distinct B words: the buffer reads
    1,024 x 16 = 16,384 of each, not one per MAC (262,144), and its 32 words per cycle
    carry them in 1,024 cycles, the compute's."""
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_ARRAY))
    _, _, r = run(tmp_path, arch, GEMM_64, GEMM_64_BYPASS)
    assert r.macs == 64 ** 3
    assert r.traffic["GlobalBuffer"]["A"].read == 16_384
    assert r.traffic["GlobalBuffer"]["B"].read == 16_384
    assert r.traffic["RegisterFile"].get("A") is None
    assert r.cycles == 1024
