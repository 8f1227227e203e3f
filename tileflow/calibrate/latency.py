"""Latency as a pure function of (counts, parameters): one parameter vector re-costs every
measured row at once in NumPy.

The form is the model's, flattened over the whole kernel (ECM-like): compute on the matrix
and vector units overlaps with the data transfers, which add up across the boundaries of
the hierarchy; each innermost step and each call add a fixed overhead.

    cycles = max(macs / mac_rate + vector_work / vector_rate,
                 sum over boundaries b of words_b / rate_b)
             + step_overhead * leaf_steps + call_overhead
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tileflow.calibrate.parameters import Parameter, ParameterSet
from tileflow.specs.arch import Architecture


def boundaries(arch: Architecture) -> list[tuple[str, str]]:
    """(outer, inner) level pairs, outermost first."""
    names = [lv.name for lv in arch.levels]
    return list(zip(names[:-1], names[1:], strict=True))


def words_column(outer: str, inner: str) -> str:
    return f"words_{outer}_{inner}"


def feature_columns(arch: Architecture) -> list[str]:
    return ["macs", "vector_work", "leaf_steps",
            *[words_column(o, i) for o, i in boundaries(arch)]]


def parameter_set(arch: Architecture) -> ParameterSet:
    """The fitted parameters with their defaults from the description and physical bounds:
    rates between 1/64 and 4 x the nominal one, overheads from 0 to 1e6 cycles."""
    params = [
        Parameter("mac_rate", "matrix unit MACs per cycle", arch.matrix.parallelism / 64,
                  4.0 * arch.matrix.parallelism, float(arch.matrix.parallelism), "MAC/cycle"),
        Parameter("vector_rate", "vector unit lanes (ops per cycle)", arch.vector.parallelism / 64,
                  4.0 * arch.vector.parallelism, float(arch.vector.parallelism), "op/cycle"),
    ]
    for outer, inner in boundaries(arch):
        lv = arch.level(outer)
        nominal = lv.read_words_per_cycle
        params.append(Parameter(f"rate_{outer}_{inner}", f"{outer} read bandwidth into {inner}",
                                nominal / 64, 4.0 * nominal, nominal, "words/cycle"))
    params += [
        Parameter("step_overhead", "cycles per innermost step (loop and address overhead)",
                  0.0, 64.0, 0.0, "cycles", log_scale=False),
        Parameter("call_overhead", "cycles per kernel call", 0.0, 1e7, 0.0, "cycles",
                  log_scale=False),
    ]
    return ParameterSet(tuple(params))


def cycles(features: Mapping[str, np.ndarray], values: np.ndarray,
           arch: Architecture) -> np.ndarray:
    """Predicted cycles of every row (features: columns of equal length)."""
    v = dict(zip(parameter_set(arch).names, values, strict=True))
    compute = (np.asarray(features["macs"], float) / v["mac_rate"]
               + np.asarray(features["vector_work"], float) / v["vector_rate"])
    data = sum(np.asarray(features[words_column(o, i)], float) / v[f"rate_{o}_{i}"]
               for o, i in boundaries(arch))
    return (np.maximum(compute, data)
            + v["step_overhead"] * np.asarray(features["leaf_steps"], float)
            + v["call_overhead"])
