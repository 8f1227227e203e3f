"""No valid tree runs faster than its chip's compute: on random trees (every primitive,
groups of operators under a `Para`, `Pipe`, `Seq` or `Shar` tile, spatial loops), with the
memories made as fast as need be so that compute is what limits, a valid result never takes
fewer cycles than its MACs over the chip's matrix units, and never has a utilization above
1 — in the scalar model and in the batched evaluator alike."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import CHAIN, GEMM, SOFTMAX, TWINS, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trees import ARCH, trees

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.structure import structure_of
from tileflow.tree import Dataflow, Op, Tile, tile

# memories of (practically) unbounded bandwidth: the compute units bound the latency
FAST = replace(ARCH, levels=tuple(
    replace(lv, read_words_per_cycle=1e9, write_words_per_cycle=1e9) for lv in ARCH.levels))
SETTINGS = settings(max_examples=80, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))
TEXTS = {"gemm": GEMM, "chain": CHAIN, "softmax": SOFTMAX, "independent twins": TWINS}


# four independent GEMMs: any primitive may group any of them
QUAD = """
name: quad
dims: {m: 4, n: 4, k: 2}
ops:
""" + "".join(f"  - {{name: g{i}, expr: \"C{i}[m,n] += A[m,k] * B{i}[k,n]\"}}\n"
              for i in range(4))
PRIMITIVES = ["Seq", "Shar", "Para", "Pipe", "Para", "Pipe"]  # at once, more often


@st.composite
def nested_groups(draw) -> Dataflow:
    """The four GEMMs split into nested groups (DRAM tiles of random primitives) under a
    root that may spread `m` over the two cores; each GEMM's L1 tile spreads over 1 to 4 of
    its core's 2 x 2 PEs (most often all 4: whole arrays beside one another)."""
    split = draw(st.sampled_from([1, 2, 2]))
    spread = split == 2 and draw(st.booleans())

    def leaf(i: int) -> Tile:
        a, b = draw(st.sampled_from([(2, 2)] * 5 + [(1, 2), (2, 1), (1, 1)]))
        m = 4 // split
        return tile("L1", f"m:{m // min(a, m)} n:{4 // b} k:2 m:{min(a, m)}:Sp n:{b}:Sp",
                    tile("Reg", "", f"g{i}"))

    def group(ops: list[int]) -> Tile | Op:
        if len(ops) == 1:
            return leaf(ops[0])
        count = min(draw(st.sampled_from([1, 1, 1, 2, 3])), len(ops) - 1)
        cuts = sorted(draw(st.sets(st.integers(1, len(ops) - 1), min_size=count,
                                   max_size=count)))
        parts = [ops[a:b] for a, b in zip([0, *cuts], [*cuts, len(ops)], strict=True)]
        return tile("DRAM", "", *(group(p) for p in parts),
                    primitive=draw(st.sampled_from(PRIMITIVES)))

    ops = list(draw(st.permutations(range(4))))
    root = group(ops)
    loops = f"m:2{':Sp' if spread else ''}" if split == 2 else ""
    return Dataflow(tile("DRAM", loops, *root.children, primitive=root.primitive))


@settings(SETTINGS, max_examples=300)
@given(nested_groups())
def test_no_valid_nesting_of_primitives_beats_the_compute_floor(flow):
    """Operators in nested `Para`/`Pipe` groups run at once: their units add up however the
    groups nest, so no valid nesting outruns the 8 PEs."""
    w = workload(QUAD)
    _check_floor(w, flow)


@pytest.mark.parametrize("name", TEXTS)
def test_no_valid_tree_beats_the_compute_floor(name):
    w = workload(TEXTS[name])

    @SETTINGS
    @given(trees(w))
    def check(flow):
        _check_floor(w, flow)

    check()


def _check_floor(w, flow: Dataflow) -> None:
    """Valid in the model or in the batch: at least the MACs over the chip's matrix units."""
    peak_macs_per_cycle = FAST.total_macs_per_cycle  # 2 cores x 4 PEs
    try:
        r = evaluate(w, FAST, flow)
    except InvalidDataflow:
        return
    structure = structure_of(w, FAST, flow)
    batch = evaluate_batch(structure, structure.default_factors[None, :])
    if batch.valid[0]:
        assert batch.cycles[0] * peak_macs_per_cycle >= r.macs * (1 - 1e-12)
    if r.valid:
        assert r.cycles * peak_macs_per_cycle >= r.macs * (1 - 1e-12)
        assert r.utilization <= 1 + 1e-12

