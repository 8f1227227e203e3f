"""What a kernel generator needs to know of a tree beyond its shape: the stride of every
loop, each operator's start offset and extents, where each intermediate lives (a local
buffer of its tile's size at an on-chip home, else a whole array) and which spatial loops
run on cores. Read from the model's own arrays of the tree at its factors (one row)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from tileflow.errors import InputError
from tileflow.evaluator.engine import Rows
from tileflow.evaluator.structure import structure_of
from tileflow.evaluator.violations import check_tree
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, Tile, node_depth, ops_under


@dataclass(frozen=True)
class Buffer:
    """Where an intermediate lives while the kernel runs."""

    tensor: str
    lca: str  # node path of the common ancestor of its producer and consumers
    local: bool  # a local buffer per step of `lca` (else the whole tensor, in memory)
    extents: tuple[int, ...]  # per axis: the local buffer's extent (local) or the shape
    origin_dims: tuple[str, ...]  # per axis: the producer's dim the axis follows

    @property
    def words(self) -> int:
        return math.prod(self.extents)


@dataclass(frozen=True)
class Nest:
    """A dataflow analysed for code generation: `rows`, the model's arrays of it (one row)."""

    workload: Workload
    arch: Architecture
    flow: Dataflow
    rows: Rows

    @property
    def root(self) -> Tile:
        return self.flow.root

    @cached_property
    def strides(self) -> dict[tuple[str, int], int]:
        """(tile path, loop index) -> stride: the extent the loop's inner loops cover."""
        return {key: int(self.rows.stride[slot][0]) for key, slot in self.rows.c.slot_of.items()}

    def shift(self, op: str, dim: str) -> int:
        """Where the operator starts along `dim` (a windowed consumer's halo: negative)."""
        shift = self.rows.shift[op].get(dim)
        return 0 if shift is None else int(shift[0])

    def extents_from(self, op: str, position: int) -> dict[str, int]:
        """Each dim's extent covered by the operator's tiles from path position `position`
        down."""
        return {d: int(v[0]) for d, v in self.rows.extents[op][position].items()}

    def extent_below(self, op: str, position: int, dim: str) -> int:
        """The extent of `dim` the operator's tiles strictly below `position` cover."""
        extents = self.rows.extents[op]
        return int(extents[position + 1][dim][0]) if position + 1 < len(extents) else 1

    def loops(self, op: str) -> list[tuple[str, int]]:
        """(dim, iterations) of the operator's loops of more than one iteration, outermost
        first."""
        n = self.rows.n
        return [(lp.dim, int(n[lp.slot][0])) for lp in self.rows.c.paths[op].loops
                if n[lp.slot][0] > 1]

    @cached_property
    def core_level(self) -> int:
        """Index of the first level with several instances per parent (the cores)."""
        levels = self.arch.levels
        return next((i for i, lv in enumerate(levels) if lv.fanout > 1), len(levels))

    @cached_property
    def buffers(self) -> dict[str, Buffer]:
        w, c = self.workload, self.rows.c
        out = {}
        for t in w.intermediates:
            producer = w.op_by_name[w.producer[t]]
            lca = c.lca[t]
            depth = node_depth(lca)
            dims = tuple(axis.terms[0][0] for axis in producer.output.axes)
            local = c.homes[t] > 0
            if local:
                extents = tuple(min(self.extent_below(producer.name, depth, d),
                                    w.sizes[d] - self.shift(producer.name, d)) for d in dims)
            else:
                extents = tuple(w.shapes[t])
            out[t] = Buffer(t, lca, local, extents, dims)
        return out

    def reduction_dims_below(self, tile: Tile) -> set[str]:
        return {d for o in ops_under(tile) for d in self.workload.op_by_name[o].reduction_dims}


def analyse(w: Workload, arch: Architecture, flow: Dataflow) -> Nest:
    carried = [op.name for op in w.ops if op.carried]
    if carried:  # the generators emit no running-state rescaling: the kernel would be wrong
        raise InputError(f"kernels are not generated for workloads whose operators carry "
                         f"state across a reduction loop ({', '.join(carried)} in "
                         f"'{w.name}'); evaluate them with the model")
    check_tree(w, arch, flow)  # what the model refuses (a summed output split over cores)
    structure = structure_of(w, arch, flow)
    rows = Rows(structure.compiled,
                structure.all_loop_factors(structure.default_factors.reshape(1, -1)))
    return Nest(w, arch, flow, rows)
