"""Evaluate many factor assignments of one structure at once, as arrays.

`evaluate_batch` is the contract the searches use. This version evaluates each row with the
scalar model (`tileflow.cost.evaluate`), which stays the reference; a vectorised engine
replaces the body without changing the contract."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tileflow.cost import evaluate
from tileflow.explore.structure import Structure


@dataclass(frozen=True)
class BatchResult:
    """Metrics of B factor assignments, one array entry per row.

    `violations` maps a violation kind (the `kind` of the model's violation records, e.g.
    'capacity', 'fanout', 'array', 'coverage', 'dependency') to the largest amount by which
    a row exceeds that constraint (needed - available, in the record's unit; 0 where none)."""

    cycles: np.ndarray
    energy_pj: np.ndarray
    dram_words: np.ndarray
    ops: np.ndarray
    footprint_words: Mapping[str, np.ndarray]
    valid: np.ndarray
    violations: Mapping[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.cycles)


def evaluate_batch(structure: Structure, factors: np.ndarray) -> BatchResult:
    """Metrics for each row of `factors` (shape B x len(structure.slots))."""
    factors = np.asarray(factors, dtype=np.int64)
    if factors.ndim != 2 or factors.shape[1] != len(structure.slots):
        raise ValueError(f"factors must have shape (B, {len(structure.slots)}), "
                         f"got {factors.shape}")
    rows = len(factors)
    cycles, energy, dram, ops = (np.zeros(rows) for _ in range(4))
    valid = np.zeros(rows, dtype=bool)
    footprint: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(rows))
    violations: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(rows))
    for r, row in enumerate(factors):
        result = evaluate(structure.workload, structure.arch, structure.dataflow(row))
        cycles[r], energy[r], dram[r] = result.cycles, result.energy_pj, result.dram_words
        ops[r] = sum(result.ops.values())
        valid[r] = result.valid
        for fp in result.footprints:
            footprint[fp.level][r] = fp.words
        for v in result.violations:
            kind = getattr(v, "kind", "other")
            amount = max(getattr(v, "needed", 1) or 1, 0) - max(getattr(v, "available", 0) or 0, 0)
            violations[kind][r] = max(violations[kind][r], amount)
    return BatchResult(cycles, energy, dram, ops, dict(footprint), valid, dict(violations))
