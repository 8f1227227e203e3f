"""Latency as a pure function of (counts, parameters): one parameter vector re-costs every
measured row at once in NumPy.

The form is the model's, flattened over the whole kernel (ECM-like): compute overlaps with
the data transfers, which add up across the boundaries of the hierarchy; each start of an
innermost loop and each call add a fixed overhead. Compute is charged by how the compiled
loop nest runs each operator's innermost loop (`kernels.inner_loops`): operations in SIMD
iterations, in independent scalar iterations, and in a reduction chain (each add waits for
the previous one), each kind at its own cost per operation.

    cycles = max(simd_cycles * simd_work + scalar_cycles * scalar_work
                 + chain_cycles * chain_work,
                 sum over boundaries b of words_b / rate_b)
             + start_overhead * loop_starts + call_overhead
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tileflow.calibrate.parameters import Parameter, ParameterSet
from tileflow.kernels.columns import boundaries, words_column
from tileflow.specs.arch import Architecture

# the counts of `kernels.inner_loops.features`
WORK_COLUMNS = ("simd_work", "scalar_work", "chain_work")
INNER_COLUMNS = (*WORK_COLUMNS, "loop_starts")


def feature_columns(arch: Architecture) -> list[str]:
    return [*INNER_COLUMNS, *[words_column(o, i) for o, i in boundaries(arch)]]


def parameter_set(arch: Architecture) -> ParameterSet:
    """The fitted parameters with their defaults from the description and physical bounds:
    rates between 1/64 and 4 x the nominal one; a SIMD operation from a quarter of one
    lane-cycle (1 / (4 x lanes)) to 4 cycles, a scalar one from 1/4 cycle (four issued per
    cycle) to 32, an operation of a reduction chain from 1/4 cycle to 64 (the add latency
    sets it, nominally 4 cycles); overheads from 0 to 256 cycles per loop start and 1e7 per
    call. Work is in unit cycles: operations x the unit's cycles per operation."""
    lanes = float(max(arch.matrix.parallelism, arch.vector.parallelism))
    params = [
        Parameter("simd_cycles", "cycles per operation in SIMD iterations", 1 / (4 * lanes),
                  4.0, 1 / lanes, "cycles/op"),
        Parameter("scalar_cycles", "cycles per operation in scalar iterations", 0.25, 32.0,
                  1.0, "cycles/op"),
        Parameter("chain_cycles", "cycles per operation of a reduction chain (add latency)",
                  0.25, 64.0, 4.0, "cycles/op"),
    ]
    for outer, inner in boundaries(arch):
        lv = arch.level(outer)
        nominal = lv.read_words_per_cycle
        params.append(Parameter(f"rate_{outer}_{inner}", f"{outer} read bandwidth into {inner}",
                                nominal / 64, 4.0 * nominal, nominal, "words/cycle"))
    params += [
        Parameter("start_overhead", "cycles per start of an innermost loop (set-up, outer "
                  "loops' overhead)", 0.0, 256.0, 0.0, "cycles", log_scale=False),
        Parameter("call_overhead", "cycles per kernel call", 0.0, 1e7, 0.0, "cycles",
                  log_scale=False),
    ]
    return ParameterSet(tuple(params))


def cycles(features: Mapping[str, np.ndarray], values: np.ndarray,
           arch: Architecture) -> np.ndarray:
    """Predicted cycles of every row (features: columns of equal length)."""
    v = dict(zip(parameter_set(arch).names, values, strict=True))
    compute = sum(np.asarray(features[c], float) * v[c.replace("_work", "_cycles")]
                  for c in WORK_COLUMNS)
    data = sum(np.asarray(features[words_column(o, i)], float) / v[f"rate_{o}_{i}"]
               for o, i in boundaries(arch))
    return (np.maximum(compute, data)
            + v["start_overhead"] * np.asarray(features["loop_starts"], float)
            + v["call_overhead"])
