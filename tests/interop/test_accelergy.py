"""An Accelergy energy reference table (ERT) gives an imported Timeloop architecture its
energies per level and action: the energy of a TileFlow run is then its counts (derived by
hand in tests/interop/test_timeloop.py for the same files) times the table's energies per
word. What the table holds that TileFlow has no use for is a note; a table that cannot be
read is an exit-2 error naming the file and the place."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.interop.samples import (
    ARCH_ONE_PE,
    CONV_OC_MAPPING,
    CONV_OC_PROBLEM,
    ERT_ONE_PE,
    ERT_ONE_PE_V03,
    write,
)
from tileflow.cli import main
from tileflow.cost import evaluate
from tileflow.interop.files import load_arch_any, load_dataflow_any, load_workload_any


def test_energy_is_the_counts_in_whole_blocks_times_the_tables_energies_per_word(tmp_path):
    """Per word: DRAM and Buffer divide their action energies by the 32-word block (100, 90,
    80 and 2, 1.5, 1 pJ), the register by 1 (0.5, 0.25, 0.125 pJ); a MAC 0.75 pJ.
    Counts (one PE; test_convolution_with_output_channels_on_one_pe): the register reads
    1536 weights, 1536 inputs and 1024 outputs (4096 x 0.5 = 2048), fills 96 + 288 + 512
    (896 x 0.25 = 224) and updates 1536 (x 0.125 = 192): 2464. Whole 32-word blocks per
    tensor and action on the one instance of Buffer and DRAM (Timeloop's accounting): the
    Buffer reads 96 + 288 (both whole blocks: 384 x 2 = 768), fills 96 + 18 (one block: 32)
    + 512 (640 x 1.5 = 960), updates 512 (x 1 = 512): 2240 (2219 word by word). DRAM reads
    96 + 18 (32: 128 x 100 = 12,800) and is updated 512 times (x 80 = 40,960): 53,760
    (52,360 word by word). 1536 MACs x 0.75 = 1152. The Buffer leaks 0.01 pJ per cycle on
    its one instance over the 1536 cycles (one MAC per cycle): 15.36 pJ."""
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_ONE_PE),
                         write(tmp_path, "ert.yaml", ERT_ONE_PE))
    dram, buf, reg = arch.levels
    assert (dram.read_energy_pj, dram.write_energy_pj, dram.update_energy_pj) == (100, 90, 80)
    assert (buf.read_energy_pj, buf.write_energy_pj, buf.update_energy_pj) == (2, 1.5, 1)
    assert (reg.read_energy_pj, reg.write_energy_pj, reg.update_energy_pj) == \
        (0.5, 0.25, 0.125)
    assert (dram.block_words, buf.block_words, reg.block_words) == (32, 32, 1)
    assert (dram.leakage_pj_per_cycle, buf.leakage_pj_per_cycle) == (0, 0.01)
    assert arch.matrix.energy_pj_per_op == 0.75
    w = load_workload_any(write(tmp_path, "prob.yaml", CONV_OC_PROBLEM))
    flow = load_dataflow_any(write(tmp_path, "map.yaml", CONV_OC_MAPPING), w, arch)
    r = evaluate(w, arch, flow)
    by_level = {lv: sum(parts.values()) for lv, parts in r.energy_by_level_pj.items()}
    assert by_level == {"Reg": 2464, "Buffer": 2240, "DRAM": 53760}
    assert r.cycles == 1536
    assert r.leakage_pj == pytest.approx({"Buffer": 15.36})
    assert r.compute_energy_pj == 1152
    assert r.energy_pj == pytest.approx(2464 + 2240 + 53760 + 1152 + 15.36)
    costs = {c.component: c.energy_pj for c in r.components}
    assert costs["Buffer"] == pytest.approx(2240 + 15.36)
    assert sum(costs.values()) == pytest.approx(r.energy_pj)


def test_a_v03_table_charges_every_access_at_the_largest_energy(tmp_path):
    """Version 0.3 (Timeloop up to 2022): the largest energy over an action's argument
    variants (read 0.5), and every access of the component at its largest action (write
    and update too); the compute at mac_random. Components without a table keep
    TileFlow's own energies."""
    plain = load_arch_any(write(tmp_path, "arch.yaml", ARCH_ONE_PE))
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_ONE_PE),
                         write(tmp_path, "ert.yaml", ERT_ONE_PE_V03))
    reg = arch.level("Reg")
    assert (reg.read_energy_pj, reg.write_energy_pj, reg.update_energy_pj) == (0.5,) * 3
    assert arch.matrix.energy_pj_per_op == 0.75
    assert arch.level("DRAM") == plain.level("DRAM")


def test_import_writes_the_energies_and_notes_what_it_does_not_use(tmp_path, capsys):
    """`--ert` (or the ERT among the files, as Timeloop takes it) writes the energies into
    the imported accelerator, the Buffer's leak as its leakage and the blocks as its
    `block_words`; the MAC's leak (Timeloop's total leaves it out), the register's
    gated_read and the NoC's table are noted, with their lines."""
    arch = write(tmp_path, "arch.yaml", ARCH_ONE_PE)
    ert = write(tmp_path, "ert.yaml", ERT_ONE_PE.replace(
        "    - {name: compute, arguments: {}, energy: 0.75}\n",
        "    - {name: compute, arguments: {}, energy: 0.75}\n"
        "    - {name: leak, arguments: {}, energy: 0.002}\n"))
    for args in (["--ert", ert], [ert]):
        out = tmp_path / f"out{len(args)}"
        assert main(["import", arch, *args, "--out", str(out)]) == 0
        said = capsys.readouterr().out
        levels = yaml.safe_load((out / "arch.arch.yaml").read_text())["levels"]
        assert levels[1]["energy_pj_per_word"] == {"read": 2, "write": 1.5, "update": 1}
        assert levels[1]["leakage_pj_per_cycle"] == 0.01 and levels[1]["block_words"] == 32
        assert "'leak' of 'Buffer'" not in said
        assert f"{ert}, line 25 (ERT.tables[3].actions[1].name)" in said
        assert "'leak' of 'MAC'" in said and "not imported" in said
        assert "'gated_read' of 'Reg'" in said
        assert "'NoC' matches no storage level or compute unit" in said


@pytest.mark.parametrize("text, place, words", [
    (ERT_ONE_PE.replace("energy: 48.0", "energy: lots"), "line 12 (ERT.tables[1].actions[0]"
     ".energy)", "'energy' must be a number"),
    (ERT_ONE_PE.replace("version: '0.4'", "version: '0.9'"), "line 3 (ERT.version)",
     "version '0.9' is not supported"),
    (ERT_ONE_PE.replace("  - name: System.Chip.NoC[1..1]\n", "  - nom: NoC\n"),
     "(ERT.tables[4].nom)", "unknown key 'nom'"),
    (ERT_ONE_PE.replace("{name: transfer, arguments: {}, energy: 1.0}", "{name: transfer}"),
     "(ERT.tables[4].actions[0])", "missing required key 'energy'"),
    (ERT_ONE_PE.replace("System.Chip.NoC", "Other.Reg"), "(ERT.tables[4].name)",
     "two tables"),
    (ERT_ONE_PE.replace("ERT:", "ERTS:"), "", "no 'ERT:' at the top"),
], ids=["energy", "version", "key", "no-energy", "twice", "not-ert"])
def test_a_table_that_cannot_be_read_is_an_error_naming_file_and_place(text, place, words,
                                                                      tmp_path, capsys):
    arch = write(tmp_path, "arch.yaml", ARCH_ONE_PE)
    ert = write(tmp_path, "ert.yaml", text)
    code = main(["import", arch, "--ert", ert, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and f"ert.yaml{', ' if place else ''}" in err and place in err, err
    assert words in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_an_ert_needs_its_architecture_and_an_existing_file(tmp_path, capsys):
    ert = write(tmp_path, "ert.yaml", ERT_ONE_PE)
    prob = write(tmp_path, "prob.yaml", CONV_OC_PROBLEM)
    assert main(["import", prob, ert, "--out", str(tmp_path / "out")]) == 2
    assert "give the architecture's file" in capsys.readouterr().err
    arch = write(tmp_path, "arch.yaml", ARCH_ONE_PE)
    missing = str(tmp_path / "nowhere.yaml")
    assert main(["import", arch, "--ert", missing, "--out", str(tmp_path / "out")]) == 2
    assert f"{missing}: no such file" in capsys.readouterr().err


def test_evaluate_takes_the_table_beside_a_timeloop_architecture(tmp_path, capsys):
    """`evaluate --ert` gives the same energy as the import (59,631.36 pJ, derived above);
    beside a TileFlow accelerator it is refused."""
    files = ["--arch", write(tmp_path, "arch.yaml", ARCH_ONE_PE),
             "--workload", write(tmp_path, "prob.yaml", CONV_OC_PROBLEM),
             "--dataflow", write(tmp_path, "map.yaml", CONV_OC_MAPPING)]
    ert = write(tmp_path, "ert.yaml", ERT_ONE_PE)
    assert main(["evaluate", *files, "--ert", ert, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["energy_pj"] == pytest.approx(59631.36)
    files[1] = "edge"
    assert main(["evaluate", *files, "--ert", ert]) == 2
    assert "edge: an Accelergy ERT goes with a Timeloop architecture" in \
        capsys.readouterr().err


def test_a_missing_action_takes_a_stand_in_and_says_so(tmp_path, capsys):
    """The register's table without write and update: fills and updates cost its read
    (0.5 pJ), and the report says so for each."""
    text = ERT_ONE_PE.replace("    - {name: write, arguments: {}, energy: 0.25}\n", "") \
        .replace("    - {name: update, arguments: {}, energy: 0.125}\n", "")
    arch = write(tmp_path, "arch.yaml", ARCH_ONE_PE)
    ert = write(tmp_path, "ert.yaml", text)
    assert main(["import", arch, "--ert", ert, "--out", str(tmp_path / "out")]) == 0
    said = capsys.readouterr().out
    levels = yaml.safe_load((tmp_path / "out" / "arch.arch.yaml").read_text())["levels"]
    assert levels[2]["energy_pj_per_word"] == {"read": 0.5, "write": 0.5, "update": 0.5}
    assert "'Reg' has no write action: taken as its 'read'" in said
    assert "'Reg' has no update action: taken as its 'read'" in said
