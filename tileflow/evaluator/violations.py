"""The violation records of one factor row, from the engine's own checks.

`limits.check` reports every constraint with its site to a recorder; at one row, `Records`
turns each site that the row breaks into the `Violation` the scalar model
(`tests/scalar_model.evaluate_plan`) returns for it: the same node path, level, tensor, amounts,
unit and message, in the model's order (the tree's structural violations, the dependences per
intermediate with their windows, the carried-state rules, coverage, capacity per level, then
fan-out and arrays per operator and the Para/Pipe splits). The amounts are the engine's
arrays at that row; only the words around them are built here.

One difference is kept on purpose: the engine's 'enumeration' amount (a tree whose counts
would enumerate too many steps) is not a record: the command line refuses such a tree
before evaluating (`workbound.check_enumeration`)."""

from __future__ import annotations

import numpy as np

from tileflow.analysis.records import Violation
from tileflow.analysis.resources import AXIS_NAMES
from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.evaluator.engine import Rows
from tileflow.evaluator.lattice import GridTooLarge, one_row_grids
from tileflow.evaluator.limits import Site, Violations, check, footprints, words_by_tensor
from tileflow.evaluator.structure import Structure, structure_of
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import ROOT, Dataflow, label, node_depth


def check_tree(workload: Workload, arch: Architecture, flow: Dataflow) -> None:
    """Raise InvalidDataflow where the model refuses a tree at its own factors (malformed:
    unknown operators, levels or tensors; an output indexed through a sum split over
    instances; sums that enumerate more than the model takes at once). Its violations
    (capacity, coverage, ...) are properties of the dataflow, reported by `evaluate()`, not
    raised."""
    structure = structure_of(workload, arch, flow)
    try:
        with one_row_grids():
            violation_records(structure, structure.default_factors)
    except GridTooLarge as exc:
        raise grid_refusal(flow.name, exc) from None


def grid_refusal(name: str, exc: GridTooLarge) -> InvalidDataflow:
    """The error of a dataflow whose sums enumerate more grid cells than one evaluation
    takes."""
    return InvalidDataflow(f"{name}: its sums over clipped or windowed tiles enumerate {exc}, "
                           "more than the model takes at once (split the loops that clip "
                           "into tiles that divide their dimension)")


def violation_records(structure: Structure, factors) -> tuple[Violation, ...]:
    """The `Violation` records of one factor assignment (a vector of len(structure.slots)
    factors >= 1), equal to `evaluate(...).violations` of `structure.dataflow(factors)`.
    Raises `InvalidDataflow` where the model does (a spatial split of an output indexed
    through a sum)."""
    row = np.asarray(factors, dtype=np.int64).reshape(1, -1)
    if row.shape[1] != len(structure.slots):
        raise ValueError(f"expected {len(structure.slots)} factors, got {row.shape[1]}")
    if row.min(initial=1) < 1:
        raise ValueError("every factor must be at least 1")
    r = Rows(structure.compiled, structure.all_loop_factors(row))
    return checked(r, footprints(r))[1]


def breaks_nothing(structure: Structure, factors) -> bool:
    """Whether one factor row breaks no constraint (`violation_records` would be empty),
    without building the records: what a builder asks of each candidate tile. Raises
    GridTooLarge for a row whose sums enumerate more than one evaluation takes."""
    with one_row_grids():
        r = Rows(structure.compiled, structure.all_loop_factors(
            np.asarray(factors, dtype=np.int64).reshape(1, -1)))
        out = Violations(1)
        check(r, footprints(r), out)
    return bool(out.valid[0])


def checked(r: Rows, fps: dict[str, np.ndarray]) -> tuple[Violations, tuple[Violation, ...]]:
    """`limits.check` on one row's `Rows` and footprints (`limits.footprints`), with its
    records: the amounts the batch reports and the model's records from one pass (an
    evaluation at one row that has built `r` and `fps` pays for nothing twice)."""
    records = Records(r)
    out = Violations(1, records)
    check(r, fps, out)
    return out, records.records()


def _at_row(x) -> int | float:
    """The value at the one row (an integer where it is whole, as the model counts it)."""
    v = float(np.asarray(x, dtype=float).reshape(-1)[0])
    return int(v) if v.is_integer() else v


def _flagged(where) -> bool:
    """Whether a check's flag holds at the one row."""
    return bool(np.asarray(where).reshape(-1)[0])


class Records:
    """A `limits.Recorder` for one row: the sites the row breaks, as records with the key
    that puts them in the scalar model's order."""

    def __init__(self, r: Rows):
        if r.count != 1:
            raise ValueError(f"records are built for one row, not {r.count}")
        self.r = r
        c = r.c
        self.c = c
        self.op_index = {o: k for k, o in enumerate(c.paths)}
        self.tensor_index = {t: k for k, t in enumerate(c.lca)}
        self.splits = [p for p, n in c.tiles.items()
                       if n.semantics.at_once and len(n.children) >= 2]
        self.found: list[tuple[tuple, Violation]] = []

    def __call__(self, kind: str, site: Site, needed, available) -> None:
        getattr(self, "_" + site[0].replace("-", "_"))(site, needed, available)

    def records(self) -> tuple[Violation, ...]:
        """The records in the model's order; fan-out, array and split records once each
        (the model drops repeats of those)."""
        ordered = sorted(self.found, key=lambda kv: kv[0])
        head = [v for key, v in ordered if key[0] < 5]
        spatial = [v for key, v in ordered if key[0] >= 5]
        return (*head, *dict.fromkeys(spatial))

    # -- helpers ------------------------------------------------------------------------
    def _n(self, slot: int) -> int:
        return int(self.r.n[slot][0])

    def _where(self, node_path: str) -> tuple[str, str]:
        tile = self.c.tiles[node_path]
        return label(node_path, tile), tile.level

    def _add(self, key: tuple, violation: Violation) -> None:
        self.found.append((key, violation))

    # -- the sites of `limits.check` ----------------------------------------------------
    def _structure(self, site: Site, where, amount) -> None:
        for k, v in enumerate(self.c.shape.violations):
            self._add((0, k), v)

    def _reduction(self, site: Site, where, amount) -> None:
        _, t, i = site
        if not _flagged(where):
            return
        w = self.c.workload
        producer = w.op_by_name[w.producer[t]]
        lp = self.c.paths[producer.name].loops[i]
        node_path = self.c.paths[producer.name].chain[lp.node]
        where_label, level = self._where(node_path)
        self._add((1, self.tensor_index[t], 0, i), Violation(
            "dependency", node_path, level, t, None, None, None,
            f"{where_label}: loop '{lp.dim}:{self._n(lp.slot)}' is a reduction of "
            f"'{producer.name}' but sits in a common ancestor of '{producer.name}' and "
            f"its consumers {', '.join(w.consumers[t])}: they would read partial values "
            f"of '{t}'"))

    def _window(self, site: Site, where, amount) -> None:
        _, t, consumer, d, need, has = site
        if not _flagged(where):
            return
        w = self.c.workload
        producer = w.op_by_name[w.producer[t]]
        axis = next(k for k, a in enumerate(producer.output.axes) if a.terms[0][0] == d)
        node_path = self.c.paths[producer.name].chain[-1]
        where_label, level = self._where(node_path)
        need, has = _at_row(need), _at_row(has)
        self._add((1, self.tensor_index[t], 1, w.consumers[t].index(consumer), axis),
                  Violation(
            "window", node_path, level, t, need, has, f"rows of {d}",
            f"{where_label}: '{consumer}' reads '{t}' through a window "
            f"along '{d}': per step of their common ancestor it needs {need} rows of '{t}' "
            f"but '{producer.name}' produces {has}; give '{producer.name}' factors of "
            f"'{d}' covering {need}"))

    def _carried_spatial(self, site: Site, where, amount) -> None:
        _, o, i = site
        if not _flagged(where):
            return
        path = self.c.paths[o]
        lp = path.loops[i]
        t = path.op.output.tensor
        node_path = path.chain[lp.node]
        where_label, level = self._where(node_path)
        self._add((2, self.op_index[o], 0, i), Violation(
            "dependency", node_path, level, t, None, None, None,
            f"{where_label}: spatial loop '{lp.dim}:{self._n(lp.slot)}' splits the running "
            f"value of '{t}' (carried by '{o}') over instances; a carried loop must be "
            "temporal"))

    def _carried_inside(self, site: Site, where, amount) -> None:
        _, o, i = site
        if not _flagged(where):
            return
        path = self.c.paths[o]
        lp = path.loops[i]
        t = path.op.output.tensor
        carried = [k for k in path.loops[:i] if k.dim == path.op.carried and not k.spatial
                   and self._n(k.slot) > 1]
        outer = carried[-1]
        node_path = path.chain[lp.node]
        where_label, level = self._where(node_path)
        self._add((2, self.op_index[o], 0, i), Violation(
            "dependency", node_path, level, t, None, None, None,
            f"{where_label}: loop '{lp.dim}:{self._n(lp.slot)}' sits inside the carried loop "
            f"'{outer.dim}:{self._n(outer.slot)}' of '{t}': the running state of "
            "one sweep would not stay resident; put the carried loops innermost "
            "among the common ancestor's loops"))

    def _carried_leaves(self, site: Site, where, amount) -> None:
        _, o, name = site
        if not _flagged(where):
            return
        w = self.c.workload
        op = w.op_by_name[o]
        t = op.output.tensor
        y = w.op_by_name[name].output.tensor
        node_path = self.c.paths[name].chain[-1]
        where_label, level = self._where(node_path)
        rescaled = set(w.rescaled[o])
        self._add((2, self.op_index[o], 1, w.downstream[o].index(name)), Violation(
            "dependency", node_path, level, y, None, None, None,
            f"{where_label}: '{y}' is derived from the running value of "
            f"'{t}' but leaves the loop over '{op.carried}' that carries it; only "
            f"accumulators over '{op.carried}' ({', '.join(sorted(rescaled)) or 'none'})"
            " are rescaled, so keep its consumers inside that loop"))

    def _summed(self, site: Site, where, amount) -> None:
        _, o, i = site
        if not _flagged(where):
            return
        path = self.c.paths[o]
        lp = path.loops[i]
        node_path = path.chain[lp.node]
        raise InvalidDataflow(
            f"spatial loop '{lp.dim}:{self._n(lp.slot)}:Sp' splits '{o}' along "
            f"'{lp.dim}', which its output indexes through a sum "
            f"({path.op.output}): overlapping partial sums across instances are not "
            "supported; make the loop temporal", where=self._where(node_path)[0])

    def _coverage(self, site: Site, needed, available) -> None:
        _, o, d = site
        size, covered = _at_row(needed), _at_row(available)
        if covered >= size:
            return
        path = self.c.paths[o]
        shift = _at_row(self.r.shift[o].get(d, 0))
        factors = [str(self._n(lp.slot)) for lp in path.loops
                   if lp.dim == d and self._n(lp.slot) > 1]
        node_path = path.chain[-1]
        where_label, level = self._where(node_path)
        self._add((3, self.op_index[o], path.op.dims.index(d)), Violation(
            "coverage", node_path, level, None, size - shift, covered - shift,
            f"iterations of {d}",
            f"{where_label}: operator '{o}': the factors of '{d}' on its "
            f"path ({' x '.join(factors) or 'none'}) cover {covered - shift} of "
            f"{size - shift} (the product of a dimension's factors must reach its size)"))

    def _capacity(self, site: Site, needed, available) -> None:
        _, name = site
        words, capacity = float(np.asarray(needed).reshape(-1)[0]), available
        if not words > capacity:
            return
        c, r = self.c, self.r
        level = c.arch.level_index[name]
        by_tensor = {t: float(np.asarray(v).reshape(-1)[0])
                     for t, v in words_by_tensor(r, ROOT, level).items()}
        # a tensor the row holds nothing of at this level is no entry of the model's
        by_tensor = {t: v for t, v in by_tensor.items() if v}
        worst = sorted(by_tensor.items(), key=lambda kv: -kv[1])[:3]
        detail = ", ".join(f"{t} {v:,.0f}" for t, v in worst)
        peak = sum(by_tensor.values())
        node = ROOT
        for path, tile in c.tiles.items():
            if c.arch.level_index[tile.level] <= level and node_depth(path) > node_depth(node):
                held = sum(float(np.asarray(v).reshape(-1)[0])
                           for v in words_by_tensor(r, path, level).values())
                if held >= peak:
                    node = path
        self._add((4, level), Violation(
            "capacity", node, name, None, words, capacity, "words",
            f"capacity: level {name} needs {words:,.0f} words but holds "
            f"{capacity:,.0f} (over by {words - capacity:,.0f}; "
            f"largest: {detail}; at {label(node, c.tiles[node])})"))

    def _fanout(self, site: Site, needed, available) -> None:
        _, o, k = site
        used, limit = _at_row(needed), _at_row(available)
        if used <= limit:
            return
        c = self.c
        arch = c.arch
        path = c.paths[o]
        levels = path.levels
        j = [j for j in range(len(levels))
             if j == len(levels) - 1 or levels[j] != levels[j + 1]][k]
        node_path = path.chain[j]
        tile = c.tiles[node_path]
        if j == len(levels) - 1:
            unit = arch.unit(path.op.unit)
            level, units = unit.level, f"{unit.kind} units"
            innermost = arch.levels[levels[-1]].name
            if levels[-1] > arch.level_index[unit.level]:
                what = (f"{unit.kind} units: '{o}' runs on the {unit.kind} unit fed from "
                        f"{unit.level}, which is above its innermost tile at {innermost}")
            else:
                what = f"{unit.kind} units per {innermost} instance"
        else:
            level = arch.levels[levels[j + 1]].name
            what = f"{level} instances per {tile.level} instance"
            units = f"{level} instances"
        self._add((5, self.op_index[o], j, 0), Violation(
            "fanout", node_path, level, None, used, limit, units,
            f"fan-out: {label(node_path, tile)} spreads '{o}' over "
            f"{used} {what.split(' per ')[0]} but there are {limit} ({what})"))

    def _array(self, site: Site, needed, available) -> None:
        _, o, j, axis, mesh = site
        spread, size = _at_row(needed), _at_row(available)
        if spread <= size:
            return
        c = self.c
        path = c.paths[o]
        levels = path.levels
        last = j == len(levels) - 1
        level = (c.arch.unit(path.op.unit).level if last
                 else c.arch.levels[levels[j + 1]].name)
        run = {k for k in range(j + 1) if levels[k] == levels[j]}
        where_of = {slot: key for key, slot in c.slot_of.items()}
        deepest = {"x": 0, "y": 0}
        unmarked = "x"
        for lp in path.loops:
            if not (lp.spatial and lp.node in run) or self._n(lp.slot) == 1:
                continue
            node_path, index = where_of[lp.slot]
            marked = c.tiles[node_path].loops[index].axis
            if not marked:
                marked, unmarked = unmarked, "y"
            deepest[marked] = max(deepest[marked], lp.node)
        node_path = path.chain[deepest[axis]]
        self._add((5, self.op_index[o], j, 1, "xy".index(axis)), Violation(
            "array", node_path, level, None, spread, size, AXIS_NAMES[axis],
            f"array: {label(node_path, c.tiles[node_path])} spreads '{o}' over "
            f"{spread} {AXIS_NAMES[axis]} of {level} but the array has {size} "
            f"({mesh[0]} x {mesh[1]})"))

    def _split(self, site: Site, needed, available) -> None:
        _, k, kind, spread = site
        units, limit = _at_row(needed), _at_row(available)
        if units <= limit:
            return
        node_path = self.splits[k]
        node = self.c.tiles[node_path]
        unit = self.c.arch.matrix if kind == "matrix" else self.c.arch.vector
        self._add((6, k), Violation(
            "fanout", node_path, unit.level, None, units, limit, f"{kind} units",
            f"fan-out: the {node.primitive} children of {label(node_path, node)} "
            f"spread over {units} {kind} units together (the tile's own spatial loops "
            f"included) but the tile's {_at_row(spread)} instance(s) have {limit}"))
