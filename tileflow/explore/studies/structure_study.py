"""The structure search of `tileflow explore` (`structures: search`).

The genetic search (`genetic.GeneticSearch`) varies tree structures; each structure's fitness
is the best cost the tile-factor search (MCTS, or the study's method) finds for it within a
small budget that grows for the better structures (successive halving). The named baselines'
structures seed it. Every fitness search is a trial of a second study in the same storage
(`tileflow-structures`): a resumed run replays the same seeded search and reads each completed
fitness back instead of searching again, and worker processes read the found structures from
the storage instead of searching themselves."""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass

import numpy as np

from tileflow import provenance
from tileflow.errors import InputError
from tileflow.evaluator.structure import Structure, structure_of
from tileflow.explore.factors.space import Limits, Space
from tileflow.explore.structures.fitness import Metrics, pick
from tileflow.explore.structures.genetic import GAConfig, GeneticSearch, SearchResult
from tileflow.explore.structures.structure_space import StructureSpace
from tileflow.explore.studies.storage import ask
from tileflow.explore.studies.study import open_marked
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, to_dict

STUDY_NAME = "tileflow-structures"


@dataclass(frozen=True)
class Found:
    """A structure the genetic search found, with the best factors its fitness search saw."""

    name: str
    flow: Dataflow  # the structure's template (default factors)
    factors: tuple[int, ...]
    cost: float
    cycles: float
    energy_pj: float


@dataclass(frozen=True)
class StructureSearch:
    """What the genetic search found and what it cost."""

    found: tuple[Found, ...]
    summary: dict  # evaluations, seconds, structures, repairs, rejected, history


def tile_fit(objective: str, limits: Limits, method: str = "mcts", non_divisors: bool = True,
             deadline: float | None = None):
    """`fit_for(cost)` for the genetic search: the tile-factor search (`method`, guided by
    the study's `objective`, within the user's `limits`) over a structure's factors, warm
    started from its default factors; the best point under `cost` (a weighted scalarisation
    when there are two objectives) is the structure's fitness. `non_divisors=False` keeps
    to exact divisor tilings; `deadline` (a `time.perf_counter()` instant) ends a fitness
    search early."""
    from tileflow.explore.tilesearch.search import search

    def fit_for(cost_of):
        def fit(structure: Structure, budget: int, seed: int) -> tuple[float, np.ndarray]:
            if deadline is not None and time.perf_counter() >= deadline:  # the share is spent
                return math.inf, structure.default_factors
            space = Space(structure, non_divisors=non_divisors)
            seconds = None if deadline is None else max(deadline - time.perf_counter(), 0.0)
            cache = search(space, method, objective, limits, budget_evals=budget,
                           budget_seconds=seconds, seed=seed,
                           batch=min(budget, 64), warm=(structure.default_factors,))
            if not cache.rows:
                return math.inf, structure.default_factors
            rows = np.array([np.frombuffer(k, dtype=np.int64) for k in cache.rows])
            values = list(cache.rows.values())
            valid = np.array([v for _, v, _ in values], dtype=bool)

            def column(name: str) -> np.ndarray:
                return np.array([m.get(name, math.inf) for _, _, m in values], dtype=float)

            excess = sum((column(k) for k in values[0][2] if k.startswith("violation_")),
                         np.zeros(len(values)))
            m = Metrics(column("cycles"), column("energy_pj"), column("dram_words"), valid,
                        excess)
            cost = np.asarray(cost_of(m), dtype=float)
            best = pick(m, cost)
            return (float(cost[best]) if valid[best] else math.inf), rows[best]
        return fit
    return fit_for


class StoredSearch(GeneticSearch):
    """The genetic search with every fitness search kept as a trial of `study`: a fitness
    already in the study (same structure, weight, budget and seed) is read back."""

    def __init__(self, space: StructureSpace, config: GAConfig, fit_for, study, **caps):
        super().__init__(space, config, fit_for, **caps)
        self.study = study
        self.known: dict[str, tuple[float, np.ndarray]] = {}
        self.replayed = 0
        from optuna.trial import TrialState

        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if "key" in t.user_attrs:
                try:
                    cost = t.user_attrs["cost"]
                    self.known[str(t.user_attrs["key"])] = (
                        math.inf if cost is None else float(cost),
                        np.array(t.user_attrs["factors"], dtype=np.int64).reshape(-1))
                except (KeyError, TypeError, ValueError):
                    raise _damaged(f"trial {t.number} of the structure search holds a fitness "
                                   "that is not what tileflow writes") from None

    def _fit(self, weight: float):
        inner = super()._fit(weight)

        def fit(structure, budget: int, seed: int):
            key = hashlib.sha256(f"{weight}|{structure.encoding.text}|{budget}|{seed}".encode()) \
                .hexdigest()
            if key in self.known:
                self.replayed += 1
                return self.known[key]
            cost, factors = inner(structure, budget, seed)
            trial = ask(self.study)
            trial.set_user_attr("key", key)
            trial.set_user_attr("cost", cost if math.isfinite(cost) else None)
            trial.set_user_attr("factors", [int(x) for x in factors])
            self.study.tell(trial, cost if math.isfinite(cost) else 1e300)
            self.known[key] = (cost, np.asarray(factors))
            return cost, factors
        return fit


def fingerprint(w: Workload, arch: Architecture, objectives, limits: Limits, method: str,
                ga: GAConfig, top: int, seeds: list | None = None) -> dict[str, str]:
    """What the structure search was started from (see `provenance.marks`)."""
    settings = [list(objectives), sorted(limits.footprint_words.items()), limits.dram_words,
                method, sorted(ga.__dict__.items()), top]
    if seeds:  # users' trees: a run without them keeps its earlier mark
        settings.append(seeds)
    return provenance.marks(arch, w, settings)


def _open(storage, mark: dict[str, str], resume: bool, restart: bool = False):
    """The structure search's study; resuming a run stopped before it began starts it."""
    return (open_marked(storage, STUDY_NAME, mark, "the structure search",
                        "objectives, limits, method or genetic settings", resume, restart)
            or open_marked(storage, STUDY_NAME, mark, "", "", False))


def _ranked(result: SearchResult, objectives, top: int):
    """The `top` distinct structures: by cost, or for two objectives the front first."""
    points = result.front + sorted(result.points, key=lambda p: (p.cost, p.cycles)) \
        if len(objectives) > 1 else sorted(result.points, key=lambda p: (p.cost, p.cycles))
    out, seen = [], set()
    for p in points:
        if p.encoding not in seen and math.isfinite(p.cycles):
            seen.add(p.encoding)
            out.append(p)
        if len(out) == top:
            break
    return out


def run_search(w: Workload, arch: Architecture, storage, *, objectives, objective: str,
               limits: Limits, method: str, ga: GAConfig, top: int,
               resume: bool, restart: bool = False,
               seeds: dict[str, Dataflow] | None = None, max_evaluations: int | None = None,
               deadline: float | None = None, on_fit=None) -> StructureSearch:
    """Run (or, with `resume`, replay from the storage) the structure search and record what
    it found in the storage for the workers (`restart`: a search already there is deleted).
    `seeds`: users' trees that join the baselines in the first generation.
    `max_evaluations` and `deadline` (a `time.perf_counter()` instant) are its share of the
    run's budget; `on_fit(search)` follows its progress."""
    seeds = seeds or {}
    mark = fingerprint(w, arch, objectives, limits, method, ga, top,
                       [(name, to_dict(flow)) for name, flow in seeds.items()])
    study = _open(storage, mark, resume, restart)
    if "found" in study.user_attrs:
        return load_found(study, w, arch)
    start = time.perf_counter()
    space = StructureSpace(w, arch, seeds=seeds)
    searcher = StoredSearch(space, ga, tile_fit(objective, limits, method, deadline=deadline),
                            study, max_evaluations=max_evaluations, deadline=deadline,
                            on_fit=on_fit)
    result = searcher.run()
    found = []
    ranked = _ranked(result, objectives, top)
    if ga.seed_baselines:  # the chip-spanning seeds go on whatever their small budgets gave
        kept = {p.encoding for p in ranked}
        for enc in space.level_seeds().values():
            seeded = [p for p in result.points if p.encoding == enc and enc not in kept
                      and math.isfinite(p.cycles)]
            if seeded:
                ranked.append(min(seeded, key=lambda p: (p.cost, p.cycles)))
                kept.add(enc)
    for k, p in enumerate(ranked):
        st = space.structure(p.encoding)
        found.append({"name": f"searched-{k + 1}", "tree": to_dict(st.template),
                      "factors": [int(x) for x in p.factors],
                      "cost": p.cost if math.isfinite(p.cost) else None,
                      "cycles": p.cycles, "energy_pj": p.energy_pj})
    summary = {"evaluations": result.evaluations, "structures": result.structures,
               "seconds": time.perf_counter() - start, "replayed_fits": searcher.replayed,
               "repairs": {k: int(v) for k, v in result.repairs.items()},
               "rejected": result.rejected, "history": result.history,
               "stopped_by": searcher.stopped,
               "baseline_seeds": sorted(space.baselines()),
               "seeds_not_expressible": dict(space.skipped),
               "settings": {**ga.__dict__, "objectives": list(ga.objectives), "top": top}}
    # "found" marks the search complete, so it is written last: a kill between the two
    # writes leaves a search that resumes anew, not a storage without its summary
    study.set_user_attr("summary", json.dumps(summary, default=float))
    study.set_user_attr("found", json.dumps(found))
    return load_found(study, w, arch)


def load_found(study, w: Workload, arch: Architecture) -> StructureSearch:
    """The structures a completed structure search recorded in its study."""
    from tileflow.specs.dataflow import parse_dataflow
    from tileflow.specs.yamlfile import Field

    found = []
    try:
        for item in json.loads(study.user_attrs["found"]):
            flow = parse_dataflow(Field(item["tree"], "structure search"))
            cost = math.inf if item["cost"] is None else float(item["cost"])
            found.append(Found(str(item["name"]), flow, tuple(int(f) for f in item["factors"]),
                               cost, float(item["cycles"]), float(item["energy_pj"])))
        summary = json.loads(study.user_attrs["summary"])
    except (KeyError, TypeError, ValueError, AttributeError, InputError) as exc:
        raise _damaged(f"the structures the search found are not what tileflow writes "
                       f"({' '.join(str(exc).split())[:200]})") from None
    return StructureSearch(tuple(found), summary)


def _damaged(what: str) -> InputError:
    return InputError(f"the study storage is damaged: {what}; give another --storage, or "
                      "--restart to start a new study there")


def read_found(storage, w: Workload, arch: Architecture) -> StructureSearch:
    """What a worker process reads: the structures the main process's search found."""
    import optuna

    study = optuna.load_study(study_name=STUDY_NAME, storage=storage)
    if "found" not in study.user_attrs:
        raise InputError("the structure search in this storage has not finished")
    return load_found(study, w, arch)


def structures_of(search: StructureSearch, w: Workload,
                  arch: Architecture) -> list[tuple[str, Structure, np.ndarray]]:
    """(name, structure, best known factors) of every found structure."""
    return [(f.name, structure_of(w, arch, f.flow), np.array(f.factors, dtype=np.int64))
            for f in search.found]
