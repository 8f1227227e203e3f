"""Compile, launch and time generated CUDA with PyCUDA (the optional `cuda` extra): results
checked against the NumPy reference, time from CUDA events. Nothing here is imported by
default; `gpu_missing()` says why a machine cannot run it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tileflow.kernels.cuda_source import CudaSource


def gpu_missing() -> str | None:
    """Why CUDA kernels cannot be launched here, or None when they can."""
    try:
        import pycuda.driver as cuda
    except ImportError:
        return "PyCUDA is not installed (pip install -e '.[cuda]')"
    try:
        cuda.init()
        if cuda.Device.count() == 0:
            return "no CUDA GPU is visible"
    except Exception as exc:  # the driver raises its own error types
        return f"the CUDA driver cannot start ({exc})"
    return None


@dataclass(frozen=True)
class GpuTiming:
    median_s: float
    min_s: float
    repetitions: int
    device: str


def run_cuda(cuda_source: CudaSource, shapes, inputs, warmup: int = 2,
             repetitions: int = 10, arch_flag: str | None = None):
    """Launch every kernel of the source in order; returns (outputs, timing). The timing is
    the whole sequence of launches between two CUDA events."""
    reason = gpu_missing()
    if reason:
        raise RuntimeError(f"cannot launch CUDA kernels: {reason}")
    import pycuda.autoinit  # noqa: F401  (creates the context)
    import pycuda.driver as cuda
    from pycuda.compiler import SourceModule

    # the source declares its kernels extern "C"; arch None: the device's own
    module = SourceModule(cuda_source.text, no_extern_c=True, options=["-O3"], arch=arch_flag)
    host = {t: np.zeros(cuda_source.layouts.get(t, shapes[t]), dtype=np.float32)
            for t in cuda_source.tensors}
    for t, value in inputs.items():
        host[t][tuple(slice(0, e) for e in shapes[t])] = value
    device = {t: cuda.to_device(a) for t, a in host.items()}
    for t, words in cuda_source.scratch_words.items():
        device[f"{t}_scratch"] = cuda.mem_alloc(4 * words)
    calls = [(module.get_function(la.name), la) for la in cuda_source.launches]

    def once():
        for fn, la in calls:
            fn(*[device[a] for a in la.arguments], block=(la.threads, 1, 1),
               grid=(la.blocks, 1))

    for _ in range(warmup):
        once()
    times = []
    start, end = cuda.Event(), cuda.Event()
    for _ in range(repetitions):
        start.record()
        once()
        end.record()
        end.synchronize()
        times.append(start.time_till(end) / 1e3)
    once()  # a clean run for the results: outputs start from their init kernels
    outputs = {}
    for t in cuda_source.tensors:
        cuda.memcpy_dtoh(host[t], device[t])
        outputs[t] = host[t][tuple(slice(0, e) for e in shapes[t])]
    name = cuda.Context.get_device().name()
    return outputs, GpuTiming(float(np.median(times)), float(np.min(times)), repetitions, name)
