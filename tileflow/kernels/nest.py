"""What a kernel generator needs to know of a tree beyond its shape: the stride of every
loop, each operator's start offset, where each intermediate lives (a local buffer of its
tile's size at an on-chip home, else a whole array) and which spatial loops run on cores."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from tileflow.analysis.prepare import Plan, loop_strides, prepare
from tileflow.errors import InputError
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, Tile, node_depth


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
    """A dataflow analysed for code generation."""

    plan: Plan

    @property
    def workload(self) -> Workload:
        return self.plan.workload

    @cached_property
    def strides(self) -> dict[tuple[str, int], int]:
        """(tile path, loop index) -> stride: the extent the loop's inner loops cover."""
        return loop_strides(self.workload, self.plan.flow.root)

    def shift(self, op: str, dim: str) -> int:
        return self.plan.paths[op].shift.get(dim, 0)

    @cached_property
    def core_level(self) -> int:
        """Index of the first level with several instances per parent (the cores)."""
        levels = self.plan.arch.levels
        return next((i for i, lv in enumerate(levels) if lv.fanout > 1), len(levels))

    @cached_property
    def buffers(self) -> dict[str, Buffer]:
        w, plan = self.workload, self.plan
        out = {}
        for t in w.intermediates:
            producer = w.op_by_name[w.producer[t]]
            path = plan.paths[producer.name]
            lca = plan.lca[t]
            depth = node_depth(lca)
            dims = tuple(axis.terms[0][0] for axis in producer.output.axes)
            local = plan.homes[t] > 0
            if local:
                extents = tuple(min(path.extent_below(depth, d), w.sizes[d] - self.shift(
                    producer.name, d)) for d in dims)
            else:
                extents = tuple(w.shapes[t])
            out[t] = Buffer(t, lca, local, extents, dims)
        return out

    def reduction_dims_below(self, tile: Tile) -> set[str]:
        from tileflow.tree import ops_under

        return {d for o in ops_under(tile) for d in self.workload.op_by_name[o].reduction_dims}


def analyse(w: Workload, arch: Architecture, flow: Dataflow) -> Nest:
    carried = [op.name for op in w.ops if op.carried]
    if carried:  # the generators emit no running-state rescaling: the kernel would be wrong
        raise InputError(f"kernels are not generated for workloads whose operators carry "
                         f"state across a reduction loop ({', '.join(carried)} in "
                         f"'{w.name}'); evaluate them with the model")
    return Nest(prepare(w, arch, flow))
