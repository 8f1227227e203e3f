"""Dataflows near the explorer's picks: the model's best trees among the named baselines and
a pool of random valid trees, each perturbed by one small step (a prime factor moved between
two loops of a dimension on one chain of tiles, or two loops of a tile swapped) and kept
where the model finds the result valid. A campaign samples these beside uniformly random
trees, so that the kernels a search would recommend are well represented."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.arith import smallest_prime
from tileflow.cost import evaluate
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, Loop, Tile

Path = tuple[int, ...]  # child indices from the root to a tile


def _tile_at(root: Tile, path: Path) -> Tile:
    node = root
    for i in path:
        node = node.children[i]
    return node


def _replace_at(root: Tile, path: Path, new: Tile) -> Tile:
    if not path:
        return new
    kids = list(root.children)
    kids[path[0]] = _replace_at(kids[path[0]], path[1:], new)
    return replace(root, children=tuple(kids))


def _tiles(root: Tile) -> list[Path]:
    out: list[Path] = []

    def go(node: Tile, path: Path) -> None:
        out.append(path)
        for i, c in enumerate(node.children):
            if isinstance(c, Tile):
                go(c, (*path, i))

    go(root, ())
    return out


def _single_chain_pairs(root: Tile) -> list[tuple[Path, Path]]:
    """(upper, lower) tile paths where every tile from the upper one down to the lower one's
    parent has a single child: a factor moved between them changes no other branch."""
    pairs = []
    for upper in _tiles(root):
        node, path = _tile_at(root, upper), upper
        while len(node.children) == 1 and isinstance(node.children[0], Tile):
            path = (*path, 0)
            node = node.children[0]
            pairs.append((upper, path))
    return pairs


def _with_factor(tile: Tile, dim: str, factor: int) -> Tile:
    """`tile` with its temporal loop over `dim` multiplied by `factor` (a fraction divides;
    a loop reaching 1 is removed, a missing one is added innermost)."""
    loops, found = [], False
    for lp in tile.loops:
        if lp.dim == dim and not lp.spatial and not found:
            found = True
            new = round(lp.factor * factor)
            if new > 1:
                loops.append(replace(lp, factor=new))
            continue
        loops.append(lp)
    if not found:
        loops.append(Loop(dim, round(factor)))
    return replace(tile, loops=tuple(loops))


def _temporal(tile: Tile) -> dict[str, int]:
    return {lp.dim: lp.factor for lp in tile.loops if not lp.spatial}


def perturb(flow: Dataflow, rng: np.random.Generator) -> Dataflow | None:
    """One random small step away from `flow` (None where the tree offers none)."""
    root = flow.root
    moves = []
    for upper, lower in _single_chain_pairs(root):
        up, low = _temporal(_tile_at(root, upper)), _temporal(_tile_at(root, lower))
        for d in set(up) | set(low):
            if up.get(d, 1) > 1:
                moves.append(("down", upper, lower, d))
            if low.get(d, 1) > 1:
                moves.append(("up", upper, lower, d))
    for path in _tiles(root):
        loops = _tile_at(root, path).loops
        if sum(not lp.spatial for lp in loops) >= 2:
            moves.append(("swap", path, path, ""))
    if not moves:
        return None
    kind, upper, lower, d = moves[int(rng.integers(len(moves)))]
    if kind == "swap":
        tile = _tile_at(root, upper)
        idx = [i for i, lp in enumerate(tile.loops) if not lp.spatial]
        i, j = sorted(int(x) for x in rng.choice(idx, 2, replace=False))
        loops = list(tile.loops)
        loops[i], loops[j] = loops[j], loops[i]
        return replace(flow, root=_replace_at(root, upper, replace(tile, loops=tuple(loops))))
    source, target = (upper, lower) if kind == "down" else (lower, upper)
    p = smallest_prime(_temporal(_tile_at(root, source))[d])
    root = _replace_at(root, source, _with_factor(_tile_at(root, source), d, 1 / p))
    root = _replace_at(root, target, _with_factor(_tile_at(root, target), d, p))
    return replace(flow, root=root)


def _valid(w: Workload, arch: Architecture, flow: Dataflow) -> float | None:
    """The model's latency (cycles) of a valid tree, else None."""
    try:
        result = evaluate(w, arch, flow)
    except InvalidDataflow:
        return None
    return result.cycles if result.valid else None


def picks(w: Workload, arch: Architecture, candidates: list[Dataflow], count: int
          ) -> list[Dataflow]:
    """The `count` valid candidates the model ranks fastest (distinct trees)."""
    scored, seen = [], set()
    for flow in candidates:
        key = repr(flow.root)
        cycles = None if key in seen else _valid(w, arch, flow)
        if cycles is not None:
            seen.add(key)
            scored.append((cycles, len(scored), flow))
    return [f for _, _, f in sorted(scored, key=lambda s: s[:2])[:count]]


def near_pick_trees(w: Workload, arch: Architecture, chosen: list[Dataflow], count: int,
                    seed: int = 0, tries: int = 40) -> list[Dataflow]:
    """`count` valid trees one step away from the picks among `chosen` (the campaign's
    candidate pool), distinct from each other and from every tree in `chosen`; fewer if
    `tries` x count attempts do not find them."""
    if count <= 0:
        return []
    from tileflow.kernels.trees import lanes_on_row

    rng = np.random.default_rng(seed + 7919)
    best = picks(w, arch, chosen, max(4, min(16, count // 4)))
    seen = {repr(f.root) for f in chosen}
    found: list[Dataflow] = []
    for _ in range(count * tries):
        if len(found) >= count or not best:
            break
        pick = best[int(rng.integers(len(best)))]
        flow = perturb(pick, rng)
        if flow is None:
            continue
        flow = lanes_on_row(w, arch, replace(flow, name=f"near-{len(found)}"))
        key = repr(flow.root)
        if key in seen or _valid(w, arch, flow) is None:
            continue
        seen.add(key)
        found.append(flow)
    return found

