"""A latency form for the generated CUDA kernels, from their structure before they run.

The CPU path's form (compute overlapped with each boundary's transfers) reads a GPU's
kernels wrongly: their time is set by how the generator spread the work, not by the
tree's traffic. Per dataflow, from the tree and the kernels generated from it:

* `launches`: kernels launched (init kernels and stages); each pays a fixed overhead;
* `serial_steps`: the statements one thread executes in turn, summed over the operators
  (siblings are separated by barriers) and multiplied by the waves of its launch
  (`ceil(blocks / (SMs x resident blocks per SM))`): an operator's work divided over the
  blocks actually launched and the threads its tile spreads it over;
* `warp_steps_per_sm`: warp-instructions of statements an SM issues (an operator on n
  threads runs in ceil(n / 32) warps), over the SMs its launch occupies: throughput;
* `global_steps`: the serial steps weighted by the operands each statement reads from or
  writes to global memory (inputs, outputs and intermediates not in shared memory), plus
  each thread's share of the input tiles its block loads into shared memory: the words one
  thread moves through L2 in turn (latency-bound, one after the other);
* `mma_per_sm`: warp-level TF32 matrix operations (m16n16k8 `mma_sync`, their fragment
  loads included) an SM issues, for the operators the generator puts on tensor cores
  (`kernels.cuda_mma`); those operators add nothing to the three scalar counts above.

Cycles = launch_cycles x launches + step_cycles x serial_steps
+ warp_cycles x warp_steps_per_sm + global_cycles x global_steps + mma_cycles x mma_per_sm.
Campaigns prepared before tensor cores (no `mma_ops` column) are read with every operator
scalar, so their `mma_per_sm` is 0."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import numpy as np

from tileflow.calibrate.parameters import Parameter, ParameterSet
from tileflow.cost.explain import leaf_work
from tileflow.kernels.cuda_mma import mma_instructions
from tileflow.kernels.cuda_source import CudaGenerator
from tileflow.kernels.nest import Nest, analyse
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, Op, Tile, ops_under

WARP = 32
THREADS_PER_SM = 2048  # resident threads per SM (compute capability 9.0)
BLOCKS_PER_SM = 32
SHARED_PER_SM_BYTES = 228 * 1024
COLUMNS = ("launches", "serial_steps", "warp_steps_per_sm", "global_steps", "mma_per_sm")
# traffic views compared with ncu: every input read once and every output written once
# (DRAM when the working set fits in L2), and every global operand access of the statements
# (L2 and L1 requests before any caching)
TRAFFIC_COLUMNS = ("compulsory_dram_bytes", "global_access_bytes")
STAGED = "staged_tiles"  # input tiles the kernels load into shared memory
WORD_BYTES = 4


def _stages(flow: Dataflow) -> list[Tile]:
    """The generator's stages: one kernel per child of a root without loops whose children
    are all tiles, else the root."""
    root = flow.root
    if not root.loops and len(root.children) > 1 and all(
            isinstance(c, Tile) for c in root.children):
        return list(root.children)
    return [root]


def op_threads(nest) -> dict[str, int]:
    """Threads each operator's statement is spread over: the product of the spatial loops,
    at or below the SMs, of the one-operator tiles on its path (the generator's thread
    loops); 1 where one thread of the block computes it."""
    arch, w = nest.arch, nest.workload
    out = {op.name: 1 for op in w.ops}

    def walk(tile: Tile, product: int) -> None:
        level = arch.level_index[tile.level]
        ops = [c.op for c in tile.children if isinstance(c, Op)]
        below = list(ops_under(tile))
        if level >= nest.core_level and len(below) == 1:
            reductions = nest.reduction_dims_below(tile)
            product *= math.prod(lp.factor for lp in tile.loops
                                 if lp.spatial and lp.dim not in reductions)
        for name in ops:
            out[name] = product
        for child in tile.children:
            if isinstance(child, Tile):
                walk(child, product)

    walk(nest.root, 1)
    return out


def kernel_features(nest: Nest, stage_inputs: bool = True,
                    tensor_cores: bool = True) -> dict[str, float]:
    """The counts of the module docstring for one analysed dataflow, for the kernels
    `generate_cuda(nest, stage_inputs=..., tensor_cores=...)` makes of it."""
    arch, w = nest.arch, nest.workload
    sms = arch.levels[nest.core_level].fanout
    gen = CudaGenerator(nest, "f", stage_inputs, tensor_cores)
    source = gen.build()
    stage_launches = [la for la in source.launches if "_stage" in la.name]
    stages = _stages(nest.flow)
    launch_of: dict[str, object] = {}
    for stage, la in zip(stages, stage_launches, strict=True):
        for op in ops_under(stage):
            launch_of[op] = la
    shared = {t for t, b in gen.buffers.items() if b.local and t not in gen.scratch}
    leaves = leaf_work(w, arch, nest.flow)
    threads = op_threads(nest)
    out = dict.fromkeys((*COLUMNS, *TRAFFIC_COLUMNS, STAGED), 0.0)
    out[STAGED] = float(gen.staged_count)
    out["compulsory_dram_bytes"] = float(WORD_BYTES * sum(
        math.prod(w.shapes[t]) for t in (*w.inputs, *w.outputs)))
    out["launches"] = float(len(source.launches))
    for op in w.ops:
        la = launch_of[op.name]
        staging = gen.staged_words.get(op.name, 0.0)  # words of its tiles in shared memory
        if op.name in gen.mma_ops:  # no scalar statements; its input tiles still staged
            out["mma_per_sm"] += mma_instructions(op, w.sizes) / min(la.blocks, sms)
            out["global_steps"] += staging / (la.blocks * max(la.threads, 1)) * math.ceil(
                la.blocks / sms)
            out["global_access_bytes"] += WORD_BYTES * staging
            continue
        ops = leaves[op.name].ops
        weight = 1.0 if op.unit == "matrix" else arch.unit(op.unit).cycles(op.function)
        n = max(threads[op.name], 1)
        smem_bytes = 4 * sum(math.prod(gen.buffers[t].extents) for t in shared)
        resident = max(1, min(BLOCKS_PER_SM, THREADS_PER_SM // max(la.threads, 1),
                              SHARED_PER_SM_BYTES // max(smem_bytes, 1)))
        waves = math.ceil(la.blocks / (sms * resident))
        per_thread = ops / (la.blocks * n)
        out["serial_steps"] += per_thread * weight * waves
        out["warp_steps_per_sm"] += (ops / n) * math.ceil(n / WARP) * weight / min(
            la.blocks, sms)
        operands = [a.tensor for a in op.inputs] + [op.output.tensor]
        in_shared = shared | gen.staged_for.get(op.name, set())
        global_operands = sum(t not in in_shared for t in operands)
        # tiles staged in shared memory: their words loaded by all the block's threads
        out["global_steps"] += (per_thread * global_operands
                                + staging / (la.blocks * max(la.threads, 1))) * waves
        out["global_access_bytes"] += WORD_BYTES * (ops * global_operands + staging)
    return out


def features_of(rows, arch: Architecture, stage_inputs: bool = True
                ) -> dict[str, np.ndarray]:
    """The counts and traffic views of every row of a campaign frame (its workload, shape
    and tree columns)."""
    from tileflow.specs.dataflow import parse_dataflow
    from tileflow.specs.workload import load_workload
    from tileflow.specs.yamlfile import Field

    cache: dict[tuple[str, str], Workload] = {}
    out: dict[str, list[float]] = {c: [] for c in (*COLUMNS, *TRAFFIC_COLUMNS, STAGED)}
    tensor_cores = "mma_ops" in getattr(rows, "columns", ())  # older campaigns: scalar
    for r in rows.itertuples():
        key = (r.workload, r.shape)
        if key not in cache:
            sizes = {k: int(v) for k, v in (p.split("=") for p in r.shape.split())}
            cache[key] = load_workload(r.workload, sizes)
        flow = parse_dataflow(Field(json.loads(r.tree), "campaign.csv"))
        f = kernel_features(analyse(cache[key], arch, flow), stage_inputs, tensor_cores)
        for c in out:
            out[c].append(f[c])
    return {c: np.asarray(v, float) for c, v in out.items()}


def parameter_set() -> ParameterSet:
    """Cycles per launch (a few microseconds at most), per serial step of one thread (an
    issue slot to a dependent chain of loads and a multiply-add), per warp-instruction an
    SM issues (a quarter cycle: four schedulers, to 16), per global word a thread moves in
    turn (an L1 hit to an L2 miss)."""
    return ParameterSet((
        Parameter("launch_cycles", "cycles per kernel launch", 10.0, 2e4, 4000.0, "cycles"),
        Parameter("step_cycles", "cycles per serial statement of one thread", 0.25, 256.0,
                  4.0, "cycles"),
        Parameter("warp_cycles", "cycles per warp-instruction of an SM", 0.05, 64.0, 0.25,
                  "cycles"),
        Parameter("global_cycles", "cycles per global-memory word of one thread in turn",
                  0.1, 1024.0, 30.0, "cycles"),
        Parameter("mma_cycles", "cycles per warp-level TF32 mma_sync (m16n16k8) of an SM",
                  0.25, 256.0, 4.0, "cycles"),
    ))


def cycles(features: Mapping[str, np.ndarray], values: np.ndarray) -> np.ndarray:
    v = dict(zip(parameter_set().names, values, strict=True))
    return (v["launch_cycles"] * features["launches"]
            + v["step_cycles"] * features["serial_steps"]
            + v["warp_cycles"] * features["warp_steps_per_sm"]
            + v["global_cycles"] * features["global_steps"]
            + v["mma_cycles"] * features.get("mma_per_sm", 0.0))
