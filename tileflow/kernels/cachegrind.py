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

from tileflow.kernels.build import CC, KEEP_LOOP_ORDER, BuildError
from tileflow.kernels.c_source import ENTRY, KernelSource
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload

CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
# valgrind 3.19 decodes neither AVX-512 nor every VEX form the compiler emits for AVX2:
# the driver targets x86-64-v2 (SSE4.2); the addresses touched, hence the misses, are the
# same whatever the vector width
DRIVER_FLAGS = ("-O3", "-march=x86-64-v2", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math",
                "-fno-signed-zeros", "-fassociative-math", *KEEP_LOOP_ORDER,
                # bind library calls at load time: the first memset call inside the kernel
                # would otherwise run the dynamic linker, whose misses are not the kernel's
                "-Wl,-z,now")


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


def driver_source(kernel: KernelSource, w: Workload, flush_bytes: int,
                  baseline: bool = False) -> str:
    """The kernel plus a main(): allocate and fill the arrays, evict them from the caches by
    sweeping a large buffer, call the kernel once on one thread. The `baseline` driver is
    the same program but for one constant that skips the call: the setup's own misses (and
    the loader's, which bind the same symbols), to be subtracted from the whole program's."""
    lines = [f"void {ENTRY}(float **args, int nthreads) __attribute__((noinline));",
             kernel.text, "#include <stdio.h>",
             f"volatile int tf_run_kernel = {0 if baseline else 1};", "int main(void) {",
             f"    float *args[{max(len(kernel.arguments), 1)}];", "    unsigned s = 1u;"]
    for i, t in enumerate(kernel.arguments):
        n = math.prod(kernel.layouts.get(t, w.shapes[t]))
        lines += [f"    args[{i}] = (float *)aligned_alloc(64, sizeof(float) * "
                  f"(({n}L + 15) / 16 * 16));",
                  f"    for (long z = 0; z < {n}L; ++z) {{ s = s * 1664525u + 1013904223u; "
                  f"args[{i}][z] = (float)(s >> 8) / 16777216.0f - 0.5f; }}"]
    lines += [f"    volatile char *flush = (volatile char *)malloc({flush_bytes}L);",
              f"    for (long z = 0; z < {flush_bytes}L; z += 64) flush[z] = (char)z;",
              f"    if (tf_run_kernel) {ENTRY}(args, 1);",
              "    double check = 0;"]
    for i, t in enumerate(kernel.arguments):
        if t in w.outputs:
            lines.append(f"    check += args[{i}][0];")
    lines += ['    printf("%g\\n", check);', "    return 0;", "}"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Misses:
    """Cachegrind's counts for one call of the kernel, with everything it calls (memset and
    memcpy that the compiler substitutes for loops, malloc, libm): the whole program's
    counts less those of the same driver without the kernel call."""

    d1_misses: int  # D1mr + D1mw: lines brought into the first-level data cache (read
    # misses and write-allocate misses; cachegrind does not count write-backs)
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


def parse_output(text: str, function: str | None = ENTRY) -> dict[str, int]:
    """Sum the events of `function` in a cachegrind.out file; function None: the whole
    program's totals (its `summary:` line)."""
    events: list[str] = []
    totals: dict[str, int] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
            totals = dict.fromkeys(events, 0)
        elif line.startswith("summary:") and function is None:
            return {n: int(v) for n, v in zip(events, line.split()[1:], strict=False)}
        elif line.startswith("fn="):
            current = line[3:].strip()
        elif current == function and line[:1].isdigit():
            values = line.split()[1:]
            for name, value in zip(events, values, strict=False):
                totals[name] += int(value)
    return totals


EVENTS = ("D1mr", "D1mw", "DLmr", "DLmw", "Dr", "Dw")


def _run(source: str, d1: CacheGeometry, ll: CacheGeometry, timeout_s: float) -> dict[str, int]:
    """Compile a driver and run it once under cachegrind: the whole program's totals."""
    with tempfile.TemporaryDirectory() as tmp:
        src, exe, out = Path(tmp) / "driver.c", Path(tmp) / "driver", Path(tmp) / "cg.out"
        src.write_text(source)
        done = subprocess.run([CC, *DRIVER_FLAGS, str(src), "-o", str(exe), "-lm"],
                              capture_output=True, text=True)
        if done.returncode:
            raise BuildError(f"{CC} failed on a cachegrind driver:\n{done.stderr[-4000:]}")
        i1 = CacheGeometry(32768, 8, d1.line_bytes)
        run = subprocess.run(
            ["valgrind", "--tool=cachegrind", f"--cachegrind-out-file={out}",
             f"--I1={i1.option()}", f"--D1={d1.option()}", f"--LL={ll.option()}", str(exe)],
            capture_output=True, text=True, timeout=timeout_s,
            env={**os.environ, "OMP_NUM_THREADS": "1"})
        if run.returncode:
            lines = run.stderr.splitlines() or ["(no output)"]
            reason = next((x for x in lines if "unhandled" in x or "Illegal" in x), lines[-1])
            raise RuntimeError(f"cachegrind failed ({reason.strip()}):\n{run.stderr[-4000:]}")
        totals = parse_output(out.read_text(), None)
    return {e: totals.get(e, 0) for e in EVENTS}


def measure(kernel: KernelSource, w: Workload, d1: CacheGeometry, ll: CacheGeometry,
            timeout_s: float = 600) -> Misses:
    """Run the driver once under cachegrind (the kernel must be generated single-threaded)
    and subtract the baseline driver's counts."""
    reason = valgrind_missing()
    if reason:
        raise RuntimeError(f"cannot measure cache traffic: {reason}")
    flush = 4 * ll.size_bytes
    base = _run(driver_source(kernel, w, flush, baseline=True), d1, ll, timeout_s)
    totals = _run(driver_source(kernel, w, flush), d1, ll, timeout_s)
    net = {e: max(totals[e] - base[e], 0) for e in EVENTS}
    return Misses(net["D1mr"] + net["D1mw"], net["DLmr"] + net["DLmw"], d1, ll,
                  net["Dr"] + net["Dw"])
