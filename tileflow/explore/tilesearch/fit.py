"""Baselines with fitted factors, and warm starts for the search.

Each named baseline keeps its tree shape and has its factors chosen under its own rule:
Chimera takes the least DRAM traffic among the factors that fit and, among those, the lowest
latency (two searches, `fit_structure`), TileFlow-Pipe the lowest
latency (the rule its shape was published with), and so do Flash and Flash-Pipe (the online
softmax's sweep); the others the largest tiles that fit.
Their builders already pick the largest tiles that fit along the dims they tile; where that
does not fit, the tile search looks for the largest tiles that do (the fewest steps at the
outermost level). Ties go to the lower latency. The search starts from the builder's factors
and from the smallest tiles (`Space.smallest_completion`), whose footprints no other factors
undercut. Where nothing fits, the dataflow with the smallest overrun (`overrun`) comes back,
and its evaluation names the level, the tensors and the amounts."""

from __future__ import annotations

import math

import numpy as np

from tileflow.cost import evaluate
from tileflow.dataflows import build
from tileflow.dataflows.chain import Roles
from tileflow.dataflows.common import Hardware, held_at_middle
from tileflow.errors import InputError
from tileflow.evaluator.structure import Structure, structure_of
from tileflow.explore.factors.space import (
    UNDECIDED,
    Limits,
    Space,
    divisor_count_within,
    divisors,
    enumerate_divisors,
)
from tileflow.explore.tilesearch.bypass import overflow_bypass, with_bypass, with_forced_bypass
from tileflow.explore.tilesearch.search import PointCache, search
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow

RULES = {"chimera": "dram", "tileflow-pipe": "latency", "flash": "latency",
         "flash-pipe": "latency"}
# others: "steps" (largest tiles)


def rule_of(name: str) -> str:
    return RULES.get(name.lower(), "steps")


def closed_form_tiles(w: Workload, arch: Architecture) -> dict[str, int] | None:
    """Row block T_M and inner tile T_L of a two-operator chain that minimise its DRAM
    traffic (in closed form: (MK + MN) L/T_L + (KL + NL) M/T_M) with both GEMMs' tiles in one
    buffer instance, solved in the reals and rounded down to divisors; None for other
    workloads."""
    from scipy.optimize import minimize

    try:
        r = Roles.of(w)
    except InputError:
        return None
    hw = Hardware.of(arch)
    first, last = w.op_by_name[r.first], w.op_by_name[r.last]
    k = math.prod(w.sizes[d] for d in first.reduction_dims)
    n = math.prod(w.sizes[d] for d in last.output.dims if d not in first.output.dims) or 1
    rows, inner = w.sizes[r.rows], w.sizes[r.inner]
    if not (r.batch and w.sizes[r.batch] >= hw.cores):
        rows = -(-rows // hw.cores)
    capacity = arch.level(hw.buffer).capacity_words
    if not math.isfinite(capacity):  # everything fits: whole tiles, the compulsory traffic
        return {r.rows: rows, r.inner: inner}

    def traffic(x):
        tm, tl = np.exp(x)
        return ((rows * k + rows * n) * inner / tl + (k * inner + n * inner) * rows / tm) / (
            rows * inner)

    def room(x):
        tm, tl = np.exp(x)
        return capacity - max(tm * k + k * tl + tm * tl, tm * tl + tl * n + tm * n)

    x0 = np.log([1.0, 1.0])
    bounds = [(0.0, math.log(rows)), (0.0, math.log(inner))]
    best = minimize(traffic, x0, bounds=bounds, method="SLSQP",
                    constraints=[{"type": "ineq", "fun": room}])
    tm, tl = np.exp(best.x)
    return {r.rows: max(d for d in divisors(rows) if d <= tm * (1 + 1e-9)),
            r.inner: max(d for d in divisors(inner) if d <= tl * (1 + 1e-9))}


def warm_rows(space: Space, tiles: dict[str, int], rng: np.random.Generator,
              count: int = 8) -> list[np.ndarray]:
    """Completions of a partial assignment where the outermost level's temporal loops give
    each dim in `tiles` that tile size per step, the spatial loops keep the builder's
    factors where the rest of their chains leaves room (`keep_spatial`), and the other
    temporal loops are drawn at random."""
    s = space.structure
    outer = s.arch.levels[0].name
    tiles_of = {p: n for p, n in _tiles(s.template)}
    default = s.default_factors
    default = default.copy()
    for i, v in space.fixed.items():
        default[i] = v
    state = np.full(space.size, UNDECIDED, dtype=np.int64)
    for dim, tile in tiles.items():
        top = [i for i, sl in enumerate(s.slots) if sl.dim == dim
               and tiles_of[sl.path].level == outer]
        spread = math.prod(int(default[i]) for i in top if s.slots[i].spatial)
        temporal = [i for i in top if not s.slots[i].spatial]
        for i in top:
            state[i] = default[i] if s.slots[i].spatial else 1
        if temporal:
            state[temporal[0]] = -(-s.workload.sizes[dim] // (tile * spread))
    state = keep_spatial(space, state, default)
    return [space.random_completion(state, rng) for _ in range(count)]


def keep_spatial(space: Space, state: np.ndarray, spatial: np.ndarray) -> np.ndarray:
    """Decide the undecided spatial slots of a partial assignment as in `spatial` (outermost
    first), each clamped to the largest factor its chains still allow: the temporal slots
    left undecided then tile around a spread that uses the array as `spatial` does."""
    return keep(space, state, spatial, np.flatnonzero(space.spatial_limit))


def keep(space: Space, state: np.ndarray, values: np.ndarray, slots) -> np.ndarray:
    """Decide the undecided `slots` (in order) as in `values`, each clamped to the largest
    factor it may take once the slots before it are decided."""
    state = space.propagate(state)
    for i in slots:
        if state[i] != UNDECIDED or i not in space.free_slots(state):
            continue
        fits = [v for v in space.candidates(state, i) if v <= int(values[i])]
        if fits:
            state[i] = fits[-1]
            state = space.propagate(state)
    return state


def respread(space: Space, row: np.ndarray, spatial: np.ndarray, rng: np.random.Generator,
             count: int = 2) -> list[np.ndarray]:
    """Variants of a complete row that keep its outermost level's loops (what sets its DRAM
    traffic) and spread below it as `spatial` does, the other temporal loops drawn anew:
    from the row as it is, with its outermost spread widened (`widen_outer`), and with the
    spread decided first (the outermost loops then clamped to what it leaves)."""
    top = _outer_slots(space)
    spread = list(np.flatnonzero(space.spatial_limit))
    empty = np.full(space.size, UNDECIDED, dtype=np.int64)
    states = [keep_spatial(space, keep(space, empty, row, top), spatial),
              keep_spatial(space, keep(space, empty, widen_outer(space, row, spatial), top),
                           spatial),
              keep(space, keep(space, empty, spatial, spread), row, top)]
    return [space.random_completion(state, rng) for state in states for _ in range(count)]


def widen_outer(space: Space, row: np.ndarray, spatial: np.ndarray) -> np.ndarray:
    """The row with each spatial loop of the outermost level widened towards `spatial` by
    taking iterations from the temporal loops over the same dim of the same tile: the same
    tile per instance, more instances at once (and the same DRAM traffic)."""
    s = space.structure
    row = row.copy()
    top = _outer_slots(space)
    for i in top:
        if not s.slots[i].spatial:
            continue
        same = [j for j in top if not s.slots[j].spatial and s.slots[j].path == s.slots[i].path
                and s.slots[j].dim == s.slots[i].dim]
        if not same:
            continue
        total = int(row[i]) * math.prod(int(row[j]) for j in same)
        wide = max(int(row[i]), min(int(spatial[i]), int(space.spatial_limit[i]), total))
        row[same] = 1
        row[same[0]] = -(-total // wide)
        row[i] = wide
    return row


def _outer_slots(space: Space) -> list[int]:
    """The slots of the outermost level's tiles, in slot order."""
    s = space.structure
    outer = s.arch.levels[0].name
    tiles_of = {p: n for p, n in _tiles(s.template)}
    return [i for i, sl in enumerate(s.slots) if tiles_of[sl.path].level == outer]


def _tiles(flow: Dataflow):
    from tileflow.tree import Tile, walk

    return [(p, n) for p, n in walk(flow.root) if isinstance(n, Tile)]


def choose(cache: PointCache, rule: str) -> np.ndarray:
    """The point a rule picks: the least of its metric among valid points, ties to the lower
    latency; where none is valid, the smallest total overrun."""
    keys = list(cache.rows)
    metric = {"dram": "dram_words", "steps": "outer_steps", "latency": "cycles",
              "energy": "energy_pj", "edp": "edp"}[rule]
    valid = [k for k in keys if cache.rows[k][1]]
    if valid:
        low = min(cache.rows[k][2][metric] for k in valid)
        ties = [k for k in valid if cache.rows[k][2][metric] <= low * (1 + 1e-9)]
        key = min(ties, key=lambda k: cache.rows[k][2]["cycles"])
    else:
        key = min(keys, key=lambda k: overrun(cache.rows[k][2]))
    return np.frombuffer(key, dtype=np.int64).copy()


def overrun(metrics: dict) -> tuple[float, float]:
    """How far an invalid point is from fitting, compared first by what smaller tiles can
    always avoid (fan-out and array spreads, coverage, dependencies: instances and counts),
    then by the words above the capacities: a point that exceeds only capacities is closer
    to fitting, and its violations are those of the structure itself."""
    other = sum(v for m, v in metrics.items()
                if m.startswith("violation_") and m != "violation_capacity")
    return other, metrics.get("violation_capacity", 0.0)


def fit_structure(structure: Structure, rule: str, budget_evals: int = 300,
                  seed: int = 0) -> np.ndarray:
    """Factors of a structure under a rule, searched from its defaults (and, for chains,
    the closed-form tiles); a space of at most four times the budget in divisor points is
    evaluated whole instead. The "dram" rule searches in two phases: the least DRAM traffic
    first (a fifth of the budget: the warm starts and the smallest tiles reach it early),
    then the lowest latency among the points that reach it (`Limits.dram_words`), from the
    tied points and their variants spread as the builder spreads (`respread`). Many points
    tie at the least traffic (every spread of the same outer tiles) and a tie-break inside
    one search sees almost no difference between them: the second phase is what orders
    them by latency."""
    space = Space(structure)
    free = _fit_in(space, rule, budget_evals, seed)
    if rule == "latency":  # a latency fit spreads by itself: a narrow spread is slower
        return free
    spread = Space(structure, fixed=intended_spread(structure))
    if not _any_valid(spread, rule, budget_evals, seed):
        return free
    # both fits under the rule, ties to the lower latency: least DRAM traffic and fewest
    # steps hardly depend on the spread, so the free search may end on a collapsed one
    cache = PointCache(space, "latency", Limits())
    cache.evaluate(np.vstack([_fit_in(spread, rule, budget_evals, seed), free]))
    return choose(cache, rule)


def intended_spread(structure: Structure) -> dict[int, int]:
    """Slot -> factor of every spatial loop as the builder spreads it (over the cores, the
    PE array, the lanes), within what each slot may take. Least DRAM traffic and fewest
    steps do not depend on the spread, so a fit under those rules that left it free could
    end on one core and one PE at no cost to its metric (and 100x the latency)."""
    space = Space(structure)
    state = keep_spatial(space, np.full(space.size, UNDECIDED, dtype=np.int64),
                         structure.default_factors)
    return {int(i): int(state[i]) for i in np.flatnonzero(space.spatial_limit)
            if state[i] != UNDECIDED}


def _any_valid(space: Space, rule: str, budget_evals: int, seed: int) -> bool:
    """Whether the restricted space has a valid point among its warm starts (the builder's
    factors within it, the smallest tiles) or a short search."""
    try:
        rows = [space.smallest_completion(space.root_state()),
                keep(space, space.root_state(), space.structure.default_factors,
                     range(space.size))]
    except (ValueError, IndexError):  # the fixed spread leaves no completion
        return False
    rows = [r for r in rows if (r != UNDECIDED).all() and space.covers(r)]
    cache = PointCache(space, "latency", Limits())
    if rows and cache.evaluate(np.vstack(rows)).valid.any():
        return True
    found = search(space, "mcts", objective="latency", budget_evals=max(budget_evals // 10, 16),
                   seed=seed, batch=16)
    return any(ok for _, ok, _ in found.rows.values())


def _fit_in(space: Space, rule: str, budget_evals: int, seed: int) -> np.ndarray:
    """`fit_structure` within one space (the whole one, or the intended spread's)."""
    structure = space.structure
    rng = np.random.default_rng(seed)
    default = structure.default_factors
    warm = [default, space.smallest_completion(space.root_state())]
    tiles = closed_form_tiles(structure.workload, structure.arch)
    if tiles:
        warm += warm_rows(space, tiles, rng)
    warm = [row for row in warm if within(space, row)]
    # a small space is evaluated whole, in one batch: a search step costs far more per
    # point than a batch does (a few hundred points a second against thousands)
    every = small_space(space, 4 * budget_evals)
    if every is not None:
        cache = PointCache(space, "latency", Limits())
        cache.evaluate(np.vstack([every, *[row for row in warm if space.covers(row)]]))
        return choose(cache, rule)
    if rule != "dram":
        objective = {"steps": "steps-then-latency"}.get(rule, rule)
        cache = search(space, "mcts", objective=objective, budget_evals=budget_evals,
                       seed=seed, warm=warm, batch=32)
        return choose(cache, rule)
    first = search(space, "mcts", objective="dram-then-latency",
                   budget_evals=budget_evals // 5, seed=seed, warm=warm, batch=32)
    if not any(ok for _, ok, _ in first.rows.values()):  # nothing fits yet: keep looking
        _merge(first, search(space, "mcts", objective="dram-then-latency",
                             budget_evals=budget_evals - first.evaluations, seed=seed + 2,
                             warm=warm, batch=32))
    valid = [(m["dram_words"], m["cycles"], k) for k, (_, ok, m) in first.rows.items() if ok]
    if not valid:
        return choose(first, rule)
    least = min(v[0] for v in valid)
    ties = sorted(v for v in valid if v[0] <= least * (1 + 1e-9))
    rows = [np.frombuffer(k, dtype=np.int64) for _, _, k in ties[:8]]
    warm = rows + [r for row in rows[:4] for r in respread(space, row, default, rng)
                   if within(space, r)]
    second = search(space, "mcts", objective="latency",
                    limits=Limits(dram_words=least * (1 + 1e-9)),
                    budget_evals=max(budget_evals - first.evaluations, budget_evals // 5),
                    seed=seed + 1, warm=warm, batch=32)
    _merge(first, second)
    return choose(first, rule)


def within(space: Space, row: np.ndarray) -> bool:
    """Whether a row keeps the factors the space holds fixed."""
    return all(int(row[i]) == v for i, v in space.fixed.items())


def small_space(space: Space, limit: int) -> np.ndarray | None:
    """Every divisor assignment of a space that has at most `limit` of them, else None (a
    large space is the search's, as usual)."""
    return enumerate_divisors(space) if divisor_count_within(space, limit) else None


def _merge(cache: PointCache, other: PointCache) -> None:
    """Points of another search of the same space into `cache` (its own entries kept: under
    a DRAM limit, a point over it is invalid in `other` but not in `cache`)."""
    for key, entry in other.rows.items():
        cache.rows.setdefault(key, entry)
    cache.evaluations += other.evaluations


def fit_baseline(name: str, workload: Workload, arch: Architecture,
                 budget_evals: int = 300, seed: int = 0) -> Dataflow:
    """A named baseline with its factors fitted under its own rule (see the module doc)."""
    built = build(name, workload, arch)
    if rule_of(name) == "dram":  # the least traffic: also with the reused data held on chip
        shapes = [built, held_at_middle(built, arch, workload.intermediates)]
        fitted = [_fit_shape(name, flow, workload, arch, budget_evals, seed)
                  for flow in shapes if flow is not None]
        return min(fitted, key=lambda f: _traffic_rank(evaluate(workload, arch, f)))
    return _fit_shape(name, built, workload, arch, budget_evals, seed)


def _traffic_rank(result) -> tuple:
    """Valid first, then the least DRAM traffic, then the lowest latency."""
    return (not result.valid, result.dram_words, result.cycles)


def _fit_shape(name: str, built: Dataflow, workload: Workload, arch: Architecture,
               budget_evals: int, seed: int) -> Dataflow:
    """One tree shape of a baseline with its factors fitted under the baseline's rule."""
    flow = with_forced_bypass(built, workload, arch)
    structure = structure_of(workload, arch, flow)
    if not structure.slots:
        return flow
    rule = rule_of(name)
    if rule == "steps" and Space(structure).covers(structure.default_factors):
        from tileflow.explore.factors.space import evaluate_rows

        if evaluate_rows(Space(structure), structure.default_factors, "latency",
                         Limits()).valid[0]:
            return flow  # the builder's own choice: the largest tiles that fit
    fitted = structure.dataflow(fit_structure(structure, rule, budget_evals, seed))
    result = evaluate(workload, arch, fitted)
    extra = set() if result.valid else overflow_bypass(workload, arch, result)
    if extra:  # a register its tree cannot fit a block of: those tensors pass it by
        again = structure_of(workload, arch, with_bypass(flow, workload, arch, extra))
        refit = again.dataflow(fit_structure(again, rule, budget_evals, seed))
        if evaluate(workload, arch, refit).valid:
            return refit
    return fitted
