"""`evaluate` from Python: a Dataflow or a bare root tile give the same result."""

from __future__ import annotations

import pytest
from helpers import GEMM, small_arch, workload

from tileflow.cost import evaluate
from tileflow.tree import Dataflow, tile


def test_a_bare_root_tile_is_evaluated_like_a_dataflow():
    w, arch = workload(GEMM), small_arch()
    root = tile("DRAM", "m:2", tile("L1", "m:2 n:4 k:4", tile("Reg", "", "mm")))
    bare, wrapped = evaluate(w, arch, root), evaluate(w, arch, Dataflow(root))
    assert bare.cycles == wrapped.cycles and bare.traffic == wrapped.traffic
    # C[m,n] += A[m,k] * B[k,n], 4 x 4 x 4: each of the two m steps fills L1 with a new half
    # of A (8 words); B does not depend on m, so it is filled once (16 words) and stays; each
    # element of C is accumulated over k in a register and updated into L1 once (16), never
    # filled (first touch)
    l1 = bare.traffic["L1"]
    assert (l1["A"].fill, l1["B"].fill, l1["C"].fill, l1["C"].update) == (16, 16, 0, 16)
    assert bare.traffic["DRAM"]["C"].update == 16
    assert bare.dataflow == "dataflow"


def test_anything_else_is_a_type_error():
    with pytest.raises(TypeError, match="Dataflow or a root Tile"):
        evaluate(workload(GEMM), small_arch(), {"root": "not a tree"})
