"""Sound pruning of partial factor assignments: a choice is ruled out only where every
covering completion of it breaks a constraint.

Two checks qualify. *Fan-out*: the spatial factors of one tile multiply into the instances
that tile spreads over, and a product only grows as undecided factors are set, so decided
factors whose product already exceeds the tile's fan-out rule out every completion.
*Capacity and footprint limits*: a level's footprint counts, per operator and dimension, the
extent of the loops of one tile and everything below it; extents grow with every factor.
`footprint_bound` gives each chain's remainder to its outermost undecided slot, which lies in
such a set exactly when all the chain's undecided slots do, and 1 to the others: no covering
completion has a smaller extent anywhere, so none has a smaller footprint.

Two rules of the model are not monotone in the factors, because a loop of one iteration
spreads over nothing: Para and Pipe children sit on disjoint instances (their footprints
taken as a maximum, not a sum) only when each of them spreads with a loop of more than one
iteration, and a tile with no loop of more than one iteration holding several tiles of its
own level counts as a group of them. Where an undecided slot can still flip either rule, the
levels it affects are not checked (`monotone_levels`). The array-axis, dependency and window
checks also depend on which loops have one iteration; they are never used to prune."""

from __future__ import annotations

import math

import numpy as np

from tileflow.errors import InputError
from tileflow.evaluator.batch import footprint_words
from tileflow.explore.factors.space import UNDECIDED, Limits, Space, evaluate_rows
from tileflow.tree import Op, Tile, node_depth, ops_under, path_prefixes, walk


class Bounds:
    """The pruning checks of one factor space (the tree's shape read once)."""

    def __init__(self, space: Space, limits: Limits | None = None):
        self.space = space
        self.limits = limits or Limits()
        structure = space.structure
        arch = structure.arch
        self.level_index = arch.level_index
        slot_of = {(s.path, s.index): i for i, s in enumerate(structure.slots)}
        tiles = {p: n for p, n in walk(structure.template.root) if isinstance(n, Tile)}
        leaves = {n.op: p for p, n in walk(structure.template.root) if isinstance(n, Op)}

        def loop(path: str, index: int) -> tuple[int, int]:
            """(slot, fixed factor): slot -1 for a loop the structure keeps fixed."""
            i = slot_of.get((path, index), -1)
            return i, tiles[path].loops[index].factor

        # Para/Pipe tiles of several children: per operator under them, the spatial loops
        # deeper on its path, with the level index of their tile
        self.splits = []
        for path, tile in tiles.items():
            if not tile.semantics.at_once or len(tile.children) < 2:
                continue
            depth = node_depth(path)
            per_op = []
            for op in ops_under(tile):
                below = path_prefixes(leaves[op])[depth + 1:-1]
                per_op.append([(*loop(p, j), self.level_index[tiles[p].level])
                               for p in below for j, lp in enumerate(tiles[p].loops)
                               if lp.spatial])
            self.splits.append((self.level_index[tile.level], per_op))
        # tiles that may count as a group of their same-level children
        self.groups = [(self.level_index[tile.level],
                        [loop(path, j) for j in range(len(tile.loops))])
                       for path, tile in tiles.items()
                       if len(tile.children) > 1
                       and all(isinstance(c, Tile) and c.level == tile.level
                               for c in tile.children)]
        self.capacity = {lv.name: lv.capacity_words for lv in arch.levels}
        self._chain_slots = [c.slots for c in space.chains]
        # bound row bytes -> words per level (nodes of one tree often share a bound row)
        self._footprints: dict[bytes, dict[str, float]] = {}

    # --- the bound row ----------------------------------------------------------------

    def footprint_bound(self, state: np.ndarray) -> np.ndarray:
        """A row with no larger extent, at any tile of any operator's path, than any covering
        completion of `state`: each chain's remainder on its outermost undecided slot (where
        that slot is the outermost undecided one of every chain it belongs to; a slot shared
        by several chains takes the least of their remainders), every other undecided slot
        1. It may fall short of covering a dimension: it is a bound, not a point."""
        sp = self.space
        values = state.tolist() if isinstance(state, np.ndarray) else [int(x) for x in state]
        out = [x or 1 for x in values]  # UNDECIDED is 0
        outermost = {}
        for k, slots in enumerate(self._chain_slots):
            for i in slots:
                if values[i] == UNDECIDED:
                    outermost[k] = i
                    break
        for i in set(outermost.values()):
            chains = sp.chains_of[i]
            if all(outermost.get(k) == i for k in chains):
                out[i] = min(sp.remaining(values, k) for k in chains)
        return np.array(out, dtype=np.int64)

    # --- which levels may be checked --------------------------------------------------

    @staticmethod
    def _spreads(state: np.ndarray, loops) -> bool | None:
        """Whether some loop has more than one iteration: True, False, or None (open)."""
        open_ = False
        for slot, fixed in loops:
            value = fixed if slot < 0 else int(state[slot])
            if value > 1:
                return True
            open_ |= value == UNDECIDED
        return None if open_ else False

    def monotone_levels(self, state: np.ndarray) -> set[int]:
        """Level indices whose footprint no undecided slot of `state` can make smaller."""
        levels = set(range(len(self.capacity)))
        for level, loops in self.groups:
            if self._spreads(state, loops) is None:
                levels.discard(level)
        for level, per_op in self.splits:
            for x in range(level, len(self.capacity)):
                answers = [self._spreads(state, [(s, f) for s, f, lv in loops if lv < x])
                           for loops in per_op]
                if False not in answers and None in answers:
                    levels.discard(x)
        return levels

    # --- the checks ---------------------------------------------------------------------

    def spread_exceeded(self, state: np.ndarray) -> bool:
        """Decided spatial factors of one tile already multiply beyond its fan-out."""
        values = state.tolist() if isinstance(state, np.ndarray) else state
        return any(math.prod([values[i] for i in idx if values[i] != UNDECIDED]) > limit
                   for idx, limit in self.space.spread_groups)

    def feasible(self, states: np.ndarray) -> np.ndarray:
        """False for each partial assignment that no covering completion can make valid."""
        states = np.asarray(states, dtype=np.int64).reshape(-1, self.space.size)
        lists = states.tolist()  # plain ints for the per-slot checks
        ok = np.array([not self.spread_exceeded(s) for s in lists], dtype=bool)
        names = list(self.capacity)
        limits = {x: min(self.capacity[name], self.limits.footprint_words.get(name, math.inf))
                  for x, name in enumerate(names)}
        limited = {x for x, limit in limits.items() if math.isfinite(limit)}
        checked = [self.monotone_levels(s) & limited if ok[r] else set()
                   for r, s in enumerate(lists)]
        if not any(checked):  # no level to check (or every state pruned already)
            return ok
        rows = [self.footprint_bound(s) for r, s in enumerate(states) if checked[r]]
        keys = [row.tobytes() for row in rows]
        new = list(dict.fromkeys(k for k in keys if k not in self._footprints))
        if new:
            fresh = np.array([np.frombuffer(k, dtype=np.int64) for k in new])
            if len(self._footprints) > 100_000:
                self._footprints.clear()
            for k, words in zip(new, self._footprints_of(fresh), strict=True):
                self._footprints[k] = words
        found = iter(keys)
        for r, levels in enumerate(checked):
            if not levels:
                continue
            fps = self._footprints[next(found)]
            for x in levels:
                words = fps.get(names[x])
                if words is not None and words > limits[x]:
                    ok[r] = False
        return ok

    def _footprints_of(self, rows: np.ndarray) -> list[dict[str, float]]:
        """Words per level of each bound row (the model's footprints, row by row where it
        cannot analyse them in a batch)."""
        try:
            fps = footprint_words(self.space.structure, rows)
        except InputError:  # a row the model cannot analyse: row by row, as the search does
            metrics = evaluate_rows(self.space, rows, "latency", self.limits).metrics
            fps = {k[len("footprint_"):]: v for k, v in metrics.items()
                   if k.startswith("footprint_")}
        return [{name: float(v[r]) for name, v in fps.items()} for r in range(len(rows))]
