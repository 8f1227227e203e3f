"""Seconds for the tile search to come within 1 % of the exhaustive optimum, per seed
(run once; not part of the tests).

    python search/target_seeds.py --seeds 10 --seconds 30 --out search/target-g1-edge.json
    python search/target_seeds.py --seeds 3 --evaluations 2000 --methods mcts,random,tpe \
        --out search/methods-g1-edge.json

Searches the space that `search/exhaustive.py` enumerated (same structure, same
restriction) with each method, warm-started as `tileflow explore` does (the builder's
factors and the closed-form DRAM-minimising tiles), and records when each seed's best
first came within 1 % of the optimum in `search/exhaustive-g1-edge.json`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from exhaustive import restricted_space  # noqa: E402

from tileflow.explore.factors.space import Space  # noqa: E402
from tileflow.explore.tilesearch.fit import closed_form_tiles, warm_rows  # noqa: E402
from tileflow.explore.tilesearch.search import search  # noqa: E402


def run_seed(space: Space, method: str, seed: int, seconds: float | None, optimum: float,
             evaluations: int | None = None) -> dict:
    s = space.structure
    warm = [s.default_factors]
    tiles = closed_form_tiles(s.workload, s.arch)
    if tiles:
        warm += warm_rows(space, tiles, np.random.default_rng(seed))
    start = time.perf_counter()
    state = {"best": float("inf"), "hit": None, "evals": 0, "hit_evals": None}

    def record(rows, result) -> None:
        state["evals"] += len(rows)
        best = float(np.min(result.cost))
        state["best"] = min(state["best"], best)
        if state["hit"] is None and state["best"] <= optimum * 1.01:
            state["hit"] = time.perf_counter() - start
            state["hit_evals"] = state["evals"]

    search(space, method, budget_evals=evaluations, budget_seconds=seconds, seed=seed,
           warm=warm, record=record)
    return {"seed": seed, "method": method, "best_cycles": state["best"],
            "gap": state["best"] / optimum - 1, "seconds_to_1pct": state["hit"],
            "evaluations_to_1pct": state["hit_evals"], "evaluations": state["evals"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--evaluations", type=int, help="budget in evaluations instead of seconds")
    p.add_argument("--methods", default="mcts")
    p.add_argument("--exhaustive", default=str(HERE / "exhaustive-g1-edge.json"))
    p.add_argument("--out", default=str(HERE / "target-g1-edge.json"))
    args = p.parse_args()
    ref = json.loads(Path(args.exhaustive).read_text())
    space = restricted_space(ref["workload"], ref["accelerator"], ref["structure"],
                             ref["restriction"] is not None)
    space = Space(space.structure, non_divisors=True, fixed=space.fixed)
    slots = [f"{x.path}[{x.index}]{x.dim}{':Sp' if x.spatial else ''}"
             for x in space.structure.slots]
    if slots != ref["slots"]:
        sys.exit(f"{args.exhaustive} was enumerated for a structure of {len(ref['slots'])} "
                 f"slots; the builder now gives {len(slots)}: run search/exhaustive.py again")
    rows = []
    for method in args.methods.split(","):
        for seed in range(args.seeds):
            seconds = None if args.evaluations else args.seconds
            row = run_seed(space, method, seed, seconds, ref["optimum_cycles"],
                           args.evaluations)
            rows.append(row)
            print(json.dumps(row), flush=True)
    hits = {m: sum(1 for r in rows if r["method"] == m and r["seconds_to_1pct"] is not None)
            for m in args.methods.split(",")}
    data = {"optimum_cycles": ref["optimum_cycles"],
            "seconds_per_seed": None if args.evaluations else args.seconds,
            "evaluations_per_seed": args.evaluations,
            "within_1pct": hits, "runs": rows, "command": "python " + " ".join(sys.argv)}
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, args.out)
    print(hits)


if __name__ == "__main__":
    main()
