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
#define __align__(n) __attribute__((aligned(n)))
"""
# Warp-level matrix operations on the CPU: lane 0 of each warp does the warp's whole
# operation (the other lanes' calls do nothing), so a warp acts as one in lock step.
WMMA_SHIM = """#include <stdint.h>
#include <string.h>
namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {};
struct row_major {}; struct col_major {};
namespace precision { struct tf32 {}; }
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K> struct shape_of;
template <int M, int N, int K> struct shape_of<matrix_a, M, N, K> { enum { r = M, c = K }; };
template <int M, int N, int K> struct shape_of<matrix_b, M, N, K> { enum { r = K, c = N }; };
template <int M, int N, int K> struct shape_of<accumulator, M, N, K> { enum { r = M, c = N }; };
template <class Use, int M, int N, int K, class T, class L = void> struct fragment {
    enum { rows = shape_of<Use, M, N, K>::r, cols = shape_of<Use, M, N, K>::c,
           num_elements = rows * cols };
    float x[rows * cols];  /* row-major, the whole matrix */
};
static inline bool tf_lead() { return threadIdx.x % 32 == 0; }
static inline float __float_to_tf32(float v) {  /* nearest, ties away from zero */
    uint32_t u; memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&v, &u, 4); return v;
}
template <class F> static inline void tf_load(F &f, const float *p, unsigned ld, bool row) {
    if (!tf_lead()) return;
    for (int i = 0; i < F::rows; ++i) for (int j = 0; j < F::cols; ++j)
        f.x[i * F::cols + j] = row ? p[i * ld + j] : p[j * ld + i];
}
template <class U, int M, int N, int K, class T>
static inline void load_matrix_sync(fragment<U, M, N, K, T, row_major> &f, const float *p,
                                    unsigned ld) { tf_load(f, p, ld, true); }
template <class U, int M, int N, int K, class T>
static inline void load_matrix_sync(fragment<U, M, N, K, T, col_major> &f, const float *p,
                                    unsigned ld) { tf_load(f, p, ld, false); }
template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p,
                                    unsigned ld, layout_t l) {
    tf_load(f, p, ld, l == mem_row_major);
}
template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f,
                                     unsigned ld, layout_t l) {
    if (!tf_lead()) return;
    for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j)
        (l == mem_row_major ? p[i * ld + j] : p[j * ld + i]) = f.x[i * N + j];
}
template <int M, int N, int K, class TA, class LA, class TB, class LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d,
                            const fragment<matrix_a, M, N, K, TA, LA> &a,
                            const fragment<matrix_b, M, N, K, TB, LB> &b,
                            const fragment<accumulator, M, N, K, float> &c) {
    if (!tf_lead()) return;
    for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
        float s = c.x[i * N + j];
        for (int q = 0; q < K; ++q) s += a.x[i * K + q] * b.x[q * N + j];
        d.x[i * N + j] = s;
    }
}
} }
"""
SHIM += WMMA_SHIM
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
