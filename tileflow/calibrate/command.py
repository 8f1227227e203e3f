"""`tileflow validate cpu|gpu`: run a measurement campaign (or reuse its CSV) and write the
model-accuracy report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tileflow.errors import InputError


def validate_cpu(config_path: str | None, points: int | None, out: str | None,
                 report_only: bool, remeasure_traffic: bool = False) -> dict:
    from tileflow.calibrate import cpu, cpu_report
    from tileflow.kernels.campaign import (
        load_config,
        remeasure,
        retime,
        run_campaign,
        tqdm_progress,
    )
    from tileflow.kernels.inner_loops import add_columns
    from tileflow.kernels.trees import single_core
    from tileflow.outputs import write_csv
    from tileflow.specs.arch import load_arch

    config = load_config(config_path, points)
    folder = Path(out or "validate/cpu")
    csv = folder / "measurements.csv"
    if report_only:
        if not csv.exists():
            raise InputError(f"no measurements to report on: {csv} does not exist (run "
                             "`tileflow validate cpu` without --report-only first)")
        import pandas as pd

        frame = pd.read_csv(csv)
    elif remeasure_traffic:
        frame = remeasure(config, folder, tqdm_progress)
    else:
        frame = run_campaign(config, folder, tqdm_progress)
        retime(frame, config, folder)  # the noise floor: a sample timed a second time
    if len(frame) < 4:
        raise InputError(f"{csv}: {len(frame)} measured rows; calibration needs at least 4")
    arch = single_core(load_arch(config.arch)) if config.threads == 1 else load_arch(config.arch)
    counted = add_columns(frame, arch)
    if counted is not frame:  # saved beside the measurements: the next report reads them
        frame = counted
        write_csv(frame, csv)
    study = cpu.study(frame, arch, config.seed)
    env_path = folder / "environment.json"
    environment = json.loads(env_path.read_text()) if env_path.exists() else None
    command = "tileflow validate cpu" + (f" --config {config_path}" if config_path else "") + (
        f" --points {points}" if points else "") + (f" --out {out}" if out else "")
    levels = {"first_level": config.first_level, "last_level": config.last_level}
    cpu_report.write(study, folder, command, levels, environment)
    _write_calibrated(study, folder, environment, config.arch)
    return study.summary


def _write_calibrated(study, folder: Path, environment: dict | None, arch_name: str) -> None:
    """host-calibrated.yaml beside the report: the description with the fitted rates."""
    from tileflow import resources
    from tileflow.calibrate.description import calibrated_description, write_description
    from tileflow.specs.yamlfile import load_yaml

    if arch_name == "host":
        from tileflow.specs.host import host_description

        try:
            original = host_description()
        except OSError:
            original = dict(load_yaml(resources.find("accelerators", "cpu")))
    else:
        path = Path(arch_name)
        shipped = resources.find("accelerators", arch_name)
        original = dict(load_yaml(path if path.exists() or shipped is None else shipped))
    s = study.summary
    provenance = {"device": (environment or {}).get("cpu", "unknown"),
                  "points": sum(s["points"].values()),
                  "held-out MAPE": f"{s['latency_mape_heldout']:.3f}",
                  "held-out Spearman": f"{s['latency_spearman_heldout']:.3f}",
                  "per core (single-threaded kernels)": "yes",
                  "at a bound": ", ".join(s["bound_hits"]) or "none"}
    write_description(calibrated_description(original, study.fit.as_dict(), provenance),
                      folder / f"{arch_name if arch_name == 'host' else 'arch'}-calibrated.yaml")


def validate_gpu(config_path: str | None, points: int | None, out: str | None,
                 report_only: bool) -> dict:
    """Not a campaign yet: the CUDA generator and launcher exist, the GPU campaign does not."""
    from tileflow.kernels.cuda_launch import gpu_missing

    reason = gpu_missing()
    if reason:
        raise InputError(f"tileflow validate gpu needs a CUDA GPU and PyCUDA: {reason}")
    raise InputError("tileflow validate gpu: the GPU campaign is not implemented yet; "
                     "kernels can be generated, launched and timed from Python with "
                     "tileflow.kernels.cuda_source.generate_cuda and "
                     "tileflow.kernels.cuda_launch.run_cuda")


def add_campaign_options(parser) -> None:
    """Options of `tileflow validate cpu|gpu` (the RTL study ignores them)."""
    parser.add_argument("--config", help="campaign YAML: workloads and sizes, points, threads, "
                                         "repetitions, seed, traffic (default: built in)")
    parser.add_argument("--points", type=int, help="dataflows per workload (default 200)")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild the report from the saved measurements.csv")
    parser.add_argument("--remeasure-traffic", action="store_true",
                        help="cpu: measure the saved kernels' cache traffic again and "
                             "recompute the model's traffic columns, keeping their timings; "
                             "then rebuild the report")


def run(args) -> int:
    """Entry point for the CLI's `validate cpu|gpu`."""
    out = None if args.out == "validate/rtl-systolic" else args.out
    try:
        if args.target == "cpu":
            summary = validate_cpu(args.config, args.points, out, args.report_only,
                                   getattr(args, "remeasure_traffic", False))
        else:
            summary = validate_gpu(args.config, args.points, out, args.report_only)
    except KeyboardInterrupt:
        folder = Path(out or "validate/cpu")
        print(f"interrupted: every kernel measured so far is in {folder / 'measurements.csv'};"
              " run the same command again to continue", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"points: {summary['points']}; traffic R^2 (tree view): "
              + ", ".join(f"{k} {v:.3f}" for k, v in summary["traffic_r2"].items())
              + "; (cache view): "
              + ", ".join(f"{k} {v:.3f}"
                          for k, v in summary.get("traffic_r2_cache_view", {}).items())
              + f"; held-out latency Spearman {summary['latency_spearman_heldout']:.3f}, "
              f"MAPE {summary['latency_mape_heldout']:.1%}; top-1 regret "
              + ", ".join(f"{k} {v:.1%}" for k, v in summary["top1_regret"].items())
              + (f"; at a bound: {', '.join(summary['bound_hits'])}"
                 if summary["bound_hits"] else ""))
        print(f"report written to {Path(out or 'validate/cpu') / 'report.md'}")
    return 0
