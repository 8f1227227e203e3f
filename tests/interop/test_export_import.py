"""Round trips: a single-operator tree written as a Timeloop mapping and read back is the
same tree; `tileflow import` writes TileFlow YAML that evaluates to the same counts."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from tests.interop.samples import (
    ARCH_V03,
    CHAIN_MAPPING,
    CHAIN_PROBLEM,
    CONV_MAPPING_SPATIAL,
    CONV_PROBLEM,
    GEMM_MAPPING,
    GEMM_PROBLEM,
    write,
)
from tileflow.cli import main
from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.interop.export import timeloop_mapping
from tileflow.interop.files import load_arch_any, load_dataflow_any, load_workload_any
from tileflow.specs.arch import load_arch
from tileflow.specs.dataflow import load_dataflow_file
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, Loop, Op, Tile, tile


def reimport(tmp_path, flow, w, arch):
    path = tmp_path / "exported.yaml"
    with path.open("w") as handle:
        YAML().dump(timeloop_mapping(flow, w, arch), handle)
    return load_dataflow_any(path, w, arch)


@pytest.fixture
def gemm(tmp_path):
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_V03))
    return load_workload_any(write(tmp_path, "prob.yaml", GEMM_PROBLEM)), arch


@pytest.mark.parametrize("problem, mapping", [(GEMM_PROBLEM, GEMM_MAPPING),
                                              (CONV_PROBLEM, CONV_MAPPING_SPATIAL)])
def test_imported_mapping_exports_and_reimports_unchanged(tmp_path, problem, mapping):
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_V03))
    w = load_workload_any(write(tmp_path, "prob.yaml", problem))
    flow = load_dataflow_any(write(tmp_path, "map.yaml", mapping), w, arch)
    again = reimport(tmp_path, flow, w, arch)
    assert again.root == flow.root
    assert evaluate(w, arch, again).traffic == evaluate(w, arch, flow).traffic


def split(n: int, parts: int, rng: random.Random) -> list[int]:
    """A random ordered factorization of n into `parts` factors."""
    out = [1] * parts
    d = 2
    while n > 1:
        while n % d == 0:
            out[rng.randrange(parts)] *= d
            n //= d
        d += 1
    return out


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6))
def test_random_exact_tilings_round_trip(tmp_path_factory, seed):
    """Every exact tiling of the GEMM over DRAM (temporal), Buffer (temporal + spatial) and
    Reg (temporal), in any loop order, comes back as the same tree with the same counts."""
    tmp_path = tmp_path_factory.mktemp("rt")
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_V03))
    w = load_workload_any(write(tmp_path, "prob.yaml", GEMM_PROBLEM))
    rng = random.Random(seed)
    parts = {d: split(n, 4, rng) for d, n in w.sizes.items()}
    groups = []
    for i, spatial in enumerate((False, False, True, False)):
        loops = [Loop(d, parts[d][i], spatial) for d in w.sizes if parts[d][i] > 1]
        rng.shuffle(loops)
        groups.append(tuple(loops))
    flow = Dataflow(Tile("DRAM", groups[0], (Tile("Buffer", groups[1] + groups[2], (
        Tile("Reg", groups[3], (Op("gemm"),)),)),)))
    again = reimport(tmp_path, flow, w, arch)
    assert again.root == flow.root
    assert evaluate(w, arch, again).traffic == evaluate(w, arch, flow).traffic


def test_a_skipped_level_is_a_full_bypass(tmp_path, gemm):
    w, arch = gemm
    flow = Dataflow(tile("DRAM", "M:8 N:6", tile("Reg", "K:4", "gemm")))
    mapping = timeloop_mapping(flow, w, arch)["mapping"]
    bypass = next(d for d in mapping if d["target"] == "Buffer")
    assert bypass["type"] == "bypass" and sorted(bypass["bypass"]) == ["A", "B", "Z"]
    again = reimport(tmp_path, flow, w, arch)
    assert again.root == flow.root


@pytest.mark.parametrize("tree, message", [
    (tile("DRAM", "M:4 N:6", tile("Reg", "K:4", "gemm")), "multiply to 4, not its size 8"),
    (tile("DRAM", "M:2 M:4 N:6", tile("Reg", "K:4", "gemm")), "two temporal loops"),
    (tile("DRAM", "M:8 N:6", tile("Reg", "K:2", tile("Reg", "K:2", "gemm"))), "two tiles at Reg"),
])
def test_what_timeloop_cannot_say_is_an_error(gemm, tree, message):
    w, arch = gemm
    with pytest.raises(InputError, match=message):
        timeloop_mapping(Dataflow(tree), w, arch)


def test_export_command_rejects_a_fused_tree(capsys):
    code = main(["export-timeloop", "--arch", "edge", "--workload", "gemm-chain",
                 "--dataflow", "chimera"])
    assert code == 2 and "single-operator" in capsys.readouterr().err


def test_import_writes_tileflow_files_that_evaluate_the_same(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    paths = [write(src, "arch.yaml", ARCH_V03), write(src, "prob.yaml", CHAIN_PROBLEM),
             write(src, "map.yaml", CHAIN_MAPPING.format(scope="Sharing"))]
    out = tmp_path / "out"
    assert main(["import", *paths, "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["arch.arch.yaml", "map.dataflow.yaml", "prob.workload.yaml"]
    arch = load_arch(str(out / "arch.arch.yaml"))
    w = load_workload(str(out / "prob.workload.yaml"))
    flow = load_dataflow_file(out / "map.dataflow.yaml")
    direct_arch = load_arch_any(paths[0])
    direct_w = load_workload_any(paths[1])
    direct = evaluate(direct_w, direct_arch, load_dataflow_any(paths[2], direct_w, direct_arch))
    assert arch.levels == direct_arch.levels
    assert evaluate(w, arch, flow).traffic == direct.traffic
    assert direct.traffic["DRAM"]["B"].read == 4 * 6  # kept by Sharing: read once


def test_import_of_a_mapping_alone_asks_for_its_problem(tmp_path, capsys):
    code = main(["import", write(tmp_path, "map.yaml", GEMM_MAPPING)])
    assert code == 2 and "needs its problem and architecture" in capsys.readouterr().err


def test_import_writes_nothing_when_one_file_is_bad(tmp_path, capsys):
    paths = [write(tmp_path, "arch.yaml", ARCH_V03), write(tmp_path, "prob.yaml", GEMM_PROBLEM),
             write(tmp_path, "map.yaml", GEMM_MAPPING.replace("M=2 N=3", "M=? N=3"))]
    out = tmp_path / "out"
    assert main(["import", *paths, "--out", str(out)]) == 2
    assert "map.yaml, line 5" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())
