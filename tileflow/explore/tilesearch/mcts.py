"""Monte-Carlo tree search over the factor slots of one structure.

A node is a partial assignment (forced slots filled in by `Space.propagate`). A step picks
an undecided slot by UCB over the slots tried at that node, then a factor by UCB over that
slot's children. The first time a slot is picked at a node, every factor it may take is
checked at once: the smallest covering completion of each child is evaluated (points to
learn from; evaluated with the step's rollouts and mutations, in one batch), and children
that no completion can make valid are pruned with the sound bounds of
`tileflow.explore.factors.bounds` (fan-out, capacity and footprint limits, where they are
monotone in the undecided slots): the nodes a step opens are checked together at its end
(the bounds cost mostly per call), so a child may be picked in the step that opens it,
before its check. New leaves are completed by random rollouts; a share of every batch
mutates the best points found so far (one decision re-drawn, or a factor moved between loops
of one dimension: a *transfer*, `tileflow.explore.factors.moves`), which refines what the
tree has found. While the best cost has not improved for `polish_after` steps, every
transfer of the best points not yet polished (best first), then every pair of transfers,
joins the batches: a local search whose moves change a shared outer split and each
operator's inner loops together. Rollouts of a step are evaluated together; rewards (best
cost / cost, 0 where invalid) are back-propagated."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from tileflow.explore.factors import moves
from tileflow.explore.factors.bounds import Bounds
from tileflow.explore.factors.space import UNDECIDED, Evaluated, Limits, Space

Evaluate = Callable[[np.ndarray], Evaluated]


@dataclass
class Node:
    state: np.ndarray
    visits: int = 0
    reward: float = 0.0
    dead: bool = False
    children: dict[int, list[bytes]] = field(default_factory=dict)  # slot -> child keys
    slot_stats: dict[int, list[float]] = field(default_factory=dict)  # slot -> [n, reward]
    decided: np.ndarray | None = None  # indices of the decided slots (read by `agrees`)
    decided_key: bytes = b""  # their values' bytes

    def agrees(self, row: np.ndarray) -> bool:
        """Whether a complete int64 row takes every factor this node has decided."""
        if self.decided is None:
            self.decided = np.flatnonzero(self.state != UNDECIDED)
            self.decided_key = self.state[self.decided].tobytes()
        return row[self.decided].tobytes() == self.decided_key


class MCTS:
    """Ask-evaluate-tell search: `step(evaluate, n)` evaluates about n new points."""

    name = "mcts"

    def __init__(self, space: Space, seed: int = 0, exploration: float = 0.4,
                 rollouts_per_leaf: int = 4, mutation_share: float = 0.5,
                 spread_bias: float = 0.5, warm: Iterable[np.ndarray] = (),
                 limits: Limits | None = None, transfer_share: float = 0.5,
                 polish_after: int = 1):
        self.space = space
        self.bounds = Bounds(space, limits)
        self.rng = np.random.default_rng(seed)
        self.c = exploration
        self.rollouts = rollouts_per_leaf
        self.mutation_share = mutation_share
        self.spread_bias = spread_bias
        root = space.root_state()
        self.root_key = root.tobytes()
        self.nodes: dict[bytes, Node] = {self.root_key: Node(root)}
        self.best_cost = math.inf
        self.elite: list[tuple[float, bytes]] = []  # (cost, row bytes), best first
        self.warm = [np.asarray(w, dtype=np.int64) for w in warm]
        self._pending: list[np.ndarray] = []  # expansions' smallest completions, to evaluate
        self._unchecked: list[np.ndarray] = []  # the step's new nodes, for the bounds
        self._elite_cdf: dict[int, np.ndarray] = {}  # elite size -> cumulative weights
        self._plan: tuple[list[int], dict[int, list[int]], dict[int, list[int]]] | None = None
        self.transfer_share = transfer_share  # of the mutations: a transfer move
        self.polish_after = polish_after  # steps without a better cost before polishing
        self.stale_steps = 0
        self._polished: set[bytes] = set()  # points whose transfers were queued
        self._deep: set[bytes] = set()  # points whose pairs of transfers were queued
        self._queue: list[tuple[int, ...]] = []  # neighbours to evaluate while stalled
        self.deep_limit = 8192

    # --- tree -------------------------------------------------------------------------

    def _ucb(self, n: float, w: float, parent: float) -> float:
        if n == 0:
            return math.inf
        return w / n + self.c * math.sqrt(math.log(parent + 1) / n)

    def _pick(self, options: list, score) -> object:
        scores = [score(o) for o in options]
        top = max(scores)
        best = [o for o, s in zip(options, scores, strict=True) if s == top]
        return best[self.rng.integers(len(best))]

    def _expand(self, node: Node, slot: int, evaluate: Evaluate) -> None:
        states = []
        for value in self.space.candidates(node.state, slot):
            state = node.state.copy()
            state[slot] = value
            states.append(self.space.propagate(state))
        if not states:
            node.children[slot] = []
            return
        # points to learn from, evaluated with the step's other expansions (one call)
        self._pending.extend(self.space.smallest_completion(s) for s in states)
        keys = []
        for state in states:
            key = state.tobytes()
            if key not in self.nodes:
                self.nodes[key] = Node(state)
                self._unchecked.append(state)
            keys.append(key)
        node.children[slot] = keys

    def _prune(self) -> None:
        """The step's new nodes that no completion can make valid, dead (one check of the
        bounds for all of them: its cost is mostly per call)."""
        states, self._unchecked = self._unchecked, []
        if not states:
            return
        for state, ok in zip(states, self.bounds.feasible(np.array(states)), strict=True):
            if not ok:
                self.nodes[state.tobytes()].dead = True

    def _select(self, evaluate: Evaluate) -> list[tuple[Node, int | None]]:
        """Descend from the root to a node not visited yet (or a complete or dead one)."""
        node = self.nodes[self.root_key]
        path: list[tuple[Node, int | None]] = []
        while True:
            free = self.space.free_slots(node.state)
            if not free or node.dead:
                path.append((node, None))
                return path
            stats, total = node.slot_stats, node.visits
            slot = self._pick(free, lambda s, st=stats, n=total: self._ucb(
                *st.get(s, (0, 0.0)), n))
            if slot not in node.children:
                self._expand(node, slot, evaluate)
            kids = [self.nodes[k] for k in node.children[slot] if not self.nodes[k].dead]
            if not kids:
                node.dead = True  # no factor of this slot fits: nothing below fits
                path.append((node, None))
                return path
            path.append((node, slot))
            child = self._pick(kids, lambda k, n=total: self._ucb(k.visits, k.reward, n))
            node = child
            if node.visits == 0:
                path.append((node, None))
                return path

    def _backprop(self, path: list[tuple[Node, int | None]], reward: float) -> None:
        for node, slot in path:
            node.visits += 1
            node.reward += reward
            if slot is not None:
                stats = node.slot_stats.setdefault(slot, [0, 0.0])
                stats[0] += 1
                stats[1] += reward

    def _path_of(self, row: np.ndarray) -> list[tuple[Node, int | None]]:
        """The deepest path of existing nodes that agrees with a complete row."""
        row = np.asarray(row, dtype=np.int64)
        node = self.nodes[self.root_key]
        path: list[tuple[Node, int | None]] = []
        while True:
            step = None
            for slot, keys in sorted(node.children.items(),
                                     key=lambda kv: -node.slot_stats.get(kv[0], (0,))[0]):
                for key in keys:
                    child = self.nodes[key]
                    if child.agrees(row):
                        step = (slot, child)
                        break
                if step:
                    break
            if step is None:
                path.append((node, None))
                return path
            path.append((node, step[0]))
            node = step[1]

    # --- learning ---------------------------------------------------------------------

    def _reward(self, cost: float) -> float:
        if not math.isfinite(cost):
            return 0.0
        return (self.best_cost / cost) ** 2

    def _learn(self, rows: np.ndarray, result: Evaluated) -> None:
        """Keep the elite; called for every evaluated row (expansions included)."""
        rows = np.asarray(rows, dtype=np.int64)
        known = {k for _, k in self.elite}
        for row, cost in zip(rows, np.asarray(result.cost, dtype=float).tolist(), strict=True):
            if math.isfinite(cost):
                self.best_cost = min(self.best_cost, cost)
                key = row.tobytes()
                if key not in known:
                    known.add(key)
                    self.elite.append((cost, key))
        self.elite.sort(key=lambda e: e[0])
        del self.elite[16:]

    def observe(self, rows: np.ndarray, result: Evaluated) -> None:
        """Points evaluated elsewhere (a resumed study, other workers): learn from them."""
        self._learn(rows, result)
        for row, cost in zip(rows, result.cost, strict=True):
            self._backprop(self._path_of(np.asarray(row)), self._reward(float(cost)))

    def _mutate(self) -> np.ndarray:
        """Change one decision of an elite point. A share `transfer_share` of the time
        (twice it while the search stalls) a factor moves between loops of one dimension
        (`moves.random_transfer`); otherwise, three times in four the slot moves to a
        neighbouring factor and one slot of each of its chains (the outermost other temporal
        one) takes up the difference, everything else kept, and else the slot's chains are
        drawn anew (a shared slot takes the chains below it along)."""
        pick = self._pick_elite()
        row = np.frombuffer(self.elite[pick][1], dtype=np.int64).copy()
        sp = self.space
        share = self.transfer_share * (2 if self.stale_steps >= self.polish_after else 1)
        if self.rng.random() < share:
            moved = moves.random_transfer(sp, row, self.rng)
            if moved is not None:
                return moved
        decisions, undo_local, undo_all = self._mutation_plan()
        slot = decisions[self.rng.integers(len(decisions))]
        old = int(row[slot])
        local = self.rng.random() < 0.75
        row[(undo_local if local else undo_all)[slot]] = UNDECIDED
        state = sp.propagate(row)
        if state[slot] == UNDECIDED and local:
            values = sp.candidates(state, slot)
            near = [v for v in values if v != old and max(v, old) <= 4 * min(v, old)]
            if near:
                state[slot] = near[self.rng.integers(len(near))]
                state = sp.propagate(state)
        return sp.random_completion(state, self.rng, self.spread_bias)

    def _pick_elite(self) -> int:
        """An elite index, drawn with weights 1/(1 + rank): `Generator.choice(n, p=...)`
        written as its definition (the cumulative weights searched with one uniform draw,
        the same draw and the same answer) without its per-call checks of `p`."""
        n = len(self.elite)
        cdf = self._elite_cdf.get(n)
        if cdf is None:
            weights = np.array([1.0 / (1 + i) for i in range(n)])
            cdf = (weights / weights.sum()).cumsum()
            cdf /= cdf[-1]
            self._elite_cdf[n] = cdf
        return int(cdf.searchsorted(self.rng.random(), side="right"))

    def _mutation_plan(self) -> tuple[list[int], dict[int, list[int]], dict[int, list[int]]]:
        """The slots a mutation may pick, and per slot the slots it re-opens: a local move
        (the outermost other temporal slot of each of its chains, or the outermost other
        one) and a redraw (every other slot of its chains); shared and fixed slots stay."""
        if self._plan is None:
            sp = self.space
            decisions = [i for i in range(sp.size) if sp.chains_of[i] and i not in sp.fixed]
            undo_local, undo_all = {}, {}
            for slot in decisions:
                near, every = {slot}, {slot}
                for k in sp.chains_of[slot]:
                    others = [j for j in sp.chains[k].slots
                              if j != slot and not sp.shared[j] and j not in sp.fixed]
                    temporal = [j for j in others if not sp.spatial_limit[j]]
                    near |= set((temporal or others)[:1])
                    every |= set(others)
                undo_local[slot], undo_all[slot] = sorted(near), sorted(every)
            self._plan = (decisions, undo_local, undo_all)
        return self._plan

    def _polish(self, n: int) -> list[np.ndarray]:
        """While stalled: up to 2n rows of the queue of neighbourhoods, refilled from the
        best elite point not polished yet (its transfers) or, every point polished, not
        yet polished twice (two transfers in a row: a move whose first half is worse)."""
        if self.stale_steps < self.polish_after:
            return []
        if not self._queue:
            self._queue = self._neighbourhood()
        take, self._queue = self._queue[:2 * n], self._queue[2 * n:]
        return [np.array(row, dtype=np.int64) for row in take]

    def _neighbourhood(self) -> list[tuple[int, ...]]:
        """The next point's transfers (one prime moved first, in random order), or its
        pairs of transfers (at most `deep_limit`, drawn at random); tuples, made arrays
        only when taken (a better point empties the queue)."""
        for twice, done in ((False, self._polished), (True, self._deep)):
            key = next((k for _, k in self.elite if k not in done), None)
            if key is None:
                continue
            done.add(key)
            row = np.frombuffer(key, dtype=np.int64).tolist()
            if not twice:
                found: dict[tuple[int, ...], None] = {}
                for prime_only in (True, False):  # one prime first, then several at once
                    more = list(moves.neighbour_lists(self.space, row, prime_only))
                    for i in self.rng.permutation(len(more)):
                        found.setdefault(tuple(more[i]))
                return list(found)
            pairs: dict[tuple[int, ...], None] = {}  # first seen first
            for first in moves.neighbour_lists(self.space, row):
                for second in moves.neighbour_lists(self.space, first):
                    pairs.setdefault(tuple(second))
            rows = list(pairs)
            pick = self.rng.permutation(len(rows))[:self.deep_limit]
            return [rows[i] for i in pick]
        return []

    def step(self, evaluate: Evaluate, n: int) -> None:
        if self.warm:
            rows = np.array([w for w in self.warm if self.space.covers(w)])
            self.warm = []
            if len(rows):
                self.observe(rows, evaluate(rows))
        rows, paths = [], []
        mutations = int(n * self.mutation_share) if self.elite else 0
        leaves = max(1, (n - mutations) // self.rollouts)
        for _ in range(leaves):
            path = self._select(evaluate)
            leaf = path[-1][0]
            if leaf.dead:
                self._backprop(path, 0.0)
                continue
            for node, _ in path:  # virtual loss: spread the batch over the tree
                node.visits += 1
            for _ in range(self.rollouts):
                rows.append(self.space.random_completion(leaf.state, self.rng,
                                                         self.spread_bias))
                paths.append(path)
        for node_path in {id(p): p for p in paths}.values():
            for node, _ in node_path:
                node.visits -= 1
        for _ in range(mutations):
            rows.append(self._mutate())
            paths.append(None)
        for row in self._polish(n):
            rows.append(row)
            paths.append(None)
        # the expansions' points first (within a budget they come first), then the rollouts
        # and mutations: one call of the evaluator per step, whose cost is mostly per call
        self._prune()
        lower, self._pending = self._pending, []
        if not rows and not lower:
            return
        batch = np.array(lower + rows)
        result = evaluate(batch)
        before = self.best_cost
        self._learn(batch, result)
        if self.best_cost < before:  # a better point: its neighbourhood comes first
            self.stale_steps, self._queue = 0, []
        else:
            self.stale_steps += 1
        for row, path, cost in zip(batch[len(lower):], paths, result.cost[len(lower):],
                                   strict=True):
            self._backprop(path or self._path_of(row), self._reward(float(cost)))
