"""Enumerate the divisor-factor space of one structure with the batched evaluator and write
its size and optimum as JSON (run once; not part of the tests).

    python search/exhaustive.py --out search/exhaustive-g1-edge.json

The space: every assignment of divisor factors to the structure's loops (loop order fixed,
each dimension's factors multiplying exactly to its size, spatial factors within each
tile's fan-out). `--lanes` holds the vector stages' spatial factors along the score
columns at the lane count (fewer lanes only add vector steps), which is what makes the
space small enough to enumerate; the full size is reported beside it."""

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
from tileflow.explore.exhaustive import divisor_optimum, lane_restriction, space_size  # noqa: E402
from tileflow.explore.space import Space  # noqa: E402
from tileflow.explore.structure import structure_of  # noqa: E402
from tileflow.specs.arch import load_arch  # noqa: E402
from tileflow.specs.workload import load_workload  # noqa: E402


def restricted_space(workload: str, arch: str, dataflow: str, lanes: bool) -> Space:
    w, a = load_workload(workload), load_arch(arch)
    structure = structure_of(w, a, build(dataflow, w, a))
    fixed = lane_restriction(structure) if lanes else {}
    return Space(structure, non_divisors=False, fixed=fixed)


size = space_size


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="G1")
    p.add_argument("--arch", default="edge")
    p.add_argument("--dataflow", default="tileflow-pipe")
    p.add_argument("--no-lanes", action="store_true", help="enumerate the full space")
    p.add_argument("--out", default="search/exhaustive-g1-edge.json")
    args = p.parse_args()
    space = restricted_space(args.workload, args.arch, args.dataflow, not args.no_lanes)
    full = size(Space(space.structure, non_divisors=False))
    total = size(space)
    print(f"divisor space: {full:,} points; enumerated: {total:,}", flush=True)
    start = time.perf_counter()
    best, best_row, valid, _ = divisor_optimum(space, lambda done, best: print(
        f"\r{done:,}/{total:,} best {best:,.1f}", end="", flush=True))
    seconds = time.perf_counter() - start
    s = space.structure
    check = evaluate(s.workload, s.arch, s.dataflow(best_row))  # the scalar reference
    data = {
        "workload": args.workload, "accelerator": args.arch, "structure": args.dataflow,
        "divisor_space_size": full, "enumerated": total, "valid": valid,
        "restriction": None if args.no_lanes else
        "vector stages' spatial factors along the score columns held at the lane count",
        "fixed_slots": {str(i): v for i, v in space.fixed.items()},
        "slots": [f"{x.path}[{x.index}]{x.dim}{':Sp' if x.spatial else ''}" for x in s.slots],
        "optimum_cycles": best, "optimum_factors": best_row,
        "scalar_check_cycles": check.cycles, "seconds": seconds,
        "evaluations_per_second": total / seconds,
        "command": "python " + " ".join(sys.argv)}
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, args.out)
    print(f"\noptimum {best:,.1f} cycles (scalar check {check.cycles:,.1f}); {seconds:.0f} s")


if __name__ == "__main__":
    main()
