"""How many evaluations per second the model sustains, single process: one dataflow at a
time (`evaluate`, the evaluator at one row with its records, the structure cached;
`scalar_evals_per_s`), the batched evaluator
(`evaluate_batch`, many factor assignments of one structure per call) and a real search
(the tile-factor phase of a one-worker study: sampler, evaluator and storage together)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import numpy as np

from tileflow.cost import evaluate
from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.structure import Structure, structure_of
from tileflow.provenance import MODEL_VERSION
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow


def exact_assignments(structure: Structure, count: int, rng: np.random.Generator) -> np.ndarray:
    """Factor rows that tile every dimension exactly, as the template does: each row moves
    prime factors between loops over the same dim that tile the same operators (which keeps
    every operator's product of factors), spatial and temporal alike."""
    c = structure.compiled
    base = structure.all_loop_factors(structure.default_factors[None, :])[0]
    groups: dict[tuple, list[int]] = {}
    for (path, i), slot in c.slot_of.items():
        key = (c.tiles[path].loops[i].dim, c.ops_below[path])
        groups.setdefault(key, []).append(slot)
    movable = [g for g in groups.values() if len(g) > 1]
    rows = np.repeat(base[None, :], count, axis=0)
    for r in range(1, count):
        for _ in range(int(rng.integers(1, 6))):
            if not movable:
                break
            group = movable[int(rng.integers(len(movable)))]
            src, dst = rng.choice(group, size=2, replace=False)
            f = int(rows[r, src])
            primes = [p for p in (2, 3, 5, 7) if f % p == 0]
            if primes:
                p = primes[int(rng.integers(len(primes)))]
                rows[r, src] //= p
                rows[r, dst] *= p
    columns = [c.slot_of[(s.path, s.index)] for s in structure.slots]
    return rows[:, columns]


def clipped_assignments(structure: Structure, count: int,
                        rng: np.random.Generator) -> np.ndarray:
    """Factor rows around the template with a few factors changed to any value up to twice
    theirs: non-dividing factors, clipped tiles, uncovered dimensions."""
    base = structure.default_factors
    rows = np.repeat(base[None, :], count, axis=0)
    for r in range(count):
        for s in rng.choice(len(base), size=min(len(base), 2), replace=False):
            rows[r, s] = int(rng.integers(1, 2 * base[s] + 2))
    return rows


def _rate(fn, seconds: float, per_call: int) -> tuple[float, int, float]:
    """Calls per second of `fn` x `per_call`, by the median CPU time of this process per
    call (on a shared machine, wall time would count other processes' turns)."""
    times = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 3:
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    median = statistics.median(times)
    return per_call / median, len(times), median


def search_rate(workload: Workload, arch: Architecture, flow: Dataflow, evaluations: int,
                seed: int = 0) -> tuple[float, int, float, float]:
    """Wall-clock points per second of the tile-factor phase of a one-worker study on the
    dataflow's structure alone: MCTS with the explore command's default batch, non-divisor
    factors allowed, in-memory storage, warm-started (and seeded) with the dataflow's own
    factors; `evaluations` new points after that seed. Returns (points/s, points, wall
    seconds, CPU seconds of this process). The rate is by wall time: the storage and the
    sampler count as much as the evaluator (the CPU time tells a loaded machine apart)."""
    from tileflow.explore.factors.space import Limits
    from tileflow.explore.studies import study as studies
    from tileflow.explore.studies.config import ExploreConfig

    structure = structure_of(workload, arch, flow)
    own = structure.default_factors
    name = flow.name or "dataflow"
    candidates = [studies.Candidate(name, structure, (own,))]
    limits, objective = Limits(), "latency"
    storage = studies.open_storage(None)
    study = studies.create_or_load(storage, candidates, objective, limits, resume=False,
                                   extra="mcts")
    seeded = studies.seed_points(study, candidates, objective, limits, {name: [own]})
    start, cpu = time.perf_counter(), time.process_time()
    worker = studies.run(study, candidates, objective, limits, method="mcts", seed=seed,
                         batch=ExploreConfig.batch, budget_evals=seeded + evaluations)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    points = worker.completed_rows - seeded
    return points / max(elapsed, 1e-9), points, elapsed, cpu


def run_bench(workload: Workload, arch: Architecture,
              dataflows: Sequence[tuple[str, Dataflow]], seconds: float = 3.0,
              batch_rows: int = 8192, seed: int = 0,
              search_evaluations: int = 2000) -> list[dict]:
    """Time each (name, dataflow): `evaluate()` of the dataflow (structure cache warm),
    batches of exactly tiled factor assignments, batches with clipped tiles, and
    (`search_evaluations` > 0) the points per second of a real search on its structure."""
    rng = np.random.default_rng(seed)
    rows = []
    for name, flow in dataflows:
        evaluate(workload, arch, flow)  # warm the structure cache
        scalar, runs, median = _rate(lambda f=flow: evaluate(workload, arch, f), seconds, 1)
        structure = structure_of(workload, arch, flow)
        exact = exact_assignments(structure, batch_rows, rng)
        clipped = clipped_assignments(structure, batch_rows, rng)
        evaluate_batch(structure, exact[:2])  # analyse the structure once
        batched, _, _ = _rate(lambda s=structure, f=exact: evaluate_batch(s, f), seconds,
                              batch_rows)
        with_clipping, _, _ = _rate(lambda s=structure, f=clipped: evaluate_batch(s, f),
                                    seconds, batch_rows)
        row = {"dataflow": name, "runs": runs, "median_us": median * 1e6,
               "evals_per_second": scalar, "scalar_evals_per_s": scalar,
               "batched_evals_per_s": batched, "batched_clipped_evals_per_s": with_clipping,
               "batch_rows": batch_rows, "model_version": MODEL_VERSION}
        if search_evaluations > 0:
            rate, points, elapsed, cpu = search_rate(workload, arch, flow, search_evaluations,
                                                     seed)
            row.update(search_points_per_s=rate, search_points=points,
                       search_seconds=elapsed, search_cpu_seconds=cpu)
        rows.append(row)
    return rows
