"""`tileflow validate gpu --results DIR`: the files `run.sh` wrote on the GPU (timings.csv,
optionally ncu.csv; campaign.csv and manifest.json copied from the prepared folder) ->
the measured campaign joined with the model's predictions, the latency parameters fitted
with each shape held out in turn, traffic compared where ncu measured it."""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tileflow.calibrate import gpu_latency, latency, metrics
from tileflow.calibrate.fit import Fit, cross_fit, fit
from tileflow.errors import InputError
from tileflow.kernels.cuda_harness import COLUMNS
from tileflow.specs.arch import Architecture
from tileflow.tables import Column, line_of, read_json_object, read_table

MAX_REL_ERR = 1e-3  # a dataflow whose outputs differ more from the reference is not timed
# Rows computed on tensor cores round their contractions' inputs to TF32 (10-bit mantissa,
# unit roundoff 2^-11), so each product carries a relative error up to 2^-10. Over a K-term
# dot product those errors of random sign add up like a random walk: 2^-10 x sqrt(K) x a
# term's size, against a result of at least about sqrt(K) x a term's size, i.e. about 1e-3
# of the output's scale per contraction, some 4e-3 for the worst of many outputs. A chain
# of two contractions (and a softmax's exp, which turns the scores' absolute error into a
# relative one) compounds it to about 1e-2; 2e-2 accepts that and still rejects a wrong
# index or a missed block, whose errors are of order 1 (the harness's max_rel_err is the
# worst error over the largest reference value).
TF32_REL_ERR = 2e-2
MEASURED = "median_s"  # a GPU to itself: the median of the event timings
FINGERPRINT = ("device", "sm_count", "l2_bytes", "cc", "driver_version", "runtime_version")
NCU_METRICS = {"dram__bytes_read.sum": "measured_dram_read_bytes",
               "dram__bytes_write.sum": "measured_dram_write_bytes",
               "lts__t_bytes.sum": "measured_l2_bytes"}
# (view, predicted column, measured column): the tree's traffic across HBM-L2 and L2-SMEM,
# the compulsory DRAM traffic (inputs read once, outputs written once) and the statements'
# global accesses before any cache
TRAFFIC_VIEWS = (("dram", "model_dram_bytes", "measured_dram_bytes"),
                 ("l2", "model_l2_bytes", "measured_l2_bytes"),
                 ("dram_compulsory", "compulsory_dram_bytes", "measured_dram_bytes"),
                 ("l2_global_accesses", "global_access_bytes", "measured_l2_bytes"))
UNITS = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12}


# what every row of timings.csv holds, whatever its status (times only where it ran)
TIMING_COLUMNS = {"id": Column("integer", maximum=2**31), "status": Column("text"),
                  "sm_count": Column("integer", minimum=1, required=False),
                  "l2_bytes": Column("number", required=False),
                  "driver_version": Column("number", required=False),
                  "runtime_version": Column("number", required=False)}


def _plain(value):
    """A cell as Python shows it (NumPy scalars as plain numbers)."""
    return value.item() if hasattr(value, "item") else value


def read_timings(path: Path) -> pd.DataFrame:
    """timings.csv, checked: every column of the harness, ids integers, times positive and
    ordered (min <= median <= max) and errors non-negative on the rows that ran."""
    if not path.exists():
        raise InputError(f"{path}: not found (run.sh writes it into its results folder)")
    frame = read_table(path, TIMING_COLUMNS)
    missing = [c for c in COLUMNS if c not in frame]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}; expected "
                         f"{', '.join(COLUMNS)}", str(path), "line 1")

    def bad(i: int, column: str, expected: str) -> InputError:
        return InputError(f"expected {expected}, got {_plain(frame.at[i, column])!r}",
                          str(path), f"line {line_of(frame, i)}, column '{column}'")

    for column in FINGERPRINT:  # one GPU and one software stack per file
        differs = frame[column].astype(str) != str(frame[column].iloc[0])
        if differs.any():
            raise bad(int(frame.index[differs][0]), column,
                      f"the machine of the file's first row ({_plain(frame[column].iloc[0])!r})")
    number = {c: pd.to_numeric(frame[c], errors="coerce")
              for c in ("median_s", "min_s", "max_s", "first_s", "reps", "max_rel_err")}
    for i in frame.index:
        if frame.at[i, "status"] != "ok":
            continue
        for c in ("median_s", "min_s", "max_s", "first_s"):
            if not (np.isfinite(number[c][i]) and 0 < number[c][i] < 3600):
                raise bad(i, c, "a time in seconds, above 0 and below 3600")
        if not number["min_s"][i] <= number["median_s"][i] <= number["max_s"][i]:
            raise bad(i, "median_s", "min_s <= median_s <= max_s")
        reps = number["reps"][i]
        if not (np.isfinite(reps) and reps >= 1 and float(reps).is_integer()):
            raise bad(i, "reps", "an integer >= 1")
        err = number["max_rel_err"][i]
        nan_written = str(frame.at[i, "max_rel_err"]).strip().lower() in ("nan", "")
        if not (err >= 0 or (np.isnan(err) and nan_written)):
            raise bad(i, "max_rel_err", "a relative error >= 0 (or nan)")
    for c in number:
        frame[c] = number[c]
    if frame.id.duplicated().any():
        i = int(frame.index[frame.id.duplicated()][0])
        raise bad(i, "id", "each dataflow once")
    frame["id"] = frame.id.astype(int)
    return frame


def read_ncu(path: Path) -> tuple[pd.DataFrame, list[str]]:
    """Bytes per dataflow from ncu's CSV (kernels named k<id>_..., metrics summed over a
    dataflow's launches); (frame, notes). ncu may have been cut short: what parses is
    kept, lines that do not are counted in the notes."""
    notes: list[str] = []
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame(columns=["id", *NCU_METRICS.values()]), ["no ncu measurements"]
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.startswith('"')]
    header = None
    totals: dict[int, dict[str, float]] = {}
    skipped = 0
    for row in csv.reader(lines):
        if all(name in row for name in ("Kernel Name", "Metric Name", "Metric Unit",
                                        "Metric Value")):
            header = {name: k for k, name in enumerate(row)}
            continue
        if header is None or len(row) < len(header):
            skipped += 1
            continue
        match = re.match(r"k(\d+)_", row[header["Kernel Name"]])
        metric = row[header["Metric Name"]]
        unit = UNITS.get(row[header["Metric Unit"]].strip().lower().rstrip("s"))
        try:
            value = float(row[header["Metric Value"]].replace(",", ""))
        except ValueError:
            value = math.nan
        if not match or metric not in NCU_METRICS or unit is None \
                or not (0 <= value * unit < math.inf):
            skipped += 1
            continue
        per = totals.setdefault(int(match.group(1)), dict.fromkeys(NCU_METRICS.values(), 0.0))
        per[NCU_METRICS[metric]] += value * unit
    if skipped:
        notes.append(f"{path.name}: {skipped} line(s) not understood were left out")
    frame = pd.DataFrame([{"id": k, **v} for k, v in sorted(totals.items())],
                         columns=["id", *NCU_METRICS.values()])
    if len(frame):
        frame["measured_dram_bytes"] = (frame.measured_dram_read_bytes
                                        + frame.measured_dram_write_bytes)
    return frame, notes


# campaign.csv as --prepare writes it: what the report reads, each checked on every row
# (the columns a campaign from before tensor cores and staging lacks are optional)
_COUNT = Column("number")
CAMPAIGN_COLUMNS = {
    "id": Column("integer", maximum=2**31), "key": Column("text"),
    "workload": Column("text"), "shape": Column("text"), "kind": Column("text"),
    "dataflow": Column("text"), "model_s": Column("number", strict=True),
    "macs": _COUNT, "tree": Column("json"), "launches": Column("integer", minimum=1),
    **{c: _COUNT for c in latency.INNER_COLUMNS},
    **{c: Column("number", required=False) for c in (
        *gpu_latency.COLUMNS, gpu_latency.STAGED, "mma_ops", "model_dram_bytes",
        "model_l2_bytes", "compulsory_dram_bytes", "global_access_bytes")},
}
# manifest.json's keys the report reads, and their types
MANIFEST_KEYS = {"arch": (str, "an accelerator name"), "nvcc": (str, "nvcc's version line"),
                 "nvcc_flags": (list, "a list of nvcc's flags"),
                 "model_version": (str, "the model's version")}


def read_campaign(folder: Path) -> tuple[pd.DataFrame, dict]:
    csv_path, manifest_path = folder / "campaign.csv", folder / "manifest.json"
    for p in (csv_path, manifest_path):
        if not p.exists():
            raise InputError(f"{p}: not found (run.sh copies it from the prepared folder; "
                             "or pass --prepared DIR)")
    manifest = read_json_object(manifest_path)
    for key, (kind, expected) in MANIFEST_KEYS.items():
        value = manifest.get(key)
        if value is not None and not (isinstance(value, kind) and all(
                isinstance(v, str) for v in (value if kind is list else []))):
            raise InputError(f"expected {expected}, got {str(value)[:60]!r}",
                             str(manifest_path), key)
    frame = read_table(csv_path, CAMPAIGN_COLUMNS)
    for column in ("id", "key"):
        twice = frame[column].duplicated()
        if twice.any():
            line = line_of(frame, int(frame.index[twice][0]))
            raise InputError(f"{str(frame[column][twice].iloc[0])!r} is there twice: each "
                             "dataflow once", str(csv_path), f"line {line}, column '{column}'")
    return frame, manifest


@dataclass(frozen=True)
class GpuStudy:
    frame: pd.DataFrame  # measured rows with predictions (calibrated_s held out by shape)
    fit: Fit  # on every measured row (the reported parameters)
    summary: dict


def tolerance(frame: pd.DataFrame) -> np.ndarray:
    """Per row, the largest relative error accepted: TF32_REL_ERR for rows computed on
    tensor cores (`precision` tf32), MAX_REL_ERR for the others (and campaigns from before
    the column)."""
    if "precision" not in frame:
        return np.full(len(frame), MAX_REL_ERR)
    return np.where(frame["precision"].astype(str) == "tf32", TF32_REL_ERR, MAX_REL_ERR)


def join(campaign: pd.DataFrame, timings: pd.DataFrame, ncu: pd.DataFrame,
         source: str) -> tuple[pd.DataFrame, dict]:
    """Measured rows that ran correctly, with their predictions; counts of the others."""
    unknown = sorted(set(timings.id) - set(campaign.id))
    if unknown:
        raise InputError(f"{source}: dataflow id(s) {unknown[:5]} are not in campaign.csv "
                         "(results from another prepared campaign?)")
    merged = campaign.merge(timings, on="id", how="inner")
    if len(ncu):
        merged = merged.merge(ncu, on="id", how="left")
    ok = merged.status == "ok"
    correct = ok & (merged.max_rel_err <= tolerance(merged))
    counts = {"prepared": int(len(campaign)), "reported": int(len(timings)),
              "ran": int(ok.sum()), "correct": int(correct.sum()),
              "wrong_results": int((ok & ~correct).sum()),
              "not_run": {str(k): int(v) for k, v in
                          merged[~ok].status.value_counts().items()},
              "missing_from_results": int(len(set(campaign.id) - set(timings.id)))}
    return merged[correct].reset_index(drop=True), counts


def shape_folds(frame: pd.DataFrame) -> list[tuple[np.ndarray, np.ndarray]]:
    """Fold k holds out every workload's k-th shape (in campaign order) and trains on the
    rest: a prediction for a shape the parameters never saw."""
    index = frame.groupby("workload")["shape"].transform(
        lambda s: pd.Series(pd.factorize(s)[0], index=s.index))
    folds = []
    for k in sorted(index.unique()):
        test = np.flatnonzero(index == k)
        train = np.flatnonzero(index != k)
        if len(train) and len(test):
            folds.append((train, test))
    return folds


def _fitted(params, predict, measured: np.ndarray, folds) -> tuple[np.ndarray, Fit]:
    """Held-out predictions (each shape from parameters that never saw it; nan without
    folds) and the fit on every row."""
    held = cross_fit(params, predict, measured, folds)[0] if folds else \
        np.full(len(measured), np.nan)
    return held, fit(params, predict, measured, np.arange(len(measured)))


def study(frame: pd.DataFrame, arch: Architecture) -> GpuStudy:
    """Fit the GPU kernels' latency form (`calibrate.gpu_latency`) and, for comparison, the
    CPU path's (`calibrate.latency`) to the GPU timings, each shape held out in turn;
    metrics on the held-out predictions."""
    if len(frame) < 4:
        raise InputError(f"only {len(frame)} dataflow(s) ran correctly: too few to fit")
    frame = frame.copy()
    missing = [c for c in (*gpu_latency.COLUMNS, *gpu_latency.TRAFFIC_COLUMNS,
                           gpu_latency.STAGED) if c not in frame]
    if missing == ["mma_per_sm"]:  # prepared before tensor cores: every kernel scalar
        frame["mma_per_sm"] = 0.0
        missing = []
    if missing:  # a campaign prepared before these counts (and before input tiles were
        # staged in shared memory): they follow from its trees and those kernels
        computed = gpu_latency.features_of(frame, arch, stage_inputs=False)
        for c in missing:
            frame[c] = computed[c]
    clock_hz = arch.clock_ghz * 1e9
    cpu_features = {c: frame[c].to_numpy(float) for c in latency.feature_columns(arch)}
    gpu_features = {c: frame[c].to_numpy(float) for c in gpu_latency.COLUMNS}

    def predict_cpu(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return latency.cycles({k: v[rows] for k, v in cpu_features.items()}, values,
                              arch) / clock_hz

    def predict_gpu(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return gpu_latency.cycles({k: v[rows] for k, v in gpu_features.items()},
                                  values) / clock_hz

    frame["latency_s"] = frame[MEASURED]
    measured = frame.latency_s.to_numpy(float)
    folds = shape_folds(frame)
    every = np.arange(len(frame))
    held, whole = _fitted(gpu_latency.parameter_set(), predict_gpu, measured, folds)
    held_cpu, whole_cpu = _fitted(latency.parameter_set(arch), predict_cpu, measured, folds)
    frame["calibrated_s"] = held
    frame["fitted_all_s"] = predict_gpu(whole.values, every)
    frame["cpu_form_s"] = held_cpu
    frame["default_s"] = predict_gpu(gpu_latency.parameter_set().defaults, every)
    summary = _summary(frame, whole, bool(folds))
    summary["cpu_form"] = {**_latency_metrics(frame, "cpu_form_s"),
                           "parameters": whole_cpu.as_dict(),
                           "bound_hits": [h["parameter"] + f" ({h['bound']})"
                                          for h in whole_cpu.bound_hits],
                           "fit_rms_log_error_all": whole_cpu.rms_log_error}
    return GpuStudy(frame, whole, summary)


def _latency_metrics(frame: pd.DataFrame, column: str) -> dict:
    """Held-out Spearman and MAPE over all rows, and per workload shape the Spearman and
    the top-1 and top-10 regret of `column` against the measured latency."""
    held = frame.dropna(subset=[column])
    out: dict = {"latency_spearman_heldout": metrics.spearman(held[column], held.latency_s),
                 "latency_mape_heldout": metrics.mape(held[column], held.latency_s)
                 if len(held) else float("nan")}
    within = metrics.within_groups(held, ["workload", "shape"], column, "latency_s") \
        if len(held) else pd.DataFrame()
    out["latency_spearman_within_shape_heldout"] = {
        f"{r.workload} {r.shape}": r.spearman for r in within.itertuples()}
    out["top1_regret"], out["top10_regret"] = {}, {}
    for (w, shape), g in held.groupby(["workload", "shape"]):
        out["top1_regret"][f"{w} {shape}"] = metrics.top_k_regret(g[column], g.latency_s, 1)
        out["top10_regret"][f"{w} {shape}"] = metrics.top_k_regret(g[column], g.latency_s, 10)
    return out


def _summary(frame: pd.DataFrame, whole: Fit, heldout: bool) -> dict:
    out: dict = {"points": {str(k): int(v) for k, v in frame.groupby("workload").size().items()},
                 "shapes": {str(k): sorted(map(str, g["shape"].unique()))
                            for k, g in frame.groupby("workload")},
                 "heldout": "by shape" if heldout else "none (one shape per workload)"}
    out.update(_latency_metrics(frame, "calibrated_s"))
    out["uncalibrated"] = {"model_spearman": metrics.spearman(frame.model_s, frame.latency_s),
                           "model_mape": metrics.mape(frame.model_s, frame.latency_s),
                           "top1_regret": {
                               f"{w} {s}": metrics.top_k_regret(g.model_s, g.latency_s, 1)
                               for (w, s), g in frame.groupby(["workload", "shape"])}}
    out["traffic_r2"], out["traffic_spearman"], out["traffic_points"] = {}, {}, {}
    out["traffic_ratio_median"] = {}
    for name, model, measured in TRAFFIC_VIEWS:
        if model in frame and measured in frame:
            f = frame.dropna(subset=[model, measured])
            if len(f) > 2:
                out["traffic_r2"][name] = metrics.r2_identity(f[model], f[measured])
                out["traffic_spearman"][name] = metrics.spearman(f[model], f[measured])
                out["traffic_points"][name] = int(len(f))
                out["traffic_ratio_median"][name] = float(np.median(f[measured] / f[model]))
    staged = frame[gpu_latency.STAGED] if gpu_latency.STAGED in frame else pd.Series([0.0])
    out["staged_tiles"] = {"dataflows": int((staged > 0).sum()), "tiles": int(staged.sum())}
    mma = frame["mma_ops"] if "mma_ops" in frame else pd.Series([0.0])
    out["tensor_cores"] = {"dataflows": int((mma > 0).sum()), "operators": int(mma.sum())}
    out["parameters"] = whole.as_dict()
    out["bound_hits"] = [h["parameter"] + f" ({h['bound']})" for h in whole.bound_hits]
    out["fit_rms_log_error_all"] = whole.rms_log_error
    best = frame.loc[frame.groupby(["workload", "shape"]).latency_s.idxmin()]
    out["best_measured"] = {f"{r.workload} {r.shape}": {
        "dataflow": r.dataflow, "kind": r.kind, "median_s": float(r.latency_s),
        "gflops": 2 * float(r.macs) / float(r.latency_s) / 1e9} for r in best.itertuples()}
    return out


def fingerprint(timings: pd.DataFrame, manifest: dict) -> dict:
    """The GPU and software the timings come from (the first row's; all rows agree)."""
    row = timings.iloc[0]
    out = {c: (row[c].item() if hasattr(row[c], "item") else row[c]) for c in FINGERPRINT}
    out["cc"] = str(row["cc"])
    out["nvcc"] = manifest.get("nvcc", "unknown")
    out["nvcc_flags"] = " ".join(manifest.get("nvcc_flags", []))
    return out


@dataclass(frozen=True)
class Runs:
    """One or more run.sh result folders read as one campaign."""

    measured: pd.DataFrame  # correct rows; a dataflow measured in several runs kept once
    counts: dict
    notes: list[str]
    manifest: dict  # the first run's
    machine: dict  # the GPU and software, the same in every run
    retest: dict  # dataflows measured in more than one run: how far their medians differ


def read_runs(folders: list[Path], prepared: Path | None = None) -> Runs:
    """Each folder's campaign, timings and ncu bytes joined, ids made distinct across runs
    (`run` column: the folder's position); a dataflow (same key) in several runs keeps its
    first run's row, and the spread of its medians is the retest figure. Runs on another
    GPU or software than the first are refused."""
    if prepared is not None and len(folders) > 1:
        raise InputError("--prepared names the prepared folder of a single --results DIR")
    frames, counts, notes, machine, first_manifest = [], {}, [], None, {}
    offset = 0
    for run, folder in enumerate(folders):
        campaign, manifest = read_campaign(prepared or folder)
        timings = read_timings(folder / "timings.csv")
        ncu, run_notes = read_ncu(folder / "ncu.csv")
        strays = set(ncu.id) - set(campaign.id)
        if strays:
            run_notes.append(f"ncu.csv: the bytes of {len(strays)} kernel id(s) not in "
                             "campaign.csv were left out")
        measured, run_counts = join(campaign, timings, ncu, str(folder / "timings.csv"))
        print_ = fingerprint(timings, manifest)
        other = [k for k in MANIFEST_KEYS if manifest.get(k) != first_manifest.get(k)]
        if machine is None:
            machine, first_manifest = print_, manifest
        elif other:
            raise InputError(f"{folder}: its campaign was prepared with {other[0]} "
                             f"{manifest.get(other[0])!r}, the first run's with "
                             f"{first_manifest.get(other[0])!r}: report each campaign apart",
                             where="--results")
        elif any(str(print_[k]) != str(machine[k]) for k in FINGERPRINT):
            raise InputError(f"{folder}: measured on {print_['device']} (driver "
                             f"{print_['driver_version']}), not on the first run's "
                             f"{machine['device']} (driver {machine['driver_version']}): "
                             "report each GPU's runs apart")
        measured = measured.assign(id=measured.id + offset, run=run)
        offset += int(campaign.id.max()) + 1
        frames.append(measured)
        notes += [f"{folder.name}: {n}" for n in run_notes] if len(folders) > 1 else run_notes
        for k, v in run_counts.items():  # summed over the runs (per status where a dict)
            if isinstance(v, dict):
                total = counts.setdefault(k, {})
                for status, n in v.items():
                    total[status] = total.get(status, 0) + n
            else:
                counts[k] = counts.get(k, 0) + v
    every = pd.concat(frames, ignore_index=True)
    repeated = every[every.key.duplicated(keep=False)]
    spread = repeated.groupby("key")[MEASURED].agg(lambda s: s.max() / s.min() - 1)
    retest = {"dataflows": int(len(spread)),
              "median_spread": float(spread.median()) if len(spread) else math.nan,
              "max_spread": float(spread.max()) if len(spread) else math.nan}
    kept = every.drop_duplicates("key", keep="first").reset_index(drop=True)
    counts["repeated_across_runs"] = int(len(every) - len(kept))
    return Runs(kept, counts, notes, first_manifest, machine, retest)
