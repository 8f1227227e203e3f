"""A genetic algorithm over fused tile-tree structures.

Individuals are canonical encodings (plus, for two objectives, the weight that scalarises
them). Each generation: tournament selection, uniform crossover, mutation, repair; the best
`elite` survive unchanged. Fitness is the best cost the tile-factor search (`fit`) finds for
a structure; budgets grow by successive halving: every new structure gets `budget` evaluations,
the better 1/eta of a generation eta times more, and so on for `rungs` rungs. The named
baselines seed the first generation, with their own factors evaluated as a first point."""

from __future__ import annotations

import math
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tileflow.evaluator.structure import structure_of
from tileflow.explore.structures.encoding import Encoding
from tileflow.explore.structures.fitness import OBJECTIVES, Fit, Metrics, measure, random_fit
from tileflow.explore.structures.structure_space import SpaceOptions, StructureSpace
from tileflow.explore.structures.tilings import EncodedStructure
from tileflow.tree import Dataflow

WEIGHTS = tuple(i / 10 for i in range(11))  # latency weight of a two-objective individual


@dataclass(frozen=True)
class GAConfig:
    population: int = 12
    generations: int = 8
    elite: int = 2
    tournament: int = 2
    crossover: float = 0.8
    mutations: int = 1  # gene changes per child
    budget: int = 16  # factor evaluations a new structure gets
    eta: int = 2  # successive halving: keep 1/eta, give eta times the budget
    rungs: int = 3
    objectives: tuple[str, ...] = ("latency",)
    seed: int = 0
    seed_baselines: bool = True


@dataclass
class Point:
    """A structure's best factors so far, with their metrics."""

    encoding: Encoding
    weight: float
    cost: float
    factors: np.ndarray
    cycles: float
    energy_pj: float
    rung: int = -1
    budget_spent: int = 0
    fits: int = 0  # tile-factor searches run for it (each with its own seed)


@dataclass
class SearchResult:
    best: Point
    structure: EncodedStructure
    dataflow: Dataflow
    points: list[Point]  # every structure's best point
    front: list[Point]  # two objectives: the Pareto front over every evaluated best point
    history: list[dict]  # per generation: evaluations, seconds, best cost
    evaluations: int  # factor evaluations handed to the tile-factor search
    repairs: Counter  # fixes by rule over every child produced
    rejected: int  # children that could not be repaired (never evaluated)
    structures: int  # distinct structures evaluated
    extra: dict = field(default_factory=dict)


def pareto_front(points: list[Point]) -> list[Point]:
    """Points no other point beats on both cycles and energy (ties kept once)."""
    ok = [p for p in points if math.isfinite(p.cycles) and math.isfinite(p.energy_pj)]
    ok.sort(key=lambda p: (p.cycles, p.energy_pj))
    front, best_energy = [], math.inf
    for p in ok:
        if p.energy_pj < best_energy:
            front.append(p)
            best_energy = p.energy_pj
    return front


def _scalar(objectives: tuple[str, ...], weight: float) -> Callable[[Metrics], np.ndarray]:
    if len(objectives) == 1:
        return OBJECTIVES[objectives[0]]
    a, b = (OBJECTIVES[o] for o in objectives)

    def cost(m: Metrics) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return weight * np.log(a(m)) + (1 - weight) * np.log(b(m))
    return cost


class OutOfBudget(Exception):
    """The structure search's share of the run's budget is spent."""


class GeneticSearch:
    """`max_evaluations` and `deadline` (a `time.perf_counter()` instant) cap the search:
    a fitness search gets at most what is left, and none starts once either is spent; the
    search then ends with what it has (`stopped` says why). `on_fit(search)` is called
    after every fitness search (progress lines)."""

    def __init__(self, space: StructureSpace, config: GAConfig | None = None,
                 fit_for: Callable[[Callable[[Metrics], np.ndarray]], Fit] | None = None,
                 max_evaluations: int | None = None, deadline: float | None = None,
                 on_fit: Callable[[GeneticSearch], None] | None = None):
        self.space, self.config = space, config or GAConfig()
        self.max_evaluations, self.deadline, self.on_fit = max_evaluations, deadline, on_fit
        self.stopped: str | None = None  # "evaluations" or "seconds": the cap that ended it
        self.fit_for = fit_for or random_fit
        self.rng = np.random.default_rng(self.config.seed)
        self.points: dict[tuple[Encoding, float], Point] = {}
        self.fits: dict[float, Fit] = {}
        self.evaluations = 0
        self.rejected = 0

    def _fit(self, weight: float) -> Fit:
        if weight not in self.fits:
            self.fits[weight] = self.fit_for(_scalar(self.config.objectives, weight))
        return self.fits[weight]

    def _seed(self, enc: Encoding, fits: int) -> int:
        return zlib.crc32(f"{self.config.seed}|{fits}|{enc.text}".encode())

    def _record(self, key, cost: float, factors: np.ndarray) -> None:
        enc, weight = key
        point = self.points.get(key)
        if point is None or cost < point.cost:
            m = measure(self.space.structure(enc), factors)
            cost = cost if m.valid[0] else math.inf
            if point is None:
                self.points[key] = Point(enc, weight, cost, np.asarray(factors),
                                         float(m.cycles[0]), float(m.energy_pj[0]))
            elif cost < point.cost:
                point.cost, point.factors = cost, np.asarray(factors)
                point.cycles, point.energy_pj = float(m.cycles[0]), float(m.energy_pj[0])

    def _rung(self, key, rung: int, again: bool = False) -> None:
        point = self.points.get(key)
        if point is not None and point.rung >= rung and not again:
            return
        budget = self.config.budget * self.config.eta ** rung
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            self.stopped = "seconds"
            raise OutOfBudget
        if self.max_evaluations is not None:
            budget = min(budget, self.max_evaluations - self.evaluations)
            if budget <= 0:
                self.stopped = "evaluations"
                raise OutOfBudget
        enc, weight = key
        fits = point.fits if point else 0
        cost, factors = self._fit(weight)(self.space.structure(enc), budget,
                                          self._seed(enc, fits))
        self.evaluations += budget
        self._record(key, cost, factors)
        point = self.points[key]
        point.rung = max(point.rung, rung)
        point.budget_spent += budget
        point.fits += 1
        if self.on_fit:
            self.on_fit(self)

    def _evaluate(self, population: list, revisit: tuple = ()) -> None:
        """Successive halving over a generation; structures the search produces again
        (`revisit`) get another search of the first rung's budget with a new seed."""
        pool = list(dict.fromkeys(population))
        for key in dict.fromkeys(revisit):
            if key in self.points:
                self._rung(key, 0, again=True)
        for rung in range(self.config.rungs):
            keep = max(1, math.ceil(len(pool) / self.config.eta ** rung))
            for key in self._ranked(pool)[:keep]:
                self._rung(key, rung)

    def _ranked(self, keys: list) -> list:
        def order(key):
            p = self.points.get(key)
            return (p.cost, p.cycles) if p else (math.inf, math.inf)
        if len(self.config.objectives) == 1:
            return sorted(keys, key=order)
        front = {id(p) for p in pareto_front([self.points[k] for k in keys if k in self.points])}
        return sorted(keys, key=lambda k: (id(self.points.get(k)) not in front, *order(k)))

    def _child(self, population: list) -> tuple[Encoding, float] | None:
        cfg, rng, space = self.config, self.rng, self.space

        def tournament():
            picks = [population[int(i)] for i in rng.integers(0, len(population),
                                                              cfg.tournament)]
            return self._ranked(picks)[0]

        a, b = tournament(), tournament()
        try:
            enc = space.crossover(a[0], b[0], rng) if rng.random() < cfg.crossover else a[0]
            for _ in range(cfg.mutations):
                enc = space.mutate(enc, rng)
        except ValueError:
            self.rejected += 1
            return None
        weight = a[1] if rng.random() < 0.5 else b[1]
        if len(cfg.objectives) > 1 and rng.random() < 0.3:
            weight = float(rng.choice(WEIGHTS))
        return enc, weight

    def _weight(self) -> float:
        return 1.0 if len(self.config.objectives) == 1 else float(self.rng.choice(WEIGHTS))

    def initial(self) -> list:
        population = []
        if self.config.seed_baselines:
            for name, enc in self.space.baselines().items():
                key = (enc, self._weight())
                population.append(key)
                w, arch = self.space.frame.workload, self.space.frame.arch
                own = structure_of(w, arch, self.space.seed_flow(name)).default_factors
                structure = self.space.structure(enc)
                if own.shape != structure.default_factors.shape:  # slots in another order
                    own = structure.default_factors
                m = measure(structure, own)
                self.evaluations += 1  # a point of the run's budget like any other
                cost = float(_scalar(self.config.objectives, key[1])(m)[0])
                self._record(key, cost if m.valid[0] else math.inf, own)
            for enc in self.space.level_seeds().values():
                population.append((enc, self._weight()))
        while len(population) < self.config.population:
            population.append((self.space.random(self.rng), self._weight()))
        return list(dict.fromkeys(population))

    def run(self) -> SearchResult:
        cfg = self.config
        start = time.perf_counter()
        population = self.initial()
        history = []
        revisit: list = []
        for generation in range(cfg.generations + 1):
            try:
                self._evaluate(population, tuple(revisit))
            except OutOfBudget:
                pass
            ranked = self._ranked(population)
            best = self.points.get(ranked[0])
            history.append({"generation": generation, "evaluations": self.evaluations,
                            "seconds": time.perf_counter() - start,
                            "best_cost": best.cost if best else math.inf,
                            "structures": len(self.points)})
            if generation == cfg.generations or self.stopped:
                break
            children = ranked[:cfg.elite]
            revisit = []
            while len(children) < cfg.population:
                child = self._child(ranked)
                if child is not None:
                    children.append(child)
                    if child in self.points:
                        revisit.append(child)
            population = list(dict.fromkeys(children))
        return self._result(history)

    def _result(self, history: list[dict]) -> SearchResult:
        points = list(self.points.values())
        best = min(points, key=lambda p: (p.cost, p.cycles))
        if len(self.config.objectives) > 1:
            best = min(points, key=lambda p: (p.cycles, p.energy_pj))
        structure = self.space.structure(best.encoding)
        return SearchResult(best, structure, structure.dataflow(best.factors), points,
                            pareto_front(points), history, self.evaluations,
                            Counter(self.space.fixes),
                            self.rejected, len({p.encoding for p in points}))


def search(space: StructureSpace, config: GAConfig | None = None, fit_for=None) -> SearchResult:
    """Run the genetic search; `fit_for(objective) -> fit` supplies the tile-factor search
    (default: `random_fit`)."""
    return GeneticSearch(space, config, fit_for).run()


@dataclass(frozen=True)
class Candidate:
    """A structure for the tile-factor search to take over, with the best factors known."""

    name: str
    structure: EncodedStructure
    factors: np.ndarray
    cost: float


def structure_candidates(workload, arch, mode: str = "search", config: GAConfig | None = None,
                         fit_for=None, top: int = 8,
                         options: SpaceOptions | None = None) -> list[Candidate]:
    """The structures `tileflow explore` searches factors for: `baselines` gives the named
    baselines' structures; `search` runs the genetic search and gives its `top` best
    structures, best first (the baselines' structures among them when they win)."""
    space = StructureSpace(workload, arch, options)
    if mode == "baselines":
        out = []
        for name, enc in space.baselines().items():
            st = space.structure(enc)
            out.append(Candidate(name, st, st.default_factors, math.inf))
        return out
    if mode != "search":
        raise ValueError(f"structures: expected 'baselines' or 'search', got '{mode}'")
    result = search(space, config, fit_for)
    ranked = sorted(result.points, key=lambda p: (p.cost, p.cycles))
    out, seen = [], set()
    for p in ranked:
        if p.encoding not in seen:
            seen.add(p.encoding)
            out.append(Candidate(f"searched-{len(out) + 1}", space.structure(p.encoding),
                                 p.factors, p.cost))
        if len(out) == top:
            break
    return out
