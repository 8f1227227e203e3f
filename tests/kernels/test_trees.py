"""Random CPU trees are valid on a one-row matrix unit (a CPU's SIMD lanes, 1 x lanes)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tileflow.cost import evaluate
from tileflow.kernels.trees import lanes_on_row, random_chain_tree, single_core
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import MATRIX, load_workload
from tileflow.tree import Op, Tile, walk

HOST = single_core(load_arch("cpu"))  # matrix: 1 row x 32 columns
W = load_workload("gemm-chain", {"b": 1, "m": 32, "l": 32, "k": 16, "n": 16})


def _lane_loops(flow):
    """(op unit, loop) for every spatial loop of a register tile."""
    out = []
    for _, node in walk(flow.root):
        if isinstance(node, Tile) and node.level == HOST.matrix.level:
            units = {W.op_by_name[c.op].unit for c in node.children if isinstance(c, Op)}
            out += [(units, lp) for lp in node.loops if lp.spatial]
    return out


def test_matrix_lanes_go_on_the_columns_of_a_one_row_array():
    assert (HOST.matrix.rows, HOST.matrix.cols) == (1, 32)
    rng = np.random.default_rng(5)
    checked = 0
    for i in range(20):
        raw = random_chain_tree(W, HOST, rng, f"t{i}")
        flow = lanes_on_row(W, HOST, raw)
        lanes = _lane_loops(flow)
        for units, lp in lanes:
            assert lp.axis == ("y" if units == {MATRIX} else "")
        wide = [lp for units, lp in _lane_loops(raw) if units == {MATRIX} and lp.factor > 1]
        if wide:  # a one-row array checks only its lanes: naming the axis changes nothing
            named, unnamed = evaluate(W, HOST, flow), evaluate(W, HOST, raw)
            assert not any(v.kind == "array" for v in (*named.violations, *unnamed.violations))
            assert named.cycles == unnamed.cycles
            checked += 1
    assert checked >= 5


def test_a_two_dimensional_array_keeps_the_tree():
    square = replace(HOST, matrix=replace(HOST.matrix, rows=8, cols=4))
    flow = random_chain_tree(W, square, np.random.default_rng(1), "t")
    assert lanes_on_row(W, square, flow) is flow
