"""`tileflow sweep CONFIG.yaml`: the explorer's best dataflow at every point of a sweep over
accelerator parameters, with the data-movement bound; the command-line wiring."""

from __future__ import annotations

import argparse
import math
import sys

from tileflow.errors import InputError
from tileflow.outputs import json_text

EPILOG = """example:
  tileflow sweep search/sweep-gemm-chain.yaml            # L1 capacity of Edge, with the bound
  tileflow sweep search/sweep-gemm-chain.yaml --resume   # continue after Ctrl-C

A sweep config is an exploration config (see `tileflow explore --help`) with a `sweep`
section:

  accelerator: edge
  workload: gemm-chain
  sizes: {b: 1, m: 256, l: 256, k: 64, n: 64}
  structures: [tileflow-pipe, chimera, flat-rgran]
  budget: {evaluations: 1000}
  sweep:
    parameters:                      # LEVEL.capacity_bytes, LEVEL.bandwidth_gbps,
      L1.capacity_bytes: [8192, 32768, 131072]   # LEVEL.fanout, matrix.size, vector.lanes...
    mode: grid                       # or zip
    bound: L1                        # the level the data-movement bound is drawn against
    max_area_mm2: 2.0                # skip points with more chip area (needs technology_nm)

Points run fewer resources first; each starts from its neighbours' best dataflows that are
still valid on it, and summary.md flags a point worse than a neighbour with fewer resources.

Outputs in OUT/: sweep.csv, summary.md, summary.json, sweep.png, bound.png, and per point
accelerators/pNNN.yaml, studies/pNNN.db, points/pNNN/ (best.yaml, bound.yaml, ...).
"""


def add_sweep_parser(sub) -> None:
    sw = sub.add_parser("sweep", help="the best dataflow at every point of a sweep over "
                        "accelerator parameters, against the data-movement bound",
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sw.add_argument("config", help="sweep config YAML (an explore config with a `sweep` section)")
    budget = sw.add_mutually_exclusive_group()
    budget.add_argument("--budget-evals", type=int, metavar="N",
                        help="evaluations per point (overrides the config's budget)")
    budget.add_argument("--budget-seconds", type=float, metavar="S",
                        help="seconds of search per point (overrides the config's budget)")
    sw.add_argument("--seed", type=int, help="random seed (overrides the config's)")
    sw.add_argument("--resume", action="store_true",
                    help="continue the sweep in OUT: finished points are skipped, an "
                         "unfinished point's study continues")
    sw.add_argument("--out", metavar="DIR", help="output folder (overrides the config's)")
    sw.add_argument("--no-bound", action="store_true", help="skip the data-movement bound")
    sw.add_argument("--json", action="store_true", help="print summary.json on stdout")
    sw.add_argument("--quiet", action="store_true",
                    help="no progress bar, estimate or progress lines")


def cmd_sweep(args) -> int:
    import dataclasses

    from tileflow.explore.sweeps.sweep import run_sweep
    from tileflow.explore.sweeps.sweep_config import load_sweep
    from tileflow.explore.sweeps.sweep_outputs import write_all
    from tileflow.outputs import check_output_folder

    config = load_sweep(args.config)
    for flag, value, low in (("--budget-evals", args.budget_evals, 1), ("--seed", args.seed, 0)):
        if value is not None and value < low:
            raise InputError(f"{flag} must be an integer >= {low}, got {value}")
    if args.budget_seconds is not None and not (math.isfinite(args.budget_seconds)
                                                and args.budget_seconds > 0):
        raise InputError(f"--budget-seconds must be a positive number, got "
                         f"{args.budget_seconds}")
    explore = config.explore.with_budget(args.budget_evals, args.budget_seconds)
    if args.seed is not None:
        explore = dataclasses.replace(explore, seed=args.seed)
    config = dataclasses.replace(config, explore=explore, out=args.out or config.out,
                                 bound_level=None if args.no_bound else config.bound_level)
    config.explore.load()  # unknown names, sizes, preset: the config's line, before the work
    check_output_folder(config.out, "--out")
    progress = not args.quiet and sys.stderr.isatty()
    from tileflow.explore.studies.heartbeat import interval_for

    state = run_sweep(config, args.resume, progress, write=write_all,
                      heartbeat_s=interval_for(args.quiet))
    data = write_all(state)
    if args.json:
        print(json_text(data, indent=2))
    else:
        print(f"{len(state.rows)} of {data['points_total']} points in {state.seconds:.1f} s"
              + (" (interrupted; --resume continues)" if state.interrupted else ""))
        for r in state.rows:
            extra = ""
            if r.get("bound_dram_words"):
                extra = (f", bound {r['bound_dram_words']:,.0f} ({r['gap']:.2f}x)"
                         if r.get("gap") else f", bound {r['bound_dram_words']:,.0f}")
            cycles = f"{r['cycles']:,.0f} cycles" if r["cycles"] else "nothing valid"
            if r.get("status") == "over_area_limit":
                cycles = f"not run: {r['area_mm2']:.3f} mm2 is over the area limit"
            dram = f", {r['dram_words']:,.0f} DRAM words" if r["dram_words"] else ""
            area = f", {r['area_mm2']:.3f} mm2" if r.get("area_mm2") and r["cycles"] else ""
            print(f"  {r['label']} {r['point']}: {cycles}{dram}{area}{extra}")
        flagged = data["monotonicity"]["flags"]
        for f in flagged:
            print(f"  not monotone: {f['point']} has a worse {f['objective']} than "
                  f"{f['neighbour']}, which has fewer resources (+{100 * f['excess']:.3g} %)")
        print(f"outputs in {config.out}/: " + ", ".join(data["files"]))
    return 130 if state.interrupted else 0
