"""Which sweep points have more resources than which: the order a sweep runs its points in
(fewer resources first, so a point's warm starts exist), each point's neighbours (the points
one step away in one parameter, or the next in a zip sweep), and the points whose objective
is worse than a neighbour's with fewer resources (flagged in the summary).

A larger capacity or bandwidth can always run the smaller point's dataflow: its cycles and
DRAM words stay the same or fall. Energy may rise with capacity (an access to a larger SRAM
costs more), so energy and the energy-delay product are compared only across bandwidths.
Other parameters (fan-out, the array's size, vector lanes) change what a dataflow's spatial
factors mean: points that differ in them are neighbours for warm starts, never compared."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tileflow.explore.sweeps.sweep_config import (
    CAPACITY_PARAMETERS,
    Parameter,
    SweepConfig,
    point_label,
)

BANDWIDTH_PARAMETERS = ("bandwidth_gbps", "read_bandwidth_gbps", "write_bandwidth_gbps")
RELATIVE_SLACK = 1e-9  # rounding in the model's sums: worse means worse by more than this

# objective -> (row column, the resource kinds over which more can only help it)
COMPARED: dict[str, tuple[str, tuple[str, ...]]] = {
    "latency": ("cycles", ("capacity", "bandwidth")),
    "dram": ("dram_words", ("capacity", "bandwidth")),
    "energy": ("energy_pj", ("bandwidth",)),
    "edp": ("edp", ("bandwidth",)),
}
ENERGY_NOTE = ("energy is not compared across capacities: an access to a larger memory costs "
               "more, so a point with more capacity may rightly use more energy")


def resource_kind(p: Parameter) -> str | None:
    """'capacity' or 'bandwidth' for a parameter more of which can only help; else None."""
    if p.target in ("matrix", "vector"):
        return None
    if p.attribute in CAPACITY_PARAMETERS:
        return "capacity"
    if p.attribute in BANDWIDTH_PARAMETERS:
        return "bandwidth"
    return None


def sweep_order(config: SweepConfig) -> list[int]:
    """The points' indices, fewer resources first: ascending in every parameter (a point is
    run after every point with fewer resources)."""
    points = config.points()
    names = [p.name for p in config.parameters]
    return sorted(range(len(points)), key=lambda i: tuple(points[i][n] for n in names))


def neighbours(config: SweepConfig) -> dict[int, tuple[int, ...]]:
    """Each point's neighbours: in a grid, the points one value up or down in one parameter
    (values in ascending order); in a zip sweep, the points before and after it in
    `sweep_order`."""
    count = len(config.points())
    if config.mode == "zip":
        order = sweep_order(config)
        out: dict[int, list[int]] = {i: [] for i in range(count)}
        for a, b in itertools.pairwise(order):
            out[a].append(b)
            out[b].append(a)
        return {i: tuple(v) for i, v in out.items()}
    sizes = [len(p.values) for p in config.parameters]
    ranks = [sorted(range(len(p.values)), key=lambda k, p=p: p.values[k])
             for p in config.parameters]
    position = [{k: r for r, k in enumerate(rank)} for rank in ranks]
    strides = [1] * len(sizes)  # itertools.product: the last parameter varies fastest
    for j in range(len(sizes) - 2, -1, -1):
        strides[j] = strides[j + 1] * sizes[j + 1]
    result = {}
    for i in range(count):
        found = []
        for j, size in enumerate(sizes):
            k = (i // strides[j]) % size
            r = position[j][k]
            for step in (-1, 1):
                if 0 <= r + step < size:
                    found.append(i + (ranks[j][r + step] - k) * strides[j])
        result[i] = tuple(found)
    return result


@dataclass(frozen=True)
class Comparison:
    """How point `more` has more resources than point `fewer`: the kinds that differ."""

    fewer: int
    more: int
    kinds: frozenset[str]


def compare(config: SweepConfig, a: dict[str, float], b: dict[str, float]
            ) -> frozenset[str] | None:
    """The resource kinds in which `b` has strictly more than `a`, where `b` has at least as
    much of every resource and the same of every other parameter; else None."""
    kinds = set()
    for p in config.parameters:
        x, y = a[p.name], b[p.name]
        if x == y:
            continue
        kind = resource_kind(p)
        if kind is None or y < x:
            return None
        kinds.add(kind)
    return frozenset(kinds) if kinds else None


def comparisons(config: SweepConfig) -> list[Comparison]:
    """Every pair of neighbours of which one has strictly more resources."""
    points = config.points()
    out = []
    for i, near in neighbours(config).items():
        for j in near:
            kinds = compare(config, points[i], points[j])
            if kinds is not None:
                out.append(Comparison(i, j, kinds))
    return out


def _value(row: dict, column: str) -> float | None:
    if not row.get("valid"):
        return None
    if column == "edp":
        c, e = row.get("cycles"), row.get("energy_pj")
        return None if c is None or e is None else c * e
    return row.get(column)


def ceiling(config: SweepConfig, index: int, rows: dict[str, dict],
            near: dict[int, tuple[int, ...]] | None = None) -> float | None:
    """The objective value point `index` must not exceed: the least of its finished
    neighbours' with fewer resources (where more of them can only help the objective; `rows`
    by label; `near`: `neighbours(config)` if known). Its warm starts reach it, so its
    tie-break is held to it."""
    objective = config.explore.objective
    if objective not in COMPARED or len(config.explore.objectives) != 1:
        return None
    column, helped_by = COMPARED[objective]
    points = config.points()
    values = []
    for j in (near if near is not None else neighbours(config))[index]:
        row = rows.get(point_label(j))
        kinds = compare(config, points[j], points[index])
        if row is None or row.get("status") != "done" or kinds is None \
                or not kinds <= set(helped_by):
            continue
        value = _value(row, column)
        if value is not None:
            values.append(value)
    return min(values, default=None)


def flags(config: SweepConfig, rows: list[dict], tolerance: float = 0.0) -> list[dict]:
    """The points whose objective is worse than a neighbour's with fewer resources (where
    more of those resources can only help the objective): one entry per such pair, with the
    excess as a fraction. `tolerance`: the tie-break's (a best point may be up to that much
    worse than the least, to save on the tie-break objective); an excess within it is marked
    `within_tie_break`, still flagged."""
    objective = config.explore.objective
    if objective not in COMPARED:
        return []
    column, helped_by = COMPARED[objective]
    by_index = {int(r["label"][1:]): r for r in rows if r.get("status") == "done"}
    out = []
    for c in comparisons(config):
        if not c.kinds <= set(helped_by) or c.fewer not in by_index or c.more not in by_index:
            continue
        small, large = by_index[c.fewer], by_index[c.more]
        x, y = _value(small, column), _value(large, column)
        if x is None or y is None or y <= x * (1 + RELATIVE_SLACK):
            continue
        excess = y / x - 1 if x else float("inf")
        out.append({"point": large["label"], "neighbour": small["label"],
                    "objective": objective, "value": y, "neighbour_value": x,
                    "excess": excess, "resources": sorted(c.kinds),
                    "within_tie_break": bool(excess <= tolerance)})
    return sorted(out, key=lambda f: (f["point"], f["neighbour"]))


def not_compared_note(config: SweepConfig) -> str | None:
    """Why some neighbours with more resources are not compared (energy across capacity, an
    objective more resources need not help), or None when every such pair is compared."""
    objective = config.explore.objective
    if objective not in COMPARED:
        return f"objective {objective}: points are not compared"
    helped_by = COMPARED[objective][1]
    if any(not c.kinds <= set(helped_by) for c in comparisons(config)):
        return ENERGY_NOTE
    return None
