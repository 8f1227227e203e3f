"""Measured cache traffic of one single-threaded kernel: a standalone C driver (no Python
under valgrind) runs it once under cachegrind, with the first-level and last-level caches
set from the accelerator description (sizes) and the OS (associativity, line size)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tileflow.cost import Result
from tileflow.kernels.build import CC, BuildError
from tileflow.kernels.c_source import ENTRY, KernelSource
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload

CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
# valgrind 3.19 decodes neither AVX-512 nor every VEX form the compiler emits for AVX2:
# the driver targets x86-64-v2 (SSE4.2); the addresses touched, hence the misses, are the
# same whatever the vector width
DRIVER_FLAGS = ("-O3", "-march=x86-64-v2", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math",
                "-fno-signed-zeros", "-fassociative-math")


def valgrind_missing() -> str | None:
    """Why cachegrind cannot run here, or None when it can."""
    if shutil.which("valgrind") is None:
        return "valgrind is not installed (apt-get install valgrind)"
    if shutil.which(CC) is None:
        return f"no C compiler '{CC}'"
    return None


@dataclass(frozen=True)
class CacheGeometry:
    size_bytes: int
    assoc: int
    line_bytes: int

    def option(self) -> str:
        return f"{self.size_bytes},{self.assoc},{self.line_bytes}"


def _os_cache(level: int, kind: str) -> tuple[int, int]:
    """(associativity, line bytes) of a cache level from the OS; (8, 64) where it is silent."""
    for index in sorted(CACHE_DIR.glob("index*")):
        try:
            if int((index / "level").read_text()) == level and \
                    (index / "type").read_text().strip() in kind:
                return (int((index / "ways_of_associativity").read_text()),
                        int((index / "coherency_line_size").read_text()))
        except (OSError, ValueError):
            continue
    return 8, 64


def geometry(arch: Architecture, level: str) -> CacheGeometry:
    """A cache level of the description (`L1`, `L2`, ...) as cachegrind needs it; the size
    is rounded down to a whole power-of-two number of sets."""
    number = int(level.lstrip("Ll"))
    assoc, line = _os_cache(number, ("Data", "Unified"))
    size = int(arch.level(level).capacity_words * arch.word_bytes)
    sets = 2 ** int(math.log2(max(size // (assoc * line), 1)))
    return CacheGeometry(sets * assoc * line, assoc, line)


def driver_source(kernel: KernelSource, w: Workload, flush_bytes: int) -> str:
    """The kernel plus a main(): allocate and fill the arrays, evict them from the caches by
    sweeping a large buffer, call the kernel once on one thread."""
    lines = [f"void {ENTRY}(float **args, int nthreads) __attribute__((noinline));",
             kernel.text, "#include <stdio.h>", "int main(void) {",
             f"    float *args[{max(len(kernel.arguments), 1)}];", "    unsigned s = 1u;"]
    for i, t in enumerate(kernel.arguments):
        n = math.prod(kernel.layouts.get(t, w.shapes[t]))
        lines += [f"    args[{i}] = (float *)aligned_alloc(64, sizeof(float) * "
                  f"(({n}L + 15) / 16 * 16));",
                  f"    for (long z = 0; z < {n}L; ++z) {{ s = s * 1664525u + 1013904223u; "
                  f"args[{i}][z] = (float)(s >> 8) / 16777216.0f - 0.5f; }}"]
    lines += [f"    volatile char *flush = (volatile char *)malloc({flush_bytes}L);",
              f"    for (long z = 0; z < {flush_bytes}L; z += 64) flush[z] = (char)z;",
              f"    {ENTRY}(args, 1);",
              "    double check = 0;"]
    for i, t in enumerate(kernel.arguments):
        if t in w.outputs:
            lines.append(f"    check += args[{i}][0];")
    lines += ['    printf("%g\\n", check);', "    return 0;", "}"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Misses:
    """Cachegrind's counts for the kernel function alone."""

    d1_misses: int  # D1mr + D1mw: lines brought into the first-level data cache
    ll_misses: int  # DLmr + DLmw: lines brought into the last-level cache
    d1: CacheGeometry
    ll: CacheGeometry
    accesses: int  # Dr + Dw

    @property
    def d1_bytes(self) -> int:
        return self.d1_misses * self.d1.line_bytes

    @property
    def ll_bytes(self) -> int:
        return self.ll_misses * self.ll.line_bytes


def parse_output(text: str, function: str = ENTRY) -> dict[str, int]:
    """Sum the events of `function` in a cachegrind.out file."""
    events: list[str] = []
    totals: dict[str, int] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
            totals = dict.fromkeys(events, 0)
        elif line.startswith("fn="):
            current = line[3:].strip()
        elif current == function and line[:1].isdigit():
            values = line.split()[1:]
            for name, value in zip(events, values, strict=False):
                totals[name] += int(value)
    return totals


def measure(kernel: KernelSource, w: Workload, d1: CacheGeometry, ll: CacheGeometry,
            timeout_s: float = 600) -> Misses:
    """Compile the driver and run it once under cachegrind (the kernel must be generated
    single-threaded)."""
    reason = valgrind_missing()
    if reason:
        raise RuntimeError(f"cannot measure cache traffic: {reason}")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe, out = Path(tmp) / "driver.c", Path(tmp) / "driver", Path(tmp) / "cg.out"
        src.write_text(driver_source(kernel, w, 4 * ll.size_bytes))
        done = subprocess.run([CC, *DRIVER_FLAGS, str(src), "-o", str(exe), "-lm"],
                              capture_output=True, text=True)
        if done.returncode:
            raise BuildError(f"{CC} failed on a cachegrind driver:\n{done.stderr[-4000:]}")
        d1_size_ok = d1.option()
        i1 = CacheGeometry(32768, 8, d1.line_bytes)
        run = subprocess.run(
            ["valgrind", "--tool=cachegrind", f"--cachegrind-out-file={out}",
             f"--I1={i1.option()}", f"--D1={d1_size_ok}", f"--LL={ll.option()}", str(exe)],
            capture_output=True, text=True, timeout=timeout_s,
            env={**os.environ, "OMP_NUM_THREADS": "1"})
        if run.returncode:
            lines = run.stderr.splitlines() or ["(no output)"]
            reason = next((x for x in lines if "unhandled" in x or "Illegal" in x), lines[-1])
            raise RuntimeError(f"cachegrind failed ({reason.strip()}):\n{run.stderr[-4000:]}")
        totals = parse_output(out.read_text())
    return Misses(totals.get("D1mr", 0) + totals.get("D1mw", 0),
                  totals.get("DLmr", 0) + totals.get("DLmw", 0), d1, ll,
                  totals.get("Dr", 0) + totals.get("Dw", 0))


def boundary_words(result: Result, inner: str) -> float:
    """Words the model moves across the boundary just above level `inner`: per tensor, the
    fills of the outermost level at or below the boundary that the tensor passes through,
    plus the updates into the innermost level above it (write-backs)."""
    levels = list(result.levels)
    j = levels.index(inner)
    words = 0.0
    tensors = {t for per in result.traffic.values() for t in per}
    for t in tensors:
        below = [lv for lv in levels[j:] if t in result.traffic.get(lv, {})]
        above = [lv for lv in levels[:j] if t in result.traffic.get(lv, {})]
        if below and above:
            words += result.traffic[below[0]][t].fill
            words += result.traffic[above[-1]][t].update
    return words


def tempdir() -> str:
    return tempfile.gettempdir()
