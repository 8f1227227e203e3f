"""`tileflow validate gpu --results DIR --learn`: the learned cost model on a GPU campaign.
Gradient-boosted trees (as on the CPU, `calibrate.learned`) predict the log ratio of the
measured time to the calibrated GPU latency form from what the tree and its generated
kernels say before they run. Validated with each workload shape held out in turn (the form
is refitted without that shape too), against the calibrated form alone; stored with the
GPU's fingerprint and refused on another GPU."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from tileflow.calibrate import gpu_latency, learned, metrics
from tileflow.calibrate.fit import fit
from tileflow.errors import InputError
from tileflow.outputs import json_text, write_text_atomic
from tileflow.specs.arch import Architecture

MODEL_FILE = "learned-model.pkl"
FINGERPRINT_KEYS = ("device", "cc", "driver_version", "runtime_version", "nvcc")
# what the tree and its kernels say before they run (those a campaign has are used)
CANDIDATES = (*gpu_latency.COLUMNS, *gpu_latency.TRAFFIC_COLUMNS, gpu_latency.STAGED,
              "blocks", "threads", "scratch_words", "model_s", "macs", "vector_work",
              "leaf_steps", "model_dram_bytes", "model_l2_bytes", "simd_work", "scalar_work",
              "chain_work", "loop_starts")
PREDICTORS = {"calibrated_s": "calibrated GPU form", "learned_s": "learned model (trees)"}


def feature_names(frame: pd.DataFrame) -> list[str]:
    """The candidate columns the campaign has, any tensor-core counts (`mma*`), and the
    calibrated prediction itself."""
    names = [c for c in CANDIDATES if c in frame]
    names += sorted(c for c in frame if c.startswith("mma") and
                    pd.api.types.is_numeric_dtype(frame[c]))
    return [*names, "calibrated_s"]


def calibrated(frame: pd.DataFrame, arch: Architecture, train: np.ndarray) -> np.ndarray:
    """Every row's latency from the GPU form fitted on the `train` rows only."""
    features = {c: frame[c].to_numpy(float) for c in gpu_latency.COLUMNS}
    clock_hz = arch.clock_ghz * 1e9

    def predict(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return gpu_latency.cycles({k: v[rows] for k, v in features.items()}, values) / clock_hz

    measured = frame.latency_s.to_numpy(float)
    whole = fit(gpu_latency.parameter_set(), predict, measured, train)
    return predict(whole.values, np.arange(len(frame)))


def _trees(frame: pd.DataFrame, columns: list[str], train: np.ndarray, seed: int):
    x = frame[columns].to_numpy(float)
    y = np.log(frame.latency_s.to_numpy(float) / frame.calibrated_s.to_numpy(float))
    model = learned.regressor(seed).fit(x[train], y[train])
    return frame.calibrated_s.to_numpy(float) * np.exp(model.predict(x)), model


def validate(frame: pd.DataFrame, arch: Architecture, seed: int = 0) -> tuple[pd.DataFrame,
                                                                               dict]:
    """Leave one workload shape out: the GPU form and the trees fitted on the other shapes
    predict its rows. Returns the rows with calibrated_s and learned_s, and the figures."""
    f = frame.reset_index(drop=True).copy()
    groups = f.workload.astype(str) + " " + f["shape"].astype(str)
    if groups.nunique() < 2:
        raise InputError("the learned GPU model is validated on held-out shapes: the campaign "
                         f"has {groups.nunique()} shape(s), at least two are needed")
    held = {name: np.full(len(f), np.nan) for name in PREDICTORS}
    for key in groups.unique():
        test, train = np.flatnonzero(groups == key), np.flatnonzero(groups != key)
        g = f.assign(calibrated_s=calibrated(f, arch, train))
        predicted, _ = _trees(g, feature_names(g), train, seed)
        held["calibrated_s"][test] = g.calibrated_s.to_numpy()[test]
        held["learned_s"][test] = predicted[test]
    for name, values in held.items():
        f[name] = values
    return f, figures(f, groups)


def figures(f: pd.DataFrame, groups: pd.Series) -> dict:
    """Per predictor and held-out shape: Spearman, MAPE, top-1 and top-10 regret; and the
    means over shapes."""
    out: dict = {}
    for name in PREDICTORS:
        per = {str(key): {"spearman": metrics.spearman(g[name], g.latency_s),
                          "mape": metrics.mape(g[name], g.latency_s),
                          "top1_regret": metrics.top_k_regret(g[name], g.latency_s, 1),
                          "top10_regret": metrics.top_k_regret(g[name], g.latency_s, 10),
                          "rows": int(len(g))}
               for key, g in f.groupby(groups.to_numpy())}
        out[name.removesuffix("_s")] = {
            "groups": per, "mape": metrics.mape(f[name], f.latency_s),
            "spearman_within_mean": float(np.mean([v["spearman"] for v in per.values()])),
            "top1_regret_mean": float(np.mean([v["top1_regret"] for v in per.values()])),
            "top10_regret_mean": float(np.mean([v["top10_regret"] for v in per.values()]))}
    return out


def run(frame: pd.DataFrame, arch: Architecture, folder: Path, fingerprint: Mapping,
        seed: int = 0) -> dict:
    """Validate on held-out shapes, train on every row, store the trees with the GPU's
    fingerprint (learned-model.pkl, learned.json)."""
    if learned.missing():
        raise InputError(learned.missing())
    _, result = validate(frame, arch, seed)
    f = frame.reset_index(drop=True).copy()
    every = np.arange(len(f))
    f["calibrated_s"] = calibrated(f, arch, every)
    columns = feature_names(f)
    _, model = _trees(f, columns, every, seed)
    print_ = {k: str(fingerprint[k]) for k in FINGERPRINT_KEYS if k in fingerprint}
    meta = {"fingerprint": print_, "features": columns, "rows": int(len(f)),
            "validation": "each workload shape held out in turn", "held_out_shapes": result}
    learned.store(folder / MODEL_FILE, model, meta)
    write_text_atomic(folder / "learned.json", json_text(meta, indent=2) + "\n")
    return meta


def load(path: Path, here: Mapping[str, str]):
    """The stored trees, refused (InputError) where `here` (the GPU's fingerprint) differs
    on a key both record."""
    if not path.exists():
        raise InputError(f"no learned GPU cost model at {path} (train one with `tileflow "
                         "validate gpu --results DIR --learn`)")
    data = pickle.loads(path.read_bytes())
    stored = data["fingerprint"]
    differ = [k for k in FINGERPRINT_KEYS if k in stored and k in here
              and str(stored[k]) != str(here[k])]
    if differ:
        raise InputError(f"{path}: the learned cost model was trained on another GPU; "
                         + "; ".join(f"{k}: trained on '{stored[k]}', here '{here[k]}'"
                                     for k in differ))
    return data


def report_lines(meta: dict) -> list[str]:
    """The report's section: held-out shape figures of the calibrated form and the trees."""
    shapes = meta["held_out_shapes"]
    lines = ["", "## Learned cost model (held out by shape)", "",
             f"Gradient-boosted trees on {len(meta['features'])} features known before a "
             "kernel runs (the GPU form's counts, the tree's traffic and work, blocks, "
             "threads, shared-memory tiles, tensor-core counts where the campaign has them, "
             "and the calibrated prediction) predict log(measured / calibrated). Each "
             "workload shape is predicted by a form and trees fitted on the other shapes "
             f"only. Stored as `{MODEL_FILE}` with this GPU's fingerprint.", "",
             "| shape | rows | calibrated: Spearman / MAPE / top-1 / top-10 | learned: "
             "Spearman / MAPE / top-1 / top-10 |", "|---|---|---|---|"]
    cal, lrn = shapes["calibrated"]["groups"], shapes["learned"]["groups"]
    for key in cal:
        lines.append(f"| {key} | {cal[key]['rows']} | {_four(cal[key])} | {_four(lrn[key])} |")
    lines.append(f"| mean | | {_four(_means(shapes['calibrated']))} | "
                 f"{_four(_means(shapes['learned']))} |")
    return lines


def _means(entry: dict) -> dict:
    return {"spearman": entry["spearman_within_mean"], "mape": entry["mape"],
            "top1_regret": entry["top1_regret_mean"],
            "top10_regret": entry["top10_regret_mean"]}


def _four(v: dict) -> str:
    return (f"{v['spearman']:.3f} / {v['mape']:.1%} / {v['top1_regret']:.1%} / "
            f"{v['top10_regret']:.1%}")
