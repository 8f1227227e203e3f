"""A single-operator tile tree written as a Timeloop mapping: per storage level a temporal
directive (every dimension's factor, the permutation innermost first), a spatial directive
when the tile has spatial loops, and a bypass of every tensor at levels the tree skips."""

from __future__ import annotations

import math
from dataclasses import replace

from tileflow.errors import InputError
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, Op, Tile, label


def timeloop_mapping(flow: Dataflow, workload: Workload, arch: Architecture) -> dict:
    """{'mapping': [...]} for a tree that is one chain of tiles down to one operator."""
    if flow.homes:
        raise InputError("'homes' has no Timeloop equivalent", flow.source or None, "homes")
    chain: list[tuple[str, Tile]] = []
    node, path = flow.root, "root"
    while isinstance(node, Tile):
        if len(node.children) != 1:
            raise InputError(f"{label(path, node)} has {len(node.children)} children: only a "
                             "single-operator chain of tiles is a Timeloop mapping",
                             flow.source or None, path)
        if node.no_reuse:
            raise InputError(f"{label(path, node)}: 'no_reuse' has no Timeloop equivalent",
                             flow.source or None, path)
        if node.buffering:
            raise InputError(f"{label(path, node)}: 'buffering' per tensor has no Timeloop "
                             "mapping equivalent (Timeloop sets multiple_buffering per level "
                             "in the architecture)", flow.source or None, path)
        chain.append((path, node))
        node, path = node.children[0], f"{path}.0"
    assert isinstance(node, Op)
    op = workload.op_by_name.get(node.op)
    if op is None:
        raise InputError(f"unknown operator '{node.op}'", flow.source or None, path)
    for d in op.dims:
        if len(d) != 1:
            raise InputError(f"dimension '{d}': Timeloop permutations need one-letter "
                             "dimension names", flow.source or None)
    by_level: dict[str, tuple[str, Tile]] = {}
    for p, t in chain:
        if t.level in by_level and t.loops and all(lp.spatial for lp in t.loops) \
                and not t.bypass:  # a further fan-out stage (imported inter_* level)
            above_path, above = by_level[t.level]
            by_level[t.level] = (above_path, replace(above, loops=above.loops + t.loops))
            continue
        if t.level in by_level:
            raise InputError(f"two tiles at {t.level} on the path ({by_level[t.level][0]}, {p}):"
                             " Timeloop has one set of loops per level", flow.source or None, p)
        by_level[t.level] = (p, t)
    _check_exact(chain, workload, op.dims, flow)
    directives = []
    tensors = list(op.tensors)
    for lv in arch.levels:
        if lv.name not in by_level:
            directives.append({"target": lv.name, "type": "bypass", "bypass": tensors})
            continue
        p, t = by_level[lv.name]
        if t.bypass:
            directives.append({"target": lv.name, "type": "bypass",
                               "keep": [x for x in tensors if x not in t.bypass],
                               "bypass": [x for x in tensors if x in t.bypass]})
        for spatial in (False, True):
            loops = [lp for lp in t.loops if lp.spatial == spatial]
            if spatial and not loops:
                continue
            dims_seen = [lp.dim for lp in loops]
            if len(set(dims_seen)) != len(dims_seen):
                raise InputError(f"{label(p, t)} has two {'spatial' if spatial else 'temporal'}"
                                 " loops over one dimension: Timeloop has one factor per "
                                 "dimension and level", flow.source or None, p)
            factors = {d: 1 for d in op.dims}
            factors.update({lp.dim: lp.factor for lp in loops})
            inner_first = [lp.dim for lp in reversed(loops)]
            order = inner_first + [d for d in op.dims if d not in inner_first]
            entry = {"target": lv.name, "type": "spatial" if spatial else "temporal",
                     "factors": " ".join(f"{d}={factors[d]}" for d in op.dims),
                     "permutation": "".join(order)}
            if spatial:
                entry["split"] = len(order)  # every spatial loop along X
            directives.append(entry)
    return {"mapping": directives}


def _check_exact(chain, workload: Workload, dims, flow: Dataflow) -> None:
    for d in dims:
        product = math.prod(lp.factor for _, t in chain for lp in t.loops if lp.dim == d)
        if product != workload.sizes[d]:
            raise InputError(f"the factors of '{d}' multiply to {product}, not its size "
                             f"{workload.sizes[d]}: Timeloop needs exact factors",
                             flow.source or None)
    for _, t in chain:
        for lp in t.loops:
            if lp.dim not in dims:
                raise InputError(f"loop over '{lp.dim}', which the operator does not use",
                                 flow.source or None)
