"""The scalar copy's carried state (the evaluator's is `tileflow/evaluator/carried.py`, whose
docstring gives the rules): which loops carry a running value, the rules as dependency
violations, and the rescaling operations, for one tree."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from tileflow.analysis.records import Violation
from tileflow.tree import is_below, label, node_depth

if TYPE_CHECKING:
    from scalar_prepare import OpPath, PathLoop, Plan


def is_carried(plan: Plan, tensor: str, lp: PathLoop) -> bool:
    """The loop carries `tensor`'s running value: a temporal loop over its producer's carried
    dim, at or above the common ancestor of the producer and its consumers."""
    w = plan.workload
    producer = w.producer.get(tensor)
    if producer is None or tensor not in plan.lca:
        return False
    d = w.op_by_name[producer].carried
    return bool(d) and lp.dim == d and not lp.spatial and lp.node <= node_depth(plan.lca[tensor])


def _inside(plan: Plan, op: str, lca: str) -> bool:
    return lca in {p for p, _ in plan.paths[op].tiles}


def _carried_loops(plan: Plan, tensor: str) -> list[PathLoop]:
    path = plan.paths[plan.workload.producer[tensor]]
    return [lp for lp in path.loops if is_carried(plan, tensor, lp)]


def check_carried(plan: Plan) -> list[Violation]:
    """The rules of the module's docstring, as dependency violations."""
    w = plan.workload
    out = []
    for op in w.ops:
        t = op.output.tensor
        if not op.carried or t not in plan.lca:
            continue
        lca = plan.lca[t]
        depth = node_depth(lca)
        path = plan.paths[op.name]
        above = [lp for lp in path.loops if lp.node <= depth]
        seen_carried = None
        for lp in above:
            node_path, tile = path.tiles[lp.node]
            where = label(node_path, tile)
            if lp.dim == op.carried and lp.spatial:
                out.append(_violation(node_path, tile.level, t, (
                    f"{where}: spatial loop '{lp.dim}:{lp.n}' splits the running value of "
                    f"'{t}' (carried by '{op.name}') over instances; a carried loop must be "
                    "temporal")))
            elif lp.dim == op.carried:
                seen_carried = lp
            elif seen_carried is not None:
                out.append(_violation(node_path, tile.level, t, (
                    f"{where}: loop '{lp.dim}:{lp.n}' sits inside the carried loop "
                    f"'{seen_carried.dim}:{seen_carried.n}' of '{t}': the running state of "
                    "one sweep would not stay resident; put the carried loops innermost "
                    "among the common ancestor's loops")))
        if not _carried_loops(plan, t):
            continue
        rescaled = set(w.rescaled[op.name])
        for name in w.downstream[op.name]:
            if not _inside(plan, name, lca):
                continue
            y = w.op_by_name[name].output.tensor
            leaves = y not in plan.lca or not (plan.lca[y] == lca
                                                or is_below(plan.lca[y], lca))
            if leaves and name not in rescaled:
                node_path, tile = plan.paths[name].tiles[-1]
                out.append(_violation(node_path, tile.level, y, (
                    f"{label(node_path, tile)}: '{y}' is derived from the running value of "
                    f"'{t}' but leaves the loop over '{op.carried}' that carries it; only "
                    f"accumulators over '{op.carried}' ({', '.join(sorted(rescaled)) or 'none'})"
                    " are rescaled, so keep its consumers inside that loop")))
    return out


def _violation(node: str, level: str, tensor: str, message: str) -> Violation:
    return Violation("dependency", node, level, tensor, None, None, None, message)


def rescaling(plan: Plan) -> dict[str, tuple[tuple[str, int], ...]]:
    """Carried operator -> the rescaling operations it performs, by function: per step after
    the first of its carried loops (per sweep), a subtraction and an exponential per element
    of its state, and a multiplication per element of each rescaled accumulator inside."""
    w = plan.workload
    out = {}
    for op in w.ops:
        t = op.output.tensor
        if not op.carried or t not in plan.lca:
            continue
        carried = _carried_loops(plan, t)
        if not carried:
            continue
        depth = node_depth(plan.lca[t])
        steps = _steps_along(carried, w.sizes[op.carried])
        if steps <= 1:
            continue
        state = _elements(plan.paths[op.name], depth, op.carried) * (steps - 1)
        products = sum(_elements(plan.paths[a], depth, op.carried)
                       for a in w.rescaled[op.name] if _inside(plan, a, plan.lca[t]))
        out[op.name] = (("sub", state), ("exp", state), ("mul", products * (steps - 1)))
    return out


def _steps_along(loops: list[PathLoop], size: int) -> int:
    """Steps of the carried loops that cover any of the dim (clipped ones left out)."""
    return sum(1 for values in itertools.product(*(range(lp.n) for lp in loops))
               if sum(v * lp.stride for v, lp in zip(values, loops, strict=True)) < size)


def _elements(path: OpPath, depth: int, carried: str) -> int:
    """Elements of the operator's result held in one sweep of the carried loops, summed over
    every step of the other loops at or above path position `depth` (each instance and each
    repetition holds its own)."""
    sizes = path.size_of
    dims = path.op.output.dims
    total = 1
    for d in dims:
        loops = [lp for lp in path.loops if lp.node <= depth and lp.dim == d]
        extent = path.extent_below(depth, d)
        start0 = path.shift.get(d, 0)
        covered = 0
        for values in itertools.product(*(range(lp.n) for lp in loops)):
            lo = start0 + sum(v * lp.stride for v, lp in zip(values, loops, strict=True))
            covered += max(0, min(lo + extent, sizes[d]) - max(lo, 0))
        total *= covered
    others = [lp.n for lp in path.loops
              if lp.node <= depth and lp.dim not in dims and lp.dim != carried]
    return total * math.prod(others)
