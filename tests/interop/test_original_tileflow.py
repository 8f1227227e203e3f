"""The original TileFlow's problem and mapping files: a two-GEMM chain whose scope type
decides whether weights are kept across the outer loop; counts derived by hand."""

from __future__ import annotations

import pytest

from tests.interop.samples import ARCH_V03, CHAIN_MAPPING, CHAIN_PROBLEM, write
from tileflow.cli import main
from tileflow.cost import evaluate
from tileflow.interop.files import load_arch_any, load_dataflow_any, load_workload_any
from tileflow.tree import tile


def load(tmp_path, scope: str):
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_V03))
    w = load_workload_any(write(tmp_path, "prob.yaml", CHAIN_PROBLEM))
    flow = load_dataflow_any(write(tmp_path, "map.yaml", CHAIN_MAPPING.format(scope=scope)),
                             w, arch)
    return w, arch, flow


def test_problem_becomes_two_chained_operators(tmp_path):
    w, _, _ = load(tmp_path, "Sequential")
    assert [str(op) for op in w.ops] == ["C[M,L] += A[M,K] * B[K,L]",
                                         "E[M,N] += C[M,L] * D[L,N]"]
    assert w.intermediates == ("C",) and dict(w.sizes) == {"M": 8, "L": 6, "K": 4, "N": 6}


def test_mapping_tree_becomes_the_same_tile_tree(tmp_path):
    _, _, flow = load(tmp_path, "Pipeline")
    expected = tile("DRAM", "M:2",
                    tile("Buffer", "M:4 L:6 K:4", tile("Reg", "", "GEMM1")),
                    tile("Buffer", "M:4 N:6 L:6", tile("Reg", "", "GEMM2")), primitive="Pipe")
    assert flow.root == expected


@pytest.mark.parametrize("scope, reloads", [("Sequential", 2), ("Sharing", 1),
                                            ("Pipeline", 1)])
def test_chain_dram_traffic(tmp_path, scope, reloads):
    """M in 2 DRAM steps of 4 rows. A (M x K) and E (M x N) move once. B (K x L) and D
    (L x N) do not depend on M: under Sequential each is dropped when the other GEMM runs
    and read again at the next M step (2 times); Sharing and Pipeline keep them (once).
    C never leaves the chip."""
    w, arch, flow = load(tmp_path, scope)
    dram = evaluate(w, arch, flow).traffic["DRAM"]
    assert dram["A"].read == 8 * 4 and dram["E"].update == 8 * 6
    assert dram["B"].read == reloads * 4 * 6
    assert dram["D"].read == reloads * 6 * 6
    assert "C" not in dram


BAD = [
    ("factors: M=2\n", "factors: M=?\n", "'M=?' is not a number"),
    ("factors: M=2\n", "factors: M=MO\n", "'M=MO' is not a number"),
    ("permutation: KLM\n", "permutation: KLM\n      bypass: [C]\n", "per-tensor bypass"),
    ("name: GEMM2", "name: GEMM3", "unknown operator 'GEMM3'"),
    ("binding: 'M:M L:L K:K'", "binding: 'M:L L:M K:K'", "renames a dimension"),
    ("type: Temporal\n  factors: M=2", "type: Diagonal\n  factors: M=2", "Temporal or Spatial"),
]


@pytest.mark.parametrize("old, new, message", BAD, ids=[m for _, _, m in BAD])
def test_unsupported_constructs_name_file_and_line(tmp_path, capsys, old, new, message):
    mapping = CHAIN_MAPPING.format(scope="Sequential")
    assert old in mapping
    args = ["evaluate", "--arch", write(tmp_path, "arch.yaml", ARCH_V03),
            "--workload", write(tmp_path, "prob.yaml", CHAIN_PROBLEM),
            "--dataflow", write(tmp_path, "map.yaml", mapping.replace(old, new, 1))]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and "map.yaml, line" in err and message in err, err


def test_problem_sizes_must_be_numbers(tmp_path, capsys):
    text = CHAIN_PROBLEM.replace("M: 8,", "M: MM,")
    code = main(["evaluate", "--arch", write(tmp_path, "arch.yaml", ARCH_V03),
                 "--workload", write(tmp_path, "prob.yaml", text), "--dataflow", "layerwise"])
    err = capsys.readouterr().err
    assert code == 2 and "prob.yaml, line" in err and "not an integer" in err


def test_a_scope_at_the_top_and_a_spatial_tile_under_a_temporal_one(tmp_path):
    """A top-level Scope sits in a tile at the outermost level; a Spatial node under a
    Temporal node at the same target joins it as one tile (temporal loops first)."""
    mapping = """
    mapping:
      node-type: Scope
      type: Sharing
      subtree:
      - node-type: Tile
        type: Temporal
        factors: M=2 L=6 K=4
        permutation: KLM
        target: Buffer
        subtree:
        - node-type: Tile
          type: Spatial
          factors: M=4
          target: Buffer
          split: 1
          subtree:
          - {node-type: Op, name: GEMM1}
      - node-type: Tile
        type: Temporal
        factors: M=8 N=6 L=6
        permutation: LNM
        target: Buffer
        subtree:
        - {node-type: Op, name: GEMM2}
    """
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_V03))
    w = load_workload_any(write(tmp_path, "prob.yaml", CHAIN_PROBLEM))
    flow = load_dataflow_any(write(tmp_path, "map.yaml", mapping), w, arch)
    assert flow.root == tile("DRAM", "", tile("Buffer", "M:2 L:6 K:4 M:4:Sp", "GEMM1"),
                             tile("Buffer", "M:8 N:6 L:6", "GEMM2"), primitive="Shar")
