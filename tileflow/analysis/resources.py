"""The pieces of resource use that the evaluator's checks (`evaluator/limits.py`) build on:
the `Footprint` record, the instances' x-by-y layouts, and how Para/Pipe children share
compute units."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tileflow.tree import Op, Tile

if TYPE_CHECKING:
    from tileflow.specs.arch import Architecture
    from tileflow.specs.workload import Operator


class OperatorPath(Protocol):
    """An operator's path from the root down: the operator and each tile's level index."""

    @property
    def op(self) -> Operator: ...

    @property
    def levels(self) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class Footprint:
    level: str
    words: float
    capacity_words: float
    by_tensor: dict[str, float]


def level_mesh(arch, parent: int, child: int) -> tuple[int, ...]:
    """The x-by-y layout of a level's instances under one instance of its parent: declared
    (`mesh`), or the matrix unit's rows x cols for a register level of one per PE."""
    if child != parent + 1:
        return ()
    lv = arch.levels[child]
    if lv.mesh:
        return lv.mesh
    m = arch.matrix
    if (lv.name == m.level and m.parallelism == 1 and m.rows * m.cols == lv.fanout
            and m.rows > 1 and m.cols > 1):
        return (m.rows, m.cols)
    return ()


def compute_mesh(arch: Architecture, path: OperatorPath) -> tuple[int, ...]:
    """An array inside one instance of its level (parallelism rows x cols): the spatial loops
    of the innermost tile spread over its rows and columns."""
    unit = arch.unit(path.op.unit)
    if unit.kind != "matrix" or arch.levels[path.levels[-1]].name != unit.level:
        return ()
    if unit.parallelism == unit.rows * unit.cols and unit.rows > 1 and unit.cols > 1:
        return (unit.rows, unit.cols)
    return ()  # one row or one column of lanes: only their number is checked


AXIS_NAMES = {"x": "rows (x)", "y": "columns (y)"}


def split_limit(limit: int, fanout: int, spread):
    """Units a Para/Pipe tile's children may use together, counted over the `spread` instances
    the tile's own spatial loops run on: each instance owns whole instances of the `fanout`
    below the tile (fanout // spread of them; one cannot serve two), so the children of one
    instance share (limit // fanout) * (fanout // spread) units. That is `limit` itself when
    the spread divides the fan-out; a spread beyond the fan-out is the fan-out check's. Takes
    an integer spread or a NumPy array of them (one per row)."""
    if fanout <= 1 or limit % fanout:
        return limit
    share = limit // fanout
    if isinstance(spread, int):
        s = max(spread, 1)
        return share * (fanout // s) * s if s <= fanout else limit
    import numpy as np  # only the batched evaluator passes arrays; `evaluate` starts without NumPy

    s = np.maximum(spread, 1)
    return np.where(s <= fanout, share * (fanout // s) * s, limit)


def split_fanout(arch: Architecture, first: OperatorPath, depth: int, level: int,
                 feed: int) -> int:
    """Instances below a Para/Pipe tile that its own spatial loops spread over: the fan-out
    down to the next level on the path (1 when that level is below the units' level)."""
    target = next((lv for lv in first.levels[depth + 1:] if lv > level), None)
    if target is None or target > feed:
        return 1
    return arch.fanout_between(arch.levels[level].name, arch.levels[target].name)


Demand = str | tuple
"""How the units under a node combine: an operator's name (its units), or ("max", parts)
for children that run one after another (`Seq`, `Shar`), ("sum", parts) for children that
run at once (`Para`, `Pipe`)."""


def unit_demand(node: Tile | Op) -> Demand:
    """The `Demand` of a subtree (shape-only): a `Para` or `Pipe` nested anywhere below a
    `Para`/`Pipe` child adds its children's units, it does not take the largest."""
    if isinstance(node, Op):
        return node.op
    parts = tuple(unit_demand(c) for c in node.children)
    if len(parts) == 1:
        return parts[0]
    return ("sum" if node.semantics.at_once else "max", parts)


def fold_demand(demand: Demand, units, maximum=max):
    """Evaluate a `Demand`: `units(op)` at the operators (0 for another kind of unit), sums
    and largest values above them; `maximum` is `max`, or `numpy.maximum` for rows."""
    if isinstance(demand, str):
        return units(demand)
    how, parts = demand
    values = [fold_demand(p, units, maximum) for p in parts]
    total = values[0]
    for v in values[1:]:
        total = total + v if how == "sum" else maximum(total, v)
    return total


