"""The scalar copy's sibling input sharing (the evaluator's is
`tileflow/evaluator/shared_inputs.py`): children of a `Shar`, `Para` or `Pipe` tile that
read the same input tensor through the same slice at every step of their common loops hold
one copy in the level below the tile: one load serves them all. The first child (in tree
order) to read it pays; a later sibling whose slice is identical loads nothing over that
link."""

from __future__ import annotations

from scalar_prepare import Plan, bypassed

from tileflow.tree import child_path, node_depth, ops_under


def served_by_sibling(plan: Plan) -> set[tuple[str, int, str]]:
    """(operator, path position of the sharing tile, input tensor): the links below that
    tile over which the operator's slice of the tensor is already resident, loaded for an
    earlier sibling."""
    out: set[tuple[str, int, str]] = set()
    for node_path, node in plan.tiles.items():
        if not node.semantics.shares_inputs or len(node.children) < 2:
            continue
        j = node_depth(node_path)
        first: dict[tuple, int] = {}  # slice signature -> first child index that loads it
        for index, child in enumerate(node.children):
            mine: dict[tuple, list[tuple[str, str]]] = {}
            below = (plan.shape.ops_below[child_path(node_path, index)] if plan.shape is not None
                     else ops_under(child))
            for o in below:
                for key, t in _signatures(plan, o, j):
                    mine.setdefault(key, []).append((o, t))
            for key, users in mine.items():
                if key in first and first[key] < index:
                    out.update((o, j, t) for o, t in users)
                else:
                    first.setdefault(key, index)
    return out


def _clipped(dim: str, extent: int, shift: int, size: int) -> tuple[str, int, int]:
    """A dimension's range in the slice: an extent reaching past the end is clipped there
    at every step, so only the part up to the end tells two slices apart."""
    return dim, shift, min(extent, size - shift)


def _signatures(plan: Plan, op: str, j: int):
    """For each input of `op` crossing the link below path position j: what fixes its slice
    at every step of the loops above (the loops themselves are common to the siblings)."""
    path = plan.paths[op]
    if j + 1 >= len(path.tiles) or path.levels[j] == path.levels[j + 1]:
        return
    extents = path.extents_from[j + 1]
    for access in path.op.inputs:
        t = access.tensor
        if t in plan.lca:  # intermediates are shared through their home already
            continue
        if bypassed(path, j + 1, t):  # no copy in the level below: it crosses a lower link
            continue
        dims = sorted({d for axis in access.axes for d, _ in axis.terms})
        box = tuple(_clipped(d, extents[d], path.shift.get(d, 0), path.size_of[d])
                    for d in dims)
        yield (t, access.axes, box, path.levels[j + 1]), t
