"""A CPU measurement campaign: for each configured workload, named baselines and random
valid trees; each kernel generated, checked, timed and (single-threaded) run under
cachegrind; the model's counts beside it. Rows are saved as they are measured."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from tileflow.analysis.prepare import InvalidDataflow, prepare
from tileflow.analysis.traffic import count
from tileflow.cost.model import Result, evaluate, evaluate_plan
from tileflow.dataflows import build
from tileflow.dataflows.registry import baselines_for
from tileflow.errors import InputError
from tileflow.kernels.boundary import boundary_words, inbound_words
from tileflow.kernels.c_source import generate_c
from tileflow.kernels.cache_view import cache_view_words
from tileflow.kernels.cachegrind import geometry, measure, valgrind_missing
from tileflow.kernels.columns import boundaries, words_column
from tileflow.kernels.cpu import build_checked
from tileflow.kernels.nest import analyse
from tileflow.kernels.timing import environment, time_kernel
from tileflow.kernels.trees import lanes_on_row, random_valid_trees, single_core
from tileflow.outputs import write_csv
from tileflow.outputs import write_text_atomic as write_text
from tileflow.specs.arch import Architecture, load_arch
from tileflow.specs.workload import Workload, load_workload
from tileflow.specs.yamlfile import Field, load_yaml
from tileflow.tree import Dataflow, to_dict

DEFAULT_WORKLOADS = {
    "gemm-chain": {"b": 1, "m": 256, "l": 256, "k": 64, "n": 64},
    "attention": {"b": 1, "m": 256, "l": 256, "k": 64, "n": 64},
}


# how measured traffic is obtained: whole-program cachegrind counts less a baseline run of
# the same driver without the kernel call (so memset/memcpy/libm calls count, setup does not)
TRAFFIC_METHOD = "cachegrind, less the same driver not calling the kernel; loop order kept"


@dataclass(frozen=True)
class CampaignConfig:
    # per workload: its sizes, or a list of sizes (several shapes of the same workload)
    workloads: dict[str, dict[str, int] | list[dict[str, int]]] = field(
        default_factory=lambda: dict(DEFAULT_WORKLOADS))
    points: int = 200  # dataflows per workload
    arch: str = "host"
    threads: int = 1
    warmup: int = 1
    repetitions: int = 7
    seed: int = 0
    traffic: bool = True  # cachegrind
    first_level: str = "L1"
    last_level: str = "L2"  # the last level of one core's own hierarchy

    def shapes(self) -> list[tuple[str, dict[str, int]]]:
        """(workload, sizes) of every shape measured, in the config's order."""
        return [(name, sizes) for name, value in self.workloads.items()
                for sizes in (value if isinstance(value, list) else [value])]


def load_config(path: str | None, points: int | None = None) -> CampaignConfig:
    """The campaign from a YAML file (every key optional), validated with line numbers."""
    config = CampaignConfig()
    if path:
        f = Field(load_yaml(path), str(path))
        f.check_keys({"workloads", "points", "arch", "threads", "warmup", "repetitions", "seed",
                      "traffic", "first_level", "last_level"})
        workloads = dict(config.workloads)
        if f.has("workloads"):
            workloads = {}
            for name, value in f.child("workloads").items():
                if isinstance(value.data, list):
                    workloads[str(name)] = [{k: sizes.integer(k) for k in sizes.keys()}
                                            for sizes in value.elements()]
                else:
                    value.require_mapping()
                    workloads[str(name)] = {k: value.integer(k) for k in value.keys()}
        traffic = f.get("traffic", True)
        if not isinstance(traffic, bool):
            raise f.error(f"'traffic' must be true or false, got {traffic!r}", "traffic")
        config = CampaignConfig(
            workloads, f.integer("points", config.points), f.string("arch", config.arch),
            f.integer("threads", 1), f.integer("warmup", 1, minimum=0),
            f.integer("repetitions", 7), f.integer("seed", 0, minimum=0), traffic,
            f.string("first_level", "L1"), f.string("last_level", "L2"))
    if points is not None:
        if points < 1:
            raise InputError(f"--points must be at least 1, got {points}")
        config = CampaignConfig(**{**config.__dict__, "points": points})
    return config


def tree_key(w: Workload, flow: Dataflow) -> str:
    text = json.dumps({"sizes": dict(w.sizes), "tree": to_dict(flow)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def choose_dataflows(w: Workload, arch: Architecture, points: int,
                     seed: int) -> list[tuple[str, Dataflow]]:
    """Named baselines the model finds valid on `arch`, then random valid trees up to
    `points` in all: (kind, dataflow)."""
    chosen: list[tuple[str, Dataflow]] = []
    for name in baselines_for(w):
        try:
            flow = lanes_on_row(w, arch, build(name, w, arch))
            if evaluate_plan(prepare(w, arch, flow)).valid:
                chosen.append(("baseline", flow))
        except (InputError, InvalidDataflow):
            continue
    chosen = chosen[:points]
    randoms = random_valid_trees(w, arch, points - len(chosen), seed)
    return chosen + [("random", f) for f in randoms]


def model_row(w: Workload, arch: Architecture, flow: Dataflow,
              config: CampaignConfig) -> dict:
    """What the model says of one dataflow: its latency and the counts calibration uses."""
    row, result = model_terms(w, arch, flow)
    return {**row, **model_traffic(w, arch, flow, result, config)}


def model_terms(w: Workload, arch: Architecture, flow: Dataflow) -> tuple[dict, Result]:
    """The model's latency, bottleneck, work and words across each boundary of one dataflow
    (the columns every campaign, CPU or GPU, calibrates on), with the model's result."""
    plan = prepare(w, arch, flow)
    counts = count(plan)
    result = evaluate_plan(plan)
    vector_work = sum(leaf.ops * arch.unit(leaf.unit).cycles(leaf.function)
                      for leaf in counts.leaves.values() if leaf.unit != "matrix")
    row = {"model_valid": result.valid, "model_s": result.cycles / (arch.clock_ghz * 1e9),
           "model_bottleneck": result.bottleneck, "macs": result.macs,
           "vector_work": vector_work,
           "leaf_steps": sum(leaf.steps for leaf in counts.leaves.values())}
    for outer, inner in boundaries(arch):
        row[words_column(outer, inner)] = boundary_words(result, inner)
    return row, result


def model_traffic(w: Workload, arch: Architecture, flow: Dataflow, result: Result,
                  config: CampaignConfig) -> dict:
    """The model's bytes brought into the measured levels, as cachegrind counts them (read
    and write-allocate misses): the tree's view and the cache view (with the simulated
    caches' sizes)."""
    sizes = {t: w.tensor_words(t) for t in w.tensors}
    capacities = {level: geometry(arch, level).size_bytes / arch.word_bytes
                  for level in (config.first_level, config.last_level)}
    row = {}
    for name, level in (("first_level", config.first_level), ("last_level", config.last_level)):
        row[f"model_{name}_bytes"] = inbound_words(result, level, sizes) * arch.word_bytes
        try:
            row[f"model_cache_{name}_bytes"] = cache_view_words(
                w, arch, flow, result, level, capacities) * arch.word_bytes
        except InvalidDataflow:  # a tree the cache view cannot rebuild: no figure
            row[f"model_cache_{name}_bytes"] = float("nan")
    return row


def measure_one(w: Workload, arch: Architecture, flow: Dataflow, config: CampaignConfig) -> dict:
    checked = build_checked(w, arch, flow, threads=config.threads, seed=config.seed)
    timing = time_kernel(checked.kernel, config.threads, config.warmup, config.repetitions)
    row = {"measured_s": timing.median_s, "min_s": timing.min_s, "max_s": timing.max_s,
           "spread": timing.spread, "repetitions": timing.repetitions,
           "threads": timing.threads, "max_error": checked.max_error}
    if config.traffic:
        row.update(measure_traffic(w, arch, flow, config))
    return row


def measure_traffic(w: Workload, arch: Architecture, flow: Dataflow,
                    config: CampaignConfig) -> dict:
    """Bytes brought into the two measured levels by the single-threaded kernel under
    cachegrind; a failure is recorded in the row, not raised (the row keeps its timing)."""
    single = generate_c(analyse(w, arch, flow), threads=False)
    try:
        misses = measure(single, w, geometry(arch, config.first_level),
                         geometry(arch, config.last_level))
    except RuntimeError as exc:
        return {"measured_first_level_bytes": float("nan"),
                "measured_last_level_bytes": float("nan"),
                "traffic_error": str(exc).splitlines()[0][:200]}
    return {"measured_first_level_bytes": misses.d1_bytes,
            "measured_last_level_bytes": misses.ll_bytes, "traffic_error": ""}


def remeasure(config: CampaignConfig, out: Path,
              progress: Callable | None = None) -> pd.DataFrame:
    """Recompute the model's traffic columns of every kernel in out/measurements.csv, and
    measure the traffic again of those not yet measured by TRAFFIC_METHOD, keeping the
    timings (they do not depend on how traffic is measured). Rows are saved as they go: an
    interrupted run keeps what it re-measured (`traffic_measured_by` names each row's
    method), and running it again continues."""
    from tileflow.specs.dataflow import parse_dataflow

    if valgrind_missing():
        raise InputError(f"cannot measure traffic: {valgrind_missing()}")
    csv = out / "measurements.csv"
    frame = read_rows(csv)
    if not len(frame):
        raise InputError(f"no measurements to re-measure: {csv} is missing or empty")
    arch = _campaign_arch(config)
    for column in ("traffic_measured_by", "traffic_error"):
        text = frame[column].astype(object) if column in frame else pd.Series("", frame.index)
        frame[column] = text.where(text.notna(), "").astype(str)
    bar = progress(total=len(frame)) if progress else None
    for i, r in frame.iterrows():
        w = load_workload(r.workload, shape_sizes(r["shape"]))
        flow = parse_dataflow(Field(json.loads(r.tree), str(csv)))
        values = model_traffic(w, arch, flow, evaluate(w, arch, flow), config)
        if r.traffic_measured_by != TRAFFIC_METHOD:
            values.update(measure_traffic(w, arch, flow, config),
                          traffic_measured_by=TRAFFIC_METHOD)
        for k, v in values.items():
            frame.loc[i, k] = v
        if r.traffic_measured_by != TRAFFIC_METHOD:
            write_atomic(frame, csv)
        if bar:
            bar.update(1)
    write_atomic(frame, csv)
    if bar:
        bar.close()
    return frame


def read_rows(csv: Path) -> pd.DataFrame:
    if not csv.exists():
        return pd.DataFrame()
    return pd.read_csv(csv)


def write_atomic(frame: pd.DataFrame, path: Path) -> None:
    write_csv(frame, path)


def run_campaign(config: CampaignConfig, out: Path,
                 progress: Callable | None = None) -> pd.DataFrame:
    """Measure every chosen dataflow not yet in out/measurements.csv; the CSV is rewritten
    (atomically) after each one, so an interrupted campaign keeps what it measured."""
    out.mkdir(parents=True, exist_ok=True)
    if config.traffic and valgrind_missing():
        raise InputError(f"cannot measure traffic: {valgrind_missing()} (set traffic: false "
                         "in the campaign config to time kernels only)")
    arch = _campaign_arch(config)
    for level in (config.first_level, config.last_level):
        if level not in arch.level_index or arch.level_index[level] == 0:
            raise InputError(f"campaign level '{level}' is not a cache level of {arch.name} "
                             f"({', '.join(arch.level_index)})")
    csv = out / "measurements.csv"
    done = read_rows(csv)
    seen = set(done["key"]) if "key" in done else set()
    rows = done.to_dict("records")
    write_text(out / "environment.json", json.dumps(
        {**environment(), "config": config.__dict__, "arch": arch.name}, indent=2) + "\n")
    jobs = []
    for name, sizes in config.shapes():
        w = load_workload(name, sizes)
        for kind, flow in choose_dataflows(w, arch, config.points, config.seed):
            jobs.append((name, w, kind, flow))
    bar = progress(total=len(jobs)) if progress else None
    for index, (name, w, kind, flow) in enumerate(jobs):
        key = tree_key(w, flow)
        if key not in seen:
            row = {"key": key, "workload": name, "shape": _shape(w), "kind": kind,
                   "dataflow": flow.name, "point": index,
                   **model_row(w, arch, flow, config), **measure_one(w, arch, flow, config),
                   "traffic_measured_by": TRAFFIC_METHOD if config.traffic else "",
                   "tree": json.dumps(to_dict(flow))}
            rows.append(row)
            seen.add(key)
            write_atomic(pd.DataFrame(rows), csv)
        if bar:
            bar.update(1)
    if bar:
        bar.close()
    return pd.DataFrame(rows)


def retime(frame: pd.DataFrame, config: CampaignConfig, out: Path, sample: int = 40,
           seed: int = 1) -> pd.DataFrame:
    """Time a random sample of measured kernels again (out/retest.csv): how far two
    measurements of the same kernel differ on this machine, the floor under any model's
    error."""
    from tileflow.specs.dataflow import parse_dataflow

    arch = _campaign_arch(config)
    rows = []
    for r in frame.sample(min(sample, len(frame)), random_state=seed).itertuples():
        w = load_workload(r.workload, shape_sizes(r.shape))
        flow = parse_dataflow(Field(json.loads(r.tree), str(out / "measurements.csv")))
        checked = build_checked(w, arch, flow, threads=config.threads, seed=config.seed)
        timing = time_kernel(checked.kernel, config.threads, config.warmup, config.repetitions)
        rows.append({"key": r.key, "workload": r.workload, "min_s": r.min_s,
                     "min_s_again": timing.min_s})
    result = pd.DataFrame(rows)
    write_atomic(result, out / "retest.csv")
    return result


def _campaign_arch(config: CampaignConfig) -> Architecture:
    """The description the kernels run on: one core's view when single-threaded."""
    arch = load_arch(config.arch)
    return single_core(arch) if config.threads == 1 else arch


def shape_sizes(shape: str) -> dict[str, int]:
    """The sizes of a row's `shape` column ("b=1 m=256 ...")."""
    return {k: int(v) for k, v in (item.split("=") for item in str(shape).split())}


def _shape(w: Workload) -> str:
    return " ".join(f"{d}={s}" for d, s in w.sizes.items())


def tqdm_progress(**kw):
    from tqdm import tqdm

    return tqdm(file=sys.stderr, desc="kernels", unit="kernel", **kw)


def total_points(frame: pd.DataFrame) -> dict[str, int]:
    return {str(k): int(v) for k, v in frame.groupby("workload").size().items()} \
        if len(frame) else {}


