"""A CPU measurement campaign: for each configured workload, named baselines and random
valid trees; each kernel generated, checked, timed and (single-threaded) run under
cachegrind; the model's counts beside it. Rows are saved as they are measured."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.cost.explain import leaf_work
from tileflow.cost.result import Result
from tileflow.dataflows import build
from tileflow.dataflows.registry import baselines_for
from tileflow.errors import InputError
from tileflow.kernels.blas import time_numpy
from tileflow.kernels.boundary import boundary_words, inbound_words
from tileflow.kernels.build import BuildError, compile_shared
from tileflow.kernels.c_source import STYLES, generate_c
from tileflow.kernels.cache_view import cache_view_words
from tileflow.kernels.cachegrind import geometry, measure, valgrind_missing
from tileflow.kernels.campaign_config import (  # noqa: F401 - the campaign API
    DEFAULT_WORKLOADS,
    CampaignConfig,
    load_config,
)
from tileflow.kernels.columns import boundaries, words_column
from tileflow.kernels.cpu import WrongResult, build_checked
from tileflow.kernels.near_picks import near_pick_trees
from tileflow.kernels.nest import analyse
from tileflow.kernels.reference import random_inputs
from tileflow.kernels.timing import environment, time_kernel
from tileflow.kernels.trees import (
    lanes_on_row,
    parallel_rows,
    random_valid_trees,
    single_core,
    threaded,
)
from tileflow.outputs import write_csv
from tileflow.outputs import write_text_atomic as write_text
from tileflow.provenance import MODEL_VERSION
from tileflow.specs.arch import Architecture, load_arch
from tileflow.specs.workload import Workload, load_workload
from tileflow.specs.yamlfile import Field
from tileflow.tree import Dataflow, to_dict

# the timing pass rewrites measurements.csv at most this often (and at its end): an
# interrupted campaign loses at most this much measuring, and thousands of rows are not
# rewritten after every kernel
SAVE_EVERY_S = 10.0

# kernels that could not be generated, compiled or checked: recorded here, skipped on resume
FAILURES = "failures.csv"
NUMPY_REPETITIONS = 51  # calls of NumPy's form per shape and thread count

# how measured traffic is obtained: whole-program cachegrind counts less a baseline run of
# the same driver without the kernel call (so memset/memcpy/libm calls count, setup does not)
TRAFFIC_METHOD = "cachegrind, less the same driver not calling the kernel; loop order kept"


def tree_key(w: Workload, flow: Dataflow) -> str:
    text = json.dumps({"sizes": dict(w.sizes), "tree": to_dict(flow)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def choose_dataflows(w: Workload, arch: Architecture, points: int, seed: int,
                     near_picks: float = 0.0) -> list[tuple[str, Dataflow]]:
    """Named baselines the model finds valid on `arch`, then up to `points` in all: the
    fraction `near_picks` of the rest one step away from the model's best trees among the
    baselines, the random ones and the baselines fitted by the tile search
    (kernels.near_picks), the others uniformly random valid trees: (kind, dataflow)."""
    chosen: list[tuple[str, Dataflow]] = []
    for name in baselines_for(w):
        try:
            flow = lanes_on_row(w, arch, build(name, w, arch))
            if evaluate(w, arch, flow).valid:
                chosen.append(("baseline", flow))
        except (InputError, InvalidDataflow):
            continue
    chosen = chosen[:points]
    left = points - len(chosen)
    near = int(round(left * near_picks))
    randoms = random_valid_trees(w, arch, left - near, seed)
    pool = [f for _, f in chosen] + randoms
    if near:
        pool += fitted_baselines(w, arch, seed)
    if near and len(pool) < 16:  # too few trees to pick from: a search pool of its own
        pool += random_valid_trees(w, arch, 16 * max(near, 4), seed + 1)
    nears = near_pick_trees(w, arch, pool, near, seed)
    return chosen + [("random", f) for f in randoms] + [("near-pick", f) for f in nears]


def fitted_baselines(w: Workload, arch: Architecture, seed: int) -> list[Dataflow]:
    """The named baselines with their tile factors fitted by the explorer's tile search on
    `arch` (explore.tilesearch.fit_baseline), as the explorer would recommend them."""
    from tileflow.explore.tilesearch.fit import fit_baseline

    fitted = []
    for name in baselines_for(w):
        try:
            fitted.append(lanes_on_row(w, arch, fit_baseline(name, w, arch, seed=seed)))
        except (InputError, InvalidDataflow):
            continue
    return fitted


def model_row(w: Workload, arch: Architecture, flow: Dataflow,
              config: CampaignConfig) -> dict:
    """What the model says of one dataflow: its latency and the counts calibration uses."""
    row, result = model_terms(w, arch, flow)
    return {**row, **model_traffic(w, arch, flow, result, config)}


def model_terms(w: Workload, arch: Architecture, flow: Dataflow) -> tuple[dict, Result]:
    """The model's latency, bottleneck, work and words across each boundary of one dataflow
    (the columns every campaign, CPU or GPU, calibrates on), with the model's result."""
    result = evaluate(w, arch, flow)
    leaves = leaf_work(w, arch, flow)
    vector_work = sum(leaves[op.name].ops * arch.unit(op.unit).cycles(op.function)
                      for op in w.ops if op.unit != "matrix")
    row = {"model_valid": result.valid, "model_s": result.cycles / (arch.clock_ghz * 1e9),
           "model_bottleneck": result.bottleneck, "macs": result.macs,
           "vector_work": vector_work,
           "leaf_steps": sum(leaf.steps for leaf in leaves.values())}
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


def measure_one(w: Workload, arch: Architecture, flow: Dataflow, config: CampaignConfig,
                threads: int = 1, traffic: bool | None = None) -> dict:
    """Check and time the kernel of `flow` on `threads` threads (`flow` already split over
    them, `arch` the description its code is generated for); its traffic where asked (by
    default where the config measures traffic), from the single-threaded code."""
    checked = build_checked(w, arch, flow, threads=threads, seed=config.seed)
    timing = time_kernel(checked.kernel, threads, config.warmup, config.repetitions)
    row = {"measured_s": timing.median_s, "min_s": timing.min_s, "max_s": timing.max_s,
           "spread": timing.spread, "repetitions": timing.repetitions,
           "threads": timing.threads, "max_error": checked.max_error}
    if config.traffic if traffic is None else traffic:
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
    sampled = traffic_keys(frame, config)
    measured: dict[str, dict] = {}  # per dataflow: one single-threaded measurement
    for r in frame[frame.traffic_measured_by == TRAFFIC_METHOD].to_dict("records"):
        measured.setdefault(r["key"], {c: r.get(c) for c in TRAFFIC_COLUMNS})
    bar = progress(total=len(frame)) if progress else None
    for i, r in frame.iterrows():
        w = load_workload(r.workload, shape_sizes(r["shape"]))
        flow = parse_dataflow(Field(json.loads(r.tree), str(csv)))
        values = model_traffic(w, arch, flow, evaluate(w, arch, flow), config)
        fresh = r.traffic_measured_by != TRAFFIC_METHOD and r.key in sampled
        if fresh:
            if r.key not in measured:
                measured[r.key] = {**measure_traffic(w, arch, flow, config),
                                   "traffic_measured_by": TRAFFIC_METHOD}
            values.update(measured[r.key])
        for k, v in values.items():
            frame.loc[i, k] = v
        if fresh:
            write_atomic(frame, csv)
        if bar:
            bar.update(1)
    write_atomic(frame, csv)
    if bar:
        bar.close()
    return frame


TRAFFIC_COLUMNS = ("measured_first_level_bytes", "measured_last_level_bytes", "traffic_error",
                   "traffic_measured_by")


def traffic_keys(frame: pd.DataFrame, config: CampaignConfig) -> set[str]:
    """The dataflows (keys) whose traffic is measured: all, or `traffic_sample` of them
    drawn with the campaign's seed (the same draw on every run, so a resumed pass
    continues it)."""
    keys = sorted(set(frame.key.astype(str)))
    if config.traffic_sample and config.traffic_sample < len(keys):
        rng = np.random.default_rng(config.seed)
        keys = rng.choice(keys, config.traffic_sample, replace=False).tolist()
    return set(keys)


def read_rows(csv: Path) -> pd.DataFrame:
    if not csv.exists():
        return pd.DataFrame()
    return pd.read_csv(csv)


def write_atomic(frame: pd.DataFrame, path: Path) -> None:
    write_csv(frame, path)


@dataclass(frozen=True)
class Job:
    """One kernel to time: a chosen dataflow of one shape at one thread count."""

    name: str
    w: Workload
    kind: str
    flow: Dataflow  # as chosen, for one core: the row's `tree`
    point: int
    threads: int
    timed: Dataflow  # `flow` with its outermost unreduced loop split over the threads
    key: str


def plan_jobs(config: CampaignConfig, seen: set[tuple[str, int]]) -> list[Job]:
    """Every (dataflow, thread count) of the campaign not in `seen` ((key, threads)).
    Dataflows are chosen once per shape on the one-core description; each is timed at every
    thread count, split over the threads by `parallel_rows` (a dataflow with no outermost
    unreduced loop the count divides is timed on fewer counts)."""
    arch = _campaign_arch(config)
    jobs = []
    for name, sizes in config.shapes():
        w = load_workload(name, sizes)
        chosen = choose_dataflows(w, arch, config.points, config.seed, config.near_picks)
        for index, (kind, flow) in enumerate(chosen):
            key = tree_key(w, flow)
            for t in config.threads:
                if (key, t) in seen:
                    continue
                try:
                    timed = parallel_rows(w, flow, t)
                except InputError:
                    continue
                jobs.append(Job(name, w, kind, flow, index, t, timed, key))
    return jobs


def kernel_arch(config: CampaignConfig, threads: int) -> Architecture:
    """The description a kernel's code is generated for: one core's view for one thread,
    the whole description (its cores' fan-out) for more."""
    return _campaign_arch(config) if threads == 1 else load_arch(config.arch)


def _compile(text: str) -> str:
    """Compile one source into the build cache: "" or the compiler's complaint."""
    try:
        compile_shared(text)
    except BuildError as exc:
        return str(exc)[:2000]
    return ""


def failure(j: Job, stage: str, exc: BaseException | str) -> dict:
    """A row of failures.csv: the job, the stage it failed at and why (first line)."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return {"key": j.key, "threads": j.threads, "workload": j.name, "shape": _shape(j.w),
            "kind": j.kind, "dataflow": j.flow.name, "stage": stage,
            "error": (text.strip().splitlines() or [""])[0][:300],
            "tree": json.dumps(to_dict(j.flow))}


def compile_pass(jobs: list[Job], config: CampaignConfig, progress: Callable | None = None
                 ) -> tuple[list[Job], list[dict]]:
    """Compile every job's kernel into the build cache before any is timed, in
    `compile_workers` processes (the timing pass then compiles nothing: nothing else runs
    on the machine while it times). Returns the jobs that compiled and a failure row for
    each that did not (a generator defect: recorded, not fatal to a long campaign)."""
    from concurrent.futures import ProcessPoolExecutor

    sources: dict[str, list[int]] = {}
    failures = []
    for i, j in enumerate(jobs):
        try:
            text = generate_c(analyse(j.w, kernel_arch(config, j.threads), j.timed),
                              threads=j.threads > 1, style=STYLES[-1]).text
        except Exception as exc:  # noqa: BLE001 - any generator defect is recorded
            failures.append(failure(j, "generate", exc))
            continue
        sources.setdefault(text, []).append(i)
    order = sorted(sources)
    bar = progress(total=len(order), desc="compile") if progress else None
    failed: set[int] = set()

    def record(text: str, error: str) -> None:
        if error:
            failed.update(sources[text])
            failures.extend(failure(jobs[i], "compile", error) for i in sources[text])
        if bar:
            bar.update(1)

    if config.compile_workers <= 1 or len(order) < 2:
        for text in order:
            record(text, _compile(text))
    else:
        with ProcessPoolExecutor(config.compile_workers) as pool:
            for text, error in zip(order, pool.map(_compile, order), strict=True):
                record(text, error)
    if bar:
        bar.close()
    built = {i for ids in sources.values() for i in ids} - failed
    return [j for i, j in enumerate(jobs) if i in built], failures


def fingerprint_columns() -> dict[str, str]:
    """The machine every row was measured on, as columns (CPU model, caches, compiler,
    flags, kernel style)."""
    env = environment()
    return {"machine_cpu": env["cpu"], "machine_cpus": env["cpus"],
            "machine_caches": env["caches"], "machine_compiler": env["compiler"],
            "machine_flags": env["flags"], "kernel_style": env["kernel_style"]}


def run_campaign(config: CampaignConfig, out: Path,
                 progress: Callable | None = None) -> pd.DataFrame:
    """Measure every chosen (dataflow, thread count) not yet in out/measurements.csv: a
    compile pass, then the timing pass; the CSV is rewritten (atomically) every
    SAVE_EVERY_S, at the end and when interrupted, so an interrupted campaign keeps what it
    measured. NumPy's time for the same computation (BLAS matrix products, same shape and
    thread count) goes into every row."""
    out.mkdir(parents=True, exist_ok=True)
    if config.traffic and valgrind_missing():
        raise InputError(f"cannot measure traffic: {valgrind_missing()} (set traffic: false "
                         "in the campaign config to time kernels only)")
    arch = _campaign_arch(config)
    for level in (config.first_level, config.last_level):
        if level not in arch.level_index or arch.level_index[level] == 0:
            raise InputError(f"campaign level '{level}' is not a cache level of {arch.name} "
                             f"({', '.join(arch.level_index)})")
    if max(config.threads) > 1:  # OpenMP threads sleep between parallel loops (read at load)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    csv = out / "measurements.csv"
    done = read_rows(csv)
    check_same_machine(done, csv)
    rows = done.to_dict("records")
    seen = {(r["key"], _threads_of(r)) for r in rows}
    write_text(out / "environment.json", json.dumps(
        {**environment(), "config": config.__dict__, "arch": arch.name,
         "model_version": MODEL_VERSION}, indent=2) + "\n")
    failed_before = read_rows(out / FAILURES)
    seen |= {(r["key"], _threads_of(r)) for r in failed_before.to_dict("records")}
    jobs = plan_jobs(config, seen)
    jobs, failures = compile_pass(jobs, config, progress)
    failures = failed_before.to_dict("records") + failures
    if failures:
        write_atomic(pd.DataFrame(failures), out / FAILURES)
    traffic = traffic_keys(pd.DataFrame({"key": [j.key for j in jobs]}), config) \
        if config.traffic and jobs else set()
    measured: dict[str, dict] = {}
    machine = fingerprint_columns()
    blas: dict[tuple[str, int], dict] = {}
    bar = progress(total=len(jobs)) if progress else None
    saved_at = time.monotonic()
    # the model of a t-thread kernel: the host with t cores under its outermost level
    models = {t: threaded(load_arch(config.arch), t) for t in config.threads}
    try:
        for j in jobs:
            shape = _shape(j.w)
            if (shape, j.threads) not in blas:
                # many calls: once per shape and thread count, and the fastest is kept
                blas[shape, j.threads] = time_numpy(j.name, random_inputs(j.w, config.seed),
                                                    j.threads, repetitions=NUMPY_REPETITIONS)
            try:
                terms, _ = model_terms(j.w, models[j.threads], j.timed)
                own = model_traffic(j.w, arch, j.flow, evaluate(j.w, arch, j.flow), config)
                timed = measure_one(j.w, kernel_arch(config, j.threads), j.timed, config,
                                    j.threads, False)
            except (BuildError, WrongResult, InputError, InvalidDataflow, OSError) as exc:
                failures.append(failure(j, "time", exc))
                write_atomic(pd.DataFrame(failures), out / FAILURES)
                continue
            row = {"key": j.key, "workload": j.name, "shape": shape, "kind": j.kind,
                   "dataflow": j.flow.name, "point": j.point, **terms, **own, **timed,
                   **blas[shape, j.threads], **machine, "traffic_measured_by": ""}
            if j.key in traffic:  # once per dataflow, copied to its other thread counts
                if j.key not in measured:
                    measured[j.key] = {**measure_traffic(j.w, arch, j.flow, config),
                                       "traffic_measured_by": TRAFFIC_METHOD}
                row.update(measured[j.key])
            row["tree"] = json.dumps(to_dict(j.flow))
            rows.append(row)
            if time.monotonic() - saved_at > SAVE_EVERY_S:
                write_atomic(pd.DataFrame(rows), csv)
                saved_at = time.monotonic()
            if bar:
                bar.update(1)
    finally:  # interrupted too: what was measured is saved
        if jobs:
            write_atomic(pd.DataFrame(rows), csv)
    if bar:
        bar.close()
    return pd.DataFrame(rows)


def check_same_machine(done: pd.DataFrame, csv: Path) -> None:
    """Refuse to add to measurements made elsewhere: rows without the machine's fingerprint
    (an older campaign) or with another machine, compiler, flags or kernel style (their
    timings would mix with these, and a resumed run would skip their dataflows)."""
    if not len(done):
        return
    here = fingerprint_columns()
    missing = [c for c in here if c not in done]
    if missing:
        raise InputError(f"{csv} holds {len(done)} rows measured without the machine's "
                         "fingerprint (an older campaign): move it away, or give another "
                         "--out, to start this campaign")
    for column, value in here.items():
        other = sorted({str(v) for v in done[column]} - {value})
        if other:
            raise InputError(f"{csv}: rows measured with {column} '{other[0]}', here "
                             f"'{value}': move the file away, or give another --out, to "
                             "measure on this machine")


def _threads_of(row: dict) -> int:
    """A saved row's thread count (rows saved before thread counts were recorded: 1)."""
    value = row.get("threads")
    return 1 if value is None or value != value else int(value)


def retime(frame: pd.DataFrame, config: CampaignConfig, out: Path, sample: int = 40,
           seed: int = 1) -> pd.DataFrame:
    """Time a random sample of measured kernels again (out/retest.csv): how far two
    measurements of the same kernel differ on this machine, the floor under any model's
    error."""
    from tileflow.specs.dataflow import parse_dataflow

    rows = []
    for r in frame.sample(min(sample, len(frame)), random_state=seed).to_dict("records"):
        w = load_workload(r["workload"], shape_sizes(r["shape"]))
        flow = parse_dataflow(Field(json.loads(r["tree"]), str(out / "measurements.csv")))
        threads = _threads_of(r)
        checked = build_checked(w, kernel_arch(config, threads),
                                parallel_rows(w, flow, threads), threads=threads,
                                seed=config.seed)
        timing = time_kernel(checked.kernel, threads, config.warmup, config.repetitions)
        rows.append({"key": r["key"], "workload": r["workload"], "threads": threads,
                     "min_s": r["min_s"], "min_s_again": timing.min_s})
    result = pd.DataFrame(rows)
    write_atomic(result, out / "retest.csv")
    return result


def _campaign_arch(config: CampaignConfig) -> Architecture:
    """The description dataflows are chosen on and traffic is modelled on: one core's
    view (each kernel's code is that of one core; more threads split its outer loop)."""
    return single_core(load_arch(config.arch))


def shape_sizes(shape: str) -> dict[str, int]:
    """The sizes of a row's `shape` column ("b=1 m=256 ...")."""
    return {k: int(v) for k, v in (item.split("=") for item in str(shape).split())}


def _shape(w: Workload) -> str:
    return " ".join(f"{d}={s}" for d, s in w.sizes.items())


def tqdm_progress(desc: str = "kernels", **kw):
    from tqdm import tqdm

    return tqdm(file=sys.stderr, desc=desc, unit="kernel", **kw)


def add_rows(out: Path, rows: list[dict]) -> int:
    """Append measured rows (campaign columns) to out/measurements.csv, refused where the
    file was measured on another machine; a (dataflow, thread count) already there keeps
    its row. Returns how many were added."""
    csv = out / "measurements.csv"
    done = read_rows(csv)
    check_same_machine(done, csv)
    seen = {(r["key"], _threads_of(r)) for r in done.to_dict("records")}
    new = [r for r in rows if (r["key"], _threads_of(r)) not in seen]
    if new:
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(pd.concat([done, pd.DataFrame(new)], ignore_index=True), csv)
    return len(new)


def measured_row(w: Workload, arch: Architecture, flow: Dataflow, threads: int, kind: str,
                 timing: dict) -> dict:
    """One kernel measured outside a campaign (`explore --measure-top`) in the campaign's
    columns: the model's terms on the t-thread description, the timing given, this
    machine's fingerprint."""
    terms, _ = model_terms(w, threaded(arch, threads), flow)
    return {"key": tree_key(w, flow), "workload": w.name, "shape": _shape(w), "kind": kind,
            "dataflow": flow.name, "point": -1, **terms, **timing, "threads": threads,
            **fingerprint_columns(), "traffic_measured_by": "",
            "tree": json.dumps(to_dict(flow))}
