"""Run generated CUDA on the CPU to check its results where there is no GPU: the source is
compiled as C++ with each block's threads as OpenMP threads (`__syncthreads` a barrier,
`__shared__` arrays shared by the block's threads). Slow, for small shapes in tests."""

from __future__ import annotations

import ctypes
import os

import numpy as np

from tileflow.kernels.build import compile_shared
from tileflow.kernels.cuda_source import CudaSource

SHIM = """#include <omp.h>
#include <math.h>
struct tf_dim3 { unsigned x; };
static tf_dim3 threadIdx, blockIdx, blockDim, gridDim;
#pragma omp threadprivate(threadIdx)
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define __restrict__ __restrict
#define __shared__ static
#define __syncthreads() _Pragma("omp barrier")
"""
FLAGS = ("-x", "c++", "-O1", "-fopenmp", "-fno-exceptions", "-fno-rtti", "-fPIC", "-shared", "-w")


def emulator_source(cuda: CudaSource) -> str:
    wrappers = []
    for launch in cuda.launches:
        args = ", ".join(f"a[{i}]" for i in range(len(launch.arguments)))
        wrappers.append(
            f'extern "C" void run_{launch.name}(float **a, int blocks, int threads) {{\n'
            "    blockDim.x = threads; gridDim.x = blocks;\n"
            "    for (int b = 0; b < blocks; ++b) {\n"
            "        blockIdx.x = b;\n"
            "        #pragma omp parallel num_threads(threads)\n"
            "        { threadIdx.x = omp_get_thread_num();"
            f" {launch.name}({args}); }}\n"
            "    }\n}\n")
    return SHIM + cuda.text + "\n" + "\n".join(wrappers)


def run_emulated(cuda: CudaSource, shapes, inputs) -> dict[str, np.ndarray]:
    """Every launch in order on the CPU; returns the tensors (logical shapes)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    lib = ctypes.CDLL(str(compile_shared(emulator_source(cuda), FLAGS)))
    # everything the kernels must write starts as NaN: a value they rely on but never set
    # shows in the results (device memory is not zeroed either)
    storage = {t: np.full(cuda.layouts.get(t, shapes[t]), np.nan, dtype=np.float32)
               for t in cuda.tensors}
    views = {t: storage[t][tuple(slice(0, e) for e in shapes[t])] for t in cuda.tensors}
    for t, value in inputs.items():
        views[t][...] = value
    for t, words in cuda.scratch_words.items():
        storage[f"{t}_scratch"] = np.full(words, np.nan, dtype=np.float32)
    for launch in cuda.launches:
        fn = getattr(lib, f"run_{launch.name}")
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        pointers = (ctypes.c_void_p * len(launch.arguments))(
            *[storage[a].ctypes.data for a in launch.arguments])
        fn(pointers, launch.blocks, launch.threads)
    return views
