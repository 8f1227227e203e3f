"""Studies in an Optuna storage (in memory, a SQLite file or a PostgreSQL server).

A trial is one batch of the tile search on one structure: its user attributes hold the
structure's name, the rows it evaluated (factors) with their metrics, cost and validity.
Storage cost is a handful of transactions per trial, small beside a batch of evaluations
(the batch grows when storage time is not small beside evaluation time).

Resume: the points of every completed trial are read back into each structure's cache and
search tree, so nothing completed is evaluated again; trials left running by a killed
process are marked failed and their points, never recorded, are evaluated anew.

Several workers: before evaluating, a worker claims its new rows in its running trial and
drops every row another running trial has claimed or a completed trial holds (a trial keeps
its claim until it is complete, so it is always in one of the two); two workers that claim
the same row at the same moment both see the other's claim and both drop it, so no point is
ever evaluated twice."""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tileflow.errors import InputError
from tileflow.explore.search import PointCache, make_sampler
from tileflow.explore.space import Evaluated, Limits, Space
from tileflow.explore.structure import Structure

STUDY_NAME = "tileflow-explore"


def open_storage(url: str | None):
    """An Optuna storage for a URL: None or 'memory' -> in memory; 'sqlite:///PATH' or a
    path ending in .db -> SQLite (write-ahead log); 'postgresql://...' -> the server."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not url or url == "memory":
        return optuna.storages.InMemoryStorage()
    if url.endswith(".db") and "://" not in url:
        url = f"sqlite:///{url}"
    url = _driver(url)
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    try:
        storage = optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url))
    except Exception as exc:  # a bad URL, a server that does not answer, a missing driver
        raise InputError(f"cannot open the study storage '{url}': {exc}") from None
    if url.startswith("sqlite"):
        from sqlalchemy import event

        @event.listens_for(storage.engine, "connect")
        def _wal(connection, _record):  # durable against a killed process, fewer fsyncs
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        storage.engine.dispose()
    return storage


def _driver(url: str) -> str:
    """PostgreSQL through psycopg2 (the 'distributed' extra) unless psycopg 3 is there."""
    scheme, sep, rest = url.partition("://")
    if scheme not in ("postgresql", "postgres"):
        return url
    try:
        import psycopg  # noqa: F401

        return url
    except ImportError:
        return f"postgresql+psycopg2://{rest}"


def _engine_kwargs(url: str) -> dict:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30}}
    return {"pool_pre_ping": True}


@dataclass(frozen=True)
class Candidate:
    """One structure of a study, by name."""

    name: str
    structure: Structure
    warm: tuple[np.ndarray, ...] = ()


def fingerprint(candidates: Sequence[Candidate], objective: str, limits: Limits,
                extra: str = "") -> str:
    """What a study was started with: resuming with something else is an error."""
    parts = [objective, repr(sorted(limits.footprint_words.items())), repr(limits.dram_words),
             extra]
    for c in candidates:
        s = c.structure
        parts += [c.name, s.arch.name, repr(sorted(s.workload.sizes.items())),
                  repr([(sl.path, sl.index, sl.dim, sl.spatial) for sl in s.slots])]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def create_or_load(storage, candidates: Sequence[Candidate], objective: str, limits: Limits,
                   resume: bool, extra: str = "", fail_running: bool = True):
    """The study for these candidates; an existing one only with `resume` (its trials left
    running by a killed process are marked failed, unless `fail_running` is False: a
    worker joining a study that runs)."""
    from optuna.trial import TrialState

    mark = fingerprint(candidates, objective, limits, extra)
    study = open_marked(storage, STUDY_NAME, mark, "the study", "set of structures", resume)
    if study is None:
        raise InputError("--resume: there is no study to resume in this storage (an "
                         "in-memory study ends with its process; give --storage)")
    if fail_running:
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
    return study


def open_marked(storage, name: str, mark: str, what: str, settings: str, resume: bool):
    """The study `name` of a storage, started with the settings whose fingerprint is `mark`:
    an existing one only with `resume` (else an error naming `what` and `settings`); a new
    one without `resume`; None where `resume` finds none."""
    import optuna

    if name in optuna.get_all_study_names(storage):
        study = optuna.load_study(study_name=name, storage=storage)
        if study.user_attrs.get("fingerprint") != mark:
            raise InputError(f"{what} in this storage was started with another accelerator, "
                             f"workload, objective, limits or {settings}; give another "
                             "--storage or --out")
        if not resume:
            raise InputError("a study already exists in this storage; give --resume to "
                             "continue it, or another --storage or --out")
        return study
    if resume:
        return None
    study = optuna.create_study(study_name=name, storage=storage, direction="minimize")
    study.set_user_attr("fingerprint", mark)
    return study


def _encode(rows: np.ndarray, result: Evaluated, worker: int) -> str:
    return json.dumps({
        "worker": worker,
        "rows": np.asarray(rows).tolist(),
        "cost": [c if math.isfinite(c) else None for c in map(float, result.cost)],
        "valid": [bool(v) for v in result.valid],
        "metrics": {k: [float(x) for x in v] for k, v in result.metrics.items()}})


def decode(text: str) -> tuple[np.ndarray, Evaluated]:
    """The rows and metrics of a trial's points (see `worker_of` for who evaluated them)."""
    data = json.loads(text)
    rows = np.array(data["rows"], dtype=np.int64)
    cost = np.array([math.inf if c is None else c for c in data["cost"]], dtype=float)
    return rows, Evaluated(rows, cost, np.array(data["valid"], dtype=bool),
                           {k: np.array(v, dtype=float) for k, v in data["metrics"].items()})


def worker_of(text: str) -> int:
    return int(json.loads(text).get("worker", 0))


class Worker:
    """One process's share of a study: a search per candidate structure, synchronised with
    the storage before every batch."""

    def __init__(self, study, candidates: Sequence[Candidate], objective: str, limits: Limits,
                 method: str = "mcts", seed: int = 0, worker: int = 0, batch: int = 64,
                 shared: bool = False):
        self.study = study
        self.worker = worker
        self.shared = shared  # other workers run on the same study: claim rows first
        self.candidates = list(candidates)
        self.spaces = [Space(c.structure) for c in candidates]
        self.caches = [PointCache(s, objective, limits) for s in self.spaces]
        self.samplers = [make_sampler(method, s, seed * 7919 + worker * 104_729 + k, c.warm,
                                      limits)
                         for k, (s, c) in enumerate(zip(self.spaces, candidates, strict=True))]
        self.index = {c.name: k for k, c in enumerate(candidates)}
        self.seen: set[int] = set()
        self.batch = batch
        self.completed_rows = 0  # rows in completed trials (every worker's)
        self.turn = 0

    def sync(self) -> None:
        """Read the points of trials completed since the last call."""
        from optuna.trial import TrialState

        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if trial.number in self.seen:
                continue
            self.seen.add(trial.number)
            k = self.index.get(trial.user_attrs.get("structure"))
            if k is None or "points" not in trial.user_attrs:
                continue
            rows, result = decode(trial.user_attrs["points"])
            self.completed_rows += len(rows)
            fresh = [i for i, r in enumerate(rows) if r.tobytes() not in self.caches[k].rows]
            if fresh:
                self.caches[k].add(rows[fresh], _take(result, fresh))
                self.samplers[k].observe(rows[fresh], _take(result, fresh))

    def _claims(self, own: int, structure: str) -> tuple[set[bytes], int]:
        """Rows claimed by other running trials of this structure; rows claimed in all."""
        from optuna.trial import TrialState

        claimed: set[bytes] = set()
        count = 0
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if trial.number == own or "claim" not in trial.user_attrs:
                continue
            rows = json.loads(trial.user_attrs["claim"])
            count += len(rows)
            if trial.user_attrs.get("structure") == structure:
                claimed |= {np.array(r, dtype=np.int64).tobytes() for r in rows}
        return claimed, count

    def run_trial(self, budget_left: Callable[[int], int]) -> int:
        """One trial: one batch of the next structure's search. Returns rows evaluated."""
        self.sync()
        k = self.turn % len(self.candidates)
        self.turn += 1
        cache, space = self.caches[k], self.spaces[k]
        trial = self.study.ask()
        trial.set_user_attr("structure", self.candidates[k].name)
        mine: list[np.ndarray] = []

        def evaluate(rows: np.ndarray) -> Evaluated:
            rows = np.asarray(rows, dtype=np.int64).reshape(-1, space.size)
            new = list(dict.fromkeys(r.tobytes() for r in rows if r.tobytes() not in cache.rows))
            if new and self.shared:
                # claim, then read the running trials' claims, then the completed trials: a
                # trial that completes between the two reads is seen by the second
                claim = mine + [np.frombuffer(key, dtype=np.int64) for key in new]
                trial.set_user_attr("claim", json.dumps(np.array(claim).tolist()))
                others, running = self._claims(trial.number, self.candidates[k].name)
                self.sync()
                new = [key for key in new if key not in others and key not in cache.rows]
                new = new[:max(budget_left(running + len(mine)), 0)]
            elif new:
                new = new[:max(budget_left(len(mine)), 0)]
            if new:
                fresh = np.array([np.frombuffer(key, dtype=np.int64) for key in new])
                cache.evaluate(fresh)
                mine.extend(fresh)
            return _answer(cache, rows)

        self.samplers[k].step(evaluate, self.batch)
        if mine:
            rows = np.array(mine)
            result = cache.lookup(rows)
            trial.set_user_attr("points", _encode(rows, result, self.worker))
            best = float(np.min(result.cost))
            self.completed_rows += len(rows)
        else:
            best = math.inf
        self.study.tell(trial, best if math.isfinite(best) else 1e300)
        self.seen.add(trial.number)
        return len(mine)

    def best(self) -> tuple[int, np.ndarray, float] | None:
        """(candidate index, factors, cost) of the best point this worker knows."""
        found = [(k, *b) for k, c in enumerate(self.caches) if (b := c.best())]
        return min(found, key=lambda f: f[2]) if found else None


def _take(result: Evaluated, index: list[int]) -> Evaluated:
    return Evaluated(result.factors[index], result.cost[index], result.valid[index],
                     {k: v[index] for k, v in result.metrics.items()})


def _answer(cache: PointCache, rows: np.ndarray) -> Evaluated:
    """Metrics for rows; a row claimed by another worker and not finished yet reads as
    invalid for now (its points arrive with that worker's trial)."""
    known = np.array([r.tobytes() in cache.rows for r in rows], dtype=bool)
    if known.all():
        return cache.lookup(rows)
    out = cache.lookup(rows[known]) if known.any() else None
    cost = np.full(len(rows), math.inf)
    valid = np.zeros(len(rows), dtype=bool)
    metrics: dict[str, np.ndarray] = {}
    if out is not None:
        cost[known], valid[known] = out.cost, out.valid
        for name, values in out.metrics.items():
            metrics[name] = np.zeros(len(rows))
            metrics[name][known] = values
    return Evaluated(rows, cost, valid, metrics)


def seed_points(study, candidates: Sequence[Candidate], objective: str, limits: Limits,
                rows: dict[str, list[np.ndarray]]) -> int:
    """Evaluate the given rows of each structure (points the study must hold whatever its
    budget: the baselines' own factors, the structure search's best) as one trial per
    structure, skipping rows a completed trial holds already. Returns rows evaluated."""
    from optuna.trial import TrialState

    held: dict[str, set[bytes]] = {}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if "points" in trial.user_attrs:
            done, _ = decode(trial.user_attrs["points"])
            held.setdefault(trial.user_attrs.get("structure"), set()).update(
                r.tobytes() for r in done)
    total = 0
    for c in candidates:
        space = Space(c.structure)
        fresh = {np.asarray(r, dtype=np.int64).tobytes(): np.asarray(r, dtype=np.int64)
                 for r in rows.get(c.name, ()) if len(r) == space.size}
        new = [r for key, r in fresh.items() if key not in held.get(c.name, set())]
        if not new:
            continue
        cache = PointCache(space, objective, limits)
        result = cache.evaluate(np.array(new))
        trial = study.ask()
        trial.set_user_attr("structure", c.name)
        trial.set_user_attr("points", _encode(np.array(new), result, 0))
        best = float(np.min(result.cost))
        study.tell(trial, best if math.isfinite(best) else 1e300)
        total += len(new)
    return total


def run(study, candidates: Sequence[Candidate], objective: str, limits: Limits, *,
        method: str = "mcts", seed: int = 0, worker: int = 0, batch: int = 64,
        shared: bool = False, budget_evals: int | None = None, budget_seconds: float | None = None,
        progress: Callable[[Worker], None] | None = None) -> Worker:
    """Run one worker until the study's budget is spent (evaluations over all workers,
    or this worker's seconds)."""
    w = Worker(study, candidates, objective, limits, method, seed, worker, batch, shared)
    start = time.perf_counter()
    w.sync()
    idle = 0

    def left(in_flight: int) -> int:
        if budget_evals is None:
            return 1 << 62
        return budget_evals - w.completed_rows - in_flight

    while True:
        if budget_seconds is not None and time.perf_counter() - start >= budget_seconds:
            break
        if budget_evals is not None and left(0) <= 0:
            w.sync()
            if left(0) <= 0:
                break
        done = w.run_trial(left)
        if progress:
            progress(w)
        idle = idle + 1 if done == 0 else 0
        if idle > 50:
            break
    w.sync()
    return w
