"""The reference a generated kernel is judged against: the workload as NumPy computes it
with BLAS matrix products, and its time on a given number of threads."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from tileflow.errors import InputError

WORKLOADS = ("gemm-chain", "attention")


def numpy_computation(name: str, inputs: dict[str, np.ndarray]) -> Callable[[], np.ndarray]:
    """The workload as NumPy computes it, float32, with BLAS matrix products (batched
    `matmul`); the softmax of attention in NumPy's own loops."""
    x = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in inputs.items()}
    if name == "gemm-chain":
        a, b, d = x["A"], x["B"], x["D"]
        return lambda: np.matmul(np.matmul(a, b), d)
    if name == "attention":
        q, k, v = x["Q"], x["K"], x["V"]

        def attention() -> np.ndarray:
            s = np.matmul(q, k)
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            return np.matmul(e / e.sum(axis=-1, keepdims=True), v)
        return attention
    raise InputError(f"no NumPy form of workload '{name}' to benchmark against (one of "
                     f"{', '.join(WORKLOADS)})")


def time_numpy(name: str, inputs: dict[str, np.ndarray], threads: int, warmup: int = 2,
               repetitions: int = 7) -> dict[str, float | int | str]:
    """Fastest and median time (s) of the NumPy form on `threads` BLAS threads (set with
    threadpoolctl for the duration; where it is missing, the BLAS library's own count,
    said in `blas_threads`)."""
    computation = numpy_computation(name, inputs)
    try:
        from threadpoolctl import threadpool_limits
        limits = threadpool_limits(limits=threads, user_api="blas")
        used = str(threads)
    except ImportError:
        limits, used = None, "library default (threadpoolctl missing)"
    try:
        for _ in range(warmup):
            computation()
        times = []
        for _ in range(repetitions):
            t0 = time.perf_counter()
            computation()
            times.append(time.perf_counter() - t0)
    finally:
        if limits is not None:
            limits.restore_original_limits()
    return {"blas_min_s": float(min(times)), "blas_median_s": float(np.median(times)),
            "blas_repetitions": repetitions, "blas_threads": used}
