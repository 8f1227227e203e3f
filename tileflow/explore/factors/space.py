"""The factor space of one structure: which slots tile which dimension of which operator,
the factors a slot may take, completing partial assignments so that every dimension is
covered, and batched evaluation into objective costs that never raises.

A *chain* is the list of slots that tile one dimension of one operator, outermost first:
their product must reach the dimension's size. The last undecided slot of a chain is
*forced* (it takes what is left); every other undecided slot is a free choice."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tileflow.arith import divisors
from tileflow.errors import InputError
from tileflow.evaluator.batch import BatchResult, evaluate_batch
from tileflow.evaluator.structure import Structure
from tileflow.tree import Op, is_below, node_depth, path_prefixes, walk

OBJECTIVES = ("latency", "energy", "edp", "dram")
COLUMNS = {"latency": "cycles", "energy": "energy_pj", "edp": "edp", "dram": "dram_words",
           "steps": "outer_steps"}  # objective -> metric ("steps": fitting baselines)
UNDECIDED = 0


@dataclass(frozen=True)
class Chain:
    """The slots (outermost first) whose product must cover `size` for `op`'s `dim`."""

    op: str
    dim: str
    size: int
    slots: tuple[int, ...]


@dataclass(frozen=True)
class Limits:
    """User limits beyond the accelerator's: words per level, and DRAM words."""

    footprint_words: Mapping[str, float] = field(default_factory=dict)
    dram_words: float = math.inf


@dataclass(frozen=True)
class Evaluated:
    """Metrics of evaluated rows, plus the objective cost (inf where a row is invalid)."""

    factors: np.ndarray
    cost: np.ndarray
    valid: np.ndarray
    metrics: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.cost)


def ints(state) -> list[int]:
    """A state as a list of Python ints (`tolist` for an integer array, at C speed)."""
    if isinstance(state, np.ndarray) and state.dtype.kind in "iu":
        return state.tolist()
    return [int(x) for x in state]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class Space:
    """Chains, per-slot limits and candidate factors of a structure."""

    def __init__(self, structure: Structure, non_divisors: bool = True,
                 fixed: Mapping[int, int] | None = None):
        self.structure = structure
        self.non_divisors = non_divisors
        self.fixed = dict(fixed or {})  # slot -> factor held fixed (a restricted space)
        w, arch = structure.workload, structure.arch
        slots = structure.slots
        leaves = {n.op: p for p, n in walk(structure.template.root) if isinstance(n, Op)}
        chains = []
        for op in w.ops:
            leaf = leaves.get(op.name)
            if leaf is None:
                continue
            for d in op.dims:
                on_path = tuple(i for i, s in enumerate(slots)
                                if s.dim == d and is_below(leaf, s.path))
                chains.append(Chain(op.name, d, w.sizes[d], on_path))
        self.chains = tuple(c for c in chains if c.slots)
        self.uncovered = tuple(c for c in chains if not c.slots and c.size > 1)
        self.chains_of = [tuple(k for k, c in enumerate(self.chains) if i in c.slots)
                          for i in range(len(slots))]
        tiles = {p: n for p, n in walk(structure.template.root) if not isinstance(n, Op)}
        self.spatial_limit = np.array([self._spatial_limit(s, tiles, leaves) if s.spatial
                                       else 0 for s in slots], dtype=np.int64)
        self.levels = tuple(lv.name for lv in arch.levels)
        outer = arch.levels[0].name
        self.outer_masks = [np.array([not sl.spatial and tiles[sl.path].level == outer
                                      and is_below(leaf, sl.path) for sl in slots])
                            for leaf in leaves.values()]
        # a slot shared by several operators' chains: the loops below it must cover the same
        # extent for each of them, so it is decided before them and takes divisors only
        self.shared = np.array([len(ks) > 1 for ks in self.chains_of])
        self.private = np.array([not any(self.shared[j] for k in ks
                                         for j in self.chains[k].slots)
                                 for ks in self.chains_of])
        self._plan()

    def _plan(self) -> None:
        """Plain-Python tables of the chains for the completion loops (the search calls them
        for every point it proposes; NumPy scalars would cost more than the arithmetic)."""
        self._chain_slots = [c.slots for c in self.chains]
        self._chain_size = [c.size for c in self.chains]
        self._chains_of = [tuple(ks) for ks in self.chains_of]
        self._chainless = [i for i, ks in enumerate(self.chains_of) if not ks]
        # per slot: the shared slots before it on its chains (it is free once they are set)
        waits_on = [tuple(dict.fromkeys(j for k in ks for j in self.chains[k].slots
                                        if j < i and self.shared[j]))
                    for i, ks in enumerate(self.chains_of)]
        self._waits_on = [(i, waits) for i, waits in enumerate(waits_on)]
        self._limit = [int(x) for x in self.spatial_limit]
        self._private = [bool(x) for x in self.private]
        self._spatial = [s.spatial for s in self.structure.slots]
        # per slot: the slots of its chains (its candidates depend on nothing else)
        self._deps = [tuple(sorted({j for k in ks for j in self.chains[k].slots}))
                      for ks in self.chains_of]
        self._candidates: dict[tuple, list[int]] = {}
        self._propagated_states: dict[bytes, tuple[list[int], list[int]]] = {}
        # per shared slot: the slots that wait on it (free once it is decided)
        self._waiters = {j: tuple(i for i, waits in self._waits_on if j in waits)
                         for j in range(len(self.chains_of)) if self.shared[j]}
        # chains x slots: which slots each chain holds (its undecided ones counted at once)
        self._incidence = np.zeros((len(self.chains), len(self.structure.slots)), dtype=np.int64)
        for k, c in enumerate(self.chains):
            self._incidence[k, list(c.slots)] = 1
        # per tile with spatial slots: those slots and the fan-out they share
        by_tile: dict[str, list[int]] = {}
        for i, s in enumerate(self.structure.slots):
            if self._limit[i]:
                by_tile.setdefault(s.path, []).append(i)
        self.spread_groups = tuple((tuple(idx), max(self._limit[i] for i in idx))
                                   for idx in by_tile.values())
        # per shared slot: the sizes of its chains (its factor must divide each)
        self._shared_sizes = {j: tuple(self.chains[k].size for k in self.chains_of[j])
                              for j in range(len(self.chains_of)) if self.shared[j]}

    def _spatial_limit(self, slot, tiles, leaves) -> int:
        """The fan-out a spatial slot may use: instances of the next level down the path of
        any operator under it (units of the operator's compute unit at the innermost)."""
        arch, w = self.structure.arch, self.structure.workload
        level = tiles[slot.path].level
        limit = 1
        for op, leaf in leaves.items():
            if not is_below(leaf, slot.path):
                continue
            # the tiles below the slot's tile on the way to the leaf
            below = [tiles[p] for p in path_prefixes(leaf)[node_depth(slot.path) + 1:-1]]
            inner = next((t.level for t in below if t.level != level), None)
            if inner is not None:
                limit = max(limit, arch.fanout_between(level, inner))
                continue
            unit = arch.unit(w.op_by_name[op].unit)
            fan = (arch.fanout_between(level, unit.level)
                   if arch.level_index[level] < arch.level_index[unit.level] else 1)
            limit = max(limit, fan * unit.parallelism)
        return limit

    @property
    def size(self) -> int:
        return len(self.structure.slots)

    # --- coverage ---------------------------------------------------------------------

    def remaining(self, state, chain: int) -> int:
        """What the undecided slots of a chain must still cover."""
        done = 1
        for i in self._chain_slots[chain]:
            if state[i] != UNDECIDED:
                done *= int(state[i])
        return -(-self._chain_size[chain] // done)

    def slot_remaining(self, state, slot: int) -> int:
        """The most a slot may take without over-covering any of its chains."""
        rems = [self.remaining(state, k) for k in self._chains_of[slot]]
        return min(rems) if rems else 1

    def propagate(self, state: np.ndarray) -> np.ndarray:
        """Assign every forced slot (the last undecided one of a chain) and every slot that
        belongs to no chain (factor 1); returns a new array."""
        values = ints(state)
        self._propagate(values)
        return np.array(values, dtype=np.int64)

    def _propagate(self, s: list[int], opens: list[int] | None = None) -> list[int]:
        """`propagate` in place on a list; `opens`: each chain's undecided slots, kept up to
        date here (counted afresh when not given). Chains are visited in order, pass after
        pass, as long as one has a single undecided slot (the next such chain of a pass is
        found with `list.index`, which visits them in the same order). Returns the counts."""
        for i in self._chainless:
            if s[i] == UNDECIDED:
                s[i] = 1
        chain_slots, chains_of, sizes = self._chain_slots, self._chains_of, self._chain_size
        if opens is None:
            opens = (self._incidence @ (np.array(s, dtype=np.int64) == UNDECIDED)).tolist()
        while 1 in opens:  # a pass over the chains, in order
            k = 0
            while True:
                try:
                    k = opens.index(1, k)
                except ValueError:
                    break
                i = next(j for j in chain_slots[k] if s[j] == UNDECIDED)
                need = 0
                for m in chains_of[i]:
                    if opens[m] == 1:
                        done = 1
                        for j in chain_slots[m]:
                            if s[j] != UNDECIDED:
                                done *= s[j]
                        need = max(need, -(-sizes[m] // done))
                s[i] = need
                for m in chains_of[i]:
                    opens[m] -= 1
                k += 1
        return opens

    def free_slots(self, state) -> list[int]:
        """Undecided slots that may be decided now: those with no undecided shared slot
        outside them on any of their chains."""
        out = []
        for i, waits in self._waits_on:
            if state[i] == UNDECIDED:
                for j in waits:
                    if state[j] == UNDECIDED:
                        break
                else:
                    out.append(i)
        return out

    def candidates(self, state, slot: int) -> list[int]:
        """Factors a free slot may take: the divisors of what its chains leave, within the
        fan-out for spatial slots; with `non_divisors`, also powers of two and the fan-out
        limit itself where they do not divide (the last tile is clipped)."""
        return list(self._candidates_shared(state, slot))

    def _candidates_shared(self, state, slot: int) -> list[int]:
        """`candidates`, the memoised list itself (the caller must not change it)."""
        key = (slot, *map(state.__getitem__, self._deps[slot]))
        found = self._candidates.get(key)
        if found is None:
            if len(self._candidates) > 200_000:
                self._candidates.clear()
            found = self._candidates[key] = self._candidates_of(state, slot)
        return found

    def _candidates_of(self, state, slot: int) -> list[int]:
        rem = self.slot_remaining(state, slot)
        cap = self._limit[slot] or rem
        low = 1  # where the rest of a chain is spatial, its fan-out bounds what it can take
        limit = self._limit
        for k in self._chains_of[slot]:
            rest = [j for j in self._chain_slots[k] if j != slot and state[j] == UNDECIDED]
            if all(limit[j] for j in rest):
                room = math.prod(limit[j] for j in rest)
                low = max(low, ceil_div(self.remaining(state, k), room))
        values = {d for d in divisors(rem) if low <= d <= cap}
        if self.non_divisors and self._private[slot]:
            values |= {1 << k for k in range(rem.bit_length()) if low <= (1 << k) <= min(rem, cap)}
            if self._spatial[slot] and low <= min(rem, cap):
                values.add(min(rem, cap))
        return sorted(values) or [max(low, 1)]

    def smallest_completion(self, state: np.ndarray) -> np.ndarray:
        """A covering completion with the innermost extents as small as they can be: each
        chain's remainder goes to its outermost undecided temporal slot (spatial if it has
        none), every other undecided slot takes 1. A point the tree search learns from when
        it opens a choice; pruning uses the bounds of `tileflow.explore.factors.bounds` (a loop of
        one
        iteration spreads over nothing, so footprints are not monotone in every slot)."""
        values = ints(state)
        out = [x or 1 for x in values]  # UNDECIDED is 0
        spatial, limit = self._spatial, self._limit
        for slots, size in zip(self._chain_slots, self._chain_size, strict=True):
            open_slots = [i for i in slots if values[i] == UNDECIDED]
            if not open_slots:
                continue
            need = -(-size // math.prod([out[i] for i in slots]))
            temporal = [i for i in open_slots if not spatial[i]]
            if temporal:
                out[temporal[0]] *= need
                continue
            for i in open_slots:  # only spatial slots left: fill them outermost first
                take = min(need, max(limit[i] // out[i], 1))
                out[i] *= take
                need = ceil_div(need, take)
            out[open_slots[-1]] *= need  # beyond every fan-out: infeasible, as it should be
        return np.array(out, dtype=np.int64)

    def random_completion(self, state: np.ndarray, rng: np.random.Generator,
                          spread_bias: float = 0.0) -> np.ndarray:
        """Complete a partial assignment: free slots in random order, each a random candidate
        (uniform over candidates, i.e. roughly log-uniform over sizes). With `spread_bias`,
        a spatial slot takes its largest candidate with that probability (using the whole
        fan-out is most often what pays)."""
        s, opens = self._propagated(state)
        limit, chains_of, waiters = self._limit, self._chains_of, self._waiters
        # every draw of the completion at once (one generator call, not three per slot):
        # a decision takes at most three uniforms and decides at least one slot
        draws = iter(rng.random(3 * s.count(UNDECIDED)).tolist())
        # `free_slots` kept by difference: the undecided slots, less those that wait on an
        # undecided shared slot (the same slots in the same order, without the full scan);
        # a slot only leaves it, except when a shared slot is decided
        shared_open: list[int] = []
        free: list[int] = []
        fresh = True
        while True:
            if fresh:
                shared_open = [j for j in waiters if s[j] == UNDECIDED]
                blocked = {i for j in shared_open for i in waiters[j]}
                free = [i for i, x in enumerate(s) if x == UNDECIDED and i not in blocked]
            else:
                free = [i for i in free if s[i] == UNDECIDED]
            if not free:
                return np.array(s, dtype=np.int64)
            slot = free[int(next(draws) * len(free))]
            values = self._candidates_shared(s, slot)
            if limit[slot] and next(draws) < spread_bias:
                s[slot] = values[-1]
            else:
                s[slot] = values[int(next(draws) * len(values))]
            for m in chains_of[slot]:
                opens[m] -= 1
            self._propagate(s, opens)
            fresh = any(s[j] != UNDECIDED for j in shared_open)

    def _propagated(self, state) -> tuple[list[int], list[int]]:
        """A propagated copy of `state` as a list, and its chains' undecided counts; kept for
        array states (the rollouts of a leaf start from the same state)."""
        key = (state.tobytes() if isinstance(state, np.ndarray) and state.dtype == np.int64
               else None)
        found = self._propagated_states.get(key) if key is not None else None
        if found is None:
            s = ints(state)
            found = (s, self._propagate(s))
            if key is not None:
                if len(self._propagated_states) > 50_000:
                    self._propagated_states.clear()
                self._propagated_states[key] = found
        return list(found[0]), list(found[1])

    def root_state(self) -> np.ndarray:
        state = np.zeros(self.size, dtype=np.int64)
        for slot, value in self.fixed.items():
            state[slot] = value
        return self.propagate(state)

    def spread_ok(self, values: Sequence[int]) -> bool:
        """The spatial factors of each tile of a complete row stay within the tile's fan-out
        together."""
        return all(math.prod([values[i] for i in idx]) <= cap
                   for idx, cap in self.spread_groups)

    def fits(self, values: Sequence[int], changed: Sequence[int]) -> bool:
        """A complete row whose `changed` slots were just set: each changed spatial slot
        within its fan-out and every tile's within its own (`spread_ok`), each changed
        shared slot still dividing its chains (the loops below it cover the same extent
        for each operator)."""
        shared, limit = self._shared_sizes, self._limit
        for j in changed:
            sizes = shared.get(j)
            if sizes is not None and any(size % values[j] for size in sizes):
                return False
        spatial = False
        for j in changed:
            if limit[j]:
                if values[j] > limit[j]:
                    return False
                spatial = True
        return not spatial or self.spread_ok(values)

    def outer_steps(self, rows: np.ndarray) -> np.ndarray:
        """Steps of the outermost level's temporal loops, summed over the operators: fewer
        steps mean larger tiles on chip."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, self.size)
        total = np.zeros(len(rows))
        for mask in self.outer_masks:
            total += np.prod(rows[:, mask], axis=1) if mask.any() else 1.0
        return total

    def covers(self, factors: np.ndarray) -> bool:
        return all(math.prod(int(factors[i]) for i in c.slots) >= c.size for c in self.chains)

    def exact(self, factors: np.ndarray) -> bool:
        return all(math.prod(int(factors[i]) for i in c.slots) == c.size for c in self.chains)


def metrics_of(batch: BatchResult, objective: str, limits: Limits,
               extra: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray,
                                                       dict[str, np.ndarray]]:
    """Objective cost (inf where invalid), validity with the user limits, metric columns."""
    valid = batch.valid.copy()
    metrics: dict[str, np.ndarray] = {
        "cycles": batch.cycles, "energy_pj": batch.energy_pj, "dram_words": batch.dram_words,
        "edp": batch.cycles * batch.energy_pj, **extra}
    for level, words in batch.footprint_words.items():
        metrics[f"footprint_{level}"] = words
    for kind, amount in batch.violations.items():
        metrics[f"violation_{kind}"] = amount
    for level, limit in limits.footprint_words.items():
        words = batch.footprint_words.get(level, np.zeros(len(batch)))
        over = np.maximum(words - limit, 0.0)
        metrics[f"violation_limit_{level}"] = over
        valid &= over == 0
    if math.isfinite(limits.dram_words):
        over = np.maximum(batch.dram_words - limits.dram_words, 0.0)
        metrics["violation_limit_dram"] = over
        valid &= over == 0
    if objective.endswith("-then-latency"):  # lexicographic: the metric, then the cycles
        first = metrics[COLUMNS[objective.split("-")[0]]]
        with np.errstate(invalid="ignore"):  # infinite cycles (no valid time) rank last
            tie = np.where(np.isfinite(batch.cycles), batch.cycles / (batch.cycles + 1e6), 1.0)
        cost = first + tie
    else:
        cost = metrics[COLUMNS[objective]]
    cost = np.where(valid, cost, np.inf)
    return cost, valid, metrics


def safe_evaluate(structure: Structure, factors: np.ndarray) -> BatchResult:
    """evaluate_batch, but a row whose tree cannot be analysed (a coverage or dependency
    error) comes back invalid with a 'structure' violation instead of raising."""
    factors = np.asarray(factors, dtype=np.int64).reshape(-1, len(structure.slots))
    if len(factors) == 0:
        return evaluate_batch(structure, factors)
    try:
        return evaluate_batch(structure, factors)
    except InputError:
        if len(factors) == 1:
            return _failed_row()
    half = len(factors) // 2
    return _concat([safe_evaluate(structure, factors[:half]),
                    safe_evaluate(structure, factors[half:])])


def _failed_row() -> BatchResult:
    one = np.array([np.inf])
    return BatchResult(one, one.copy(), one.copy(), np.zeros(1), {}, np.zeros(1, dtype=bool),
                       {"structure": np.ones(1)})


def _concat(parts: Sequence[BatchResult]) -> BatchResult:
    sizes = [len(p) for p in parts]

    def join(maps: list[Mapping[str, np.ndarray]], fill: float) -> dict[str, np.ndarray]:
        keys = dict.fromkeys(k for m in maps for k in m)
        return {k: np.concatenate([m.get(k, np.full(n, fill)) for m, n in zip(maps, sizes,
                                                                             strict=True)])
                for k in keys}

    return BatchResult(*(np.concatenate([getattr(p, f) for p in parts])
                         for f in ("cycles", "energy_pj", "dram_words", "ops")),
                       join([p.footprint_words for p in parts], 0.0),
                       np.concatenate([p.valid for p in parts]),
                       join([p.violations for p in parts], 0.0))


def evaluate_rows(space: Space, factors: np.ndarray, objective: str,
                  limits: Limits) -> Evaluated:
    factors = np.asarray(factors, dtype=np.int64).reshape(-1, space.size)
    batch = safe_evaluate(space.structure, factors)
    batch_metrics = {"outer_steps": space.outer_steps(factors)}
    cost, valid, metrics = metrics_of(batch, objective, limits, batch_metrics)
    return Evaluated(factors, cost, valid, metrics)


def enumerate_divisors(space: Space, limit: int | None = None) -> np.ndarray:
    """Every assignment of divisor factors (each chain's product exactly its size, spatial
    slots within their fan-out), in a fixed slot order; stops after `limit` rows."""
    out = []
    total = 0
    for block in divisor_blocks(space):
        out.append(block)
        total += len(block)
        if limit is not None and total >= limit:
            break
    rows = np.concatenate(out) if out else np.zeros((0, space.size), dtype=np.int64)
    return rows[:limit] if limit is not None else rows


def divisor_blocks(space: Space, chunk: int = 65_536):
    """The divisor space in blocks of at most `chunk` rows: for each assignment of the shared
    slots, the Cartesian product of the independent groups of the other slots (slots linked
    by a chain)."""
    for state, groups, options in divisor_products(space):
        sizes = [len(o) for o in options]
        count = math.prod(sizes)
        if not sizes:  # every slot decided (a space of fixed factors): one row
            yield state[None, :].copy()
            continue
        for first in range(0, count, chunk):
            flat = np.arange(first, min(first + chunk, count))
            block = np.repeat(state[None, :], len(flat), axis=0)
            for g, opts, idx in zip(groups, options, np.unravel_index(flat, sizes),
                                    strict=True):
                block[:, g] = opts[idx]
            yield block


def divisor_products(space: Space):
    """(shared-slot state, groups, each group's options): the divisor space as a union of
    Cartesian products; its size is the sum of the products of the option counts."""
    exact = Space(space.structure, non_divisors=False, fixed=space.fixed)
    for state in _shared_assignments(exact, exact.root_state()):
        groups = _groups(exact, state)
        options = [_group_options(exact, state, g) for g in groups]
        if all(len(o) for o in options):
            yield state, groups, options


def _shared_assignments(exact: Space, state: np.ndarray):
    open_shared = [i for i in exact.free_slots(state) if exact.shared[i]]
    if not open_shared:
        yield state
        return
    slot = open_shared[0]
    for value in exact.candidates(state, slot):
        child = state.copy()
        child[slot] = value
        yield from _shared_assignments(exact, exact.propagate(child))


def _groups(exact: Space, state: np.ndarray) -> list[list[int]]:
    """Undecided slots split into groups that share no chain and no tile's fan-out."""
    open_slots = [i for i in range(exact.size) if state[i] == UNDECIDED]
    slots = exact.structure.slots
    groups: list[set[int]] = []
    for i in open_slots:
        linked = {j for k in exact.chains_of[i] for j in exact.chains[k].slots
                  if state[j] == UNDECIDED} | {i}
        if exact.spatial_limit[i]:
            linked |= {j for j in open_slots if exact.spatial_limit[j]
                       and slots[j].path == slots[i].path}
        merged = [g for g in groups if g & linked]
        for g in merged:
            groups.remove(g)
            linked |= g
        groups.append(linked)
    return [sorted(g) for g in groups]


def _group_options(exact: Space, state: np.ndarray, group: list[int]) -> np.ndarray:
    """Every exact assignment of one group's slots (the rest of the state as given)."""
    found = list(_group_assignments(exact, state, group))
    return np.array(found, dtype=np.int64).reshape(-1, len(group))


class GroupTooLarge(Exception):
    """A group's walk visited more partial assignments than it was allowed."""


def _group_assignments(exact: Space, state: np.ndarray, group: list[int],
                       max_visits: float = math.inf):
    """The exact assignments of one group's slots, depth first in candidate order; raises
    GroupTooLarge once the walk has visited more than `max_visits` partial assignments."""
    stack = [state]
    visits = 0
    while stack:
        st = stack.pop()
        visits += 1
        if visits > max_visits:
            raise GroupTooLarge
        free = [i for i in group if st[i] == UNDECIDED]
        if not free:
            if all(math.prod(int(st[i]) for i in exact.chains[k].slots) == exact.chains[k].size
                   for i in group for k in exact.chains_of[i]) and all(
                    st[i] <= exact.spatial_limit[i] for i in group if exact.spatial_limit[i]) \
                    and exact.spread_ok(st.tolist()):
                yield [int(st[i]) for i in group]
            continue
        for value in reversed(exact.candidates(st, free[0])):
            child = st.copy()
            child[free[0]] = value
            stack.append(exact.propagate(child))


def divisor_count_within(space: Space, limit: int) -> bool:
    """Whether the divisor space has at most `limit` assignments, counted as
    `divisor_products` lists them, each count stopping as soon as it passes what is left of
    the limit (a group whose walk visits more than 20 partial assignments per assignment
    still allowed counts as too many): telling a large space from a small one costs little."""
    exact = Space(space.structure, non_divisors=False, fixed=space.fixed)
    total = 0
    for k, state in enumerate(_shared_assignments(exact, exact.root_state())):
        if k > limit:
            return False
        count = 1
        for group in _groups(exact, state):
            cap = (limit - total) // max(count, 1)
            try:
                walk = _group_assignments(exact, state, group, max_visits=20 * (cap + 1))
                found = sum(1 for _ in itertools.islice(walk, cap + 1))
            except GroupTooLarge:
                found = cap + 1
            count *= found
            if count == 0 or total + count > limit:
                break
        total += count
        if total > limit:
            return False
    return True
