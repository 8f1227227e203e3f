"""Compile generated C with the system compiler, cache the library by source hash, load it
with ctypes and run it on NumPy arrays."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tileflow.kernels.c_source import ENTRY, KernelSource

CC = os.environ.get("CC", "cc")
# the compiler may vectorise any loop; the tree's SIMD lanes are marked `omp simd`
# -O3 would interchange loops and unroll-and-jam them: the kernel would no longer run the
# tree's loop order (a third of the random trees' kernels were reordered)
KEEP_LOOP_ORDER = ("-fno-loop-interchange", "-fno-loop-unroll-and-jam")
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno",
         "-fno-trapping-math", "-fno-signed-zeros", "-fassociative-math", *KEEP_LOOP_ORDER)


class BuildError(RuntimeError):
    """The compiler rejected a generated kernel (a generator defect): the log says why."""


def cache_dir() -> Path:
    root = os.environ.get("TILEFLOW_CACHE") or Path(tempfile.gettempdir()) / "tileflow-kernels"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def compile_shared(source: str, flags: tuple[str, ...] = FLAGS) -> Path:
    """The shared library of `source`, compiled once per (source, flags, compiler)."""
    key = hashlib.sha256("\0".join((CC, *flags, source)).encode()).hexdigest()[:24]
    lib = cache_dir() / f"k{key}.so"
    if lib.exists():
        return lib
    if shutil.which(CC) is None:
        raise BuildError(f"no C compiler '{CC}' on PATH (set CC)")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.c"
        src.write_text(source)
        out = Path(tmp) / "kernel.so"
        done = subprocess.run([CC, *flags, str(src), "-o", str(out), "-lm"],
                              capture_output=True, text=True)
        if done.returncode:
            raise BuildError(f"{CC} failed on a generated kernel:\n{done.stderr[-4000:]}")
        staged = lib.with_suffix(f".{os.getpid()}.tmp")
        shutil.copy(out, staged)
        staged.replace(lib)  # atomic: concurrent builders never see half a library
    return lib


@dataclass
class CompiledKernel:
    """A loaded kernel and the arrays it runs on (allocated once, reused across calls, in
    the kernel's padded layout; `arrays` are views of the tensors' logical shapes)."""

    source: KernelSource
    function: ctypes._CFuncPtr
    arrays: dict[str, np.ndarray]
    library: Path
    storage: dict[str, np.ndarray]

    def __call__(self, threads: int = 1) -> None:
        pointers = (ctypes.c_void_p * len(self.source.arguments))(
            *[self.storage[t].ctypes.data for t in self.source.arguments])
        self.function(pointers, threads)


def load(source: KernelSource, shapes: Mapping[str, tuple[int, ...]],
         inputs: Mapping[str, np.ndarray]) -> CompiledKernel:
    """Compile and load `source`; inputs are copied in, other arguments are zeroed arrays."""
    lib_path = compile_shared(source.text)
    lib = ctypes.CDLL(str(lib_path))
    fn = getattr(lib, ENTRY)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int]
    fn.restype = None
    arrays, storage = {}, {}
    for t in source.arguments:
        shape = tuple(shapes[t])
        storage[t] = np.zeros(source.layouts.get(t, shape), dtype=np.float32)
        arrays[t] = storage[t][tuple(slice(0, e) for e in shape)]
        if t in inputs:
            arrays[t][...] = inputs[t]
    return CompiledKernel(source, fn, arrays, lib_path, storage)
