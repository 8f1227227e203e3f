"""Feasible starting factors for a generated structure.

`default_factors` covers every dim but keeps each operator's iterations in its innermost
temporal loop, so on a chip with small on-chip levels the default tile of a level holds the
whole tensor and overflows it (and a spatial loop may ask for more instances than there
are). `fit_to_levels` moves factors, keeping every operator's product per dim, until the
model's checks pass: a temporal factor out to a loop of an enclosing tile (smaller blocks
below it), a spatial one to a temporal loop of its tile or an enclosing one. Each round
evaluates every single move (one batch) and keeps the one that cuts the violations most."""

from __future__ import annotations

import math

import numpy as np

from tileflow.arith import smallest_prime
from tileflow.evaluator.structure import Structure
from tileflow.explore.structures.fitness import measure
from tileflow.tree import Tile, is_below, node_depth, ops_under, walk


def moves(structure: Structure) -> list[tuple[tuple[int, ...], int]]:
    """(from slots, to slot) along which a factor can move without changing any operator's
    product of a dim: the destination is a temporal loop over the dim in the same tile as
    the source or an enclosing one; the sources hit every operator below the destination
    that uses the dim exactly once (a loop of a tile shared by several operators takes the
    factor from each of their own loops at once)."""
    w = structure.workload
    slots = structure.slots
    tiles = {p: n for p, n in walk(structure.template.root) if isinstance(n, Tile)}
    users = {(p, d): frozenset(o for o in ops_under(t) if d in w.op_by_name[o].dims)
             for p, t in tiles.items() for d in w.sizes}
    out = []
    for j, dst in enumerate(slots):
        if dst.spatial:
            continue
        need = users[(dst.path, dst.dim)]
        for k, src in enumerate(slots):  # one source covering every user
            if k == j or src.dim != dst.dim or users[(src.path, src.dim)] != need:
                continue
            if is_below(src.path, dst.path) or (src.path == dst.path and
                                                 (src.spatial or src.index > dst.index)):
                out.append(((k,), j))
        if len(need) > 1:  # each user's own innermost loop below the destination
            own = []
            for o in sorted(need):
                mine = [k for k, s in enumerate(slots) if s.dim == dst.dim and not s.spatial
                        and is_below(s.path, dst.path) and users[(s.path, s.dim)] == {o}]
                if not mine:
                    break
                own.append(max(mine, key=lambda k: (node_depth(slots[k].path), slots[k].index)))
            else:
                out.append((tuple(own), j))
    return out


def fit_to_array(structure: Structure, factors: np.ndarray) -> np.ndarray:
    """Spatial factors of a matrix operator's innermost tile cut to its rows x cols array
    (the first spatial loop takes the rows, the next the columns, as the model reads them);
    what is cut goes to the tile's temporal loop over the same dim."""
    w, arch = structure.workload, structure.arch
    out = np.asarray(factors, dtype=np.int64).copy()
    tiles = {p: n for p, n in walk(structure.template.root) if isinstance(n, Tile)}
    by_tile: dict[str, list[int]] = {}
    for k, s in enumerate(structure.slots):
        by_tile.setdefault(s.path, []).append(k)
    for path, ks in by_tile.items():
        tile, ops = tiles[path], ops_under(tiles[path])
        unit = arch.unit(w.op_by_name[ops[0]].unit) if len(ops) == 1 else None
        kids = [c for c in tile.children if isinstance(c, Tile)]
        if unit is None or unit.kind != "matrix" or min(unit.rows, unit.cols) < 2 or \
                not kids or kids[0].level != unit.level or \
                arch.fanout_between(tile.level, unit.level) != unit.rows * unit.cols:
            continue
        room = {"x": unit.rows, "y": unit.cols}
        unmarked = "x"
        for k in ks:
            s, n = structure.slots[k], int(out[k])
            if not s.spatial or n == 1:
                continue
            axis = tile.loops[s.index].axis
            if not axis:
                axis, unmarked = unmarked, "y"
            keep = max(d for d in range(1, min(n, room[axis]) + 1) if n % d == 0)
            home = [j for j in ks if structure.slots[j].dim == s.dim
                    and not structure.slots[j].spatial]
            if keep < n and home:
                out[k], out[home[-1]] = keep, out[home[-1]] * (n // keep)
                room[axis] //= keep
            else:
                room[axis] = max(room[axis] // n, 1)
    return out


def fit_to_levels(structure: Structure, factors: np.ndarray, rounds: int = 8) -> np.ndarray:
    """Factors close to `factors` that the model accepts (capacity, fan-out, array), or the
    least-violating ones found when no move helps any more. A level's excess is that of its
    fullest tile, so one operator's move may change nothing while its siblings stay as
    full: moves that are no worse alone are then made together (one per slot)."""
    current = np.asarray(factors, dtype=np.int64).copy()
    m = measure(structure, current[None])
    if m.valid[0]:
        return current
    current = fit_to_array(structure, current)
    m = measure(structure, current[None])
    if m.valid[0]:
        return current
    pairs = moves(structure)
    depth = [node_depth(s.path) for s in structure.slots]
    excess = float(m.excess[0])
    for _ in range(rounds):
        steps, rows = [], []
        for ks, j in pairs:
            n = math.gcd(*(int(current[k]) for k in ks))
            for step in dict.fromkeys((smallest_prime(n), n)) if n > 1 else ():
                row = current.copy()
                row[list(ks)] //= step
                row[j] *= step
                steps.append((ks, j, step))
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
                       key=lambda i: (steps[i][2] != smallest_prime(steps[i][2]),
                                      -max(int(current[k]) for k in steps[i][0]),
                                      depth[steps[i][1]]))
        for i in order:
            ks, j, step = steps[i]
            if used.isdisjoint((*ks, j)):
                used.update((*ks, j))
                together[list(ks)] //= step
                together[j] *= step
        m = measure(structure, together[None])
        if m.valid[0]:
            return together
        if not m.excess[0] < excess:
            break
        current, excess = together, float(m.excess[0])
    return current
