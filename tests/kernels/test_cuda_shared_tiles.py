"""Input tiles staged in shared memory where the tree keeps an operator's tile at the SM
level: every thread of the block loads them together, a barrier, the operator reads them
from there; the results (emulated on the CPU) equal NumPy's, staged or not."""

from __future__ import annotations

import numpy as np
import pytest

from tileflow.dataflows import build
from tileflow.kernels.cuda_emulate import run_emulated
from tileflow.kernels.cuda_source import SHARED_LIMIT_BYTES, CudaGenerator, generate_cuda
from tileflow.kernels.gpu_trees import random_valid_gpu_trees
from tileflow.kernels.nest import analyse
from tileflow.kernels.reference import random_inputs, run_reference
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload

SIZES = {"b": 2, "m": 16, "l": 24, "k": 8, "n": 12}


@pytest.mark.parametrize("workload", ["attention", "gemm-chain"])
def test_staged_tiles_give_the_reference_results(workload):
    w = load_workload(workload, SIZES)
    arch = load_arch("gpu-h100")
    x = random_inputs(w, 7)
    ref = run_reference(w, x)
    flows = [*random_valid_gpu_trees(w, arch, 2, seed=11, min_blocks=4),
             build("layerwise", w, arch), build("chimera", w, arch)]
    for flow in flows:
        nest = analyse(w, arch, flow)
        gen = CudaGenerator(nest, "tf")
        source = gen.build()
        # every input of the workload is read by some operator whose SM tile holds it alone
        # (intermediates homed in global memory, as in layerwise, are staged too)
        assert set(w.inputs) <= {t for ts in gen.staged_for.values() for t in ts}, flow.name
        assert "_tile" in source.text and "__syncthreads();" in source.text
        plain = generate_cuda(nest, stage_inputs=False)
        assert "_tile" not in plain.text
        for cuda in (source, plain):
            out = run_emulated(cuda, w.shapes, x)
            for t in w.outputs:
                assert np.abs(out[t] - ref[t]).max() <= 1e-5 * np.abs(ref[t]).max(), flow.name


def test_a_tile_larger_than_the_shared_memory_stays_global():
    """gemm1's B tile is k x l words for each batch: 8 x 2048 x 4 bytes = 64 KiB > 48 KiB."""
    w = load_workload("gemm-chain", {"b": 1, "m": 4, "l": 2048, "k": 8, "n": 4})
    arch = load_arch("gpu-h100")
    assert 8 * 2048 * 4 > SHARED_LIMIT_BYTES
    for flow in random_valid_gpu_trees(w, arch, 2, seed=3, min_blocks=2):
        gen = CudaGenerator(analyse(w, arch, flow), "tf")
        gen.build()
        assert "B" not in gen.staged_for.get("gemm1", set())
