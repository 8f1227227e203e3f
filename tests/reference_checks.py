"""The violations of a dataflow by the oracle's own reading of docs/concepts.md,
docs/footprints.md and the README's list of kinds, independent of the analytic model
(nothing of `tileflow.analysis` or `tileflow.cost` is imported).

* capacity: a level's footprint (the oracle's, per instance) above its capacity;
* fanout: the spatial factors of a run of consecutive tiles at one level X above the
  product of the fan-outs down to the level of the next tile on the path; in an operator's
  innermost run, above (fan-out down to its unit's level) x the unit's parallelism (one
  MAC per PE where the matrix array is fed from a level of rows x cols instances per
  parent, rows x cols otherwise; lanes for a vector unit);
* coverage: an operator's factors of a dimension multiply to less than its size (named
  by the operator's innermost tile);
* dependency: a loop (of more than one iteration) over a reduction dimension of an
  intermediate's producer at or above the common ancestor of producer and consumers; a
  `Para` tile one of whose children uses what another produces;
* window: along an axis a consumer reads through a window, the producer's rows below the
  common ancestor (when the ancestor steps that dimension) short of the rows the consumer
  reads there (its extents, clipped to the sizes, through the window).

Each violation is a tuple (kind, node path or None, level or None, needed, available).
"""

from __future__ import annotations

import math

from reference_sim import Oracle

from tileflow.specs.arch import Architecture


def violations(oracle: Oracle, arch: Architecture) -> set[tuple]:
    """Every violation (the oracle's footprints count each buffer's depth)."""
    return (_capacity(oracle, arch) | _fanout(oracle, arch)
            | _coverage(oracle) | _dependency(oracle) | _window(oracle))


def _capacity(o: Oracle, arch: Architecture) -> set[tuple]:
    out = set()
    for name, words in o.footprints.items():
        level = arch.level(name)
        if words > level.capacity_words:
            out.add(("capacity", None, name, words, level.capacity_words))
    return out


def _runs(o: Oracle, op: str) -> list[tuple[int, int, int]]:
    """(first path position, last path position, level index) of each run of consecutive
    tiles at one level on the operator's path."""
    chain = o.paths[op]
    runs: list[tuple[int, int, int]] = []
    for k, (_, t) in enumerate(chain):
        lv = o.index[t.level]
        if runs and runs[-1][2] == lv:
            runs[-1] = (runs[-1][0], k, lv)
        else:
            runs.append((k, k, lv))
    return runs


def _unit_limit(arch: Architecture, kind: str, level: int) -> int | None:
    """Compute units an innermost run at `level` spreads over (None below the unit)."""
    unit = arch.unit(kind)
    home = arch.level_index[unit.level]
    if level > home:
        return None
    between = math.prod(lv.fanout for lv in arch.levels[level + 1:home + 1])
    fed = arch.levels[home]
    one_per_pe = unit.kind == "matrix" and fed.fanout == unit.rows * unit.cols
    return between * (1 if one_per_pe else unit.parallelism)


def _fanout(o: Oracle, arch: Architecture) -> set[tuple]:
    out = set()
    for op in o.paths:
        chain = o.paths[op]
        runs = _runs(o, op)
        for n, (first, last, lv) in enumerate(runs):
            needed = math.prod(lp.factor for _, t in chain[first:last + 1]
                               for lp in t.loops if lp.spatial)
            if n + 1 < len(runs):
                below = runs[n + 1][2]
                available = math.prod(x.fanout for x in arch.levels[lv + 1:below + 1])
            else:
                unit = arch.unit(o.w.op_by_name[op].unit)
                below = arch.level_index[unit.level]
                available = _unit_limit(arch, unit.kind, lv)
                if available is None:  # no unit below the level
                    out.add(("fanout", chain[last][0], unit.level, needed, 0))
                    continue
            if needed > available:
                out.add(("fanout", chain[last][0], arch.levels[below].name, needed, available))
            out |= _array(o, arch, op, chain[first:last + 1], lv, below)
    out |= _together(o, arch)
    return out


def _array(o: Oracle, arch: Architecture, op: str, run, lv: int, below: int) -> set[tuple]:
    """A run directly above the matrix array's level of one register per PE (whatever the
    operator's unit) maps its spatial loops (more than one iteration) in order: the first
    to the rows, the others to the columns."""
    unit = arch.matrix
    fed = arch.level_index[unit.level]
    if below != fed or lv + 1 != fed or arch.levels[fed].fanout != unit.rows * unit.cols:
        return set()
    factors = [lp.factor for _, t in run for lp in t.loops if lp.spatial and lp.factor > 1]
    if not factors:
        return set()
    x, y = factors[0], math.prod(factors[1:])
    out = set()
    if x > unit.rows:
        out.add(("array", run[-1][0], unit.level, x, unit.rows))
    if y > unit.cols:
        out.add(("array", run[-1][0], unit.level, y, unit.cols))
    return out


def _together(o: Oracle, arch: Architecture) -> set[tuple]:
    """The children of a `Para` or `Pipe` tile run at once on disjoint units: per kind of
    unit, the units each child spreads over (per operator, the spatial factors from the tile
    down, the tile's own and those of the tiles above it at its level included, which share
    its level's instance; operators one after another in a child take the largest, those
    under a `Para` or `Pipe` inside it the sum) add up to at most the units below one
    instance of the tile's level."""
    out = set()
    for path, node in o.tiles.items():
        if node.primitive not in ("Para", "Pipe") or len(node.children) < 2:
            continue
        depth = path.count(".")
        lv = o.index[node.level]
        for kind in ("matrix", "vector"):
            used = any(arch.unit(o.w.op_by_name[op].unit).kind == kind
                       for op in o._ops_below(node))
            total = _at_once(node, lambda op, k=kind, d=depth, n=node:
                             _op_units(o, arch, op, k, d, n.level))
            available = _unit_limit(arch, kind, lv)
            if used and available is not None and total > available:
                out.add(("fanout", path, arch.unit(kind).level, total, available))
    return out


def _op_units(o: Oracle, arch: Architecture, op: str, kind: str, depth: int,
              level: str) -> int:
    """Units of `kind` an operator spreads over below the tile at `depth` (0 for another
    kind): its spatial factors from the tile down, those of the tiles above it at the tile's
    level (which share its instance) included."""
    if arch.unit(o.w.op_by_name[op].unit).kind != kind:
        return 0
    top = depth
    while top > 0 and o.paths[op][top - 1][1].level == level:
        top -= 1
    return math.prod(lp.factor for k, _, _, lp in o.loops(op) if k >= top and lp.spatial)


def _at_once(node, units) -> int:
    """Units a subtree uses at once: an operator's own; the sum over `Para`/`Pipe` children
    (they run together); the largest over children run one after another."""
    if not hasattr(node, "children"):  # an operator's leaf
        return units(node.op)
    parts = [_at_once(c, units) for c in node.children]
    return sum(parts) if node.primitive in ("Para", "Pipe") else max(parts)


def _coverage(o: Oracle) -> set[tuple]:
    """docs/concepts.md: an operator's loops of a dimension, each stepping by the extent the
    loops inside it cover (a loop shared by children stepping by the smallest), cover
    1 + sum((factor - 1) x step) of it; that must reach the size (a producer grown by a
    window's halo: the size from the window's offset on, halo rows included)."""
    out = set()
    for op in o.paths:
        for d in o.w.op_by_name[op].dims:
            loops = [(p, i, lp) for _, p, i, lp in o.loops(op) if lp.dim == d]
            covered = 1 + sum((lp.factor - 1) * o.stride[(p, i)] for p, i, lp in loops)
            needed = o.w.sizes[d] - o.shift.get(op, {}).get(d, 0)  # from the offset on
            if covered < needed:
                path, tile = o.paths[op][-1]
                out.add(("coverage", path, tile.level, needed, covered))
    return out


def _dependency(o: Oracle) -> set[tuple]:
    out = set()
    for t, depth in o.lca.items():
        producer = o.w.op_by_name[o.w.producer[t]]
        for k, path, _, lp in o.loops(producer.name):
            if k <= depth and lp.factor > 1 and lp.dim in producer.reduction_dims:
                out.add(("dependency", path, o.tiles[path].level, None, None))
    for path, node in o.tiles.items():  # Para children run at once: none feeds another
        if node.primitive != "Para":
            continue
        ops = [[o.w.op_by_name[x] for x in o._ops_below(c)] for c in node.children]
        made = [{x.output.tensor for x in group} for group in ops]
        read = [{t for x in group for t in x.tensors} for group in ops]
        if any(made[i] & read[j] for i in range(len(made)) for j in range(len(read)) if i != j):
            out.add(("dependency", path, node.level, None, None))
    return out


def _window(o: Oracle) -> set[tuple]:
    """The producer's extent of a dimension below the common ancestor against the rows the
    consumer reads there (its extent plus the window's other terms)."""
    out = set()
    w = o.w
    for t, depth in o.lca.items():
        producer = w.producer[t]
        for consumer in w.consumers[t]:
            axes = w.op_by_name[consumer].access(t).axes
            for mine, theirs in zip(w.op_by_name[producer].output.axes, axes, strict=True):
                d = mine.terms[0][0]
                if len(theirs.terms) < 2:
                    continue
                need = 1 + sum(c * (min(_extent(o, consumer, x, depth), w.sizes[x]) - 1)
                               for x, c in theirs.terms)
                have = _extent(o, producer, d, depth)
                # only when the common ancestor steps the dimension (else all is computed)
                stepped = any(lp.dim == d and lp.factor > 1 and k <= depth
                              for k, _, _, lp in o.loops(producer))
                if stepped and have < need:
                    path, tile = o.paths[producer][-1]
                    out.add(("window", path, tile.level, need, have))
    return out


def _extent(o: Oracle, op: str, d: str, depth: int) -> int:
    return 1 + sum((lp.factor - 1) * o.stride[(p, i)] for k, p, i, lp in o.loops(op)
                   if lp.dim == d and k > depth)
