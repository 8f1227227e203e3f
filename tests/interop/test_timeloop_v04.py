"""Timeloop v0.4 files as the example designs and the mapper write them: MAC widths,
containers, `!Parallel` registers, `inter_*_spatial` targets, run-together factors (K4),
`dataspace` directives, extra problem keys. What has no effect becomes a note in the
import's report; what cannot be read is refused with every problem of the file listed."""

from __future__ import annotations

import pytest

from tests.interop.samples import (
    ARCH_V03_DESIGN,
    ARCH_V04_DESIGN,
    GEMM_MAPPING,
    GEMM_PROBLEM,
    GEMM_PROBLEM_V04,
    MAPPING_V04_MAPPER,
    write,
)
from tileflow.cli import main
from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.interop.files import load_arch_any, load_dataflow_any, load_workload_any
from tileflow.interop.report import collecting


@pytest.fixture
def design(tmp_path):
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_V04_DESIGN))
    w = load_workload_any(write(tmp_path, "prob.yaml", GEMM_PROBLEM_V04))
    return w, arch


def test_parallel_registers_become_levels_in_the_order_listed(design):
    """DRAM, the buffer, then the !Parallel's registers outer to inner (as Timeloop nests
    them), each on the 2 x 2 PEs; one MAC per PE."""
    _, arch = design
    assert [lv.name for lv in arch.levels] == ["DRAM", "glb", "a_reg", "z_reg"]
    assert [lv.instances for lv in arch.levels] == [1, 1, 4, 4]
    assert arch.levels[2].capacity_words == 1 and arch.matrix.level == "z_reg"
    assert arch.overlap == "perfect"


def test_the_mappers_file_evaluates_with_hand_derived_counts(tmp_path, design):
    """Loops, outer to inner: DRAM M:2 | glb N:1 M:2 K:4, M:2 x N:2 over the PEs (the
    inter_PE_spatial factors) | a_reg N:3. 192 MACs in 2 x 2 x 4 x 3 = 48 steps.
    A[m, k] sits in a_reg across its N loop: 16 glb steps fill the 4 registers (64 fills),
    the buffer sending 2 distinct words per step (32 reads, multicast along N). B skips
    both registers: the MACs read it from the buffer, 2 distinct words per step (B[k, n]
    is the same for both M): 48 x 2 = 96. DRAM sends A once (32) and B once (24: the
    buffer keeps it across DRAM's M loop, which does not index it)."""
    w, arch = design
    flow = load_dataflow_any(write(tmp_path, "map.yaml", MAPPING_V04_MAPPER), w, arch)
    r = evaluate(w, arch, flow)
    assert r.macs == 192 and r.cycles == 48
    assert r.traffic["glb"]["A"].read == 32 and r.traffic["a_reg"]["A"].fill == 64
    assert r.traffic["glb"]["B"].read == 96
    assert r.traffic["DRAM"]["A"].read == 32 and r.traffic["DRAM"]["B"].read == 24


def test_what_has_no_effect_is_noted_in_the_import_report(tmp_path, capsys):
    paths = [write(tmp_path, "arch.yaml", ARCH_V04_DESIGN),
             write(tmp_path, "prob.yaml", GEMM_PROBLEM_V04),
             write(tmp_path, "map.yaml", MAPPING_V04_MAPPER)]
    assert main(["import", *paths, "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.count("wrote ") == 3
    for text in ("'constraints' are mapper input", "'n_banks'", "'adder_width'", "'H' is",
                 "'Hpad' is"):
        assert text in out, text


def test_a_factor_0_takes_what_the_others_leave(tmp_path, design):
    w, arch = design
    text = MAPPING_V04_MAPPER.replace("factors: M2 N1 K4", "factors: M2 N1 K0")
    flow = load_dataflow_any(write(tmp_path, "map.yaml", text), w, arch)
    assert evaluate(w, arch, flow).cycles == 48


def test_a_container_named_as_the_spatial_target(tmp_path, design):
    w, arch = design
    text = MAPPING_V04_MAPPER.replace("target: inter_PE_spatial, type: spatial",
                                      "target: PE, type: spatial")
    flow = load_dataflow_any(write(tmp_path, "map.yaml", text), w, arch)
    assert evaluate(w, arch, flow).traffic["glb"]["B"].read == 96


def test_one_refusal_lists_every_problem_of_the_file(tmp_path, capsys):
    """An unknown node tag, an unknown node key and a network class: three problems, one
    message, exit status 2."""
    bad = (ARCH_V04_DESIGN
           .replace("  - !Parallel\n", "  - !Network\n    name: noc\n  - !Parallel\n")
           .replace("    name: glb\n", "    name: glb\n    floorplan: left\n")
           .replace("class: smartbuffer_SRAM", "class: XY_NoC"))
    path = write(tmp_path, "arch.yaml", bad)
    with collecting(), pytest.raises(InputError) as caught:
        load_arch_any(path)
    message = caught.value.message
    assert message.startswith("3 things TileFlow cannot read")
    for text in ("!Network", "'floorplan'", "class 'XY_NoC'"):
        assert text in message, text
    code = main(["import", path, write(tmp_path, "p.yaml", GEMM_PROBLEM)])
    err = capsys.readouterr().err
    assert code == 2 and "!Network" in err and "XY_NoC" in err and "Traceback" not in err


def test_import_of_a_missing_file_says_so(tmp_path, capsys):
    code = main(["import", str(tmp_path / "nowhere.yaml"),
                 write(tmp_path, "m.yaml", GEMM_MAPPING)])
    assert code == 2 and "no such file" in capsys.readouterr().err


def test_a_2022_design_layout(tmp_path):
    """The MAC may precede the registers in its list; `data_storage_depth` is the depth; a
    depth-0 buffer is a fan-out: glb spreads over the 2 dummies (N:2), each dummy over 2 of
    the 4 PEs (M:2), both held by glb as its spatial loops. 48 steps of 4 MACs."""
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_V03_DESIGN))
    assert [lv.name for lv in arch.levels] == ["DRAM", "glb", "a_reg", "z_reg"]
    assert arch.levels[1].capacity_words == 1024 * 4
    assert [lv.instances for lv in arch.levels] == [1, 1, 4, 4]
    w = load_workload_any(write(tmp_path, "prob.yaml", GEMM_PROBLEM))
    mapping = """
mapping:
- {target: DRAM, type: temporal, factors: M=1 N=1 K=1}
- {target: glb, type: temporal, factors: M=4 N=3 K=4, permutation: KNM}
- {target: dummy, type: spatial, factors: M=2, permutation: M}
- {target: glb, type: spatial, factors: N=2, permutation: N}
- {target: a_reg, type: bypass, keep: [A], bypass: [B, Z]}
"""
    flow = load_dataflow_any(write(tmp_path, "map.yaml", mapping), w, arch)
    r = evaluate(w, arch, flow)
    assert r.macs == 192 and r.cycles == 4 * 3 * 4
