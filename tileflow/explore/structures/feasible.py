"""Feasible starting factors for a generated structure.

`default_factors` covers every dim but keeps each operator's iterations in its innermost
temporal loop, so on a chip with small on-chip levels the default tile of a level holds the
whole tensor and overflows it (and a spatial loop may ask for more instances than there
are). `fit_to_levels` moves factors, keeping every operator's product per dim, until the
model's checks pass: a temporal factor out to a loop of an enclosing tile (smaller blocks
below it), a spatial one to a temporal loop of its tile or an enclosing one. Each round
evaluates every single move (one batch) and keeps the one that cuts the violations most."""

from __future__ import annotations

import numpy as np

from tileflow.evaluator.structure import Structure
from tileflow.explore.structures.fitness import measure
from tileflow.tree import Tile, ops_under, walk


def moves(structure: Structure) -> list[tuple[int, int]]:
    """(from slot, to slot) pairs along which a factor can move without changing any
    operator's product of a dim: the destination is a temporal loop over the same dim in the
    same tile or an enclosing one, and every operator below the destination that uses the dim
    is also below the source (a tile shared by more operators than the source's would tile
    them too)."""
    w = structure.workload
    tiles = {p: n for p, n in walk(structure.template.root) if isinstance(n, Tile)}
    users = {(p, d): {o for o in ops_under(t) if d in w.op_by_name[o].dims}
             for p, t in tiles.items() for d in w.sizes}
    out = []
    for k, src in enumerate(structure.slots):
        for j, dst in enumerate(structure.slots):
            if j == k or dst.spatial or dst.dim != src.dim:
                continue
            if dst.path != src.path and not src.path.startswith(dst.path + "."):
                continue
            if dst.path == src.path and not src.spatial and dst.index > src.index:
                continue  # inward within a tile: no smaller block below
            if users[(dst.path, dst.dim)] <= users[(src.path, src.dim)]:
                out.append((k, j))
    return out


def _smallest_prime(n: int) -> int:
    p = 2
    while p * p <= n:
        if n % p == 0:
            return p
        p += 1
    return n


def fit_to_levels(structure: Structure, factors: np.ndarray, rounds: int = 48) -> np.ndarray:
    """Factors close to `factors` that the model accepts (capacity, fan-out, array), or the
    least-violating ones found when no move helps any more. A level's excess is that of its
    fullest tile, so one operator's move may change nothing while its siblings stay as
    full: moves that are no worse alone are then made together (one per slot)."""
    current = np.asarray(factors, dtype=np.int64).copy()
    m = measure(structure, current[None])
    if m.valid[0]:
        return current
    pairs = moves(structure)
    depth = [s.path.count(".") for s in structure.slots]
    excess = float(m.excess[0])
    for _ in range(rounds):
        steps, rows = [], []
        for k, j in pairs:
            n = int(current[k])
            for step in dict.fromkeys((_smallest_prime(n), n)) if n > 1 else ():
                row = current.copy()
                row[k] //= step
                row[j] *= step
                steps.append((k, j, step))
                rows.append(row)
        if not rows:
            break
        batch = np.array(rows)
        m = measure(structure, batch)
        if m.valid.any():  # the valid move that keeps the most in the inner loops
            return batch[int(np.argmin(np.where(m.valid, m.cycles, np.inf)))]
        best = int(np.argmin(m.excess))
        if m.excess[best] < excess:
            current, excess = batch[best], float(m.excess[best])
            continue
        together, used = current.copy(), set()
        order = sorted((i for i in range(len(steps)) if m.excess[i] <= excess),
                       key=lambda i: (steps[i][2] != _smallest_prime(int(current[steps[i][0]])),
                                      -int(current[steps[i][0]]), depth[steps[i][1]]))
        for i in order:
            k, j, step = steps[i]
            if k not in used and j not in used:
                used.update((k, j))
                together[k] //= step
                together[j] *= step
        m = measure(structure, together[None])
        if m.valid[0]:
            return together
        if not m.excess[0] < excess:
            break
        current, excess = together, float(m.excess[0])
    return current
