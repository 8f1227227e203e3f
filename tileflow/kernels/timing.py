"""Time a compiled kernel: warm-up calls, repetitions, median and spread, a fixed thread
count, and the environment the numbers were taken in."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from dataclasses import dataclass
from functools import cache

import numpy as np

from tileflow.kernels.build import CC, FLAGS, CompiledKernel


@dataclass(frozen=True)
class Timing:
    median_s: float
    min_s: float
    max_s: float
    spread: float  # (75th - 25th percentile) / median
    repetitions: int
    threads: int


def time_kernel(kernel: CompiledKernel, threads: int = 1, warmup: int = 1,
                repetitions: int = 5, min_total_s: float = 0.0) -> Timing:
    """Median wall time of one call after `warmup` calls; at least `repetitions` calls, more
    while their total stays under `min_total_s` (for very short kernels)."""
    for _ in range(warmup):
        kernel(threads)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repetitions or (time.perf_counter() - start < min_total_s
                                       and len(times) < 1000):
        t0 = time.perf_counter()
        kernel(threads)
        times.append(time.perf_counter() - t0)
    a = np.array(times)
    median = float(np.median(a))
    q1, q3 = np.percentile(a, [25, 75])
    return Timing(median, float(a.min()), float(a.max()), float((q3 - q1) / median),
                  len(times), threads)


@cache
def environment() -> dict[str, str]:
    """Compiler, flags, CPU and OS the measurements come from."""
    try:
        cc = subprocess.run([CC, "--version"], capture_output=True, text=True).stdout
        cc = cc.splitlines()[0] if cc else CC
    except OSError:
        cc = CC
    model = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from tileflow.kernels.c_source import STYLES
    from tileflow.specs.host import read_caches

    try:
        caches = ", ".join(f"L{c['level']} {c['size_bytes']} B shared by {c['shared_by']}"
                           for c in read_caches())
    except OSError:
        caches = "unknown"
    return {"compiler": cc, "flags": " ".join(FLAGS), "kernel_style": STYLES[-1], "cpu": model,
            "caches": caches,
            "cpus": str(os.cpu_count()), "os": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__}
