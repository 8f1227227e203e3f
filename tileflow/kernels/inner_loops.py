"""How the generated C runs each operator's innermost loop.

The C kernel keeps the tree's loop order (`build.KEEP_LOOP_ORDER`), so the innermost `for`
around an operator's statement is the last loop of factor > 1 on its path; whether some
loop around the statement runs in SIMD vectors is the compiler's decision, which it
reports (`kernels.vectorised`). Each operator's work is then of one of three kinds:

* simd: in a vectorised loop of n iterations, `floor(n / words) * words` of them run in
  vectors of `words` lanes (the rest is a scalar remainder);
* chain: the iterations of a reduction loop kept innermost that do not run in vectors:
  each adds to the same output element, so it waits for the previous add (latency, not
  throughput);
* scalar: everything else: independent scalar iterations.

Each start of the innermost loop (operations / trip of them) pays the loop's set-up and
the outer loops' overhead."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tileflow.cost.explain import leaf_work
from tileflow.kernels.nest import Nest

KINDS = ("simd", "scalar", "chain")
COLUMNS = (*(f"{k}_work" for k in KINDS), "loop_starts")


@dataclass(frozen=True)
class InnerLoop:
    """One operator's innermost loop and the vectorised loop around its statement."""

    op: str
    dim: str  # "" where no loop of factor > 1 is on the operator's path
    trip: int  # iterations per start
    reduction: bool  # the loop's dim is one the operator reduces
    work: float  # operations x the unit's cycles per operation (recomputation included)
    starts: float  # times the loop starts: operations / trip
    simd_trip: int = 0  # iterations of the vectorised loop (0: none is)
    simd_words: int = 0  # lanes of its vectors

    def split(self) -> dict[str, float]:
        """The work in each kind of iteration (`KINDS`)."""
        out = dict.fromkeys(KINDS, 0.0)
        share = 0.0
        if self.simd_words and self.simd_trip:
            share = (self.simd_trip // self.simd_words) * self.simd_words / self.simd_trip
        out["simd"] = self.work * share
        out["chain" if self.reduction else "scalar"] = self.work * (1 - share)
        return out


def inner_loops(nest: Nest, simd: Mapping[str, tuple[int, int]]) -> list[InnerLoop]:
    """The innermost loop of every operator of an analysed dataflow; `simd`: per operator
    whose statement is in a vectorised loop, (that loop's trip count, its vector's words)."""
    arch, w = nest.arch, nest.workload
    leaves = leaf_work(w, arch, nest.flow)
    out = []
    for op in w.ops:
        leaf = leaves[op.name]
        weight = 1.0 if op.unit == "matrix" else arch.unit(op.unit).cycles(op.function)
        loops = nest.loops(op.name)
        dim, trip = loops[-1] if loops else ("", 1)
        simd_trip, words = simd.get(op.name, (0, 0))
        out.append(InnerLoop(op.name, dim, trip, dim in op.reduction_dims, leaf.ops * weight,
                             leaf.ops / trip, simd_trip, words))
    return out


def features(nest: Nest, simd: Mapping[str, tuple[int, int]]) -> dict[str, float]:
    """Per kernel: the work in SIMD, scalar and chained iterations (`simd_work`,
    `scalar_work`, `chain_work`) and how often innermost loops start (`loop_starts`)."""
    out = dict.fromkeys(COLUMNS, 0.0)
    for loop in inner_loops(nest, simd):
        for k, v in loop.split().items():
            out[f"{k}_work"] += v
        out["loop_starts"] += loop.starts
    return out


def kernel_features(nest: Nest, style: str = "registers") -> dict[str, float]:
    """`features` of an analysed dataflow's single-threaded C kernel (of the generator's
    `style`), with the loops the compiler vectorises in it."""
    from tileflow.kernels.c_source import generate_c
    from tileflow.kernels.vectorised import simd_loops

    return features(nest, simd_loops(generate_c(nest, threads=False, style=style).text))


def add_columns(frame, arch, style: str = "registers"):
    """`frame` (measured kernels, with their `workload`, `shape` and `tree` columns) with the
    innermost-loop counts of every row (`features`) added where missing: they come from the
    tree, so measurements saved before these counts existed are costed the same way."""
    import json

    from tileflow.kernels.nest import analyse
    from tileflow.specs.dataflow import parse_dataflow
    from tileflow.specs.workload import load_workload
    from tileflow.specs.yamlfile import Field

    if all(c in frame and frame[c].notna().all() for c in COLUMNS):
        return frame
    rows = []
    for r in frame.itertuples():
        sizes = {k: int(v) for k, v in (item.split("=") for item in str(r.shape).split())}
        w = load_workload(str(r.workload), sizes)
        flow = parse_dataflow(Field(json.loads(r.tree), "measurements.csv"))
        rows.append(kernel_features(analyse(w, arch, flow), style))
    out = frame.copy()
    for c in COLUMNS:
        out[c] = [row[c] for row in rows]
    return out
