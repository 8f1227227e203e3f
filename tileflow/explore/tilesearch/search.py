"""The tile-factor search loop: a sampler (MCTS, random, TPE) proposes rows, the evaluator
answers them in batches, each point is evaluated once (a cache of every point seen), and
every new point is handed to a recorder as it is evaluated."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tileflow.explore.factors.space import Evaluated, Limits, Space, evaluate_rows
from tileflow.explore.tilesearch.mcts import MCTS

METHODS = ("mcts", "random", "tpe")
Recorder = Callable[[np.ndarray, Evaluated], None]


@dataclass
class PointCache:
    """Every point evaluated for one structure: row bytes -> (cost, valid, metrics)."""

    space: Space
    objective: str
    limits: Limits
    rows: dict[bytes, tuple[float, bool, dict[str, float]]] = field(default_factory=dict)
    evaluations: int = 0  # new evaluations made through this cache

    def add(self, rows: np.ndarray, result: Evaluated) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        names = list(result.metrics)
        # plain Python floats at once (per-element NumPy scalars cost more than the rest)
        columns = [np.asarray(v, dtype=float).tolist() for v in result.metrics.values()]
        costs = np.asarray(result.cost, dtype=float).tolist()
        valid = np.asarray(result.valid, dtype=bool).tolist()
        for r, row in enumerate(rows):
            self.rows[row.tobytes()] = (costs[r], valid[r],
                                        dict(zip(names, [c[r] for c in columns], strict=True)))

    def evaluate(self, rows: np.ndarray, record: Recorder | None = None) -> Evaluated:
        """Evaluate the rows not seen before (once each); answer all rows."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, self.space.size)
        new = list(dict.fromkeys(r.tobytes() for r in rows if r.tobytes() not in self.rows))
        if new:
            fresh = np.array([np.frombuffer(k, dtype=np.int64) for k in new])
            result = evaluate_rows(self.space, fresh, self.objective, self.limits)
            self.add(fresh, result)
            self.evaluations += len(fresh)
            if record:
                record(fresh, result)
        return self.lookup(rows)

    def evaluate_within(self, rows: np.ndarray, room: int,
                        record: Recorder | None = None) -> Evaluated:
        """`evaluate`, but at most `room` new points (the first ones, in order): a row
        beyond it is answered as invalid and not kept, so a budget is never overrun."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, self.space.size)
        new = list(dict.fromkeys(r.tobytes() for r in rows if r.tobytes() not in self.rows))
        if len(new) <= room:
            return self.evaluate(rows, record)
        if room > 0:
            self.evaluate(np.array([np.frombuffer(k, dtype=np.int64) for k in new[:room]]),
                          record)
        return self.answer(rows)

    def answer(self, rows: np.ndarray) -> Evaluated:
        """Metrics of rows; a row not evaluated reads as invalid with an infinite cost."""
        known = np.array([r.tobytes() in self.rows for r in rows], dtype=bool)
        if known.all():
            return self.lookup(rows)
        cost = np.full(len(rows), math.inf)
        valid = np.zeros(len(rows), dtype=bool)
        metrics: dict[str, np.ndarray] = {}
        if known.any():
            out = self.lookup(rows[known])
            cost[known], valid[known] = out.cost, out.valid
            for name, values in out.metrics.items():
                metrics[name] = np.zeros(len(rows))
                metrics[name][known] = values
        return Evaluated(rows, cost, valid, metrics)

    def lookup(self, rows: np.ndarray) -> Evaluated:
        got = [self.rows[r.tobytes()] for r in rows]
        keys = dict.fromkeys(got[0][2] if got else ())
        if all(m.keys() == keys.keys() for _, _, m in got):  # every row has the same metrics
            table = np.array([[m[k] for k in keys] for _, _, m in got], dtype=float)
            table = table.reshape(len(got), len(keys))
            metrics = {k: table[:, j].copy() for j, k in enumerate(keys)}
        else:
            keys = dict.fromkeys(k for _, _, m in got for k in m)
            metrics = {k: np.array([m.get(k, 0.0) for _, _, m in got]) for k in keys}
        return Evaluated(rows, np.array([c for c, _, _ in got], dtype=float),
                         np.array([v for _, v, _ in got], dtype=bool), metrics)

    def best(self) -> tuple[np.ndarray, float] | None:
        if not self.rows:
            return None
        key, (cost, _, _) = min(self.rows.items(), key=lambda kv: kv[1][0])
        if not math.isfinite(cost):
            return None
        return np.frombuffer(key, dtype=np.int64).copy(), cost


class RandomSearch:
    """Uniform random covering assignments (the comparison baseline)."""

    name = "random"

    def __init__(self, space: Space, seed: int = 0, warm=()):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.root = space.root_state()

    def observe(self, rows, result) -> None:
        pass

    def step(self, evaluate, n: int) -> None:
        evaluate(np.array([self.space.random_completion(self.root, self.rng)
                           for _ in range(n)]))


class TPESearch:
    """Optuna's TPE sampler over the same slots: each free slot in walk order suggests one
    of the divisors of its dimension (within the fan-out); the value is clamped to what the
    slot's chains leave, and forced slots take the rest."""

    name = "tpe"

    def __init__(self, space: Space, seed: int = 0, warm=()):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space = space
        self.study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
        root = space.root_state()
        self.choices = {i: space.candidates(root, i) for i in range(space.size)
                        if root[i] == 0}

    def observe(self, rows, result) -> None:
        pass

    def _row(self, trial) -> np.ndarray:
        sp = self.space
        state = sp.root_state()
        while True:
            free = sp.free_slots(state)
            if not free:
                return state
            slot = free[0]
            wanted = trial.suggest_categorical(f"s{slot}", self.choices[slot])
            allowed = sp.candidates(state, slot)
            state[slot] = min(allowed, key=lambda v: abs(math.log(v) - math.log(wanted)))
            state = sp.propagate(state)

    def step(self, evaluate, n: int) -> None:
        trials = [self.study.ask() for _ in range(n)]
        rows = np.array([self._row(t) for t in trials])
        result = evaluate(rows)
        for trial, cost in zip(trials, result.cost, strict=True):
            self.study.tell(trial, float(cost) if math.isfinite(cost) else 1e30)


def make_sampler(method: str, space: Space, seed: int, warm=(), limits: Limits | None = None):
    if method == "mcts":  # the tree search prunes with the user's limits too
        return MCTS(space, seed=seed, warm=warm, limits=limits)
    cls = {"random": RandomSearch, "tpe": TPESearch}[method]
    return cls(space, seed=seed, warm=warm)


def search(space: Space, method: str = "mcts", objective: str = "latency",
           limits: Limits | None = None, budget_evals: int | None = 2000,
           budget_seconds: float | None = None, seed: int = 0, batch: int = 64,
           warm=(), record: Recorder | None = None) -> PointCache:
    """Search one structure's factors in one process; returns the cache of every point.
    `budget_seconds` counts from the call, the sampler's set-up included."""
    start = time.perf_counter()
    cache = PointCache(space, objective, limits or Limits())
    sampler = make_sampler(method, space, seed, warm, limits)
    stale = 0
    while True:
        if budget_evals is not None and cache.evaluations >= budget_evals:
            break
        size = batch
        if budget_seconds is not None:
            spent = time.perf_counter() - start
            if spent >= budget_seconds:
                break
            size = _within_seconds(batch, cache.evaluations, spent, budget_seconds - spent)
        before = cache.evaluations
        if budget_evals is None:
            sampler.step(lambda rows: cache.evaluate(rows, record), size)
        else:  # a sampler may propose more rows than asked: never evaluate past the budget
            sampler.step(lambda rows: cache.evaluate_within(
                rows, budget_evals - cache.evaluations, record),
                min(size, budget_evals - cache.evaluations))
        stale = stale + 1 if cache.evaluations == before else 0
        if stale > 50:  # nothing new to propose: the space is exhausted
            break
    return cache


# rows of the first batch of a search under a time budget, before its cost per row is known
PROBE_ROWS = 4


def _within_seconds(batch: int, evaluated: int, spent_s: float, left_s: float) -> int:
    """A batch that ends within the seconds left at the cost per row seen so far (a slow
    structure can take a second a row; one batch of 64 would overrun the budget by a
    minute): a probe of PROBE_ROWS first, then at most what the time left affords."""
    if not evaluated or spent_s <= 0:
        return min(batch, PROBE_ROWS)
    return max(1, min(batch, int(left_s * evaluated / spent_s)))
