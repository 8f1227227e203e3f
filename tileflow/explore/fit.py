"""Baselines with fitted factors, and warm starts for the search.

Each named baseline keeps its tree shape and has its factors chosen under its own rule:
Chimera takes the least DRAM traffic among the factors that fit, TileFlow-Pipe the lowest
latency (the rule its shape was published with), and so do Flash and Flash-Pipe (the online
softmax's sweep); the others the largest tiles that fit.
Their builders already pick the largest tiles that fit along the dims they tile; where that
does not fit, the tile search looks for the largest tiles that do (the fewest steps at the
outermost level). Ties go to the lower latency. Where nothing fits, the dataflow with the
smallest overrun comes back, and its evaluation names the tensor, the level and the
amounts."""

from __future__ import annotations

import math

import numpy as np

from tileflow.dataflows import build
from tileflow.dataflows.chain import Roles
from tileflow.dataflows.common import Hardware
from tileflow.errors import InputError
from tileflow.explore.search import PointCache, search
from tileflow.explore.space import UNDECIDED, Space, divisors
from tileflow.explore.structure import Structure, structure_of
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
    traffic (DESIGN 2.5: (MK + MN) L/T_L + (KL + NL) M/T_M) with both GEMMs' tiles in one
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
    each dim in `tiles` that tile size per step (its spatial loops keep their defaults)."""
    s = space.structure
    outer = s.arch.levels[0].name
    tiles_of = {p: n for p, n in _tiles(s.template)}
    default = s.default_factors
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
    return [space.random_completion(state, rng) for _ in range(count)]


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
        key = min(keys, key=lambda k: sum(v for m, v in cache.rows[k][2].items()
                                          if m.startswith("violation_")))
    return np.frombuffer(key, dtype=np.int64).copy()


def fit_structure(structure: Structure, rule: str, budget_evals: int = 300,
                  seed: int = 0) -> np.ndarray:
    """Factors of a structure under a rule, searched from its defaults (and, for chains,
    the closed-form tiles)."""
    space = Space(structure)
    rng = np.random.default_rng(seed)
    warm = [structure.default_factors]
    tiles = closed_form_tiles(structure.workload, structure.arch)
    if tiles:
        warm += warm_rows(space, tiles, rng)
    objective = {"dram": "dram-then-latency", "steps": "steps-then-latency"}.get(rule, rule)
    cache = search(space, "mcts", objective=objective, budget_evals=budget_evals, seed=seed,
                   warm=warm, batch=32)
    return choose(cache, rule)


def fit_baseline(name: str, workload: Workload, arch: Architecture,
                 budget_evals: int = 300, seed: int = 0) -> Dataflow:
    """A named baseline with its factors fitted under its own rule (see the module doc)."""
    flow = build(name, workload, arch)
    structure = structure_of(workload, arch, flow)
    if not structure.slots:
        return flow
    rule = rule_of(name)
    if rule == "steps" and Space(structure).covers(structure.default_factors):
        from tileflow.explore.space import Limits, evaluate_rows

        if evaluate_rows(Space(structure), structure.default_factors, "latency",
                         Limits()).valid[0]:
            return flow  # the builder's own choice: the largest tiles that fit
    return structure.dataflow(fit_structure(structure, rule, budget_evals, seed))
