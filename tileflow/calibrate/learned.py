"""A learned cost model of CPU kernels beside the analytical one (optional extra `learn`).

Gradient-boosted trees (scikit-learn's HistGradientBoostingRegressor) predict the log of
measured latency over a reference (NumPy's time for the same computation, shape and thread
count where the campaign has it, else the calibrated latency) from what is known before a
kernel runs: the latency function's terms (work in SIMD, scalar and chained iterations,
loop starts, words per boundary), the model's traffic and its calibrated prediction; per
contraction, where the compiler vectorised a loop around the statement (loops out from the
innermost, vector width, trip) from `-fopt-info-vec`, the innermost loop's trip and whether
it reduces, and how many operands are unit-stride, strided or invariant along the innermost
and along the vectorised loop; the same loop counts for every operator; and the tile tree's
loops as numbers (per operator, level and dim, the product of the trips). The prediction is
the reference times exp(the learned log ratio).

Validation holds out whole groups (a workload's shape), never rows of a group: the
calibration and the trees are fitted on the other groups only. A trained model is stored
with the fingerprint of the machine its campaign ran on (CPU model, caches, compiler,
flags, kernel style) and refused on another."""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tileflow.calibrate import latency, metrics
from tileflow.calibrate.fit import fit
from tileflow.errors import InputError
from tileflow.specs.arch import Architecture

CONTRACTIONS = 2  # per-operator columns for the first two matrix-unit operators
STRIDES = ("unit", "strided", "invariant")
MODEL_COLUMNS = ("model_s", "macs", "vector_work", "leaf_steps", "model_first_level_bytes",
                 "model_last_level_bytes", "model_cache_first_level_bytes",
                 "model_cache_last_level_bytes")
FINGERPRINT_KEYS = ("cpu", "caches", "compiler", "flags", "kernel_style")
MEASURED = "min_s"
BLAS = "blas_min_s"  # NumPy's time for the same computation, shape and thread count
RATIO = "calibrated_over_blas"


def missing() -> str:
    """Why the learned model cannot run here ('' when it can)."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return ("the learned cost model needs scikit-learn: pip install 'tileflow[learn]' "
                "(or pip install scikit-learn)")
    return ""


def _stride(access, dim: str) -> str:
    """How an access moves along `dim`: unit (the last axis, coefficient 1), strided (any
    other axis uses it) or invariant (no axis does)."""
    if dim not in access.dims:
        return "invariant"
    last = access.axes[-1] if access.axes else None
    if last is not None and last.is_plain and last.terms[0][0] == dim:
        return "unit"
    return "strided"


def operator_features(w, source: str) -> dict[str, float]:
    """Per contraction (c0, c1: the matrix-unit operators in order) of a generated C
    kernel: the loops around its statement and what the compiler vectorised there."""
    from tileflow.kernels.vectorised import op_loops, vectorised_lines

    lines = vectorised_lines(source)
    around = op_loops(source)
    out: dict[str, float] = {}
    contractions = [op for op in w.ops if op.unit == "matrix"][:CONTRACTIONS]
    for i, op in enumerate(contractions):
        loops = around[op.name].loops if op.name in around else ()
        accesses = (*op.inputs, op.output)
        prefix = f"c{i}_"
        inner = loops[-1] if loops else None
        out[prefix + "depth"] = len(loops)
        out[prefix + "inner_trip"] = inner[2] if inner else 1
        out[prefix + "inner_reduces"] = float(bool(inner) and inner[1] in op.reduction_dims)
        hits = around[op.name].vectorised(lines) if op.name in around else []
        vloop, words = hits[-1] if hits else (None, 0)
        position = len(loops) - 1 - loops.index(vloop) if vloop else np.nan
        out[prefix + "simd_position"] = position
        out[prefix + "simd_words"] = words
        out[prefix + "simd_trip"] = vloop[2] if vloop else 0
        out[prefix + "simd_reduces"] = float(bool(vloop) and vloop[1] in op.reduction_dims)
        for where, lp in (("inner", inner), ("simd", vloop)):
            kinds = [_stride(a, lp[1]) for a in accesses] if lp else []
            for kind in STRIDES:
                out[f"{prefix}{where}_{kind}"] = kinds.count(kind) if lp else np.nan
    return out


def every_operator_features(w, source: str) -> dict[str, float]:
    """Per operator (o0, o1, ... in the workload's order) of a generated C kernel: its loop
    depth, the innermost loop's trip and whether it reduces, the vectorised loop's width,
    trip and position, the log of its loops' trips summed, and how many loops run once."""
    from tileflow.kernels.vectorised import op_loops, vectorised_lines

    lines, around = vectorised_lines(source), op_loops(source)
    out: dict[str, float] = {}
    for i, op in enumerate(w.ops):
        loops = around[op.name].loops if op.name in around else ()
        inner = loops[-1] if loops else None
        hits = around[op.name].vectorised(lines) if op.name in around else []
        vloop, words = hits[-1] if hits else (None, 0)
        trips = [lp[2] for lp in loops]
        p = f"o{i}_"
        out[p + "depth"] = len(loops)
        out[p + "inner_trip"] = inner[2] if inner else 1
        out[p + "inner_reduces"] = float(bool(inner) and inner[1] in op.reduction_dims)
        out[p + "simd_words"] = words
        out[p + "simd_trip"] = vloop[2] if vloop else 0
        out[p + "simd_position"] = len(loops) - 1 - loops.index(vloop) if vloop else np.nan
        out[p + "trips_log_sum"] = float(np.log(np.maximum(trips, 1)).sum()) if trips else 0.0
        out[p + "loops_trip1"] = sum(1 for t in trips if t == 1)
    return out


def tree_features(tree: Mapping) -> dict[str, float]:
    """The tile tree's loops as numbers (TVM-style loop features): per operator (t0, t1,
    ... in the order the tree reaches them), the product of its loops' trips at each level
    over each dim, temporal and spatial apart, and the innermost dim a temporal loop of more
    than one step runs over (its position in the workload's dims, -1 for none)."""
    out: dict[str, float] = {}
    paths: list[list[Mapping]] = []

    def walk(node: Mapping, path: list[Mapping]) -> None:
        if "op" in node:
            paths.append(path)
            return
        for child in node.get("children", []):
            walk(child, [*path, node])

    walk(tree["root"], [])
    dims = "".join(sorted({str(lp).split(":")[0] for path in paths for node in path
                           for lp in node.get("loops", [])}))
    for i, path in enumerate(paths):
        inner = None
        for node in path:
            for lp in node.get("loops", []):
                dim, trip, *spatial = str(lp).split(":")
                key = f"t{i}_{node.get('level')}_{dim}{'_sp' if spatial else ''}"
                out[key] = out.get(key, 1) * int(trip)
                if not spatial and int(trip) > 1:
                    inner = dim
        out[f"t{i}_inner_dim"] = dims.index(inner) if inner else -1
    return out


def kernel_features(w, arch: Architecture, flow, style: str) -> dict[str, float]:
    """What a kernel is before it runs: `operator_features` and `every_operator_features`
    of the single-threaded kernel of `flow` in `style`, and `tree_features` of `flow`."""
    from tileflow.kernels.c_source import generate_c
    from tileflow.kernels.nest import analyse
    from tileflow.tree import to_dict

    source = generate_c(analyse(w, arch, flow), threads=False, style=style).text
    return {**operator_features(w, source), **every_operator_features(w, source),
            **tree_features(to_dict(flow))}


def add_operator_features(frame: pd.DataFrame, arch: Architecture, style: str,
                          progress=None) -> pd.DataFrame:
    """`frame` (campaign rows: workload, shape, tree) with the per-contraction columns."""
    from tileflow.specs.dataflow import parse_dataflow
    from tileflow.specs.workload import load_workload
    from tileflow.specs.yamlfile import Field

    rows = []
    for r in frame.itertuples():
        sizes = {k: int(v) for k, v in (item.split("=") for item in str(r.shape).split())}
        w = load_workload(str(r.workload), sizes)
        flow = parse_dataflow(Field(json.loads(r.tree), "measurements.csv"))
        rows.append(kernel_features(w, arch, flow, style))
        if progress:
            progress(1)
    extra = pd.DataFrame(rows, index=frame.index)
    return pd.concat([frame.drop(columns=[c for c in extra if c in frame]), extra], axis=1)


def feature_names(frame: pd.DataFrame, arch: Architecture) -> list[str]:
    base = [*latency.feature_columns(arch), *MODEL_COLUMNS, "calibrated_s", "threads"]
    per_op = sorted(c for c in frame.columns if c[:1] in "cot" and c[1:2].isdigit()
                    and "_" in c)
    ratio = [RATIO] if reference_of(frame) == BLAS else []  # where NumPy's time is known
    return [c for c in base if c in frame] + ratio + per_op


def reference_of(frame: pd.DataFrame) -> str:
    """What the trees' target is relative to: NumPy's time for the same computation where
    every row has it (a yardstick of the shape and thread count that the analytical
    calibration does not need to get right), else the calibrated latency."""
    if BLAS in frame and np.all(np.isfinite(frame[BLAS].to_numpy(float))) \
            and (frame[BLAS] > 0).all():
        return BLAS
    return "calibrated_s"


def with_ratio(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with the calibrated latency over NumPy's (NaN where NumPy's is unknown)."""
    blas = frame[BLAS].to_numpy(float) if BLAS in frame else np.full(len(frame), np.nan)
    return frame.assign(**{RATIO: frame.calibrated_s.to_numpy(float) / blas})


def calibrate(frame: pd.DataFrame, arch: Architecture, train: np.ndarray) -> np.ndarray:
    """The analytical latency function fitted on the `train` rows, predicting every row."""
    params = latency.parameter_set(arch)
    features = {c: frame[c].to_numpy(float) for c in latency.feature_columns(arch)}
    clock_hz = arch.clock_ghz * 1e9

    def predict(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return latency.cycles({k: v[rows] for k, v in features.items()}, values, arch) / clock_hz

    result = fit(params, predict, frame[MEASURED].to_numpy(float), train)
    return predict(result.values, np.arange(len(frame)))


def ridge_correction(frame: pd.DataFrame, arch: Architecture, train: np.ndarray
                     ) -> np.ndarray:
    """The existing baseline (`calibrate.cpu.learned_correction`) on these rows."""
    from tileflow.calibrate.cpu import learned_correction

    f = frame.assign(latency_s=frame[MEASURED])
    return learned_correction(f, arch, train)


def regressor(seed: int = 0):
    from sklearn.ensemble import HistGradientBoostingRegressor

    return HistGradientBoostingRegressor(max_iter=400, learning_rate=0.05, max_leaf_nodes=15,
                                         min_samples_leaf=8, l2_regularization=1.0,
                                         random_state=seed)


def learned_prediction(frame: pd.DataFrame, columns: list[str], train: np.ndarray,
                       seed: int = 0) -> tuple[np.ndarray, object]:
    """The reference time (`reference_of`) x exp(the trees' log ratio), the trees fitted on
    the `train` rows."""
    f = with_ratio(frame)
    reference = f[reference_of(f)].to_numpy(float)
    x = _matrix(f, columns)
    x[:, np.isnan(x[train]).all(axis=0)] = 0.0  # e.g. another workload's operators alone
    y = np.log(f[MEASURED].to_numpy(float) / reference)
    model = regressor(seed).fit(x[train], y[train])
    return reference * np.exp(model.predict(x)), model


def _matrix(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """The feature matrix as the trees take it (they bin each column by its quantiles, so
    no scaling; NaN, e.g. no vectorised loop, is a value of its own)."""
    return frame[columns].to_numpy(float)


@dataclass(frozen=True)
class Validation:
    """Held-out predictions of every row by three predictors, and their figures."""

    frame: pd.DataFrame  # + calibrated_s, ridge_s, learned_s (each from its held-out fit)
    figures: dict


def grouped_validation(frame: pd.DataFrame, arch: Architecture, groups: pd.Series,
                       seed: int = 0, ranked: pd.Series | None = None) -> Validation:
    """Leave one group out: for each group, calibration, ridge correction and trees fitted
    on the others' rows predict its rows; figures within each of `ranked` (default the
    groups; e.g. a shape's rows per thread count)."""
    f = frame.reset_index(drop=True).copy()
    keys = groups.reset_index(drop=True)
    for c in ("calibrated_s", "ridge_s", "learned_s"):
        f[c] = np.nan
    if keys.nunique() < 2:
        raise InputError("grouped validation needs at least two groups (workload shapes); "
                         f"the campaign has {keys.nunique()}")
    for key in keys.unique():
        test = np.flatnonzero(keys == key)
        train = np.flatnonzero(keys != key)
        g = f.copy()
        g["calibrated_s"] = calibrate(g, arch, train)
        ridge = ridge_correction(g, arch, train)
        learned, _ = learned_prediction(g, feature_names(g, arch), train, seed)
        f.loc[test, "calibrated_s"] = g.calibrated_s.to_numpy()[test]
        f.loc[test, "ridge_s"] = ridge[test]
        f.loc[test, "learned_s"] = learned[test]
    return Validation(f, figures(f, keys if ranked is None else ranked.reset_index(drop=True)))


def figures(f: pd.DataFrame, groups: pd.Series) -> dict:
    """Per predictor: within-group Spearman (per group and mean), MAPE, top-1 and top-10
    regret per group."""
    out: dict = {}
    for name in ("calibrated_s", "ridge_s", "learned_s"):
        per = {}
        for key, g in f.groupby(groups.to_numpy()):
            per[str(key)] = {"spearman": metrics.spearman(g[name], g[MEASURED]),
                             "mape": metrics.mape(g[name], g[MEASURED]),
                             "top1_regret": metrics.top_k_regret(g[name], g[MEASURED], 1),
                             "top10_regret": metrics.top_k_regret(g[name], g[MEASURED], 10),
                             "rows": int(len(g))}
        out[name.removesuffix("_s")] = {
            "groups": per, "mape": metrics.mape(f[name], f[MEASURED]),
            "spearman_within_mean": float(np.mean([v["spearman"] for v in per.values()]))}
    return out


# -- stored per machine -------------------------------------------------------------------


def fingerprint(environment: Mapping | None) -> dict[str, str]:
    """The machine and build a campaign's kernels ran on (keys it records)."""
    env = dict(environment or {})
    env.setdefault("kernel_style", "plain")  # campaigns before the register-tile generator
    return {k: str(env[k]) for k in FINGERPRINT_KEYS if k in env}


def current_fingerprint() -> dict[str, str]:
    from tileflow.kernels.timing import environment

    return fingerprint(environment())


def save(path: Path, model, columns: list[str], print_: dict, figures_: dict,
         calibration: dict, reference: str = "calibrated_s") -> None:
    """The trees and what they need, pickled, beside a JSON of the fingerprint and figures."""
    import sklearn

    store(path, model, {"fingerprint": print_, "features": columns,
                        "sklearn": sklearn.__version__, "calibration": calibration,
                        "validation": figures_, "reference": reference})


def store(path: Path, model, meta: dict) -> None:
    """`model` and `meta` pickled into `path` atomically, `meta` beside it as JSON."""
    from tileflow.outputs import json_text, write_text_atomic

    staged = path.with_suffix(".tmp")
    staged.write_bytes(pickle.dumps({"model": model, **meta}))
    staged.replace(path)
    write_text_atomic(path.with_suffix(".json"), json_text(meta, indent=2) + "\n")


@dataclass(frozen=True)
class LearnedModel:
    model: object
    features: list[str]
    calibration: dict  # the latency parameters fitted on every campaign row
    fingerprint: dict
    reference: str = "calibrated_s"  # what the trees' log ratio is relative to

    def predict(self, frame: pd.DataFrame, arch: Architecture) -> np.ndarray:
        """Latency in seconds of rows with the model's features (calibrated_s computed
        from the stored calibration where missing)."""
        f = frame.copy()
        if "threads" in self.features and "threads" not in f:  # one thread unless said
            f["threads"] = 1
        if "calibrated_s" not in f:
            params = latency.parameter_set(arch)
            values = params.check(self.calibration)
            feats = {c: f[c].to_numpy(float) for c in latency.feature_columns(arch)}
            f["calibrated_s"] = latency.cycles(feats, values, arch) / (arch.clock_ghz * 1e9)
        f = with_ratio(f)
        if self.reference == BLAS and BLAS not in f:
            raise InputError(f"the learned cost model predicts relative to NumPy's time "
                             f"('{BLAS}'): the rows to predict need it")
        absent = [c for c in self.features if c not in f]  # e.g. another workload's
        if absent:  # operators: NaN, as in training
            f = pd.concat([f, pd.DataFrame(np.nan, index=f.index, columns=absent)], axis=1)
        return f[self.reference].to_numpy(float) * np.exp(
            self.model.predict(_matrix(f, self.features)))


def load(path: Path, here: Mapping[str, str] | None = None) -> LearnedModel:
    """A stored model, refused (InputError) when its fingerprint differs from this
    machine's (`here`; default: this machine) on any key both record."""
    if missing():
        raise InputError(missing())
    if not path.exists():
        raise InputError(f"no learned cost model at {path} (train one with `tileflow validate "
                         "cpu --report-only --learn`)")
    data = pickle.loads(path.read_bytes())
    here = dict(here if here is not None else current_fingerprint())
    stored = data["fingerprint"]
    differ = [k for k in FINGERPRINT_KEYS if k in stored and k in here and stored[k] != here[k]]
    if differ:
        raise InputError(f"{path}: the learned cost model was trained for another machine; "
                         + "; ".join(f"{k}: trained on '{stored[k]}', here '{here[k]}'"
                                     for k in differ)
                         + " (train one here from a campaign measured on this machine)")
    return LearnedModel(data["model"], data["features"], data["calibration"], stored,
                        data.get("reference", "calibrated_s"))
