"""The CPU campaign adapter: measured kernels (a CSV from `tileflow.kernels.campaign`) ->
the fit of the latency parameters with held-out validation, traffic and latency metrics."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tileflow.calibrate import latency, metrics
from tileflow.calibrate.fit import Fit, fit, split
from tileflow.calibrate.parameters import ParameterSet
from tileflow.kernels.inner_loops import add_columns
from tileflow.specs.arch import Architecture

HELDOUT_FRACTION = 0.3
# the fastest of the repetitions: on a shared machine the median carries other processes'
# load (the campaign records both, and the spread)
MEASURED = "min_s"
# (model column, measured column) per measured boundary; bytes brought into the level.
# TRAFFIC: the model evaluated on the dataflow's own tree (a level holds its tiles only);
# CACHE_TRAFFIC: the same model on the tree the caches realise (kernels.cache_view)
TRAFFIC = {"first_level": ("model_first_level_bytes", "measured_first_level_bytes"),
           "last_level": ("model_last_level_bytes", "measured_last_level_bytes")}
CACHE_TRAFFIC = {"first_level": ("model_cache_first_level_bytes", "measured_first_level_bytes"),
                 "last_level": ("model_cache_last_level_bytes", "measured_last_level_bytes")}
VIEWS = {"": TRAFFIC, "_cache_view": CACHE_TRAFFIC}


@dataclass(frozen=True)
class CpuStudy:
    frame: pd.DataFrame  # measurements plus predictions: default, calibrated; heldout flag
    parameters: ParameterSet
    fit: Fit
    summary: dict


def study(frame: pd.DataFrame, arch: Architecture, seed: int = 0,
          style: str = "plain") -> CpuStudy:
    """Fit on the rows of a seeded 70 % of each workload's shapes, validate on the other
    shapes (a held-out shape, never held-out rows of a measured shape; a workload measured
    on one shape only: a seeded 30 % of the rows instead); `style`: the kernel generator's
    style the rows were measured with (for counts not yet in the frame)."""
    frame = add_columns(frame.reset_index(drop=True), arch, style)
    if "threads" not in frame:  # campaigns measured before thread counts were recorded
        frame["threads"] = 1
    frame["threads"] = frame.threads.fillna(1).astype(int)
    params = latency.parameter_set(arch)
    features = {c: frame[c].to_numpy(float) for c in latency.feature_columns(arch)}
    clock_hz = arch.clock_ghz * 1e9

    def predict(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return latency.cycles({k: v[rows] for k, v in features.items()}, values, arch) / clock_hz

    frame["latency_s"] = frame[MEASURED]
    measured = frame.latency_s.to_numpy(float)
    train, test, heldout_by = shape_split(frame, seed)
    result = fit(params, predict, measured, train)
    every = np.arange(len(frame))
    frame["default_s"] = predict(params.defaults, every)
    frame["calibrated_s"] = predict(result.values, every)
    frame["heldout"] = False
    frame.loc[test, "heldout"] = True
    frame["corrected_s"] = learned_correction(frame, arch, train)
    return CpuStudy(frame, params, result, {**_summary(frame, result),
                                            "heldout": heldout_by})


def shape_split(frame: pd.DataFrame, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """(train, held-out) row indices and what was held out: "shapes" where every workload
    has at least two shapes (a seeded 30 % of each workload's shapes, at least one, every
    thread count of a held-out shape with it), else "rows" (a seeded 30 % of the rows)."""
    shapes = frame.groupby("workload")["shape"].unique()
    if len(frame) and all(len(v) >= 2 for v in shapes):
        rng = np.random.default_rng(seed)
        held = set()
        for workload, values in shapes.items():
            k = max(1, int(round(len(values) * HELDOUT_FRACTION)))
            held |= {(workload, v) for v in rng.permutation(sorted(values))[:k]}
        mask = np.array([(w, s) in held for w, s in zip(frame.workload, frame["shape"],
                                                        strict=True)])
        return np.flatnonzero(~mask), np.flatnonzero(mask), "shapes"
    train, test = split(len(frame), HELDOUT_FRACTION, seed)
    return train, test, "rows"


def regret_by_workload(frame: pd.DataFrame, predicted: str, k: int) -> dict[str, float]:
    """Top-k regret per workload: within each (workload, shape, thread count) of `frame`
    (the measured latency of the best of the k first picks by `predicted` over the measured
    best, minus one), the mean over the workload's groups."""
    out: dict[str, list[float]] = {}
    for (w, _, _), g in frame.groupby(["workload", "shape", "threads"]):
        out.setdefault(str(w), []).append(metrics.top_k_regret(g[predicted], g.latency_s, k))
    return {w: float(np.mean(v)) for w, v in out.items()}


def kernel_vs_blas(frame: pd.DataFrame) -> dict:
    """Per workload and thread count: the best generated kernel's measured time over
    NumPy's (BLAS matrix products) on the same shape and thread count, per shape, with the
    geometric mean, best and worst over the shapes. Empty where no NumPy time was
    measured (campaigns before it was)."""
    if "blas_min_s" not in frame or frame.blas_min_s.isna().all():
        return {}
    out: dict = {}
    f = frame.dropna(subset=["blas_min_s"])
    for (w, t), g in f.groupby(["workload", "threads"]):
        ratios = {str(shape): float(s.latency_s.min() / s.blas_min_s.min())
                  for shape, s in g.groupby("shape")}
        r = np.array(list(ratios.values()))
        out.setdefault(str(w), {})[str(int(t))] = {
            "geomean": float(np.exp(np.log(r).mean())), "best": float(r.min()),
            "worst": float(r.max()), "shapes": ratios}
    return out


def learned_correction(frame: pd.DataFrame, arch: Architecture, train: np.ndarray,
                       ridge: float = 10.0) -> np.ndarray:
    """The calibrated prediction times exp(a learned residual): ridge regression of
    log(measured / calibrated) on the log of the counts the analysis computes (operations,
    innermost steps, words per boundary), fitted on the training rows only."""
    columns = latency.feature_columns(arch)
    x = np.log1p(frame[columns].to_numpy(float))
    x = np.column_stack([x, np.log(frame.calibrated_s.to_numpy(float)), np.ones(len(frame))])
    y = np.log(frame.latency_s.to_numpy(float) / frame.calibrated_s.to_numpy(float))
    a = x[train]
    weights = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ y[train])
    return frame.calibrated_s.to_numpy(float) * np.exp(x @ weights)


def _summary(frame: pd.DataFrame, result: Fit) -> dict:
    held = frame[frame.heldout]
    out: dict = {"points": {str(k): int(v) for k, v in frame.groupby("workload").size().items()}}
    out["traffic_r2"] = {}
    for suffix, pairs in VIEWS.items():
        for name, (model, measured) in pairs.items():
            if model not in frame or measured not in frame or frame[measured].isna().all():
                continue
            f = frame.dropna(subset=[model, measured])
            out.setdefault(f"traffic_r2{suffix}", {})[name] = metrics.r2_identity(
                f[model], f[measured])
            out.setdefault(f"traffic_spearman{suffix}", {})[name] = metrics.spearman(
                f[model], f[measured])
            ratio = f[measured] / f[model]
            out.setdefault(f"traffic_within_25pct{suffix}", {})[name] = float(
                ((ratio >= 0.8) & (ratio <= 1.25)).mean())
    out["latency_spearman_heldout"] = metrics.spearman(held.calibrated_s, held.latency_s)
    out["latency_mape_heldout"] = metrics.mape(held.calibrated_s, held.latency_s)
    out["latency_kendall_heldout"] = metrics.kendall(held.calibrated_s, held.latency_s)
    out["latency_r2_heldout"] = metrics.r2_identity(held.calibrated_s, held.latency_s)
    # on held-out shapes where shapes are held out, else on every row of a workload's shape
    ranked = held if held["shape"].nunique() and _shapes_held(frame) else frame
    out["top1_regret"] = regret_by_workload(ranked, "calibrated_s", 1)
    out["top10_regret"] = regret_by_workload(ranked, "calibrated_s", 10)
    out["top1_regret_uncalibrated"] = regret_by_workload(ranked, "model_s", 1)
    out["kernel_vs_blas"] = kernel_vs_blas(frame)
    out["uncalibrated"] = {"model_mape": metrics.mape(frame.model_s, frame.latency_s),
                           "model_spearman": metrics.spearman(frame.model_s, frame.latency_s),
                           "default_parameters_mape": metrics.mape(frame.default_s,
                                                                   frame.latency_s)}
    corrected = {"mape_heldout": metrics.mape(held.corrected_s, held.latency_s),
                 "spearman_heldout": metrics.spearman(held.corrected_s, held.latency_s)}
    corrected["beats_calibrated"] = bool(corrected["mape_heldout"] < out["latency_mape_heldout"] and
                             corrected["spearman_heldout"] > out["latency_spearman_heldout"])
    out["learned_correction"] = corrected
    out["parameters"] = result.as_dict()
    out["bound_hits"] = [h["parameter"] + f" ({h['bound']})" for h in result.bound_hits]
    out["fit_rms_log_error_train"] = result.rms_log_error
    return out


def _shapes_held(frame: pd.DataFrame) -> bool:
    """Whether the held-out rows are whole shapes (no shape both trained on and held out)."""
    both = frame.groupby(["workload", "shape"]).heldout.nunique()
    return bool((both == 1).all())


def worst_cases(frame: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The held-out rows the calibrated model misses most (by log ratio)."""
    held = frame[frame.heldout].copy()
    held["ratio"] = held.calibrated_s / held.latency_s
    held["miss"] = np.abs(np.log(held.ratio))
    return held.sort_values("miss", ascending=False).head(n)
