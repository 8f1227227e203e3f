"""The GPU latency form's counts, derived by hand from random GPU trees of a GEMM chain
(both operators on the matrix unit, the intermediate on chip, the inputs' tiles staged in
shared memory, one stage, no recomputation): each operator's statements divided over the
blocks and its tile's threads."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tileflow.calibrate import gpu_latency
from tileflow.kernels.gpu_trees import blocks_of, random_valid_gpu_trees
from tileflow.kernels.nest import analyse
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import Tile

SIZES = {"b": 2, "m": 16, "l": 24, "k": 8, "n": 12}


def _threads(stage: Tile) -> int:
    """Threads of an operator's SM tile: the product of its spatial loops."""
    return math.prod(lp.factor for lp in stage.loops if lp.spatial)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_counts_follow_blocks_threads_and_operands(seed):
    w = load_workload("gemm-chain", SIZES)
    arch = load_arch("gpu-h100")
    for flow in random_valid_gpu_trees(w, arch, 3, seed=seed, min_blocks=4):
        f = gpu_latency.kernel_features(analyse(w, arch, flow))
        blocks = blocks_of(flow)
        statements = {"gemm1": 2 * 16 * 24 * 8, "gemm2": 2 * 16 * 12 * 24}
        per_thread = [statements[stage.children[0].children[0].op] / (blocks * _threads(stage))
                      for stage in flow.root.children]
        # one init kernel (E accumulates in memory) and one stage; one wave (<= 132 blocks)
        assert f["launches"] == 2
        assert f["serial_steps"] == pytest.approx(sum(per_thread))
        # A, B and D are staged in shared memory (their tiles fit) and C lives there: only
        # gemm2's accumulation into E goes to global memory per statement; each staging
        # loads its tile's words (a block's share of the dims the root walks) once per step
        # of the root's loops, spread over the block's threads
        walked = {d: math.prod(lp.factor for lp in flow.root.loops if lp.dim == d)
                  for d in SIZES}
        e = {d: SIZES[d] // walked[d] for d in SIZES}
        steps = walked["b"] * walked["m"]
        staging = steps * (e["b"] * e["m"] * e["k"] + e["b"] * e["k"] * e["l"]
                           + e["b"] * e["l"] * e["n"])
        block_threads = max(_threads(stage) for stage in flow.root.children)
        gemm2 = [p for p, stage in zip(per_thread, flow.root.children, strict=True)
                 if stage.children[0].children[0].op == "gemm2"][0]
        assert f["global_steps"] == pytest.approx(gemm2 + staging / (blocks * block_threads))
        assert f["global_access_bytes"] == pytest.approx(4 * (statements["gemm2"] + staging))
        assert f["compulsory_dram_bytes"] == 4 * (2 * 16 * 8 + 2 * 8 * 24 + 2 * 24 * 12
                                                  + 2 * 16 * 12)
        warps = sum(statements[s.children[0].children[0].op] / _threads(s)
                    * math.ceil(_threads(s) / 32) for s in flow.root.children)
        assert f["warp_steps_per_sm"] == pytest.approx(warps / blocks)


def test_cycles_are_the_weighted_sum_of_the_counts():
    features = {c: np.array([1.0, 2.0]) * (k + 1) for k, c in enumerate(gpu_latency.COLUMNS)}
    values = np.array([10.0, 2.0, 0.5, 3.0, 7.0])
    expected = np.array([10 + 4 + 1.5 + 12 + 35, 20 + 8 + 3 + 24 + 70])
    assert np.allclose(gpu_latency.cycles(features, values), expected)
    # a campaign from before tensor cores has no MMA count: the term is 0
    older = {c: v for c, v in features.items() if c != "mma_per_sm"}
    assert np.allclose(gpu_latency.cycles(older, values), expected - [35, 70])
