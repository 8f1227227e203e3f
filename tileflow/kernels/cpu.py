"""One call from a dataflow to a checked CPU kernel: generate, compile, run, compare."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tileflow.kernels.build import CompiledKernel, load
from tileflow.kernels.c_source import KernelSource, generate_c
from tileflow.kernels.nest import analyse
from tileflow.kernels.reference import random_inputs, run_reference
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow

RTOL = 1e-4  # float32 kernel against the float64 reference, relative to the tensor's scale


class WrongResult(AssertionError):
    """A generated kernel disagrees with the NumPy reference (a generator defect)."""


@dataclass
class CheckedKernel:
    kernel: CompiledKernel
    source: KernelSource
    max_error: float  # largest |kernel - reference| / max |reference| over the outputs


def build_checked(w: Workload, arch: Architecture, flow: Dataflow, threads: int = 1,
                  seed: int = 0, style: str = "registers") -> CheckedKernel:
    """Generate the C kernel of `flow` (generator `style`), run it once on random inputs
    with `threads` threads and check every output against the reference; raises
    WrongResult on a mismatch."""
    source = generate_c(analyse(w, arch, flow), threads=threads > 1, style=style)
    inputs = random_inputs(w, seed)
    kernel = load(source, w.shapes, inputs)
    kernel(threads)
    reference = run_reference(w, inputs)
    error = 0.0
    for t in w.outputs:
        scale = float(np.abs(reference[t]).max()) or 1.0
        error = max(error, float(np.abs(kernel.arrays[t] - reference[t]).max()) / scale)
    if not error <= RTOL:
        raise WrongResult(f"kernel of '{flow.name}' differs from the reference by "
                          f"{error:.3g} (relative)")
    return CheckedKernel(kernel, source, error)
