"""Sibling input sharing for every row of a batch (the tests' scalar copy: `scalar_sharing`):
children of a Shar, Para or Pipe tile that read the same input through the same slice into
the same level hold one copy; the first child to read it pays, a later sibling
whose slice is identical loads nothing over that link. The slice is fixed by the tensor, its
axes, the level and, per dimension, the shift and the clipped extent below the tile: arrays
over the rows, compared row by row."""

from __future__ import annotations

import numpy as np

from tileflow.tree import child_path, node_depth


def served_masks(r) -> dict[tuple[str, int, str], np.ndarray]:
    """(operator, path position of the sharing tile, input tensor) -> the rows in which an
    earlier sibling already loaded that operator's slice of the tensor over the link below
    the tile. `r` is an `engine.Rows`."""
    c = r.c
    sizes = c.workload.sizes
    out: dict[tuple[str, int, str], np.ndarray] = {}
    for node_path, node in c.tiles.items():
        if not node.semantics.shares_inputs or len(node.children) < 2:
            continue
        j = node_depth(node_path)
        earlier: list[tuple[tuple, list]] = []
        for index in range(len(node.children)):
            mine = list(_signatures(r, c, sizes, child_path(node_path, index), j))
            for o, t, static, box in mine:
                hit = np.zeros(r.count, dtype=bool)
                for other, other_box in earlier:
                    if other != static:
                        continue
                    same = np.ones(r.count, dtype=bool)
                    for (s1, e1), (s2, e2) in zip(box, other_box, strict=True):
                        same &= (s1 == s2) & (e1 == e2)
                    hit |= same
                if hit.any():
                    key = (o, j, t)
                    out[key] = out[key] | hit if key in out else hit
            earlier += [(static, box) for _, _, static, box in mine]
    return out


def _signatures(r, c, sizes, child: str, j: int):
    """For each input of each operator under `child` crossing the link below position j:
    (operator, tensor, the static part of its slice, per dim (shift, clipped extent))."""
    zero = np.zeros(r.count, dtype=np.int64)
    for o in c.ops_below[child]:
        path = c.paths[o]
        if j + 1 >= len(path.chain) or path.levels[j] == path.levels[j + 1]:
            continue
        extents = r.extents[o][j + 1]
        shifts = r.shift[o]
        for access in path.op.inputs:
            t = access.tensor
            if t in c.lca:  # intermediates are shared through their home already
                continue
            if not c.holds(o, j + 1, t):  # no copy in the level below: it crosses lower
                continue
            dims = sorted({d for axis in access.axes for d, _ in axis.terms})
            box = []
            for d in dims:
                shift = shifts.get(d, zero)
                box.append((shift, np.minimum(extents[d], sizes[d] - shift)))
            yield o, t, (t, access.axes, path.levels[j + 1], tuple(dims)), box
