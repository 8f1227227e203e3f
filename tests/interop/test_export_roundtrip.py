"""Round trips of whole designs: every shipped accelerator with a GEMM tiling built for it is
exported as Timeloop v0.4 files (architecture, ERT, problem, mapping), imported back, and the
import gives the original's numbers under Timeloop's conventions (counts per level and
tensor, cycles, energy); where a number cannot survive, the export's note says so and the
difference is exactly the convention the note names."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tileflow.cli import _with_overlap, main
from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.interop.export import export_folder
from tileflow.interop.files import load_arch_any, load_dataflow_any, load_workload_any
from tileflow.shipped import shipped
from tileflow.specs.arch import Architecture, load_arch, parse_arch
from tileflow.specs.dataflow import load_dataflow_file
from tileflow.specs.workload import Workload, load_workload
from tileflow.specs.yamlfile import Field
from tileflow.tree import Dataflow, Loop, Op, Tile

CHIPS = sorted(shipped("accelerators"))
FIRST_TOUCH = "first_touch_fills"  # the one convention of a shipped chip a v0.4 file loses


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def spread(arch: Architecture, i: int) -> tuple[int, int] | None:
    """rows x cols of the array a tile at level i spreads over, or None for a row."""
    m, levels = arch.matrix, arch.levels
    if i + 1 < len(levels):
        below = levels[i + 1]
        if below.name == m.level and m.parallelism == 1 and m.rows * m.cols == below.fanout \
                and m.rows > 1 and m.cols > 1:
            return m.rows, m.cols
        return None
    return (m.rows, m.cols) if m.parallelism > 1 and m.rows > 1 and m.cols > 1 else None


def room(arch: Architecture, i: int) -> int:
    levels = arch.levels
    return levels[i + 1].fanout if i + 1 < len(levels) else arch.matrix.parallelism


def chip_tiling(arch: Architecture, w: Workload, rng: random.Random | None = None) -> Dataflow:
    """An exact tiling of a one-operator workload for this chip: at each level spatial loops
    over the output's last two dimensions (m and n of a GEMM) that fill the fan-out below (on
    an array, the first along its rows (x), the second along its columns (y)); without `rng`
    the largest such factors, the other dimensions' rest at the outermost level and the
    reduction dimensions at the next; with it, random divisors, a random split of the rest
    over the levels, random loop orders and, half the time, some tensors kept out of one
    inner level."""
    op = w.ops[0]
    across = op.output.dims[-2:]  # two output dimensions spread over the instances
    reduced = set(op.reduction_dims)
    rest = dict(w.sizes)
    groups: list[list[Loop]] = []
    for i in range(len(arch.levels)):
        array = spread(arch, i)
        caps = dict(zip(across, array, strict=True)) if array else {
            across[0]: room(arch, i), across[1]: None}
        loops = []
        free = room(arch, i)
        for dim in across:
            cap = caps[dim] if caps[dim] is not None else free
            options = [d for d in divisors(math.gcd(rest[dim], cap)) if free % d == 0]
            factor = rng.choice(options) if rng else max(options)
            if factor > 1:
                loops.append(Loop(dim, factor, True, ("x" if dim == across[0] else "y")
                                  if array else ""))
                rest[dim] //= factor
                free //= factor
        groups.append(loops)
    temporal: list[list[Loop]] = [[] for _ in arch.levels]
    for dim, size in rest.items():
        if rng is None:
            at = 1 if dim in reduced and len(arch.levels) > 1 else 0
            temporal[at].append(Loop(dim, size))
            continue
        parts = [1] * len(arch.levels)
        n, p = size, 2
        while n > 1:
            while n % p == 0:
                parts[rng.randrange(len(parts))] *= p
                n //= p
            p += 1
        for at, factor in enumerate(parts):
            if factor > 1:
                temporal[at].append(Loop(dim, factor))
    if rng is not None:
        for loops in temporal:
            rng.shuffle(loops)
    bypass: dict[int, tuple[str, ...]] = {}
    if rng is not None and len(arch.levels) > 1 and rng.random() < 0.5:
        tensors = list(w.ops[0].tensors)  # some (not all) kept out of one inner level
        bypass[rng.randrange(1, len(arch.levels))] = tuple(
            rng.sample(tensors, rng.randrange(1, len(tensors))))
    node: Tile | Op = Op(w.ops[0].name)
    for i in reversed(range(len(arch.levels))):
        node = Tile(arch.levels[i].name, tuple(temporal[i] + groups[i]), (node,),
                    bypass=bypass.get(i, ()))
    return Dataflow(node)


def round_trip(folder: Path, arch: Architecture, w: Workload, flow: Dataflow):
    """Export, import from the files, evaluate both: (original, imported, notes)."""
    _, notes = export_folder(folder, flow, w, arch)
    imported_arch = load_arch_any(str(folder / "arch.yaml"), folder / "ERT.yaml")
    imported_w = load_workload_any(str(folder / "problem.yaml"))
    imported_flow = load_dataflow_any(folder / "mapping.yaml", imported_w, imported_arch)
    original = evaluate(w, _with_overlap(arch, None, "timeloop"), flow)
    return original, evaluate(imported_w, imported_arch, imported_flow), notes


def assert_same_numbers(original, imported) -> None:
    assert imported.traffic == original.traffic  # every level, tensor, fill/read/update
    assert imported.cycles == original.cycles
    assert imported.valid == original.valid
    assert imported.macs == original.macs
    assert imported.energy_pj == pytest.approx(original.energy_pj, rel=1e-12)
    for level, by_tensor in original.energy_by_level_pj.items():
        assert imported.energy_by_level_pj[level] == pytest.approx(by_tensor, rel=1e-12)
    assert imported.latency_ms == pytest.approx(original.latency_ms, rel=1e-12)


def without_first_touch(arch: Architecture) -> Architecture:
    return replace(arch, levels=tuple(replace(lv, first_touch_fills=False)
                                      for lv in arch.levels))


@pytest.fixture(scope="module")
def gemm() -> Workload:
    return load_workload("gemm")


@pytest.mark.parametrize("chip", CHIPS)
def test_every_shipped_chip_round_trips(tmp_path, gemm, chip):
    arch = load_arch(chip)
    flow = chip_tiling(arch, gemm)
    original, imported, notes = round_trip(tmp_path, arch, gemm, flow)
    assert original.valid, original.violations  # a tiling that fits the chip
    assert any("--conventions timeloop" in n for n in notes)
    assert any("vector unit" in n for n in notes) == (not arch.vector_on_matrix)
    touched = [lv.name for lv in arch.levels if lv.first_touch_fills]
    if not touched:
        assert_same_numbers(original, imported)
        return
    # a v0.4 file cannot say that outputs are filled on their first touch: the note names
    # each such level, and without that convention the numbers are the same
    for name in touched:
        assert any(n.startswith(f"{name}: {FIRST_TOUCH}") for n in notes)
    assert imported.traffic != original.traffic
    again = evaluate(gemm, _with_overlap(without_first_touch(arch), None, "timeloop"), flow)
    assert_same_numbers(again, imported)


@pytest.mark.parametrize("chip", [c for c in CHIPS if not c.startswith("gpu")])
def test_the_layerwise_baseline_round_trips(tmp_path, gemm, chip):
    """The shipped layerwise tree of one GEMM (a loopless layer tile above the operator's
    tiles) is a Timeloop mapping."""
    from tileflow.dataflows import build

    arch = without_first_touch(load_arch(chip))
    original, imported, _ = round_trip(tmp_path, arch, gemm, build("layerwise", gemm, arch))
    assert_same_numbers(original, imported)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 10**6))
def test_random_exact_tilings_of_random_chips_round_trip(tmp_path_factory, gemm, seed):
    rng = random.Random(seed)
    arch = without_first_touch(load_arch(rng.choice(CHIPS)))
    sizes = {d: rng.choice([16, 32, 48, 64, 96]) for d in gemm.sizes}
    w = load_workload("gemm", sizes)
    flow = chip_tiling(arch, w, rng)
    original, imported, _ = round_trip(tmp_path_factory.mktemp("rt"), arch, w, flow)
    assert_same_numbers(original, imported)


def test_what_timeloop_cannot_state_becomes_a_note(tmp_path, gemm):
    arch = parse_arch(Field({
        "name": "odd", "clock_ghz": 2.5, "word_bits": 16,
        "levels": [
            {"name": "DRAM", "read_bandwidth_gbps": 50, "write_bandwidth_gbps": 50,
             "latency_cycles": 100},
            {"name": "Buf", "capacity_bytes": 1001, "buffering": 2, "ports": "shared",
             "read_words_per_cycle": 8, "write_words_per_cycle": 4,
             "step_overhead_cycles": 3},
            {"name": "Reg", "capacity_words": 4, "fanout": 8, "mesh": [2, 4],
             "read_words_per_cycle": 2, "write_words_per_cycle": 2, "buffering": 1}],
        "compute": {"matrix": {"rows": 2, "cols": 4, "level": "Reg",
                               "cycles_per_op": 2}}}, "odd.yaml"))
    from tileflow.interop.export_arch import timeloop_architecture

    exported = timeloop_architecture(arch)
    text = "\n".join(exported.notes)
    for expected in ("DRAM: latency_cycles 100 not written", "Buf: step_overhead_cycles 3",
                     "Buf: capacity 500.5 words written as depth 500",
                     "Buf: 'buffering: 2' written as multiple_buffering 2",
                     "Buf: one shared port at 8 words per cycle",
                     "Reg: 'buffering: 1'", "Reg: mesh 2 x 4", "cycles_per_op",
                     "overlap fill-drain"):
        assert expected in text
    buf = next(n for n in exported.arch["architecture"]["nodes"] if n["name"] == "Buf")
    assert buf["attributes"]["shared_bandwidth"] == 8
    assert buf["attributes"]["multiple_buffering"] == 2
    array = next(n for n in exported.arch["architecture"]["nodes"] if n["name"] == "Reg_array")
    assert array["spatial"] == {"meshX": 4, "meshY": 2}  # TileFlow's x (2) is Timeloop's Y


def test_the_command_writes_four_files_that_import_to_the_same_numbers(tmp_path, capsys):
    out = tmp_path / "tl"
    assert main(["export-timeloop", "--arch", "tpu-like", "--workload", "gemm",
                 "--dataflow", "layerwise", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["ERT.yaml", "arch.yaml", "mapping.yaml",
                                                    "problem.yaml"]
    assert "notes (2):" in printed and "vector unit" in printed
    assert "# note: vector unit" in (out / "arch.yaml").read_text()
    back = tmp_path / "back"
    assert main(["import", *(str(p) for p in sorted(out.iterdir())), "--out", str(back)]) == 0
    arch = load_arch(str(back / "arch.arch.yaml"))
    w = load_workload(str(back / "problem.workload.yaml"))
    imported = evaluate(w, arch, load_dataflow_file(back / "mapping.dataflow.yaml"))
    from tileflow.dataflows import build

    original_arch, gemm = load_arch("tpu-like"), load_workload("gemm")
    original = evaluate(gemm, _with_overlap(original_arch, None, "timeloop"),
                        build("layerwise", gemm, original_arch))
    assert_same_numbers(original, imported)


def test_a_file_name_still_writes_the_mapping_alone(tmp_path, capsys):
    path = tmp_path / "map.yaml"
    assert main(["export-timeloop", "--arch", "edge", "--workload", "gemm",
                 "--dataflow", "layerwise", "--out", str(path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["map.yaml"]
    assert path.read_text().startswith("mapping:")


def test_a_file_name_with_json_writes_the_mapping_and_says_so(tmp_path, capsys):
    import json

    path = tmp_path / "map.yaml"
    assert main(["export-timeloop", "--arch", "edge", "--workload", "gemm",
                 "--dataflow", "layerwise", "--out", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"wrote": [str(path)], "notes": []}
    assert path.read_text().startswith("mapping:")


def test_one_mapping_of_several_operators_is_refused_naming_them(capsys):
    """Without a folder, a layerwise tree of attention (whose intermediates have homes) is
    refused for its operators, not for a detail of the tree."""
    code = main(["export-timeloop", "--arch", "edge", "--workload", "attention",
                 "--dataflow", "layerwise"])
    err = capsys.readouterr().err
    assert code == 2 and "7 operators (qk, max, sub, exp, sum, div, pv)" in err
    assert "export to a folder" in err and "homes" not in err


def test_several_operators_are_refused_by_name(tmp_path, capsys):
    code = main(["export-timeloop", "--arch", "edge", "--workload", "gemm-chain",
                 "--dataflow", "chimera", "--out", str(tmp_path / "tl")])
    err = capsys.readouterr().err
    assert code == 2 and "2 operators (gemm1, gemm2)" in err and "Traceback" not in err
    assert not (tmp_path / "tl").exists()  # nothing made before the refusal


def test_an_operator_that_is_not_a_multiply_accumulate_is_refused():
    from tileflow.interop.export_arch import timeloop_problem
    from tileflow.specs.workload import parse_workload

    w = parse_workload(Field({"name": "e", "dims": {"m": 4},
                              "ops": [{"name": "ex", "expr": "B[m] = exp(A[m])"}]}, "e.yaml"))
    with pytest.raises(InputError, match="not a multiply-accumulate"):
        timeloop_problem(w)


CONV = {"name": "conv", "dims": {"k": 16, "c": 8, "p": 14, "q": 14, "r": 3, "s": 3},
        "ops": [{"name": "conv", "expr": "O[k,p,q] += I[c,2*p+r,2*q+s] * W[k,c,r,s]"}]}


@pytest.mark.parametrize("chip", ["edge", "tpu-like", "cpu", "gpu-a100"])
def test_a_strided_convolution_round_trips(tmp_path, chip):
    """Input windows (coefficients 2 in the projection, a named `coefficients` entry) and
    Timeloop's delta rule for them survive the round trip."""
    from tileflow.specs.workload import parse_workload

    w = parse_workload(Field(CONV, "conv.yaml"))
    arch = load_arch(chip)
    original, imported, _ = round_trip(tmp_path, arch, w, chip_tiling(arch, w))
    problem = (tmp_path / "problem.yaml").read_text()
    assert "coefficients" in problem and "c2" in problem
    assert_same_numbers(original, imported)
    rng = random.Random(chip)
    for attempt in range(3):
        folder = tmp_path / f"random{attempt}"
        folder.mkdir()
        original, imported, _ = round_trip(folder, arch, w, chip_tiling(arch, w, rng))
        assert_same_numbers(original, imported)


def test_energies_of_the_component_model_travel_in_the_ert(tmp_path, gemm):
    """A chip given by its technology (no energies written): the energies TileFlow's
    component model derives are the ERT's, so the import spends the same."""
    from tileflow.dataflows import build
    from tileflow.specs.yamlfile import load_mapping

    data = dict(load_mapping(shipped("accelerators")["edge"]).data)
    data["technology_nm"] = 45
    data["levels"] = [{k: v for k, v in lv.items() if k != "energy_pj_per_word"}
                      for lv in data["levels"]]
    arch = parse_arch(Field(data, "edge-45nm.yaml"))
    assert arch.levels[1].read_energy_pj != 100  # the model's, not the shipped file's
    original, imported, notes = round_trip(tmp_path, arch, gemm,
                                           build("layerwise", gemm, arch))
    assert_same_numbers(original, imported)
    assert "technology: 45nm" in (tmp_path / "arch.yaml").read_text()
    assert any("areas" in n for n in notes)


def summed(results) -> tuple[dict, float, float]:
    """Counts per level and tensor, cycles and energy of runs one after another."""
    traffic: dict = {}
    for r in results:
        for level, by_tensor in r.traffic.items():
            for tensor, m in by_tensor.items():
                a = traffic.setdefault(level, {}).get(tensor)
                traffic[level][tensor] = m if a is None else replace(
                    a, fill=a.fill + m.fill, read=a.read + m.read, update=a.update + m.update)
    return traffic, sum(r.cycles for r in results), sum(r.energy_pj for r in results)


@pytest.mark.parametrize("chip", [c for c in CHIPS if not c.startswith("gpu")])
def test_a_layerwise_chain_is_one_run_per_operator(tmp_path, chip):
    """Two GEMMs one after another (C through DRAM): a problem and a mapping per operator,
    whose imported runs add up to the tree's numbers."""
    from tileflow.dataflows import build

    w = load_workload("gemm-chain")
    arch = without_first_touch(load_arch(chip))
    flow = build("layerwise", w, arch)
    paths, notes = export_folder(tmp_path, flow, w, arch)
    assert sorted(p.name for p in paths) == sorted([
        "arch.yaml", "ERT.yaml", "problem.gemm1.yaml", "mapping.gemm1.yaml",
        "problem.gemm2.yaml", "mapping.gemm2.yaml"])
    assert any("one after another" in n for n in notes)
    imported_arch = load_arch_any(str(tmp_path / "arch.yaml"), tmp_path / "ERT.yaml")
    runs = []
    for op in ("gemm1", "gemm2"):
        alone = load_workload_any(str(tmp_path / f"problem.{op}.yaml"))
        runs.append(evaluate(alone, imported_arch, load_dataflow_any(
            tmp_path / f"mapping.{op}.yaml", alone, imported_arch)))
    original = evaluate(w, _with_overlap(arch, None, "timeloop"), flow)
    traffic, cycles, energy = summed(runs)
    assert traffic == original.traffic
    assert cycles == original.cycles
    assert energy == pytest.approx(original.energy_pj, rel=1e-12)
    assert traffic["DRAM"]["C"].update > 0 and traffic["DRAM"]["C"].read > 0  # via DRAM


def test_a_fused_chain_and_a_vector_operator_are_refused(tmp_path, capsys):
    code = main(["export-timeloop", "--arch", "edge", "--workload", "mlp",
                 "--dataflow", "layerwise", "--out", str(tmp_path / "tl")])
    err = capsys.readouterr().err
    assert code == 2 and "operator 'gelu'" in err and "not a multiply-accumulate" in err
    assert not (tmp_path / "tl").exists()


def test_json_lists_the_files_and_notes(tmp_path, capsys):
    import json

    assert main(["export-timeloop", "--arch", "cpu", "--workload", "gemm", "--dataflow",
                 "layerwise", "--out", str(tmp_path / "tl"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [Path(p).name for p in report["wrote"]] == ["arch.yaml", "ERT.yaml",
                                                       "problem.yaml", "mapping.yaml"]
    assert any("vector unit (16 lanes at Reg" in n for n in report["notes"])


@pytest.mark.parametrize("seconds, ok", [(1 / 2.6e9, True), (0, False), (-1e-9, False)])
def test_a_cycle_below_a_nanosecond_imports(tmp_path, seconds, ok):
    """A clock above 1 GHz (cpu: 2.6 GHz) is a global_cycle_seconds below 1e-9."""
    folder = tmp_path / "tl"
    export_folder(folder, chip_tiling(load_arch("cpu"), load_workload("gemm")),
                  load_workload("gemm"), load_arch("cpu"))
    text = (folder / "arch.yaml").read_text()
    path = tmp_path / "arch.yaml"
    path.write_text(text.replace(f"global_cycle_seconds: {1e-9 / 2.6}",
                                 f"global_cycle_seconds: {seconds}"))
    if ok:
        assert load_arch_any(str(path)).clock_ghz == pytest.approx(2.6, rel=1e-12)
    else:
        with pytest.raises(InputError, match="global_cycle_seconds"):
            load_arch_any(str(path))


def test_per_tensor_precision_is_a_note(tmp_path):
    from tileflow.specs.workload import parse_workload

    w = parse_workload(Field({"name": "g", "dims": {"m": 8, "n": 8, "k": 8},
                              "precision_bits": {"C": 32},
                              "ops": [{"name": "gemm", "expr": "C[m,n] += A[m,k] * B[k,n]"}]},
                             "g.yaml"))
    arch = load_arch("edge")
    _, notes = export_folder(tmp_path, chip_tiling(arch, w), w, arch)
    assert any(n.startswith("precision_bits {'C': 32} not written") for n in notes)


def test_a_level_called_mac_keeps_its_own_energy_table(tmp_path, gemm):
    from tileflow.specs.yamlfile import load_mapping

    data = dict(load_mapping(shipped("accelerators")["tpu-like"]).data)
    data["levels"] = [dict(lv) for lv in data["levels"]]
    data["levels"][-1]["name"] = "MAC"
    data["compute"] = {k: dict(v, level="MAC") if v.get("level") == "Reg" else v
                       for k, v in data["compute"].items()}
    arch = parse_arch(Field(data, "tpu-mac.yaml"))
    original, imported, _ = round_trip(tmp_path, arch, gemm, chip_tiling(arch, gemm))
    assert_same_numbers(original, imported)
    assert "name: MAC_unit" in (tmp_path / "arch.yaml").read_text()


def test_read_fill_and_update_energies_each_survive(tmp_path, gemm):
    """Distinct energies per action: the ERT's read, write (fill) and update each land on
    their own action, the MAC's compute on the operation."""
    from tileflow.specs.yamlfile import load_mapping

    data = dict(load_mapping(shipped("accelerators")["edge"]).data)
    data["levels"] = [dict(lv, energy_pj_per_word={"read": 1.0 + i, "write": 10.0 + i,
                                                    "update": 100.0 + i})
                      for i, lv in enumerate(data["levels"])]
    data["compute"] = dict(data["compute"], matrix=dict(data["compute"]["matrix"],
                                                        energy_pj_per_op=0.25))
    arch = parse_arch(Field(data, "edge-actions.yaml"))
    original, imported, _ = round_trip(tmp_path, arch, gemm, chip_tiling(arch, gemm))
    assert_same_numbers(original, imported)
    back = load_arch_any(str(tmp_path / "arch.yaml"), tmp_path / "ERT.yaml")
    assert [(lv.read_energy_pj, lv.write_energy_pj, lv.update_energy_pj)
            for lv in back.levels] == [(1.0, 10.0, 100.0), (2.0, 11.0, 101.0),
                                       (3.0, 12.0, 102.0)]
    assert back.matrix.energy_pj_per_op == 0.25
