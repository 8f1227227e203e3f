"""One `tileflow explore` run: fit the baselines, search the candidate structures in a study
(one or several worker processes), and gather what the study holds."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from tileflow.cost import evaluate
from tileflow.cost.result import Result
from tileflow.explore.factors.space import COLUMNS, Space
from tileflow.explore.studies import study as studies
from tileflow.explore.studies.config import (
    ExploreConfig,
    TieBreak,
    candidate_structures,
    check_against,
    load_tree,
    tree_name,
)
from tileflow.explore.studies.workers import Pool, usable_workers, watch_parent
from tileflow.explore.tilesearch.fit import closed_form_tiles, fit_baseline, warm_rows
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow


@dataclass(frozen=True)
class Compared:
    """A named baseline: with its own rule's factors, and its structure's best searched point
    (None when its structure was not searched)."""

    name: str
    flow: Dataflow
    result: Result
    searched: Dataflow | None = None
    searched_result: Result | None = None


@dataclass(frozen=True)
class Outcome:
    config: ExploreConfig
    workload: Workload
    arch: Architecture
    best_structure: str | None
    best: Dataflow | None
    best_result: Result | None
    baselines: tuple[Compared, ...]
    points: pd.DataFrame  # one row per evaluated point, in evaluation order
    slots: dict[str, list[str]]  # structure -> slot labels (the factors' order)
    seconds: float
    interrupted: bool = False
    structure_search: dict | None = None  # what the genetic search did (structures: search)
    workers: dict | None = None  # processes, points by worker, notes (see _workers_report)
    structures: dict | None = None  # name -> structure: rebuilds any point's dataflow
    budget: dict | None = None  # the caps, their split between phases, what each used
    # structure -> every name it came under, for those several sources gave (searched once)
    merged: dict[str, list[str]] | None = None


def slot_labels(structure) -> list[str]:
    return [f"{s.path}[{s.index}]{s.dim}{':Sp' if s.spatial else ''}" for s in structure.slots]


def candidates_for(config: ExploreConfig, w: Workload, arch: Architecture,
                   fitted: dict[str, Dataflow], seed: int, found=None) -> list[studies.Candidate]:
    """Candidate structures with their warm starts: of every name a structure came under,
    the builder's default factors, the baseline's fitted factors and the structure search's
    best factors; for chains, the closed-form DRAM-minimising tiles."""
    from tileflow.evaluator.structure import structure_of
    from tileflow.explore.studies.structure_study import structures_of

    rng = np.random.default_rng(seed)
    tiles = closed_form_tiles(w, arch)
    searched = structures_of(found, w, arch) if found is not None else []
    best = {name: factors for name, _, factors in searched}
    out = []
    for merged in candidate_structures(config, w, arch, [(n, s) for n, s, _ in searched]):
        structure = merged.structure
        warm = []
        for name, own in merged.members:
            rows = [own.default_factors] + ([best[name]] if name in best else [])
            if name in fitted:
                rows.append(structure_of(w, arch, fitted[name]).default_factors)
            warm += [r for r in rows if same_slots(own, structure)]
        if tiles:
            warm += warm_rows(Space(structure), tiles, rng)
        out.append(studies.Candidate(merged.name, structure, tuple(warm), merged.names))
    return out


def same_slots(a, b) -> bool:
    """Whether factor rows of structure `a` are rows of `b` (one slot list: what two
    structures of one `structure_key` have)."""
    return [(s.path, s.index, s.dim, s.spatial) for s in a.slots] == \
        [(s.path, s.index, s.dim, s.spatial) for s in b.slots]


def seed_rows(w: Workload, arch: Architecture, candidates, fitted: dict[str, Dataflow],
              found, users: dict[str, Dataflow] | None = None
              ) -> dict[str, list[np.ndarray]]:
    """Points every study holds, by candidate name: each baseline's own factors (where its
    fitted tree has its candidate's structure), the structure search's best factors of each
    structure it found and the factors of the users' trees `users` (by name; so the found
    dataflow is never worse than any of them, under whichever name each was merged)."""
    from tileflow.evaluator.structure import structure_of
    from tileflow.explore.structures.canonical import structure_key
    from tileflow.explore.studies.structure_study import structures_of

    users = users or {}
    owner = {n: c for c in candidates for n in c.names}
    rows: dict[str, list[np.ndarray]] = {}

    def add(name: str, structure, factors: np.ndarray) -> None:
        c = owner.get(name)
        if c is not None and same_slots(structure, c.structure) and \
                structure_key(structure.template, arch) == \
                structure_key(c.structure.template, arch):
            rows.setdefault(c.name, []).append(factors)

    for name, flow in fitted.items():
        own = structure_of(w, arch, flow)
        add(name, own, own.default_factors)
    for name, structure, factors in structures_of(found, w, arch) if found is not None \
            else []:
        add(name, structure, factors)
    for name, flow in users.items():  # a user's tree: its own factors are a point
        own = structure_of(w, arch, flow)
        add(name, own, own.default_factors)
    return rows


def search_structures(config: ExploreConfig, w: Workload, arch: Architecture, storage,
                      resume: bool, restart: bool = False, max_evaluations: int | None = None,
                      deadline: float | None = None, on_fit=None):
    """The genetic search over structures (`structures: search`), kept in `storage`, within
    its share of the budget (`max_evaluations`, a `time.perf_counter()` `deadline`)."""
    from tileflow.explore.studies.structure_study import run_search

    return run_search(w, arch, storage, objectives=config.objectives,
                      objective=config.objective, limits=config.limits, method=config.method,
                      ga=config.genetic_config, top=config.top, resume=resume, restart=restart,
                      seeds=user_trees(config, w, arch), max_evaluations=max_evaluations,
                      deadline=deadline, on_fit=on_fit)


def user_trees(config: ExploreConfig, w: Workload, arch: Architecture) -> dict[str, Dataflow]:
    """The dataflow files of `structures`, by their structure names."""
    return {tree_name(p): load_tree(config, p, w, arch) for p in config.trees}


def structure_caps(config: ExploreConfig) -> tuple[int | None, float | None]:
    """The structure search's share of the run's budget: `structure_share` of the
    evaluations (rounded down) and of the seconds; none without `structures: search`."""
    if config.structures != "search":
        return 0, 0.0
    share = config.structure_share
    return (None if config.budget_evals is None else int(config.budget_evals * share),
            None if config.budget_seconds is None else config.budget_seconds * share)


def _left(cap, used):
    return None if cap is None else max(cap - used, 0)


def storage_url(config: ExploreConfig, storage: str | None, workers: int) -> str | None:
    """Several workers need a storage they can share: a SQLite file in the output folder
    where none is given."""
    if workers > 1 and (not storage or storage == "memory"):
        Path(config.out).mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{Path(config.out).resolve() / 'study.db'}"
    return storage


def explore(config: ExploreConfig, storage: str | None = None, workers: int = 1,
            resume: bool = False, progress: bool = True, seed_fitted: bool = True,
            restart: bool = False, heartbeat_s: float | None = None,
            started: float | None = None, reserve_s: float = 0.0) -> Outcome:
    """Run the study the config describes and gather its points and best dataflow.
    `seed_fitted=False`: the baselines' fitted factors are neither study points nor warm
    starts (they are still fitted and compared), so the points are the search's own.
    `restart`: a study already in the storage is discarded and a new one started.
    The budget caps the whole run: the structure search stops at its share
    (`structure_caps`), the tile-factor study gets the rest. `heartbeat_s`: a progress line
    on stderr that often (see `heartbeat`). `started` (a `time.perf_counter()` instant,
    default now) is when the run began, so that loading and start-up count against the
    seconds; `reserve_s` of them are left for what the caller does after (its outputs)."""
    workers = usable_workers(workers)
    started = time.perf_counter() if started is None else started
    url = storage_url(config, storage, workers)
    with studies.storage_errors(url):
        return _explore(config, url, workers, resume, progress, seed_fitted, restart,
                        heartbeat_s, started, reserve_s)


def _explore(config: ExploreConfig, url: str | None, workers: int, resume: bool,
             progress: bool, seed_fitted: bool, restart: bool,
             heartbeat_s: float | None = None, started: float | None = None,
             reserve_s: float = 0.0) -> Outcome:
    from tqdm import tqdm

    from tileflow.explore.studies.heartbeat import ProgressLine

    start = time.perf_counter() if started is None else started
    reported = config  # the budget as given; the search's caps leave `reserve_s` out of it
    if config.budget_seconds is not None:
        config = replace(config, budget_seconds=max(config.budget_seconds - reserve_s, 0.0))
    w, arch = config.load()
    check_against(config, w, arch)
    from tileflow.dataflows import baselines_for

    store = studies.open_storage(url)
    shared = hasattr(store, "record_heartbeat")  # a database: other processes may join
    line = ProgressLine(f"explore {config.name}", heartbeat_s, clock=time.perf_counter)
    line.start = line.last = start
    found = None
    struct_evals, struct_seconds = structure_caps(config)
    if config.structures == "search":
        if progress:
            print(f"explore {config.name}: searching structures", file=sys.stderr)

        def on_fit(search) -> None:
            best = min((p.cost for p in search.points.values()), default=None)
            line.beat("structure search", search.evaluations, best, "evaluations")

        found = search_structures(
            config, w, arch, store, resume, restart, max_evaluations=struct_evals,
            deadline=None if struct_seconds is None else start + struct_seconds,
            on_fit=on_fit)
    struct_used = int(found.summary.get("evaluations", 0)) if found is not None else 0
    struct_used_s = time.perf_counter() - start
    tile_evals = _left(config.budget_evals, struct_used)
    candidates = candidates_for(config, w, arch, {}, config.seed, found)
    bare = [studies.Candidate(c.name, c.structure) for c in candidates]
    if found is not None and resume:  # a run stopped during the structure search resumes
        import optuna  # with the tile-factor study not yet started

        resume = studies.STUDY_NAME in optuna.get_all_study_names(store)
    study = studies.create_or_load(store, bare, config.objective,
                                   config.limits, resume, extra=config.method, restart=restart)
    fitted = {name: fit_baseline(name, w, arch, seed=config.seed) for name in baselines_for(w)}
    own = fitted if seed_fitted else {}
    candidates = candidates_for(config, w, arch, own, config.seed, found)
    studies.seed_points(study, candidates, config.objective, config.limits,
                        seed_rows(w, arch, candidates, own, found,
                                  user_trees(config, w, arch)))
    tile_config = replace(config, budget_evals=tile_evals, budget_seconds=_left(
        config.budget_seconds, time.perf_counter() - start))
    bar = tqdm(total=tile_evals, disable=not progress, unit="eval",
               desc=f"explore {config.name}", leave=False)

    def show(worker: studies.Worker) -> None:
        pool.tend(worker, time.perf_counter() - searching)
        best = worker.best()
        bar.n = worker.completed_rows
        rate = worker.completed_rows / max(time.perf_counter() - start, 1e-9)
        bar.set_postfix_str(f"{rate:,.0f} evals/s, best {best[2]:,.0f}" if best else
                            f"{rate:,.0f} evals/s")
        line.beat("tile-factor search", struct_used + worker.completed_rows,
                  best[2] if best else None)

    interrupted = False
    pool = Pool(tile_config, url, workers, worker_entry)
    searching = time.perf_counter()
    try:
        studies.run(study, candidates, config.objective, config.limits, method=config.method,
                    seed=config.seed, worker=0, batch=config.batch, shared=shared,
                    budget_evals=tile_evals,  # its seconds counted from now, not before the pool
                    budget_seconds=_left(config.budget_seconds, time.perf_counter() - start),
                    progress=show)
        pool.finish()
    except KeyboardInterrupt:
        interrupted = True
        pool.terminate()
    finally:
        bar.close()
    outcome = gather(reported, w, arch, study, candidates, fitted,
                     time.perf_counter() - start, interrupted)
    outcome = replace(outcome, workers=pool.report(outcome.points, interrupted))
    if found is not None:
        outcome = replace(outcome, structure_search=found.summary)
    phases = {"structure_search": {"evaluations_cap": struct_evals,
                                   "seconds_cap": struct_seconds,
                                   "evaluations": struct_used, "seconds": struct_used_s,
                                   "stopped_by": found.summary.get("stopped_by")
                                   if found is not None else None},
              "tile_search": {"evaluations_cap": tile_evals,
                              "seconds_cap": tile_config.budget_seconds,
                              "evaluations": int(len(outcome.points)),
                              "seconds": outcome.seconds - struct_used_s}}
    budget = {"evaluations": config.budget_evals, "seconds": reported.budget_seconds,
              "reserved_for_outputs_s": reserve_s if config.budget_seconds is not None else 0,
              "structure_share": config.structure_share if found is not None else 0.0,
              "evaluations_used": struct_used + int(len(outcome.points)),
              "seconds_used": outcome.seconds, "phases": phases}
    return replace(outcome, budget=budget)


def points_frame(study, candidates) -> pd.DataFrame:
    """Every point of every completed trial, in trial order, with seconds since the study's
    first trial started."""
    from optuna.trial import TrialState

    trials = sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)),
                    key=lambda t: t.number)
    names = {c.name for c in candidates}
    frames = []
    start = min((t.datetime_start for t in trials if t.datetime_start), default=None)
    for t in trials:
        if t.user_attrs.get("structure") not in names or "points" not in t.user_attrs:
            continue
        rows, result = studies.decode(t.user_attrs["points"], t.number)
        seconds = (t.datetime_complete - start).total_seconds() if start else 0.0
        frame = pd.DataFrame(result.metrics)
        frame.insert(0, "structure", t.user_attrs["structure"])
        frame.insert(1, "trial", t.number)
        frame.insert(2, "worker", studies.worker_of(t.user_attrs["points"]))
        frame.insert(3, "seconds", seconds)
        frame.insert(4, "factors", [" ".join(map(str, r)) for r in rows])
        frame["valid"] = result.valid
        frame["cost"] = result.cost
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["structure", "trial", "worker", "seconds", "factors",
                                     "valid", "cost"])
    return pd.concat(frames, ignore_index=True)


def gather(config, w, arch, study, candidates, fitted, seconds, interrupted) -> Outcome:
    points = points_frame(study, candidates)
    by_name = {c.name: c.structure for c in candidates}
    best_name = best_flow = best_result = None
    valid = points[np.isfinite(points["cost"].astype(float))] if len(points) else points
    searched: dict[str, Dataflow] = {}
    for name, group in valid.groupby("structure") if len(valid) else []:
        row = group.loc[group["cost"].astype(float).idxmin()]
        factors = [int(x) for x in str(row["factors"]).split()]
        searched[name] = by_name[name].dataflow(factors)
    if searched:
        single = len(config.objectives) == 1  # two objectives: the front is the answer
        row = valid.loc[pick_best(valid, config.tie_break if single else TieBreak(None))]
        best_name = str(row["structure"])
        factors = [int(x) for x in str(row["factors"]).split()]
        searched[best_name] = by_name[best_name].dataflow(factors)
        best_flow = searched[best_name]
        best_result = evaluate(w, arch, best_flow)
    label = {n: c.name for c in candidates for n in c.names}  # a source -> its candidate
    compared = []
    for name, flow in fitted.items():
        s = searched.get(label.get(name, name))
        compared.append(Compared(name, flow, evaluate(w, arch, flow), s,
                                 evaluate(w, arch, s) if s else None))
    slots = {c.name: slot_labels(c.structure) for c in candidates}
    merged = {c.name: list(c.names) for c in candidates if len(c.names) > 1}
    return Outcome(config, w, arch, best_name, best_flow, best_result, tuple(compared), points,
                   slots, seconds, interrupted, structures=by_name, merged=merged)


def pick_best(valid: pd.DataFrame, tie_break: TieBreak):
    """The index of the study's best point among `valid` (finite cost): the least cost or,
    with a tie-break objective, the point least by it among those whose cost is within
    `tolerance` (a fraction) of the least and, where the least is within the tie-break's
    `ceiling`, within it too; equal values go to the earlier point."""
    cost = valid["cost"].astype(float)
    column = COLUMNS.get(tie_break.objective or "")
    if column is None or column not in valid:
        return cost.idxmin()
    limit = cost.min() * (1.0 + tie_break.tolerance)
    if tie_break.ceiling is not None and cost.min() <= tie_break.ceiling * (1 + 1e-9):
        limit = min(limit, tie_break.ceiling * (1 + 1e-9))
    near = valid[cost <= limit]
    return near[column].astype(float).idxmin()


def objective_value(result: Result, objective: str) -> float:
    return {"latency": result.cycles, "energy": result.energy_pj,
            "edp": result.cycles * result.energy_pj, "dram": result.dram_words}.get(
        objective, math.nan)


def worker_entry(config, url: str, worker: int, ready, stop, deadline: float | None) -> None:
    """A worker process: the same candidates (warm-started from defaults and closed form),
    its own seed, the shared study; it ends with its parent, when `stop` is set, or at the
    wall-clock `deadline`."""
    watch_parent()
    from tileflow.explore.studies import study as studies
    from tileflow.explore.studies.structure_study import read_found

    w, arch = config.load()
    storage = studies.open_storage(url, existing=True)
    with studies.storage_errors(url):
        found = read_found(storage, w, arch) if config.structures == "search" else None
        candidates = candidates_for(config, w, arch, {}, config.seed + worker, found)
        study = studies.create_or_load(storage, candidates, config.objective,
                                       config.limits, resume=True, extra=config.method,
                                       fail_running=False)
        ready.set()
        seconds = None if deadline is None else max(deadline - time.time(), 0.0)
        studies.run(study, candidates, config.objective, config.limits, method=config.method,
                    seed=config.seed, worker=worker, batch=config.batch, shared=True,
                    budget_evals=config.budget_evals, budget_seconds=seconds,
                    should_stop=stop.is_set)
