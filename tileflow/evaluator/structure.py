"""A dataflow's shape with one slot per loop factor: what the searches vary.

The tree's shape (levels, loop order, spatial marks, primitives, homes) is fixed; every loop
factor is a slot. A factor assignment is an integer vector, one entry per slot, in `slots`
order (tree walk order, loops outermost first)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, Tile, walk, with_factors


@dataclass(frozen=True)
class Slot:
    """One loop factor of the tree: loop `index` of the tile at node `path`."""

    path: str
    index: int
    dim: str
    spatial: bool


@dataclass(frozen=True, eq=False)
class Structure:
    """A tile tree whose loop factors are free; `template` holds default factors."""

    workload: Workload
    arch: Architecture
    template: Dataflow
    slots: tuple[Slot, ...]

    @property
    def default_factors(self) -> np.ndarray:
        tiles = {p: n for p, n in walk(self.template.root) if isinstance(n, Tile)}
        return np.array([tiles[s.path].loops[s.index].factor for s in self.slots],
                        dtype=np.int64)

    @cached_property
    def compiled(self):
        """The factor-independent analysis, done once per tree shape (cached there, and kept
        here: the search asks on every call, and the shared cache's key costs a tree walk)."""
        from tileflow.evaluator.compiled import compiled_for

        return compiled_for(self.workload, self.arch, self.template)

    @cached_property
    def loop_columns(self) -> tuple[np.ndarray, np.ndarray]:
        """Where each slot sits among all loops of the tree, and every loop's default."""
        order = self.compiled.slot_of
        columns = np.array([order[(s.path, s.index)] for s in self.slots], dtype=np.int64)
        defaults = np.array([lp.factor for p, t in walk(self.template.root)
                             if isinstance(t, Tile) for lp in t.loops], dtype=np.int64)
        return columns, defaults

    def all_loop_factors(self, factors: np.ndarray) -> np.ndarray:
        """Factor rows over every loop of the tree (loops without a slot keep their
        template factor)."""
        columns, defaults = self.loop_columns
        if len(columns) == len(defaults) and (columns == np.arange(len(columns))).all():
            return factors
        full = np.repeat(defaults[None, :], len(factors), axis=0)
        full[:, columns] = factors
        return full

    def dataflow(self, factors: Sequence[int]) -> Dataflow:
        """The concrete dataflow for one factor assignment."""
        if len(factors) != len(self.slots):
            raise ValueError(f"expected {len(self.slots)} factors, got {len(factors)}")
        return with_factors(self.template, {(s.path, s.index): int(f)
                                            for s, f in zip(self.slots, factors, strict=True)})


def structure_of(workload: Workload, arch: Architecture, flow: Dataflow) -> Structure:
    """The structure of a dataflow: every loop of every tile becomes a slot."""
    slots = tuple(Slot(path, i, lp.dim, lp.spatial)
                  for path, node in walk(flow.root) if isinstance(node, Tile)
                  for i, lp in enumerate(node.loops))
    return Structure(workload, arch, flow, slots)
