"""Tile factors of a structure: defaults, per-slot limits, and the exact divisor tilings
(every operator's factors of a dim multiply to its size), counted, listed and sampled
uniformly. Dims are independent, so counts multiply over dims; within a dim a tile's
factors divide what its parent leaves, and every operator below must reach exactly 1."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tileflow.arith import divisors
from tileflow.evaluator.structure import Slot, Structure, structure_of
from tileflow.explore.structures.encoding import Encoding, Frame, leaf_chains
from tileflow.specs.workload import Workload
from tileflow.tree import (
    ROOT,
    Dataflow,
    Op,
    Tile,
    child_index,
    child_path,
    ops_under,
    path_prefixes,
    walk,
    with_factors,
)


@dataclass(frozen=True, eq=False)
class EncodedStructure(Structure):
    """A structure decoded from genes: the encoding, and per slot the largest factor the
    fan-out below it (and the operator's share of the array) allows; 0 for temporal slots."""

    encoding: Encoding | None = None
    slot_limits: tuple[int, ...] = ()


def slot_limits(frame: Frame, enc: Encoding, flow: Dataflow, slots: Sequence[Slot]) -> tuple:
    """Per slot, the instances a spatial loop may spread over: the fan-out down to the
    tile's children (or the compute unit's lanes), divided by the operator's share of the
    array; 0 for temporal slots."""
    tiles = {p: n for p, n in walk(flow.root) if isinstance(n, Tile)}
    arch = frame.arch
    out = []
    for s in slots:
        tile = tiles[s.path]
        if not s.spatial:
            out.append(0)
            continue
        below = [frame.index[o] for o in ops_under(tile)]
        kids = _levels_below(tile, tile.level)
        if kids:
            inner = min(kids, key=lambda lv: arch.level_index[lv])
            limit = arch.fanout_between(tile.level, inner)
            if len(below) == 1 and arch.level_index[inner] == frame.feed[below[0]] \
                    and arch.level_index[tile.level] == frame.loop_level[below[0]]:
                limit *= arch.unit(frame.workload.op_by_name[frame.ops[below[0]]].unit) \
                    .parallelism
        else:
            limit = arch.unit(frame.workload.op_by_name[frame.ops[below[0]]].unit).parallelism
        if len(below) == 1:
            limit //= enc.share[below[0]]
        out.append(max(limit, 1))
    return tuple(out)


def _levels_below(tile: Tile, level: str) -> set[str]:
    """The first levels other than `level` met going down from `tile`."""
    out: set[str] = set()
    for c in tile.children:
        if isinstance(c, Tile):
            out |= _levels_below(c, level) if c.level == level else {c.level}
    return out


def default_factors(w: Workload, structure: Structure, limits: Sequence[int]) -> np.ndarray:
    """Factors that cover every dim exactly where divisors allow: spatial loops the largest
    divisor of what is left of their dim within their limit (shared tiles first), the
    innermost temporal loop of each operator's path the rest, other loops 1."""
    slot_at = {(s.path, s.index): k for k, s in enumerate(structure.slots)}
    f = np.ones(len(structure.slots), dtype=np.int64)
    used: dict[str, int] = {}
    chains = leaf_chains(structure.template.root)

    def spread(k: int, left: int) -> None:
        s = structure.slots[k]
        if s.spatial and limits[k] > 1:
            room = max(limits[k] // used.get(s.path, 1), 1)
            f[k] = max(d for d in divisors(left) if d <= room)
            used[s.path] = used.get(s.path, 1) * int(f[k])

    shared = {k for k, s in enumerate(structure.slots)
              if sum(any(p == s.path for p, _ in c) for c in chains.values()) > 1}
    for k in sorted(shared):
        spread(k, w.sizes[structure.slots[k].dim])
    for op, chain in chains.items():
        for d in w.op_by_name[op].dims:
            ks = [slot_at[(p, i)] for p, t in chain for i, lp in enumerate(t.loops)
                  if lp.dim == d]
            if not ks:
                continue
            for k in ks:
                if k not in shared:
                    left = -(-w.sizes[d] // math.prod(int(f[j]) for j in ks if j != k))
                    spread(k, left)
            covered = math.prod(int(f[k]) for k in ks)
            need = -(-w.sizes[d] // covered)
            if need > 1:  # an own loop where there is one: a shared one would tile the others
                own = [k for k in ks if k not in shared]
                temporal = [k for k in own if not structure.slots[k].spatial] or own or \
                    [k for k in ks if not structure.slots[k].spatial] or ks
                f[temporal[-1]] *= need
    return f


def build_structure(frame: Frame, enc: Encoding, flow: Dataflow,
                    fit: Callable[[Structure, np.ndarray], np.ndarray] | None = None
                    ) -> EncodedStructure:
    """The structure of a decoded encoding, its template holding the default factors
    (`fit(structure, factors)`: starting factors fitted to the chip, e.g. its capacities)."""
    plain = structure_of(frame.workload, frame.arch, flow)
    limits = slot_limits(frame, enc, flow, plain.slots)
    factors = default_factors(frame.workload, plain, limits)
    if fit is not None:
        factors = fit(plain, factors)
    template = with_factors(flow, {(s.path, s.index): int(x)
                                   for s, x in zip(plain.slots, factors, strict=True)})
    return EncodedStructure(frame.workload, frame.arch, template, plain.slots, enc, limits)


class Tilings:
    """The exact divisor tilings of a structure, within each spatial slot's limit."""

    def __init__(self, structure: Structure, limits: Sequence[int] | None = None):
        self.structure = structure
        self.w = structure.workload
        self.limits = tuple(limits) if limits is not None else \
            tuple(getattr(structure, "slot_limits", ()) or (0,) * len(structure.slots))
        self.slot_at = {(s.path, s.index): k for k, s in enumerate(structure.slots)}
        self.dims = tuple(dict.fromkeys(s.dim for s in structure.slots))
        self._count = lru_cache(maxsize=None)(self._count_uncached)

    def _parts(self, node: Tile, path: str, d: str):
        ks = [self.slot_at[(path, i)] for i, lp in enumerate(node.loops) if lp.dim == d]
        kids = [(child_path(path, i), c) for i, c in enumerate(node.children)
                if d in {x for o in ops_under(c) for x in self.w.op_by_name[o].dims}]
        return ks, kids

    def _assignments(self, ks: list[int], r: int):
        """Factor tuples for slots `ks` whose product divides r, within limits."""
        options = []
        for k in ks:
            cap = self.limits[k] if self.structure.slots[k].spatial and self.limits[k] else r
            options.append([x for x in divisors(r) if x <= cap])
        for combo in itertools.product(*options):
            q = math.prod(combo)
            if r % q == 0:
                yield combo, r // q

    def _count_uncached(self, path: str, d: str, r: int) -> int:
        node = self._node(path)
        if isinstance(node, Op):
            return 1 if r == 1 else 0
        ks, kids = self._parts(node, path, d)
        total = 0
        for _, rest in self._assignments(ks, r):
            total += math.prod(self._count(p, d, rest) for p, _ in kids)
        return total

    def _node(self, path: str):
        node = self.structure.template.root
        for prefix in path_prefixes(path)[1:]:
            node = node.children[child_index(prefix)]
        return node

    def count_dim(self, d: str) -> int:
        return self._count(ROOT, d, self.w.sizes[d])

    @property
    def count(self) -> int:
        return math.prod(self.count_dim(d) for d in self.dims)

    def _list_dim(self, path: str, d: str, r: int) -> list[dict[int, int]]:
        node = self._node(path)
        if isinstance(node, Op):
            return [{}] if r == 1 else []
        ks, kids = self._parts(node, path, d)
        out = []
        for combo, rest in self._assignments(ks, r):
            below = [self._list_dim(p, d, rest) for p, _ in kids]
            for parts in itertools.product(*below):
                row = dict(zip(ks, combo, strict=True))
                for part in parts:
                    row.update(part)
                out.append(row)
        return out

    def all(self) -> np.ndarray:
        """Every tiling, one row each (use `count` first: it can be large)."""
        per_dim = [self._list_dim(ROOT, d, self.w.sizes[d]) for d in self.dims]
        rows = []
        for parts in itertools.product(*per_dim):
            row = np.ones(len(self.structure.slots), dtype=np.int64)
            for part in parts:
                for k, x in part.items():
                    row[k] = x
            rows.append(row)
        return np.array(rows, dtype=np.int64).reshape(len(rows), len(self.structure.slots))

    def _sample_dim(self, rng: np.random.Generator, path: str, d: str, r: int,
                    row: np.ndarray) -> None:
        node = self._node(path)
        if isinstance(node, Op):
            return
        ks, kids = self._parts(node, path, d)
        options = list(self._assignments(ks, r))
        weights = np.array([math.prod(self._count(p, d, rest) for p, _ in kids)
                            for _, rest in options], dtype=float)
        combo, rest = options[rng.choice(len(options), p=weights / weights.sum())]
        for k, x in zip(ks, combo, strict=True):
            row[k] = x
        for p, _ in kids:
            self._sample_dim(rng, p, d, rest, row)

    def sample(self, rng: np.random.Generator, k: int) -> np.ndarray:
        """k tilings drawn uniformly (with replacement), one row each."""
        rows = np.ones((k, len(self.structure.slots)), dtype=np.int64)
        if self.count == 0:
            return rows[:0]
        for i in range(k):
            for d in self.dims:
                self._sample_dim(rng, ROOT, d, self.w.sizes[d], rows[i])
        return rows
