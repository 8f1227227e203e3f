"""Input tensors of a GPU campaign, made on the GPU machine rather than carried to it: a
counter-based hash (splitmix64) of each element's index gives the same float32 values on
any machine with NumPy, so a prepared folder carries only the programs and the reference
outputs. `hashed_inputs` makes them here (for the references); `SCRIPT` (inputs.py, run by
run.sh) makes them there, bit for bit the same."""

from __future__ import annotations

import numpy as np

from tileflow.kernels.c_source import pitched
from tileflow.kernels.cuda_harness import tensor_file
from tileflow.specs.workload import Workload

GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment
MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def stream_of(seed: int, ordinal: int) -> int:
    """The hash stream of a program's `ordinal`-th input tensor."""
    return seed * 1000 + ordinal


def hashed_uniform(count: int, stream: int) -> np.ndarray:
    """`count` float32 values in [-1, 1), each a multiple of 2^-23: splitmix64 of
    index + stream x GOLDEN, its top 24 bits."""
    z = np.arange(count, dtype=np.uint64) + np.uint64(stream * GOLDEN % 2**64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX[0])
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX[1])
    z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(40)).astype(np.float64) / 2**23 - 1).astype(np.float32)


def hashed_inputs(w: Workload, seed: int) -> dict[str, np.ndarray]:
    """The workload's inputs as the GPU machine makes them (logical shapes)."""
    return {t: hashed_uniform(int(np.prod(w.shapes[t])), stream_of(seed, i)).reshape(
        w.shapes[t]) for i, t in enumerate(w.inputs)}


def recipe(w: Workload, seed: int) -> list[dict]:
    """What inputs.py needs to make one program's input files."""
    return [{"file": tensor_file(t), "shape": list(w.shapes[t]),
             "pitched": list(pitched(w.shapes[t])), "stream": stream_of(seed, i)}
            for i, t in enumerate(w.inputs)]


# Standalone: the GPU machine runs it with its own python3 and NumPy, without tileflow.
SCRIPT = r'''"""Writes each program's input tensors (raw float32, pitched) into data/<program>/:
splitmix64 of each element's index, as tileflow.calibrate.gpu_inputs makes them.
Usage: python3 inputs.py PREPARED_DIR"""
import json
import sys
from pathlib import Path

import numpy as np

GOLDEN = 0x9E3779B97F4A7C15
MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def hashed_uniform(count, stream):
    z = np.arange(count, dtype=np.uint64) + np.uint64(stream * GOLDEN % 2**64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX[0])
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX[1])
    z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(40)).astype(np.float64) / 2**23 - 1).astype(np.float32)


def main():
    here = Path(sys.argv[1])
    manifest = json.loads((here / "manifest.json").read_text())
    for program, tensors in manifest["inputs"].items():
        folder = here / "data" / program
        folder.mkdir(parents=True, exist_ok=True)
        for t in tensors:
            values = hashed_uniform(int(np.prod(t["shape"])), t["stream"])
            array = np.zeros(t["pitched"], dtype=np.float32)
            array[tuple(slice(0, e) for e in t["shape"])] = values.reshape(t["shape"])
            array.tofile(folder / t["file"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
