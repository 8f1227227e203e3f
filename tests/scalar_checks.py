"""The scalar copy's checks of one tree that are properties of the dataflow (the
evaluator's are `tileflow/evaluator/limits.py`): the shape's dependent Para children, the
dependences of each intermediate (a reduction loop in the common ancestor, a window the
producer's tile does not cover), the carried-state rules and each dimension's coverage, as
`Violation` records in the model's order."""

from __future__ import annotations

from scalar_carried import check_carried, is_carried
from scalar_prepare import Plan

from tileflow.analysis.records import Violation
from tileflow.specs.workload import Operator, Workload
from tileflow.tree import label, node_depth


def structural_violations(plan: Plan) -> list[Violation]:
    """Every violation of `plan` that its footprints and spatial loops do not decide."""
    shape = plan.shape.violations if plan.shape is not None else ()
    return [*shape, *_check_dependences(plan), *_check_coverage(plan)]


def _check_coverage(plan: Plan) -> list[Violation]:
    w = plan.workload
    out = []
    for name, path in plan.paths.items():
        extents = path.extents_from[0]
        for d in path.op.dims:
            size = w.sizes[d]
            shift = path.shift.get(d, 0)
            covered = shift + extents[d]
            if covered < size:
                factors = [str(lp.n) for lp in path.loops if lp.dim == d]
                node_path, tile = path.tiles[-1]
                out.append(Violation(
                    "coverage", node_path, tile.level, None, size - shift, covered - shift,
                    f"iterations of {d}",
                    f"{label(node_path, tile)}: operator '{name}': the factors of '{d}' on its "
                    f"path ({' x '.join(factors) or 'none'}) cover {covered - shift} of "
                    f"{size - shift} (the product of a dimension's factors must reach its size)"))
    return out


def _check_dependences(plan: Plan) -> list[Violation]:
    """An intermediate lives within one step of the producer's and consumers' common
    ancestor: loops there over the producer's reductions would hand over partial results,
    and the producer's tile must cover the consumer's window."""
    w = plan.workload
    out = []
    for t, lca in plan.lca.items():
        producer = w.op_by_name[w.producer[t]]
        path = plan.paths[producer.name]
        depth = node_depth(lca)
        for lp in path.loops:
            if lp.node <= depth and lp.dim in producer.reduction_dims and lp.n > 1 \
                    and not is_carried(plan, t, lp):
                node_path, tile = path.tiles[lp.node]
                out.append(Violation(
                    "dependency", node_path, tile.level, t, None, None, None,
                    f"{label(node_path, tile)}: loop '{lp.dim}:{lp.n}' is a reduction of "
                    f"'{producer.name}' but sits in a common ancestor of '{producer.name}' and "
                    f"its consumers {', '.join(w.consumers[t])}: they would read partial values "
                    f"of '{t}'"))
        for consumer in w.consumers[t]:
            if (t, consumer) in _windowed_reads(w):
                out += _check_window(plan, t, producer, w.op_by_name[consumer], depth)
    return out + check_carried(plan)


def _windowed_reads(w: Workload) -> frozenset[tuple[str, str]]:
    """(tensor, consumer) for every read through a window (an axis summing dims), kept on
    the workload."""
    found = w.__dict__.get("_tileflow_windowed_reads")
    if found is None:
        found = frozenset((a.tensor, op.name) for op in w.ops for a in op.inputs
                          if any(len(axis.terms) > 1 for axis in a.axes))
        object.__setattr__(w, "_tileflow_windowed_reads", found)
    return found


def _check_window(plan: Plan, t: str, producer: Operator, consumer: Operator,
                  depth: int) -> list[Violation]:
    w = plan.workload
    cpath, ppath = plan.paths[consumer.name], plan.paths[producer.name]
    out = []
    for out_axis, axis in zip(producer.output.axes, consumer.access(t).axes, strict=True):
        if len(axis.terms) < 2:
            continue
        d = out_axis.terms[0][0]
        window = sum(c * (w.sizes[x] - 1) for x, c in axis.terms if x != d)
        need = cpath.extent_below(depth, d) + window
        has = ppath.extent_below(depth, d)
        tiled_above = any(lp.dim == d and lp.n > 1 and lp.node <= depth for lp in ppath.loops)
        if tiled_above and has < need:
            node_path, tile = ppath.tiles[-1]
            out.append(Violation(
                "window", node_path, tile.level, t, need, has, f"rows of {d}",
                f"{label(node_path, tile)}: '{consumer.name}' reads '{t}' through a window "
                f"along '{d}': per step of their common ancestor it needs {need} rows of '{t}' "
                f"but '{producer.name}' produces {has}; give '{producer.name}' factors of "
                f"'{d}' covering {need}"))
    return out
