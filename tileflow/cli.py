"""The `tileflow` command line: evaluate a dataflow, compare baselines, benchmark."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tileflow.commands.sweep import add_sweep_parser, cmd_sweep
from tileflow.errors import InputError
from tileflow.outputs import json_text

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


MAX_FLAG_VALUE = 2**31  # --set and --tile values (the same bound as sizes in files)
# of a budget in seconds, kept for what follows the search: gathering the study, writing
# explore's outputs (on a loaded machine 3-5 s after a 60 s study: points.csv grows with the
# points) and the last batch's overrun; the figures only fill what is left
OUTPUTS_RESERVE_S, OUTPUTS_RESERVE_SHARE = 3.0, 0.08


def _pairs(values: Sequence[str] | None, flag: str, minimum: int) -> dict[str, int]:
    """NAME=INTEGER pairs, each integer in [minimum, MAX_FLAG_VALUE]."""
    out: dict[str, int] = {}
    for item in values or ():
        key, sep, value = item.partition("=")
        key, text = key.strip(), value.strip()
        digits = text[1:] if text[:1] in "+-" else text
        if not sep or not key or not (digits.isascii() and digits.isdigit()):
            shown = item if len(item) <= 60 else item[:57] + "..."
            raise InputError(f"{flag} expects NAME=INTEGER, got '{shown}'")
        number = int(text) if len(digits) <= 12 else MAX_FLAG_VALUE + 1
        if not minimum <= number <= MAX_FLAG_VALUE:
            shown = text if len(text) <= 20 else f"a number of {len(digits)} digits"
            raise InputError(f"{flag} {key}: the value must be from {minimum:,} to "
                             f"{MAX_FLAG_VALUE:,} (2**31), got {shown}")
        out[key] = number
    return out


def _common(p: argparse.ArgumentParser, required: bool = True) -> None:
    found = "; default: the dataflow file's found_for (best.yaml of `tileflow explore`)" \
        if not required else ""
    p.add_argument("--arch", required=required,
                   help="accelerator: a YAML file or a shipped name (edge, cloud, tpu-like, "
                        f"cpu){found}")
    p.add_argument("--workload", required=required,
                   help="workload: a YAML file, a shipped name (attention, gemm-chain, "
                        f"conv-chain, mlp) or a preset (G1..G12, C1..C8){found}")
    p.add_argument("--preset", metavar="NAME",
                   help="a size preset of the workload, e.g. G3 for gemm-chain")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="override a dimension or parameter size (repeatable), e.g. m=1024")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def _overlap_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overlap", choices=["perfect", "fill-drain", "lockstep"],
                   help="how loads, compute and stores overlap in the latency: perfect (the "
                        "published tools' convention), fill-drain (the first load and last "
                        "store of a run are not hidden) or lockstep (each step's transfers "
                        "where they happen, the steps' stages in lock step); default: the "
                        "accelerator's `overlap`")


def _conventions_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--conventions", choices=["timeloop"],
                   help="count as Timeloop does: perfect overlap (unless --overlap says "
                        "otherwise), write-backs that take no read bandwidth "
                        "(`writeback_on_read_port: false` on every level), its delta "
                        "rule for inputs (`deltas: timeloop`) and whole accesses in energy "
                        "(`block_words`, the level's or 1); Timeloop files "
                        "are imported with these already (docs/interop.md)")
    p.add_argument("--ert", metavar="FILE",
                   help="an Accelergy energy reference table for a Timeloop --arch: its "
                        "energies per level and action, as `tileflow import --ert` writes "
                        "them (docs/interop.md)")


def _with_overlap(arch, overlap: str | None, conventions: str | None = None):
    """The accelerator with the command line's overlap convention, when one is given, and
    Timeloop's conventions when asked for."""
    from dataclasses import replace

    if conventions == "timeloop":
        arch = replace(arch, overlap="perfect", levels=tuple(
            replace(lv, writeback_on_read_port=False, deltas="timeloop",
                    block_words=lv.block_words or 1)
            for lv in arch.levels))
    return replace(arch, overlap=overlap) if overlap else arch


class _Parser(argparse.ArgumentParser):
    """Usage errors as one paragraph, exit 2, like every other bad input."""

    def error(self, message: str):
        self.exit(2, f"tileflow: error: {' '.join(message.split())} (see '{self.prog} "
                     "--help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tileflow",
        description="What does this fused dataflow cost on this chip? Data movement per "
                    "memory level, footprint, latency and energy of tile-tree dataflows.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", help="analyse one dataflow", epilog=EXAMPLES,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(ev, required=False)
    ev.add_argument("--dataflow", required=True,
                    help="a dataflow YAML file, a baseline name (layerwise, flat-rgran, ...) "
                         "or a shipped dataflow file's name (attention-chimera, ...)")
    ev.add_argument("--tile", action="append", metavar="DIM=SIZE",
                    help="tile size for a baseline builder (repeatable), e.g. m=64")
    ev.add_argument("--double-buffer", action="store_true",
                    help="tensors whose buffering depth neither the level nor the tile sets "
                         "are double-buffered (footprint doubled)")
    _overlap_flag(ev)
    _conventions_flag(ev)
    ev.add_argument("--tree", action="store_true", help="also print the tile tree")
    ev.add_argument("--detail", action="store_true",
                    help="also print traffic and energy per level and tensor, and the "
                         "latency of every tile")
    ev.add_argument("--csv", metavar="FILE",
                    help="write one row per level and tensor (level, tensor, fill, read, "
                         "update, energy_pj) to FILE")
    ev.add_argument("--save-dataflow", metavar="PATH",
                    help="write the dataflow as YAML (a starting point for hand edits)")
    cp = sub.add_parser("compare", help="every baseline dataflow side by side",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(cp)
    cp.add_argument("--plot", metavar="PATH",
                    help="bar chart PNG (default: compare-WORKLOAD-SIZES-ARCH.png here)")
    cp.add_argument("--csv", metavar="FILE",
                    help="write one row per dataflow (the table's columns) to FILE")
    cp.add_argument("--no-plot", action="store_true", help="do not write the chart")
    _overlap_flag(cp)
    _conventions_flag(cp)
    rp = sub.add_parser("reproduce", help="re-run the published comparison (G1-G12, C1-C8) "
                        "and write the Markdown report with plots")
    rp.add_argument("--out", default="validate", help="output folder (default: validate)")
    rp.add_argument("--json", action="store_true", help="print every result as JSON")
    rp.add_argument("--online-only", action="store_true",
                    help="only the online softmax beside the five-operator form (G1-G12 on "
                         "Edge and Cloud, baselines and explorer): its section of the report")
    rp.add_argument("--online-budget", type=int, default=1000, metavar="N",
                    help="explorer points per study of the online comparison (default 1000)")
    va = sub.add_parser("validate", help="model accuracy against measurements")
    va.add_argument("target", choices=["rtl", "cpu", "gpu"],
                    help="rtl: the RTL-measured systolic accelerator (1,152 GEMMs, 131 chains); "
                         "cpu: measure real kernels on this machine (out: validate/cpu); "
                         "gpu: --prepare DIR builds CUDA kernels and DIR/run.sh for a GPU, "
                         "--results DIR reports what run.sh measured (out: validate/gpu)")
    va.add_argument("--data", metavar="DIR",
                    help="folder with gemm_1152.csv and gemm_chain_131.csv, the RTL "
                         "measurements published with the TileFlow paper's artifact "
                         "(default: ../shared/datasets/rtl-systolic beside the repository)")
    va.add_argument("--out", default="validate/rtl-systolic", help="output folder")
    va.add_argument("--json", action="store_true", help="print the summary as JSON")
    _overlap_flag(va)
    _campaign_options(va)
    im = sub.add_parser("import", help="write TileFlow YAML for Timeloop / original TileFlow "
                        "architecture, problem and mapping files")
    im.add_argument("files", nargs="+", help="YAML files (a mapping needs its problem and "
                                             "architecture among them)")
    im.add_argument("--out", metavar="DIR", help="output folder (default: beside each file)")
    im.add_argument("--ert", metavar="FILE", help="an Accelergy energy reference table (the "
                    "ERT.yaml of a Timeloop run): the architecture's energies per level and "
                    "action are taken from it (an 'ERT:' file among FILES does the same)")
    ex = sub.add_parser("export-timeloop", help="write a single-operator dataflow as a "
                        "Timeloop mapping, or with its accelerator and problem as Timeloop "
                        "v0.4 files")
    _common(ex)
    ex.add_argument("--dataflow", required=True, help="a dataflow YAML file or baseline name")
    ex.add_argument("--out", metavar="PATH", help="a FILE.yaml: the mapping alone; a folder: "
                    "arch.yaml, ERT.yaml, problem.yaml and mapping.yaml, what Timeloop's "
                    "format cannot state printed as notes (default: print the mapping)")
    bn = sub.add_parser("bench", help="evaluations per second of the analysis")
    _common(bn)
    bn.add_argument("--dataflow", action="append",
                    help="baseline(s) to time (default: flat-rgran and tileflow-pipe)")
    bn.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    bn.add_argument("--batch-rows", type=int, default=8192,
                    help="factor assignments per batched call (default 8192)")
    bn.add_argument("--search-evaluations", type=int, default=2000, metavar="N",
                    help="points of the timed tile-factor search on each structure (default "
                    "2000; 0: no search timed)")
    bk = sub.add_parser("bench-kernels", help="the best generated CPU kernel of a shape "
                        "against NumPy's BLAS, on 1 and 2 threads, side by side")
    bk.add_argument("--workload", action="append", choices=["gemm-chain", "attention"],
                    help="workload(s) to benchmark (default: both)")
    bk.add_argument("--set", action="append", metavar="DIM=SIZE",
                    help="dim size (repeatable; default b=1 m=256 l=256 k=64 n=64)")
    bk.add_argument("--campaign", default="validate/cpu/measurements.csv", metavar="CSV",
                    help="campaign whose fastest trees of the same shape are candidates "
                         "(default: validate/cpu/measurements.csv; 'none' for none)")
    bk.add_argument("--top", type=int, default=8, metavar="N",
                    help="candidates from the campaign (default 8)")
    bk.add_argument("--random", type=int, default=8, metavar="N",
                    help="seeded random valid trees as candidates too (default 8)")
    bk.add_argument("--seed", type=int, default=0, help="seed of the random trees")
    bk.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    bk.add_argument("--seconds", type=float, default=3.0,
                    help="time of the side-by-side calls per workload and thread count")
    bk.add_argument("--json", action="store_true", help="print the result as JSON")
    add_explore_parser(sub)
    add_figures_parser(sub)
    add_sweep_parser(sub)
    return parser


def _load(args):
    from tileflow.interop.files import load_arch_any, load_workload_any

    overrides = _pairs(args.set, "--set", -MAX_FLAG_VALUE)
    try:
        workload = load_workload_any(args.workload, overrides, args.preset)
    except InputError as exc:  # one that names no file is about the name given
        raise exc.about("--workload") from None
    try:
        arch = load_arch_any(args.arch, getattr(args, "ert", None))
    except InputError as exc:
        raise exc.about("--arch") from None
    return workload, arch


def _run_title(args, workload, arch) -> str:
    """The run in words (workload, preset, sizes, accelerator), for tables and plot titles."""
    from tileflow.commands.report import run_title
    from tileflow.specs.workload import resolve_workload

    preset = resolve_workload(args.workload, args.preset)[1]
    return run_title(workload, arch, preset, _pairs(args.set, "--set", -MAX_FLAG_VALUE))


def _dataflow(name: str, workload, arch, tiles: dict[str, int]):
    from tileflow import shipped as resources
    from tileflow.interop.files import load_dataflow_any
    from tileflow.specs.dataflow import check_operators
    from tileflow.specs.yamlfile import given

    path = Path(name)
    explicit = path.suffix in (".yaml", ".yml") or given(path)
    shipped = None if explicit else resources.find("dataflows", name)
    if shipped is not None or explicit:
        if tiles:
            raise InputError("--tile applies to a named baseline, not to a dataflow file",
                             where="--tile")
        try:
            flow = load_dataflow_any(shipped or path, workload, arch)
        except InputError as exc:  # one that names no file is about the name given
            raise exc.about("--dataflow") from None
        check_operators(flow, [op.name for op in workload.ops])
        return flow
    for dim in tiles:
        if dim not in workload.sizes:
            raise InputError(f"--tile {dim}: the workload has no dimension '{dim}' (its "
                             f"dimensions: {', '.join(workload.sizes)})")
        if tiles[dim] > workload.sizes[dim]:
            raise InputError(f"--tile {dim}={tiles[dim]}: larger than the dimension "
                             f"({workload.sizes[dim]})")
    return _build(name, workload, arch, tiles)


def _build(name: str, workload, arch, tiles=None, fit: bool = False):
    """A named baseline with the builder's factors (or the --tile sizes); with `fit`, its
    factors fitted by the tile search under the baseline's own rule (`compare`). A name that
    is no baseline is an error of --dataflow; one that does not apply to the workload, or an
    error of fit (the workload's shape), names the workload file."""
    from tileflow.dataflows import build
    from tileflow.dataflows.registry import BASELINES
    from tileflow.evaluator.structure import structure_of
    from tileflow.evaluator.workbound import check_enumeration

    if name.lower() not in BASELINES:
        try:
            build(name, workload, arch, tiles)  # its message: what the names are
        except InputError as exc:
            raise exc.about("--dataflow") from None
    try:
        flow = build(name, workload, arch, tiles)
        if not fit or tiles:
            return flow
        from tileflow.explore.tilesearch.fit import (
            fit_baseline,  # the tile search: only for `compare`
        )

        check_enumeration(structure_of(workload, arch, flow))  # sizes the search cannot afford
        return fit_baseline(name, workload, arch)
    except InputError as exc:
        if exc.source or not workload.source:
            raise
        raise exc.located(workload.source, workload.place("ops")) from None


def _evaluate(flow, workload, arch, **kw):
    from tileflow.analysis.tree_checks import InvalidDataflow
    from tileflow.cost import evaluate
    from tileflow.evaluator.structure import structure_of
    from tileflow.evaluator.workbound import check_enumeration
    from tileflow.specs.dataflow import locate

    try:
        check_enumeration(structure_of(workload, arch, flow))
        result = evaluate(workload, arch, flow, **kw)
    except InvalidDataflow as exc:
        located = locate(exc, flow)
        source = located.source or (None if flow.source else workload.source or None)
        where = located.where if flow.source else located.where or workload.place("ops")
        raise InputError(f"invalid dataflow '{flow.name}': {located.message}",
                         source, where) from None
    except InputError as exc:  # a size bound of the model (tileflow.evaluator.workbound)
        if exc.source:
            raise
        if flow.source:
            located = locate(exc, flow)
            raise InputError(f"dataflow '{flow.name}': {located.message}", located.source,
                             located.where) from None
        raise InputError(f"dataflow '{flow.name}': {exc.message}", workload.source or None,
                         workload.place("dims")) from None
    _check_finite(result.to_dict(), f"dataflow '{flow.name}'", workload, arch)
    return result


def _check_finite(value, what: str, workload, arch) -> None:
    """A last guard: a result with NaN or an infinity is an error, never printed."""
    bad = _non_finite(value)
    if bad:
        raise InputError(f"the result for {what} is not finite ({bad}): the sizes of "
                         f"workload '{workload.name}' or the figures of accelerator "
                         f"'{arch.name}' are out of the range the model handles")


def _non_finite(value, path: str = "") -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path or 'value'} = {value}"
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _non_finite(item, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


def _print_json(value) -> None:
    print(json_text(value, indent=2))


def _fill_from_found_for(args) -> None:
    """--arch, --workload, --preset and --set not given: from the dataflow file's
    `found_for` (the run `tileflow explore` found it for). A flag given wins; a --workload
    given takes its sizes from the flags alone, and --preset replaces the recorded sizes."""
    if args.arch and args.workload:
        return
    from tileflow.specs.dataflow import found_for_file
    from tileflow.specs.yamlfile import given

    path = Path(args.dataflow)
    found = found_for_file(path) if path.suffix in (".yaml", ".yml") and given(path) \
        else None
    if found is None:
        missing = " and ".join(f for f, v in (("--arch", args.arch),
                                               ("--workload", args.workload)) if not v)
        raise InputError(f"give {missing}: the dataflow '{args.dataflow}' does not say "
                         "which run it was found for (no found_for)")
    args.arch = args.arch or found["accelerator"]
    if not args.workload:
        args.workload = found["workload"]
        if args.preset is None:
            args.preset = found["preset"]
            recorded = [f"{k}={v}" for k, v in found["sizes"].items()]
            args.set = recorded + list(args.set or [])  # --set after: it wins


def cmd_evaluate(args) -> int:
    from tileflow.commands.report import summary
    from tileflow.outputs import YAML_SUFFIXES, check_output_file
    from tileflow.tree import render

    if args.save_dataflow:
        check_output_file(args.save_dataflow, YAML_SUFFIXES, "--save-dataflow")
    _fill_from_found_for(args)
    workload, arch = _load(args)
    arch = _with_overlap(arch, args.overlap, args.conventions)
    flow = _dataflow(args.dataflow, workload, arch, _pairs(args.tile, "--tile", 1))
    result = _evaluate(flow, workload, arch, double_buffer=args.double_buffer)
    if args.save_dataflow:
        from tileflow.specs.dataflow import save_dataflow

        save_dataflow(flow, args.save_dataflow)
    if args.csv:
        from tileflow.commands.report import write_csv
        from tileflow.provenance import MODEL_VERSION

        write_csv(result.frame().assign(model_version=MODEL_VERSION), args.csv)
    if args.json:
        _print_json(result.to_dict())
    else:
        if args.tree:
            print(render(flow.root))
        print(summary(result, arch.name, workload.name, flow.source, flow.lines))
        if args.detail:
            print("\nper level and tensor (words, pJ):")
            print(result.frame().to_string(index=False))
            print("\nper tile (cycles if alone: loads, children, stores; fill and drain):")
            print(result.latency_frame()[["tile", "load_cycles", "inner_cycles",
                                          "store_cycles", "fill_drain_cycles",
                                          "cycles"]].to_string(index=False))
            from tileflow.cost.components import components_table

            print("\nper component (energy; area where the file names technology_nm):")
            print(components_table(result.components))
    return 0


def cmd_compare(args) -> int:
    from tileflow.commands.report import (
        comparison_frame,
        comparison_json,
        comparison_plot,
        comparison_table,
        default_plot_name,
        write_csv,
    )
    from tileflow.dataflows import baselines_for
    from tileflow.outputs import PLOT_SUFFIXES, check_output_file

    if args.plot and not args.no_plot:
        check_output_file(args.plot, PLOT_SUFFIXES, "--plot")
    workload, arch = _load(args)
    arch = _with_overlap(arch, args.overlap, args.conventions)
    plot_path = None
    if not args.no_plot:
        sizes = _pairs(args.set, "--set", -MAX_FLAG_VALUE)
        plot_path = args.plot or default_plot_name(workload, arch, sizes)
        check_output_file(plot_path, PLOT_SUFFIXES, "--plot")
    results = [_evaluate(_build(name, workload, arch, fit=True), workload, arch)
               for name in baselines_for(workload)]
    title = _run_title(args, workload, arch)
    plot = comparison_plot(results, title, plot_path) if plot_path else None
    if args.csv:
        write_csv(comparison_frame(results), args.csv)
    if args.json:
        _print_json(comparison_json(results))
    else:
        print(comparison_table(results, title))
        if plot:
            print(f"\nchart written to {plot}")
    return 0


def cmd_bench_kernels(args) -> int:
    from tileflow.commands.blas_bench import SHAPE, WORKLOADS, bench, table

    try:
        threads = tuple(int(t) for t in args.threads.split(","))
    except ValueError:
        threads = ()
    if not threads or min(threads) < 1:
        raise InputError(f"--threads expects a comma-separated list of positive integers, "
                         f"got '{args.threads}'")
    for flag, value in (("--top", args.top), ("--random", args.random), ("--seed", args.seed)):
        if value < 0:
            raise InputError(f"{flag} must be an integer >= 0, got {value}")
    if not (math.isfinite(args.seconds) and 0 < args.seconds <= 600):
        raise InputError(f"--seconds must be a number of seconds from 0 to 600, got "
                         f"{args.seconds}")
    campaign = None if args.campaign == "none" else Path(args.campaign)
    if campaign is not None and not campaign.exists():
        raise InputError(f"--campaign: {campaign} does not exist ('none' for no campaign)")
    sizes = {**SHAPE, **_pairs(args.set, "--set", 1)}
    result = bench(tuple(args.workload or WORKLOADS), sizes, campaign, args.top,
                   args.random, args.seed, threads, args.seconds)
    print(json_text(result, indent=2) if args.json else table(result))
    return 0


def cmd_bench(args) -> int:
    from tileflow.commands.bench import run_bench

    if not (math.isfinite(args.seconds) and 0 < args.seconds <= 3600):
        raise InputError(f"--seconds must be a number of seconds from 0 to 3600, got "
                         f"{args.seconds}")
    workload, arch = _load(args)
    if not 1 <= args.batch_rows <= 1_000_000:
        raise InputError(f"--batch-rows must be between 1 and 1,000,000, got {args.batch_rows}")
    if not 0 <= args.search_evaluations <= 10_000_000:
        raise InputError(f"--search-evaluations must be between 0 and 10,000,000, got "
                         f"{args.search_evaluations}")
    names = args.dataflow or ["flat-rgran", "tileflow-pipe"]
    flows = [(name, _dataflow(name, workload, arch, {})) for name in names]
    rows = run_bench(workload, arch, flows,
                     args.seconds, args.batch_rows, search_evaluations=args.search_evaluations)
    if args.json:
        _print_json(rows)
    else:
        for row in rows:
            print(f"{row['dataflow']:<14} evaluate() {row['scalar_evals_per_s']:>9,.0f}/s "
                  f"(median {row['median_us']:.0f} us); batched "
                  f"{row['batched_evals_per_s']:>10,.0f}/s exactly tiled, "
                  f"{row['batched_clipped_evals_per_s']:>10,.0f}/s with clipped tiles "
                  f"({row['batch_rows']} rows per call)"
                  + (f"; in search {row['search_points_per_s']:,.0f} points/s"
                     if "search_points_per_s" in row else ""))
    return 0


def _campaign_options(parser) -> None:
    from tileflow.calibrate.command import add_campaign_options

    add_campaign_options(parser)


# the options of `validate` that each target reads (the others are refused, not ignored)
VALIDATE_OPTIONS = {"rtl": {"data", "overlap"},
                    "cpu": {"config", "points", "report_only", "remeasure_traffic", "learn"},
                    "gpu": {"points", "prepare", "results", "prepared", "learn"}}


def cmd_validate(args) -> int:
    for name in sorted(set().union(*VALIDATE_OPTIONS.values())):
        value = getattr(args, name, None)
        if value is not None and value is not False \
                and name not in VALIDATE_OPTIONS[args.target]:
            flag = "--" + name.replace("_", "-")
            takes = ", ".join("--" + n.replace("_", "-")
                              for n in sorted(VALIDATE_OPTIONS[args.target]))
            raise InputError(f"does not apply to `tileflow validate {args.target}` (it takes "
                             f"{takes}, --out and --json)", where=flag)
    if args.target != "rtl":
        from tileflow.calibrate.command import run

        return run(args)
    from tileflow.outputs import check_output_folder
    from tileflow.rtl import report, study

    study.load_dataset(args.data)  # a missing dataset is explained before anything is written
    check_output_folder(args.out, "--out")
    results = study.run(args.data, overlap=args.overlap)
    command = "tileflow validate rtl" + (f" --data {args.data}" if args.data else "") + (
        f" --out {args.out}" if args.out != "validate/rtl-systolic" else "") + (
        f" --overlap {args.overlap}" if args.overlap else "")
    path = report.write(results, args.out, command)
    numbers = report.summary(results)
    if args.json:
        print(json_text(numbers, indent=2))
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
    from tileflow.commands.experiments import run_studies, write_report
    from tileflow.commands.online_study import run_online, write_online
    from tileflow.outputs import check_output_folder

    check_output_folder(args.out, "--out")
    if not 1 <= args.online_budget <= 10**7:
        raise InputError(f"--online-budget must be from 1 to 10,000,000, got "
                         f"{args.online_budget}")
    frames = []
    if not args.online_only:
        frames.append(run_studies(progress=not args.json))
        path = write_report(frames[-1], args.out, f"tileflow reproduce --out {args.out}")
    online = run_online(budget_evals=args.online_budget, progress=not args.json)
    path = write_online(online, args.out, f"tileflow reproduce --out {args.out} --online-only"
                        + (f" --online-budget {args.online_budget}"
                           if args.online_budget != 1000 else ""))
    frames.append(online)
    if args.json:
        print(_records_json(frames))
    else:
        print(f"report written to {path}")
    return 0


def _records_json(frames) -> str:
    import pandas as pd

    return pd.concat(frames, ignore_index=True).to_json(orient="records")


def cmd_import(args) -> int:
    from tileflow.interop.files import import_files
    from tileflow.interop.report import collecting

    with collecting() as found:
        written = import_files(args.files, args.out, args.ert)
    for path in written:
        print(f"wrote {path}")
    if found.notes:  # read, and without effect on TileFlow's numbers
        print(f"notes ({len(found.notes)}):")
        for text in found.notes:
            print(f"  {text}")
    return 0


def cmd_export_timeloop(args) -> int:
    from tileflow.interop.export import timeloop_mapping
    from tileflow.outputs import write_yaml, yaml_text

    workload, arch = _load(args)
    flow = _dataflow(args.dataflow, workload, arch, {})
    if args.out and Path(args.out).suffix not in (".yaml", ".yml"):  # a folder of files
        from tileflow.interop.export import export_folder

        paths, notes = export_folder(args.out, flow, workload, arch)
        if args.json:
            print(json_text({"wrote": [str(p) for p in paths], "notes": notes}, indent=2))
            return 0
        for path in paths:
            print(f"wrote {path}")
        if notes:  # what Timeloop's format cannot state (also atop arch.yaml)
            print(f"notes ({len(notes)}):")
            for text in notes:
                print(f"  {text}")
        return 0
    mapping = timeloop_mapping(flow, workload, arch)
    if args.out:  # one mapping file: written whether or not --json reports it
        path = write_yaml(Path(args.out), mapping)
        print(json_text({"wrote": [str(path)], "notes": []}, indent=2) if args.json
              else f"wrote {path}")
    elif args.json:
        print(json_text(mapping, indent=2))
    else:
        print(yaml_text(mapping), end="")
    return 0


def add_explore_parser(sub) -> None:
    ex = sub.add_parser("explore", help="search dataflows for a workload on an accelerator "
                        "(a study described by a YAML config)",
                        epilog="example: tileflow explore search/quick.yaml --budget-seconds 30",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ex.add_argument("config", help="exploration config YAML, or a shipped study by name "
                                   "(quick, attention-edge/G3, ...; see search/)")
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
                    help="continue the study in --storage (nothing completed is repeated; "
                         "refused if it was started from other contents)")
    ex.add_argument("--restart", action="store_true",
                    help="discard the study in --storage and start a new one")
    ex.add_argument("--out", metavar="DIR", help="output folder (overrides the config's)")
    ex.add_argument("--json", action="store_true", help="print summary.json on stdout")
    ex.add_argument("--quiet", action="store_true",
                    help="no progress bar, and no progress lines when stderr is not a terminal")
    ex.add_argument("--measure-top", type=int, metavar="K",
                    help="accelerator host: compile, check and time the study's K best points "
                         "on this CPU (re-ranked by the learned cost model where one exists "
                         "for this machine), predicted beside measured, the best measured "
                         "against NumPy's BLAS (OUT/measured.csv)")
    ex.add_argument("--add-to-campaign", metavar="DIR",
                    help="with --measure-top: append the measured kernels to the CPU "
                         "campaign in DIR (DIR/measurements.csv, kind 'measure-top'; "
                         "refused where DIR was measured on another machine), e.g. "
                         "validate/cpu")
    ex.add_argument("--measure-threads", type=int, default=1, metavar="N",
                    help="threads of the measured kernels and of NumPy (default 1)")
    ex.add_argument("--kernel-style", choices=["registers", "plain"], default="registers",
                    help="C generator style of the measured kernels (default registers)")
    ex.add_argument("--learned-model", metavar="PKL",
                    help="learned cost model to re-rank with (default, where it exists: "
                         "validate/cpu/learned-model.pkl for registers kernels; 'none' for "
                         "none)")


def _explore_config(name: str) -> Path:
    """A config file, or a shipped study by its name under search/ (`quick`,
    `attention-edge/G3`): an installed copy runs them from any folder."""
    from tileflow import shipped as resources
    from tileflow.specs.yamlfile import given

    path = Path(name)
    if given(path):
        return path
    root = resources.folder("search")
    shipped = root / (name if path.suffix in (".yaml", ".yml") else f"{name}.yaml")
    if not path.is_absolute() and ".." not in path.parts and shipped.is_file():
        return shipped
    studies = sorted((str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml")
                      if p.relative_to(root).parts[0] != "quality"),  # the quality suite's
                     key=lambda s: ("/" in s, s))
    few = ", ".join(studies[:4]) + (f" ... ({len(studies)} in all)" if len(studies) > 4 else "")
    raise InputError(f"no such exploration config '{name}': give a YAML file or a shipped "
                     f"study ({few})")


def cmd_explore(args) -> int:
    """Run a study; write best.yaml, points.csv, plots, summaries and the timeline."""
    import dataclasses
    import math

    from tileflow.explore.studies.config import MAX_EVALUATIONS, check_against, load_config
    from tileflow.explore.studies.outputs import write_all
    from tileflow.explore.studies.session import explore
    from tileflow.output_checks import check_out, check_storage

    config = load_config(_explore_config(args.config))
    for flag, value, low in (("--budget-evals", args.budget_evals, 1),
                             ("--workers", args.workers, 1), ("--seed", args.seed, 0)):
        if value is not None and value < low:
            raise InputError(f"{flag} must be an integer >= {low}, got {value}")
    if args.budget_evals is not None and args.budget_evals > MAX_EVALUATIONS:
        raise InputError(f"--budget-evals must be at most {MAX_EVALUATIONS:,}, got "
                         f"{args.budget_evals:,}")
    if args.budget_seconds is not None and not (math.isfinite(args.budget_seconds)
                                                and args.budget_seconds > 0):
        raise InputError(f"--budget-seconds must be a positive number, got "
                         f"{args.budget_seconds}")
    config = config.with_budget(args.budget_evals, args.budget_seconds)
    changes = {k: v for k, v in (("seed", args.seed), ("out", args.out)) if v is not None}
    config = dataclasses.replace(config, **changes)
    if args.measure_top is not None:
        from tileflow.commands.measure_top import check_host

        if args.measure_top < 1 or args.measure_threads < 1:
            raise InputError(f"--measure-top and --measure-threads must be integers >= 1, got "
                             f"{args.measure_top} and {args.measure_threads}")
        check_host(config.load()[1])
    if args.add_to_campaign and args.measure_top is None:
        raise InputError("--add-to-campaign adds the kernels --measure-top measures: give "
                         "--measure-top K too")
    check_against(config, *config.load())  # sizes, preset, names: before the search
    check_storage(args.storage)
    if args.out is not None or "out" not in config.places:  # last: it creates the folder
        check_out(config.out)
    else:
        check_out(config.out, config.source, config.places["out"])
    progress = not args.quiet and sys.stderr.isatty()
    from tileflow.explore.studies.heartbeat import interval_for

    try:
        outcome = explore(config, args.storage, args.workers, args.resume, progress,
                          restart=args.restart, heartbeat_s=interval_for(args.quiet),
                          started=args.started,
                          reserve_s=OUTPUTS_RESERVE_S + OUTPUTS_RESERVE_SHARE * (
                              config.budget_seconds or 0.0))
    except InputError as exc:  # a storage that cannot be opened: say which flag gave it
        if args.storage and not exc.source and not exc.where and "storage" in exc.message:
            raise exc.located(where="--storage") from None
        raise
    deadline = (args.started + config.budget_seconds  # the budget caps the whole process
                if config.budget_seconds is not None and args.measure_top is None else None)
    data = write_all(outcome, config.out, deadline)
    # nothing left to save: an in-memory study needs no orderly exit
    args.exit_now = deadline is not None and args.storage is None and args.workers == 1
    if data.get("figures_skipped") and not args.json:
        skipped = data["figures_skipped"]
        print(f"tileflow: {', '.join(skipped['files'])} not drawn ({skipped['why']}); "
              f"`{skipped['redraw']}` draws them", file=sys.stderr)
    measured = None
    if args.measure_top is not None and not outcome.interrupted:
        measured = _measure_top(args, outcome, config.out, progress)
        data["measured"] = {**{k: v for k, v in measured.items()
                               if k not in ("rows", "campaign_rows")},
                            "rows": measured["rows"].to_dict("records")}
    if args.json:
        print(json_text(data, indent=2, default=str))
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
        if "front" in data:
            print(f"Pareto front of {' and '.join(data['objectives'])}: "
                  f"{len(data['front'])} points (front.csv, front.png)")
        print(f"outputs in {config.out}/: " + ", ".join(data["files"]))
        if measured is not None:
            from tileflow.commands.measure_top import table

            print(table(measured))
            print(f"measured kernels in {Path(config.out) / 'measured.csv'}")
            if args.add_to_campaign:
                print(f"{measured['added_to_campaign']} kernel(s) added to "
                      f"{Path(args.add_to_campaign) / 'measurements.csv'}")
    return 130 if outcome.interrupted else 0


def add_figures_parser(sub) -> None:
    fg = sub.add_parser("figures", help="draw a study folder's figures again (convergence, "
                        "timeline, Pareto front) from its saved files",
                        epilog="example: tileflow figures out/quick")
    fg.add_argument("folder", help="an output folder of `tileflow explore`")
    fg.add_argument("--accelerator", metavar="ARCH",
                    help="accelerator name or file, where the recorded one has moved")


def cmd_figures(args) -> int:
    """Redraw convergence.png, timeline.png and front.png of a saved study (those a time
    budget left out, or after a change of style)."""
    from tileflow.explore.studies.outputs import redraw

    for name in redraw(args.folder, args.accelerator):
        print(str(Path(args.folder) / name))
    return 0


def _measure_top(args, outcome, out: str, progress: bool) -> dict:
    """The study's top points measured on this CPU (`--measure-top`), saved in OUT."""
    from tileflow.commands.measure_top import DEFAULT_MODELS, measure_top, tqdm_progress
    from tileflow.commands.measure_top import write as write_measured

    default = DEFAULT_MODELS.get(args.kernel_style)
    model = (None if args.learned_model == "none" else
             Path(args.learned_model) if args.learned_model else
             default if default is not None and default.exists() else None)
    if args.learned_model not in (None, "none") and not Path(args.learned_model).exists():
        raise InputError(f"--learned-model: {args.learned_model} does not exist")
    result = measure_top(outcome, args.measure_top, args.measure_threads, args.kernel_style,
                         model, progress=tqdm_progress(args.measure_top) if progress else None)
    write_measured(result, Path(out))
    if args.add_to_campaign:
        from tileflow.kernels.campaign import add_rows

        result["added_to_campaign"] = add_rows(Path(args.add_to_campaign),
                                               result["campaign_rows"])
    return result


COMMANDS = {"evaluate": cmd_evaluate, "compare": cmd_compare, "bench": cmd_bench,
            "bench-kernels": cmd_bench_kernels,
            "reproduce": cmd_reproduce, "validate": cmd_validate, "import": cmd_import,
            "export-timeloop": cmd_export_timeloop, "explore": cmd_explore,
            "sweep": cmd_sweep, "figures": cmd_figures}


def _process_age_s() -> float:
    """Seconds since this process started (the interpreter's start-up and imports before
    `main`), from /proc where there is one; 0 elsewhere."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        return max(uptime_s - int(fields[19]) / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Bad input: one paragraph on stderr, exit 2. Ctrl-C: exit 130.
    A closed stdout (`... | head`): exit 141 quietly, as a program killed by SIGPIPE."""
    started = time.perf_counter() - (_process_age_s() if argv is None else 0.0)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        args.started = started  # budgets in seconds count the whole command
        code = COMMANDS[args.command](args)
        sys.stdout.flush()
        if argv is None and getattr(args, "exit_now", False):
            # a time budget caps the whole process: freeing a large in-memory study at
            # the interpreter's exit takes up to a second on a loaded machine
            sys.stderr.flush()
            os._exit(code)
        return code
    except InputError as exc:
        print(f"tileflow: error: {' '.join(exc.render().split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tileflow: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away: send the rest of our output nowhere, and say nothing
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
