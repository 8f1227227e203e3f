"""Invariants that hold for every valid tree, checked over randomly generated ones."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from helpers import CHAIN, CONV, GEMM, SOFTMAX, workload
from hypothesis import HealthCheck, given, settings
from trees import ARCH, trees

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.tree import Dataflow, Tile, map_tiles, ops_under, walk

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))
TEXTS = {"gemm": GEMM, "chain": CHAIN, "softmax": SOFTMAX, "conv": CONV}


def _evaluate(w, arch, flow):
    try:
        r = evaluate(w, arch, flow)
    except InvalidDataflow:
        return None
    structural = {"coverage", "dependency", "window"}
    return None if any(v.kind in structural for v in r.violations) else r


def _repetitions(flow: Dataflow, op) -> int:
    """Loops over dims the operator does not use repeat all of its work."""
    found = 1
    for _, node in walk(flow.root):
        if isinstance(node, Tile) and op.name in ops_under(node):
            found *= math.prod(lp.factor for lp in node.loops if lp.dim not in op.dims)
    return found


def _with_primitive(flow: Dataflow, primitive: str) -> Dataflow:
    def change(_path: str, t: Tile) -> Tile:
        return replace(t, primitive=primitive) if len(t.children) > 1 else t
    return replace(flow, root=map_tiles(flow.root, change))


@pytest.mark.parametrize("name", TEXTS)
def test_dram_traffic_never_below_compulsory_and_ops_match_the_workload(name):
    w = workload(TEXTS[name])

    @SETTINGS
    @given(trees(w))
    def check(flow):
        r = _evaluate(w, ARCH, flow)
        if r is None:
            return
        dram = r.traffic["DRAM"]
        for t in w.inputs:
            assert dram[t].read >= w.tensor_words(t)
        for t in w.outputs:
            assert dram[t].update >= w.tensor_words(t)
        for op in w.ops:
            expected = w.op_count(op) * _repetitions(flow, op)
            if name == "conv" and op.name == "conv1":
                assert r.ops[op.name] >= expected  # halo rows may be recomputed
            else:
                assert r.ops[op.name] == expected

    check()


@pytest.mark.parametrize("name", ["chain", "softmax", "conv"])
def test_seq_never_moves_less_than_shar(name):
    w = workload(TEXTS[name])
    strictly_more = []

    @SETTINGS
    @given(trees(w))
    def check(flow):
        seq = _evaluate(w, ARCH, _with_primitive(flow, "Seq"))
        shar = _evaluate(w, ARCH, _with_primitive(flow, "Shar"))
        if seq is None or shar is None:
            return
        strictly_more.append(seq.dram_words > shar.dram_words)
        for level, tensors in shar.traffic.items():
            for t, m in tensors.items():
                s = seq.traffic[level][t]
                assert s.fill >= m.fill and s.read >= m.read and s.update >= m.update, (level, t)
        assert seq.dram_words >= shar.dram_words

    check()
    assert any(strictly_more), "no generated tree showed the cost of Seq's drops"
