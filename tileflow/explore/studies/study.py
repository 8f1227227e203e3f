"""Studies in an Optuna storage (in memory, a SQLite file or a PostgreSQL server).

A trial is one batch of the tile search on one structure: its user attributes hold the
structure's name, the rows it evaluated (factors) with their metrics, cost and validity.
Storage cost is a handful of transactions per trial, small beside a batch of evaluations
(the batch grows when storage time is not small beside evaluation time).

Resume: the points of every completed trial are read back into each structure's cache and
search tree, so nothing completed is evaluated again; trials left running by a dead process
(see `storage.reap`) are marked failed and their points, never recorded, are evaluated anew,
while the trials of a process still running are left to it. A study records what it was
started from (`provenance.marks`); resuming it with other contents is an error.

Several workers: before evaluating, a worker claims its new rows in its running trial and
drops every row another running trial has claimed or a completed trial holds (a trial keeps
its claim until it is complete, so it is always in one of the two); two workers that claim
the same row at the same moment both see the other's claim and both drop it, so no point is
ever evaluated twice."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tileflow import provenance
from tileflow.errors import InputError
from tileflow.evaluator.structure import Structure
from tileflow.explore.factors.space import Evaluated, Limits, Space
from tileflow.explore.studies.storage import (  # noqa: F401 - re-exported
    Heartbeat,
    ask,
    lock_of,
    open_storage,
    owner,
    reap,
    storage_errors,
)
from tileflow.explore.tilesearch.search import PointCache, make_sampler

STUDY_NAME = "tileflow-explore"


@dataclass(frozen=True)
class Candidate:
    """One structure of a study, by name; `sources`: every name it came under (a baseline,
    a user's tree, the structure search) when several gave this one structure."""

    name: str
    structure: Structure
    warm: tuple[np.ndarray, ...] = ()
    sources: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The names this candidate answers to: its sources, or its own name."""
        return self.sources or (self.name,)


def fingerprint(candidates: Sequence[Candidate], objective: str, limits: Limits,
                extra: str = "") -> dict[str, str]:
    """What a study was started from (model version, accelerator and workload contents,
    settings): resuming with something else is an error."""
    settings = [objective, sorted(limits.footprint_words.items()), limits.dram_words, extra]
    for c in candidates:
        s = c.structure
        settings += [c.name, [(sl.path, sl.index, sl.dim, sl.spatial) for sl in s.slots]]
    first = candidates[0].structure if candidates else None
    return provenance.marks(first.arch if first else None, first.workload if first else None,
                            settings)


def create_or_load(storage, candidates: Sequence[Candidate], objective: str, limits: Limits,
                   resume: bool, extra: str = "", fail_running: bool = True,
                   restart: bool = False):
    """The study for these candidates; an existing one only with `resume`. Its trials left
    running by dead processes are failed (unless `fail_running` is False: a worker joining a
    study its main process runs); a live process's trials are left running. `restart`: a
    study already in the storage is deleted first."""
    mark = fingerprint(candidates, objective, limits, extra)
    study = open_marked(storage, STUDY_NAME, mark, "the study",
                        "objective, limits, method or structures", resume, restart)
    if study is None:
        raise InputError("--resume: there is no study to resume in this storage (an "
                         "in-memory study ends with its process; give --storage)")
    if fail_running:
        reap(study)
    return study


def open_marked(storage, name: str, mark: dict[str, str], what: str, settings: str,
                resume: bool, restart: bool = False):
    """The study `name` of a storage, started from what `mark` records: an existing one only
    with `resume` (else an error naming `what` and what differs, `settings` saying what the
    settings are); a new one without `resume`; None where `resume` finds none. `restart`
    deletes an existing one and starts anew. Two processes creating one study at the same
    moment: one creates it, the other finds it."""
    import optuna

    with lock_of(storage):
        if name in optuna.get_all_study_names(storage):
            study = optuna.load_study(study_name=name, storage=storage)
            if restart:
                optuna.delete_study(study_name=name, storage=storage)
            else:
                _check_marks(study, mark, what, settings)
                if not resume:
                    raise InputError("a study already exists in this storage; give --resume "
                                     "to continue it, --restart to start a new one, or another "
                                     "--storage or --out")
                return study
        elif resume and not restart:
            return None
        try:
            study = optuna.create_study(study_name=name, storage=storage, direction="minimize")
        except optuna.exceptions.DuplicatedStudyError:  # another process made it just now
            study = optuna.load_study(study_name=name, storage=storage)
            _check_marks(study, mark, what, settings, wait_s=5.0)
            return study
        study.set_user_attr("provenance", dict(mark))
        return study


def _check_marks(study, mark: dict[str, str], what: str, settings: str,
                 wait_s: float = 0.0) -> None:
    """An error naming what differs between the study's record and `mark` (waiting up to
    `wait_s` for a study just created by another process to get its record)."""
    deadline = time.monotonic() + wait_s
    stored = study.user_attrs.get("provenance")
    while stored is None and time.monotonic() < deadline:
        time.sleep(0.1)
        stored = study._storage.get_study_user_attrs(study._study_id).get("provenance")
    differ = provenance.differences(stored, mark)
    if differ:
        words = [f"the settings ({settings})" if d == "the settings" else d for d in differ]
        verb = "differ" if len(words) > 1 else "differs"
        raise InputError(f"{what} in this storage was started from other contents: "
                         f"{'; '.join(words)} {verb}; give --restart to discard it and start "
                         "a new study, or another --storage or --out")


def _encode(rows: np.ndarray, result: Evaluated, worker: int) -> str:
    return json.dumps({
        "worker": worker,
        "rows": np.asarray(rows).tolist(),
        "cost": [c if math.isfinite(c) else None
                 for c in np.asarray(result.cost, dtype=float).tolist()],
        "valid": np.asarray(result.valid, dtype=bool).tolist(),
        "metrics": {k: np.asarray(v, dtype=float).tolist() for k, v in result.metrics.items()}})


class DamagedTrial(InputError):
    """A trial's stored points are not what a worker writes."""


def decode(text, trial: int | None = None, width: int | None = None
           ) -> tuple[np.ndarray, Evaluated]:
    """The rows and metrics of a trial's points (see `worker_of` for who evaluated them),
    checked: anything else than what `_encode` writes (`width` factors per row, where
    given) is a `DamagedTrial` naming the trial."""
    where = f"trial {trial} of the study" if trial is not None else "a trial of the study"

    def bad(what: str) -> DamagedTrial:
        return DamagedTrial(f"the study storage is damaged: {where} holds points that are "
                            f"not what tileflow writes ({what}); give another --storage, or "
                            "--restart to start a new study there")

    try:
        data = json.loads(text) if isinstance(text, str) else None
    except ValueError as exc:
        raise bad(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not {"rows", "cost", "valid", "metrics"} <= data.keys():
        raise bad("expected an object with rows, cost, valid and metrics")
    try:
        rows = np.array(data["rows"], dtype=np.int64)
        cost = np.array([math.inf if c is None else float(c) for c in data["cost"]], dtype=float)
        valid = np.array(data["valid"])
        metrics = {str(k): np.array(v, dtype=float) for k, v in data["metrics"].items()}
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise bad(f"a value of the wrong type: {exc}") from None
    n = len(rows)
    if rows.ndim != 2 or (width is not None and rows.shape[1] != width):
        raise bad(f"rows must be a table of {width or 'equal numbers of'} factors")
    if (rows < 1).any():
        raise bad("a factor below 1")
    if valid.dtype != bool or valid.shape != (n,) or cost.shape != (n,):
        raise bad("cost and valid must have one entry per row, valid true or false")
    if any(v.shape != (n,) for v in metrics.values()):
        raise bad("every metric must have one number per row")
    if np.isnan(cost).any():
        raise bad("a cost that is not a number")
    return rows, Evaluated(rows, cost, valid, metrics)


def worker_of(text: str) -> int:
    try:
        who = json.loads(text).get("worker", 0)
    except (ValueError, AttributeError):
        return -1
    return who if isinstance(who, int) else -1


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
        self.heartbeat = Heartbeat(study._storage)
        self.trial = None
        self.attrs: dict[str, object] = {}  # the running trial's attributes

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
            rows, result = decode(trial.user_attrs["points"], trial.number, self.spaces[k].size)
            self.completed_rows += len(rows)
            fresh = [i for i, r in enumerate(rows) if r.tobytes() not in self.caches[k].rows]
            if fresh:
                self.caches[k].add(rows[fresh], _take(result, fresh))
                self.samplers[k].observe(rows[fresh], _take(result, fresh))

    def claims(self, structure: str = "") -> tuple[set[bytes], int]:
        """Rows claimed by other running trials of `structure`; rows claimed by them all."""
        from optuna.trial import TrialState

        own = self.trial.number if self.trial is not None else -1
        claimed: set[bytes] = set()
        count = 0
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if trial.number == own or "claim" not in trial.user_attrs:
                continue
            try:
                rows = json.loads(trial.user_attrs["claim"])
                keys = {np.array(r, dtype=np.int64).tobytes() for r in rows}
            except (TypeError, ValueError):
                raise DamagedTrial(f"the study storage is damaged: trial {trial.number} of the "
                                   "study claims rows that are not a table of factors; give "
                                   "another --storage, or --restart") from None
            count += len(rows)
            if trial.user_attrs.get("structure") == structure:
                claimed |= keys
        return claimed, count

    def _open_trial(self, structure: str) -> None:
        self.trial = ask(self.study)
        self.heartbeat.track(self.trial._trial_id)
        self.attrs = {"structure": structure, "owner": owner()}
        for key, value in self.attrs.items():
            self.trial.set_user_attr(key, value)

    def _set(self, key: str, value) -> None:
        """Set an attribute of the running trial; a trial another process failed as stale
        (this process was too slow to beat in time) is replaced by a new one."""
        from optuna.exceptions import UpdateFinishedTrialError

        try:
            self.trial.set_user_attr(key, value)
        except UpdateFinishedTrialError:
            attrs = self.attrs
            self._open_trial(str(attrs["structure"]))
            for k, v in attrs.items():
                if k not in self.attrs:
                    self.trial.set_user_attr(k, v)
            self.trial.set_user_attr(key, value)
            self.attrs = {**attrs, "owner": owner()}
        self.attrs[key] = value

    def _tell(self, value: float) -> None:
        from optuna.exceptions import UpdateFinishedTrialError

        try:
            self.study.tell(self.trial, value)
        except UpdateFinishedTrialError:  # failed as stale meanwhile: record it anew
            attrs = self.attrs
            self._open_trial(str(attrs["structure"]))
            for k, v in attrs.items():
                if k not in ("structure", "owner", "claim"):
                    self.trial.set_user_attr(k, v)
            self.study.tell(self.trial, value)
        self.seen.add(self.trial.number)
        self.heartbeat.track(None)
        self.trial = None

    def run_trial(self, budget_left: Callable[[int], int]) -> int:
        """One trial: one batch of the next structure's search. Returns rows evaluated."""
        self.sync()
        k = self.turn % len(self.candidates)
        self.turn += 1
        cache, space = self.caches[k], self.spaces[k]
        self._open_trial(self.candidates[k].name)
        mine: list[np.ndarray] = []

        def evaluate(rows: np.ndarray) -> Evaluated:
            rows = np.asarray(rows, dtype=np.int64).reshape(-1, space.size)
            new = list(dict.fromkeys(r.tobytes() for r in rows if r.tobytes() not in cache.rows))
            if new and self.shared:
                # claim, then read the running trials' claims, then the completed trials: a
                # trial that completes between the two reads is seen by the second
                claim = mine + [np.frombuffer(key, dtype=np.int64) for key in new]
                self._set("claim", json.dumps(np.array(claim).tolist()))
                others, running = self.claims(self.candidates[k].name)
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
            self._set("points", _encode(rows, result, self.worker))
            best = float(np.min(result.cost))
            self.completed_rows += len(rows)
        else:
            best = math.inf
        self._tell(best if math.isfinite(best) else 1e300)
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
            done, _ = decode(trial.user_attrs["points"], trial.number)
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
        trial = ask(study)
        if hasattr(study._storage, "record_heartbeat"):
            study._storage.record_heartbeat(trial._trial_id)
        trial.set_user_attr("owner", owner())
        trial.set_user_attr("structure", c.name)
        trial.set_user_attr("points", _encode(np.array(new), result, 0))
        best = float(np.min(result.cost))
        study.tell(trial, best if math.isfinite(best) else 1e300)
        total += len(new)
    return total


def run(study, candidates: Sequence[Candidate], objective: str, limits: Limits, *,
        method: str = "mcts", seed: int = 0, worker: int = 0, batch: int = 64,
        shared: bool = False, budget_evals: int | None = None, budget_seconds: float | None = None,
        progress: Callable[[Worker], None] | None = None,
        should_stop: Callable[[], bool] | None = None) -> Worker:
    """Run one worker until the study's budget is spent (evaluations over all workers,
    or this worker's seconds) or `should_stop()`. With `shared` (other processes may run on
    the study), it fails dead processes' trials now and then, and waits while the rest of
    the budget is claimed by live ones."""
    from tileflow.explore.studies.storage import HEARTBEAT_S

    w = Worker(study, candidates, objective, limits, method, seed, worker, batch, shared)
    start = time.perf_counter()
    w.sync()
    idle = 0
    reaped = -math.inf

    def left(in_flight: int) -> int:
        if budget_evals is None:
            return 1 << 62
        return budget_evals - w.completed_rows - in_flight

    try:
        while not (should_stop and should_stop()):
            now = time.perf_counter()
            if budget_seconds is not None and now - start >= budget_seconds:
                break
            if shared and now - reaped >= HEARTBEAT_S:
                reap(study)
                reaped = now
            if budget_evals is not None and left(0) <= 0:
                w.sync()
                if left(0) <= 0:
                    break
            if shared and budget_evals is not None and left(w.claims()[1]) <= 0:
                time.sleep(0.1)  # what is left is claimed by running trials: wait for them
                w.sync()
                if progress:
                    progress(w)
                continue
            done = w.run_trial(left)
            if progress:
                progress(w)
            idle = idle + 1 if done == 0 else 0
            if idle > 50:
                break
        w.sync()
    finally:
        w.heartbeat.stop()
    return w
