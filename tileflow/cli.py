"""The `tileflow` command line: evaluate a dataflow, compare baselines, benchmark."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from tileflow.errors import InputError

EXAMPLES = """examples:
  tileflow compare --arch edge --workload attention
  tileflow compare --arch cloud --workload G3 --json
  tileflow compare --arch cloud --workload C1 --plot c1.png
  tileflow compare --arch edge --workload gemm-chain --preset G3
  tileflow evaluate --arch edge --workload attention --dataflow flat-rgran --detail
  tileflow evaluate --arch edge --workload attention --dataflow chimera --tile m=64 --tile l=128
  tileflow evaluate --arch edge --workload gemm-chain --dataflow my-tree.yaml --set m=1024 --json
  tileflow bench --arch edge --workload attention
  tileflow reproduce --out validate
  tileflow validate rtl
"""


def _pairs(values: Sequence[str] | None, flag: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in values or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{flag} expects NAME=INTEGER, got '{item}'")
        try:
            out[key.strip()] = int(value)
        except ValueError:
            raise InputError(f"{flag} expects NAME=INTEGER, got '{item}'") from None
    return out


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", required=True,
                   help="accelerator: a YAML file or a shipped name (edge, cloud, tpu-like, cpu)")
    p.add_argument("--workload", required=True,
                   help="workload: a YAML file, a shipped name (attention, gemm-chain, "
                        "conv-chain, mlp) or a preset (G1..G12, C1..C8)")
    p.add_argument("--preset", metavar="NAME",
                   help="a size preset of the workload, e.g. G3 for gemm-chain")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="override a dimension or parameter size (repeatable), e.g. m=1024")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tileflow",
        description="What does this fused dataflow cost on this chip? Data movement per "
                    "memory level, footprint, latency and energy of tile-tree dataflows.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", help="analyse one dataflow", epilog=EXAMPLES,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(ev)
    ev.add_argument("--dataflow", required=True,
                    help="a dataflow YAML file or a baseline name (layerwise, flat-rgran, ...)")
    ev.add_argument("--tile", action="append", metavar="DIM=SIZE",
                    help="tile size for a baseline builder (repeatable), e.g. m=64")
    ev.add_argument("--double-buffer", action="store_true",
                    help="check capacity with every buffer doubled")
    ev.add_argument("--tree", action="store_true", help="also print the tile tree")
    ev.add_argument("--detail", action="store_true",
                    help="also print traffic and energy per level and tensor, and the "
                         "latency of every tile")
    ev.add_argument("--save-dataflow", metavar="PATH",
                    help="write the dataflow as YAML (a starting point for hand edits)")
    cp = sub.add_parser("compare", help="every baseline dataflow side by side",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(cp)
    cp.add_argument("--plot", metavar="PATH",
                    help="bar chart PNG (default: compare-WORKLOAD-ARCH.png here)")
    cp.add_argument("--no-plot", action="store_true", help="do not write the chart")
    rp = sub.add_parser("reproduce", help="re-run the published comparison (G1-G12, C1-C8) "
                        "and write the Markdown report with plots")
    rp.add_argument("--out", default="validate", help="output folder (default: validate)")
    rp.add_argument("--json", action="store_true", help="print every result as JSON")
    va = sub.add_parser("validate", help="model accuracy against measurements")
    va.add_argument("target", choices=["rtl"],
                    help="rtl: the RTL-measured systolic accelerator (1,152 GEMMs, 131 chains)")
    va.add_argument("--data", help="folder with gemm_1152.csv and gemm_chain_131.csv "
                                   "(default: ../shared/datasets/rtl-systolic)")
    va.add_argument("--out", default="validate/rtl-systolic", help="output folder")
    va.add_argument("--json", action="store_true", help="print the summary as JSON")
    bn = sub.add_parser("bench", help="evaluations per second of the analysis")
    _common(bn)
    bn.add_argument("--dataflow", action="append",
                    help="baseline(s) to time (default: flat-rgran and tileflow-pipe)")
    bn.add_argument("--seconds", type=float, default=3.0, help="time per dataflow")
    add_explore_parser(sub)
    return parser


def _load(args):
    from tileflow.specs.arch import load_arch
    from tileflow.specs.workload import load_workload

    overrides = _pairs(args.set, "--set")
    return load_workload(args.workload, overrides, args.preset), load_arch(args.arch)


def _dataflow(name: str, workload, arch, tiles):
    from tileflow.dataflows import build
    from tileflow.specs.dataflow import load_dataflow_file

    path = Path(name)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return load_dataflow_file(path)
    return build(name, workload, arch, tiles)


def _evaluate(flow, workload, arch, **kw):
    from tileflow.analysis.prepare import InvalidDataflow
    from tileflow.cost import evaluate
    from tileflow.specs.dataflow import locate

    try:
        return evaluate(workload, arch, flow, **kw)
    except InvalidDataflow as exc:
        located = locate(exc, flow)
        raise InputError(f"invalid dataflow '{flow.name}': {located.message}",
                         located.source, located.where) from None


def cmd_evaluate(args) -> int:
    from tileflow.report import summary
    from tileflow.tree import render

    workload, arch = _load(args)
    flow = _dataflow(args.dataflow, workload, arch, _pairs(args.tile, "--tile"))
    result = _evaluate(flow, workload, arch, double_buffer=args.double_buffer)
    if args.save_dataflow:
        from tileflow.specs.dataflow import save_dataflow

        save_dataflow(flow, args.save_dataflow)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        if args.tree:
            print(render(flow.root))
        print(summary(result, arch.name, workload.name))
        if args.detail:
            print("\nper level and tensor (words, pJ):")
            print(result.frame().to_string(index=False))
            print("\nper tile (cycles if alone: loads, children, stores):")
            print(result.latency_frame()[["tile", "load_cycles", "inner_cycles",
                                          "store_cycles", "cycles"]].to_string(index=False))
    return 0


def cmd_compare(args) -> int:
    from tileflow.dataflows import baselines_for
    from tileflow.explore.fit import fit_baseline
    from tileflow.report import comparison_plot, comparison_table

    workload, arch = _load(args)
    results = [_evaluate(fit_baseline(name, workload, arch), workload, arch)
               for name in baselines_for(workload)]
    title = f"{workload.name} {dict(workload.sizes)} on {arch.name}"
    plot = None
    if not args.no_plot:
        plot = comparison_plot(results, title,
                               args.plot or f"compare-{workload.name}-{arch.name}.png")
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        print(comparison_table(results, title))
        if plot:
            print(f"\nchart written to {plot}")
    return 0


def cmd_bench(args) -> int:
    from tileflow.bench import run_bench

    workload, arch = _load(args)
    rows = run_bench(workload, arch, args.dataflow or ["flat-rgran", "tileflow-pipe"],
                     args.seconds)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print(f"{row['dataflow']:<14} {row['evals_per_second']:>10,.0f} evaluations/s "
                  f"(median {row['median_us']:.0f} us over {row['runs']} runs)")
    return 0


def cmd_validate(args) -> int:
    from tileflow.rtl import report, study

    results = study.run(args.data)
    command = "tileflow validate rtl" + (f" --data {args.data}" if args.data else "") + (
        f" --out {args.out}" if args.out != "validate/rtl-systolic" else "")
    path = report.write(results, args.out, command)
    numbers = report.summary(results)
    if args.json:
        print(json.dumps(numbers, indent=2))
    else:
        print(f"GEMM set:  MAPE {numbers['gemm_mape']:.2%}, R^2 {numbers['gemm_r2']:.4f} "
              f"(calibrated, held out: {numbers['gemm_mape_calibrated_heldout']:.2%})")
        print(f"fused set: MAPE {numbers['fused_mape']:.2%}, R^2 {numbers['fused_r2']:.4f} "
              f"(calibrated, held out: {numbers['fused_mape_calibrated_heldout']:.2%}); "
              f"DRAM traffic exact on {numbers['fused_dram_exact_rows']} of "
              f"{numbers['fused_rows']} rows")
        print(f"report written to {path}")
    return 0


def cmd_reproduce(args) -> int:
    from tileflow.experiments import run_studies, write_report

    frame = run_studies(progress=not args.json)
    path = write_report(frame, args.out, f"tileflow reproduce --out {args.out}")
    if args.json:
        print(frame.to_json(orient="records"))
    else:
        print(f"report written to {path}")
    return 0


def add_explore_parser(sub) -> None:
    ex = sub.add_parser("explore", help="search dataflows for a workload on an accelerator "
                        "(a study described by a YAML config)",
                        epilog="example: tileflow explore search/quick.yaml --budget-seconds 30",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ex.add_argument("config", help="exploration config YAML (see search/*.yaml)")
    budget = ex.add_mutually_exclusive_group()
    budget.add_argument("--budget-evals", type=int, metavar="N",
                        help="evaluations over all workers (overrides the config's budget)")
    budget.add_argument("--budget-seconds", type=float, metavar="S",
                        help="seconds of search (overrides the config's budget)")
    ex.add_argument("--seed", type=int, help="random seed (overrides the config's)")
    ex.add_argument("--workers", type=int, default=1, metavar="N",
                    help="processes on one study (default 1)")
    ex.add_argument("--storage", metavar="URL",
                    help="study storage: sqlite:///FILE.db or postgresql://... "
                         "(default: in memory; with --workers, OUT/study.db)")
    ex.add_argument("--resume", action="store_true",
                    help="continue the study in --storage (nothing completed is repeated)")
    ex.add_argument("--out", metavar="DIR", help="output folder (overrides the config's)")
    ex.add_argument("--json", action="store_true", help="print summary.json on stdout")
    ex.add_argument("--quiet", action="store_true", help="no progress bar")


def cmd_explore(args) -> int:
    """Run a study; write best.yaml, points.csv, plots, summaries and the timeline."""
    import dataclasses
    import math

    from tileflow.explore.config import load_config
    from tileflow.explore.outputs import write_all
    from tileflow.explore.session import explore

    config = load_config(args.config)
    for flag, value, low in (("--budget-evals", args.budget_evals, 1),
                             ("--workers", args.workers, 1), ("--seed", args.seed, 0)):
        if value is not None and value < low:
            raise InputError(f"{flag} must be an integer >= {low}, got {value}")
    if args.budget_seconds is not None and not (math.isfinite(args.budget_seconds)
                                                and args.budget_seconds > 0):
        raise InputError(f"--budget-seconds must be a positive number, got "
                         f"{args.budget_seconds}")
    config = config.with_budget(args.budget_evals, args.budget_seconds)
    changes = {k: v for k, v in (("seed", args.seed), ("out", args.out)) if v is not None}
    config = dataclasses.replace(config, **changes)
    progress = not args.quiet and sys.stderr.isatty()
    outcome = explore(config, args.storage, args.workers, args.resume, progress)
    data = write_all(outcome, config.out)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        found = data["found"]
        print(f"{data['evaluations']:,} points in {outcome.seconds:.1f} s"
              + (" (interrupted; --resume continues with --storage)" if outcome.interrupted
                 else ""))
        if found:
            extra = (f", {found['speedup_over_layerwise']:.2f}x over Layerwise"
                     if found["speedup_over_layerwise"] else "")
            print(f"best: {found['structure']} structure, {found['cycles']:,.0f} cycles"
                  f"{extra}")
        print(f"outputs in {config.out}/: " + ", ".join(data["files"]))
    return 130 if outcome.interrupted else 0


COMMANDS = {"evaluate": cmd_evaluate, "compare": cmd_compare, "bench": cmd_bench,
            "reproduce": cmd_reproduce, "validate": cmd_validate, "explore": cmd_explore}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except InputError as exc:
        print(f"tileflow: error: {exc.render()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
