"""State carried across a reduction loop (online softmax), for many factor rows at once:
which loops carry it, the rules a tree must follow for it, and the rescaling operations
it costs.

An operator declared `carried: d` in the workload (the running maximum `M[b,m] max= S[b,m,l]`,
carried over l) lets a temporal loop over d sit in the common ancestor of it and its
consumers: at each step they read its running value. The state then lives through a whole
sweep of those loops at its home (the loops are its epoch's inner loops, not a new epoch).
Whatever the consumers derive from the running value is only right once rescaled: the
accumulators downstream that reduce over d (the running sum, the unnormalised output) are
multiplied by exp(old - new) at every step after the first. Per element of the state that
factor costs a subtraction and an exponential; per element of each rescaled accumulator, one
multiplication. The rules:

* a carried loop is temporal (a spatial one would split the state over instances);
* inside the common ancestor's loops, the carried loops come after every other loop (the
  state of one sweep must stay resident; an outer step over another dim would need another);
* a result derived from the running value that leaves the carried loops (a final output, or
  an intermediate whose common ancestor is above them) must be a rescaled accumulator.

Which loops carry a running value is fixed by the structure (`Compiled.carries`); the
rules and the rescaling depend on which of them, and of the loops around them, run more
than one iteration, row by row (the tests' scalar copy: `scalar_carried`)."""

from __future__ import annotations

import numpy as np

from tileflow.analysis.movement import AxisRec
from tileflow.evaluator import sums
from tileflow.evaluator.compiled import Path
from tileflow.evaluator.lattice import I64, VDim
from tileflow.tree import is_below, node_depth

RESCALE = ("sub", "exp", "mul")  # the rescaling's functions, in the order the records list them


def _carried_ops(r):
    """(carried operator, its result, the common ancestor's depth) for each carried
    operator whose result lives in a common ancestor."""
    c = r.c
    for op in c.workload.ops:
        t = op.output.tensor
        if op.carried and t in c.lca:
            yield op, t, node_depth(c.lca[t])


def _inside(path: Path, lca: str) -> bool:
    return lca in path.chain


def check(r, violations) -> None:
    """The rules above per row, as 'dependency' amounts of 1: a spatial carried
    loop, a loop (of more than one iteration) inside a carried one, a result derived from
    the running value that leaves the carried loops without being rescaled."""
    c = r.c
    w = c.workload
    for op, t, depth in _carried_ops(r):
        path = c.paths[op.name]
        seen = np.zeros(r.count, dtype=bool)  # a carried loop of more than one iteration
        for i, lp in enumerate(path.loops):
            if lp.node > depth:
                continue
            moves = r.n[lp.slot] > 1
            if lp.dim == op.carried and lp.spatial:
                violations.flag("dependency", moves, 1.0, ("carried-spatial", op.name, i))
            elif lp.dim == op.carried:
                seen = seen | moves
            else:
                violations.flag("dependency", seen & moves, 1.0,
                                ("carried-inside", op.name, i))
        carrying = np.zeros(r.count, dtype=bool)
        for i in c.carries(t):
            carrying |= r.n[path.loops[i].slot] > 1
        rescaled = set(w.rescaled[op.name])
        lca = c.lca[t]
        for name in w.downstream[op.name]:
            if not _inside(c.paths[name], lca):
                continue
            y = w.op_by_name[name].output.tensor
            leaves = y not in c.lca or not (c.lca[y] == lca or is_below(c.lca[y], lca))
            if leaves and name not in rescaled:
                violations.flag("dependency", carrying, 1.0, ("carried-leaves", op.name, name))


def rescaling(r) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The rescaling per row: carried operator -> its (sub, exp, mul) operations (the tests'
    `scalar_carried.rescaling`)."""
    c = r.c
    w = c.workload
    out = {}
    for op, t, depth in _carried_ops(r):
        carried = c.carries(t)
        if not carried:
            continue
        path = c.paths[op.name]
        size = w.sizes[op.carried]
        # the steps of the carried loops that cover any of the dim: the offsets below its size
        one = np.ones(r.count, dtype=I64)
        steps = sums.volume_sum(AxisRec(((op.carried, 1),), 0, size),
                                {op.carried: VDim(size, one, np.zeros(r.count, dtype=I64))},
                                [r.vloop(path, i, False) for i in carried], (), r.count)
        again = np.maximum(steps - 1, 0)
        state = _elements(r, path, depth, op.carried) * again
        products = np.zeros(r.count, dtype=I64)
        for a in w.rescaled[op.name]:
            if _inside(c.paths[a], c.lca[t]):
                products = products + _elements(r, c.paths[a], depth, op.carried)
        out[op.name] = (state, state, products * again)
    return out


def _elements(r, path: Path, depth: int, carried: str) -> np.ndarray:
    """`carried._elements`: elements of the operator's result held in one sweep of the
    carried loops, summed over every step of the other loops at or above `depth`."""
    w = r.c.workload
    dims = path.op.output.dims
    extents = r.extents[path.op.name][depth + 1]
    shifts = r.shift[path.op.name]
    total = np.ones(r.count, dtype=I64)
    for d in dims:
        loops = [r.vloop(path, i, False) for i, lp in enumerate(path.loops)
                 if lp.node <= depth and lp.dim == d]
        rec = VDim(w.sizes[d], extents[d], shifts.get(d, np.zeros(r.count, dtype=I64)))
        total = total * sums.volume_sum(AxisRec(((d, 1),), 0, w.sizes[d]), {d: rec}, loops,
                                        (), r.count)
    for lp in path.loops:
        if lp.node <= depth and lp.dim not in dims and lp.dim != carried:
            total = total * r.n[lp.slot]
    return total
