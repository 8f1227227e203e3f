"""`tileflow validate cpu|gpu`: run a measurement campaign (or reuse its CSV) and write the
model-accuracy report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tileflow.errors import InputError
from tileflow.outputs import json_text


def validate_cpu(config_path: str | None, points: int | None, out: str | None,
                 report_only: bool, remeasure_traffic: bool = False,
                 learn: bool = False) -> dict:
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
        described = _measured_machine(config.arch, folder, report_only)
        from tileflow.tables import read_table  # pandas: only when a report is read

        frame = read_table(csv, measurement_columns(load_arch(described)), minimum_rows=4)
    elif remeasure_traffic:
        frame = remeasure(config, folder, tqdm_progress)
    else:
        frame = run_campaign(config, folder, tqdm_progress)
        retime(frame, config, folder)  # the noise floor: a sample timed a second time
    if len(frame) < 4:
        raise InputError(f"{csv}: {len(frame)} measured rows; calibration needs at least 4")
    described = _measured_machine(config.arch, folder, report_only)
    arch = single_core(load_arch(described))  # each kernel's code is that of one core
    env_path = folder / "environment.json"
    environment = json.loads(env_path.read_text()) if env_path.exists() else None
    if environment and config.traffic_sample:  # the traffic pass's sample, for the report
        environment["config"] = {**environment.get("config", {}),
                                 "traffic_sample": config.traffic_sample}
    # campaigns measured before the register-tile generator name no style: plain kernels
    style = (environment or {}).get("kernel_style", "plain")
    counted = add_columns(frame, arch, style)
    if counted is not frame:  # saved beside the measurements: the next report reads them
        frame = counted
        write_csv(frame, csv)
    study = cpu.study(frame, arch, config.seed, style)
    command = "tileflow validate cpu" + (f" --config {config_path}" if config_path else "") + (
        f" --points {points}" if points else "") + (f" --out {out}" if out else "")
    levels = {"first_level": config.first_level, "last_level": config.last_level}
    result = None
    if learn:
        from tileflow.calibrate import learned_report

        result = learned_report.run(frame, arch, folder, environment,
                                    command + " --report-only --learn", config.seed)
    elif (folder / "learned.json").exists():  # the last --learn run's figures
        result = json.loads((folder / "learned.json").read_text())
    # the version of the model whose predictions the campaign saved with its rows (null for
    # a campaign run before environment.json recorded it)
    study.summary["model_version"] = (environment or {}).get("model_version")
    if result is not None:  # in the summary as in the report
        study.summary["learned_model"] = {
            k: result["held_out_groups"]["learned"][k]
            for k in ("mape", "spearman_within_mean")}
    cpu_report.write(study, folder, command, levels, environment, result)
    _write_calibrated(study, folder, environment, config.arch, described)
    return study.summary


MEASURED_MACHINE = "host.yaml"


def measurement_columns(arch) -> dict:
    """What `measurements.csv` must hold for a report: each kernel's workload, shape and
    tree, its times (> 0 s), the model's time and the counts the latency fit reads
    (>= 0); traffic columns, where a campaign measured them, >= 0 bytes."""
    from tileflow.calibrate import latency
    from tileflow.tables import Column

    text, time, count = Column("text"), Column("number", 0, strict=True), Column("number", 0)
    columns = {"workload": text, "shape": text, "tree": Column("json"), "kind": text,
               "dataflow": text, "model_bottleneck": text, "min_s": time, "measured_s": time,
               "model_s": time, "macs": count}
    columns["max_s"] = Column("number", 0, strict=True, required=False)
    for name in ("spread", "vector_work", "leaf_steps", *latency.INNER_COLUMNS):
        columns[name] = Column("number", 0, required=False)
    for name in latency.feature_columns(arch):
        columns.setdefault(name, count)
    for view in ("", "_cache"):
        for side in ("first", "last"):
            for kind in ("model", "measured"):
                columns[f"{kind}{view if kind == 'model' else ''}_{side}_level_bytes"] = \
                    Column("number", 0, required=False)
    return columns


def _measured_machine(arch_name: str, folder: Path, report_only: bool) -> str:
    """The accelerator the measurements were made on. For `host`, a campaign saves this
    machine's description beside its measurements (host.yaml), and a report rebuilt from
    them fits against that file: on another machine `host` would read other caches."""
    saved = folder / MEASURED_MACHINE
    if arch_name != "host":
        return arch_name
    if report_only:
        return str(saved) if saved.is_file() else arch_name
    from tileflow.calibrate.description import write_description
    from tileflow.specs.host import host_description

    try:
        write_description(host_description(), saved)
    except OSError:
        return arch_name
    return str(saved)


def _write_calibrated(study, folder: Path, environment: dict | None, arch_name: str,
                      described: str) -> None:
    """host-calibrated.yaml beside the report: the description with the fitted rates."""
    from tileflow import shipped as resources
    from tileflow.calibrate.description import calibrated_description, write_description
    from tileflow.specs.yamlfile import load_yaml

    if arch_name == "host" and described != arch_name:  # the measured machine's saved file
        original = dict(load_yaml(Path(described)))
    elif arch_name == "host":
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


def validate_gpu(points: int | None, out: str | None, prepare: str | None,
                 results: str | list[str] | None, prepared: str | None = None,
                 learn: bool = False) -> dict:
    """--prepare DIR: build the campaign's CUDA programs and run.sh here (nvcc, no GPU);
    --results DIR: read what run.sh measured on the GPU and write the report. (The command
    line refuses the options of other targets, --config among them.)"""
    from tileflow.calibrate import gpu_campaign, gpu_report, gpu_results, gpu_vendor

    if bool(prepare) == bool(results):
        raise InputError("tileflow validate gpu needs either --prepare DIR (build the "
                         "campaign here) or --results DIR (report what run.sh measured)")
    if prepare:
        campaign = gpu_campaign.GpuCampaign()
        if points is not None:
            if points < 1:
                raise InputError(f"--points must be at least 1, got {points}")
            campaign = gpu_campaign.GpuCampaign(points=points)
        frame = gpu_campaign.prepare_campaign(campaign, Path(prepare),
                                              progress=lambda m: print(m, file=sys.stderr))
        return {"prepared": str(prepare), "dataflows": int(len(frame)),
                "programs": sorted(frame.program.unique().tolist())}
    import pandas as pd

    from tileflow.outputs import check_output_folder
    from tileflow.specs.arch import load_arch

    if points is not None:
        raise InputError("applies to --prepare: with --results the campaign is the one "
                         "run.sh measured", where="--points")
    folders = [Path(r) for r in ([results] if isinstance(results, str) else results)]
    for folder in folders:
        if not folder.is_dir():
            raise InputError(f"'{folder}' is not a folder (give the folder run.sh wrote its "
                             "results into)", where="--results")
    if len({f.resolve() for f in folders}) < len(folders):
        raise InputError("the same results folder is given twice", where="--results")
    target = check_output_folder(out or "validate/gpu", "--out")
    gpu_report.check_outputs(target, learn)  # every file it writes, before any is
    runs = gpu_results.read_runs(folders, Path(prepared) if prepared else None)
    try:
        arch = load_arch(runs.manifest.get("arch", gpu_campaign.ARCH))
    except InputError as exc:  # the accelerator the campaign was prepared for
        raise exc.located(str((Path(prepared) if prepared else folders[0]) / "manifest.json"),
                          "arch") from None
    study = gpu_results.study(runs.measured, arch)
    vendor = pd.concat([gpu_vendor.read_vendor(f / gpu_vendor.FILE) for f in folders],
                       ignore_index=True)
    study.summary["kernel_vs_vendor"] = gpu_vendor.kernel_vs_vendor(study.frame, vendor)
    study.summary["runs"] = [str(f) for f in folders]
    # the version of the model that made the campaign's predictions (null for a campaign
    # prepared before manifests recorded it)
    study.summary["model_version"] = runs.manifest.get("model_version")
    study.summary["retest"] = runs.retest
    command = "tileflow validate gpu" + "".join(f" --results {f}" for f in folders) + (
        f" --prepared {prepared}" if prepared else "") + (f" --out {out}" if out else "") + (
        " --learn" if learn else "")
    machine, counts, notes = runs.machine, runs.counts, runs.notes
    sections: list[str] = []
    if learn:
        from tileflow.calibrate import gpu_learned

        meta = gpu_learned.run(study.frame, arch, target, machine)
        shapes = meta["held_out_shapes"]
        study.summary["learned_model"] = {
            name: {k: v for k, v in shapes[name].items() if k != "groups"}
            for name in shapes}
        sections = gpu_learned.report_lines(meta)
    gpu_report.write(study, target, command, machine, counts, notes, sections)
    return {**study.summary, "report": str(target / "report.md")}


def add_campaign_options(parser) -> None:
    """Options of `tileflow validate cpu|gpu` (the RTL study ignores them)."""
    parser.add_argument("--config", help="campaign YAML: workloads and sizes, points, threads, "
                                         "repetitions, seed, traffic (default: built in)")
    parser.add_argument("--points", type=int, help="dataflows per workload (default 200)")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild the report from the saved measurements.csv")
    parser.add_argument("--prepare", metavar="DIR",
                        help="gpu: choose the campaign, build its CUDA programs with nvcc "
                             "and write DIR/run.sh to run on a GPU (no GPU needed here)")
    parser.add_argument("--results", metavar="DIR", action="append",
                        help="gpu: the folder run.sh wrote on the GPU; writes the report "
                             "(default out: validate/gpu); repeat it for several runs on the "
                             "same GPU, reported as one campaign (a dataflow in two runs is "
                             "kept once and counted as a retest)")
    parser.add_argument("--prepared", metavar="DIR",
                        help="gpu --results: the prepared folder, where DIR lacks the "
                             "campaign.csv and manifest.json run.sh copies")
    parser.add_argument("--remeasure-traffic", action="store_true",
                        help="cpu: measure the saved kernels' cache traffic again and "
                             "recompute the model's traffic columns, keeping their timings; "
                             "then rebuild the report")
    parser.add_argument("--learn", action="store_true",
                        help="cpu, gpu --results: also train the learned cost model (needs "
                             "the 'learn' extra), validate it on held-out workload shapes and "
                             "store it with the measured machine's fingerprint (learned.json, "
                             "learned-model.pkl; cpu also learned.md, gpu a report section)")


def run(args) -> int:
    """Entry point for the CLI's `validate cpu|gpu`."""
    out = None if args.out == "validate/rtl-systolic" else args.out
    try:
        if args.target == "cpu":
            summary = validate_cpu(args.config, args.points, out, args.report_only,
                                   getattr(args, "remeasure_traffic", False),
                                   getattr(args, "learn", False))
        else:
            summary = validate_gpu(args.points, out, args.prepare,
                                   args.results, args.prepared,
                                   getattr(args, "learn", False))
            if args.json or "prepared" in summary:
                print(json_text(summary, indent=2, default=str))
            else:
                print(f"points: {summary['points']}; held-out ({summary['heldout']}) "
                      f"latency Spearman {summary['latency_spearman_heldout']:.3f}, MAPE "
                      f"{summary['latency_mape_heldout']:.1%}; traffic R^2: "
                      + (", ".join(f"{k} {v:.3f}" for k, v in summary["traffic_r2"].items())
                         or "none measured"))
                print(f"report written to {summary['report']}")
            return 0
    except KeyboardInterrupt:
        folder = Path(out or "validate/cpu")
        print(f"interrupted: every kernel measured so far is in {folder / 'measurements.csv'};"
              " run the same command again to continue", file=sys.stderr)
        return 130
    if args.json:
        print(json_text(summary, indent=2))
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
