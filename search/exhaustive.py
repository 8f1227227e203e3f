"""Find the optimum of one structure's divisor-factor space with the batched evaluator and
write its size and optimum as JSON (run once; not part of the tests).

    python search/exhaustive.py --out search/exhaustive-g1-edge.json

The space: every assignment of divisor factors to the structure's loops (loop order fixed,
each dimension's factors multiplying exactly to its size, spatial factors within each
tile's fan-out). `--lanes` holds the vector stages' spatial factors along the score columns
at the lane count (fewer lanes only add vector steps), a smaller space. The branch and bound
(`tileflow.explore.factors.exhaustive.branch_and_bound`) accounts for every point but evaluates only
those whose lower bound on the cycles is below the best found so far, so the optimum is that
of the whole space; `--every-point` evaluates every point instead. Progress is saved after
each product of the space to `--checkpoint`: run the same command again to go on after an
interruption (the file is removed once the result is written)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tileflow.cost import evaluate  # noqa: E402
from tileflow.dataflows import build  # noqa: E402
from tileflow.evaluator.structure import structure_of  # noqa: E402
from tileflow.explore.factors.exhaustive import (  # noqa: E402
    Enumeration,
    branch_and_bound,
    divisor_optimum,
    lane_restriction,
    space_size,
)
from tileflow.explore.factors.space import Space, divisor_products  # noqa: E402
from tileflow.specs.arch import load_arch  # noqa: E402
from tileflow.specs.workload import load_workload  # noqa: E402


def restricted_space(workload: str, arch: str, dataflow: str, lanes: bool) -> Space:
    w, a = load_workload(workload), load_arch(arch)
    structure = structure_of(w, a, build(dataflow, w, a))
    fixed = lane_restriction(structure) if lanes else {}
    return Space(structure, non_divisors=False, fixed=fixed)


size = space_size


def slot_names(space: Space) -> list[str]:
    return [f"{x.path}[{x.index}]{x.dim}{':Sp' if x.spatial else ''}"
            for x in space.structure.slots]


def write_json(path: str | Path, data: dict) -> None:
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="G1")
    p.add_argument("--arch", default="edge")
    p.add_argument("--dataflow", default="tileflow-pipe")
    p.add_argument("--lanes", action="store_true",
                   help="hold the vector stages' column spread at the lane count")
    p.add_argument("--every-point", action="store_true", help="evaluate every point")
    p.add_argument("--checkpoint", help="progress file (default: OUT with .progress.json)")
    p.add_argument("--out", default="search/exhaustive-g1-edge.json")
    args = p.parse_args()
    space = restricted_space(args.workload, args.arch, args.dataflow, args.lanes)
    full = size(Space(space.structure, non_divisors=False))
    total = size(space)
    products = sum(1 for _ in divisor_products(space))
    print(f"divisor space: {full:,} points; enumerated: {total:,} in {products} products",
          flush=True)
    s = space.structure
    key = {"command": "python " + " ".join(sys.argv), "slots": slot_names(space)}
    if args.every_point:
        start = time.perf_counter()
        best, best_row, valid, _ = divisor_optimum(space, lambda done, best: print(
            f"\r{done:,}/{total:,} best {best:,.1f}", end="", flush=True))
        state = Enumeration(products, best, best_row, valid, total, 0)
        seconds = time.perf_counter() - start
    else:
        checkpoint = Path(args.checkpoint or Path(args.out).with_suffix(".progress.json"))
        state, seconds = Enumeration(), 0.0
        if checkpoint.exists():
            saved = json.loads(checkpoint.read_text())
            if {k: saved[k] for k in key} != key:
                sys.exit(f"{checkpoint} is the progress of another run; remove it first")
            state, seconds = Enumeration(**saved["state"]), saved["seconds"]
            print(f"resuming after {state.products_done} of {products} products", flush=True)
        start = time.perf_counter() - seconds

        def save(st: Enumeration) -> None:
            elapsed = time.perf_counter() - start
            write_json(checkpoint, {**key, "state": vars(st), "seconds": elapsed})
            print(f"{st.products_done}/{products} products, {st.done:,}/{total:,} points, "
                  f"{st.evaluated:,} evaluated, best {st.best:,.1f}, {elapsed:.0f} s",
                  flush=True)

        # the builder's own factors, where they lie in the space, start the bound
        default = s.default_factors
        inside = space.exact(default) and all(default[i] == v for i, v in space.fixed.items())
        state = branch_and_bound(space, state, save, default if inside else None)
        seconds = time.perf_counter() - start
        assert state.done == total, (state.done, total)
    check = evaluate(s.workload, s.arch, s.dataflow(state.best_row))  # the scalar reference
    data = {
        "workload": args.workload, "accelerator": args.arch, "structure": args.dataflow,
        "divisor_space_size": full, "enumerated": total, "products": products,
        "method": "every point evaluated" if args.every_point else
        "branch and bound: partial assignments whose latency floor over every completion is "
        "not below the best valid cycles so far are skipped with their completions (exact: "
        "the optimum of every point of the space)",
        "evaluated": state.evaluated, "pruned": state.pruned,
        "valid_among_evaluated": state.valid,
        "restriction": None if not args.lanes else
        "vector stages' spatial factors along the score columns held at the lane count",
        "fixed_slots": {str(i): v for i, v in space.fixed.items()},
        "slots": key["slots"],
        "optimum_cycles": state.best, "optimum_factors": state.best_row,
        "scalar_check_cycles": check.cycles, "seconds": seconds,
        "points_per_second": total / seconds,
        "command": key["command"]}
    write_json(args.out, data)
    if not args.every_point:
        checkpoint.unlink(missing_ok=True)  # the result holds everything it recorded
    print(f"\noptimum {state.best:,.1f} cycles (scalar check {check.cycles:,.1f}); "
          f"{state.evaluated:,} of {total:,} points evaluated; {seconds:.0f} s")


if __name__ == "__main__":
    main()
