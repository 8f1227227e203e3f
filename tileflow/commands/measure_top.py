"""`tileflow explore --measure-top K`: the explorer's best points on this machine's CPU,
compiled, checked and timed, beside what the model predicted; the best measured kernel
against NumPy's BLAS.

The study's distinct valid points are ranked by the model's cost; where a learned cost
model for this machine and kernel style exists, the model's first `RERANK x K` points are
ranked again by it. The first K are generated as C kernels, checked against the NumPy
reference and timed; the fastest is then timed side by side with NumPy in a fresh process
(`commands.blas_bench`), where the workload has a NumPy form."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from tileflow.errors import InputError

RERANK = 4  # the learned model re-ranks the model's first RERANK x K points
# the stored learned models, by the kernel style their campaign measured
DEFAULT_MODELS = {"registers": Path("validate/cpu/learned-model.pkl")}


def check_host(arch) -> None:
    """Kernels run on this CPU: the accelerator must describe it."""
    if not arch.name.startswith(("host", "cpu")):
        raise InputError(f"--measure-top runs kernels on this machine's CPU: the study's "
                         f"accelerator must be 'host' (or the shipped 'cpu'), not "
                         f"'{arch.name}'")


def ranked_points(outcome, limit: int) -> list[tuple[str, str, float]]:
    """(structure, factors, model cost) of the first `limit` distinct valid points."""
    points = outcome.points
    if not len(points):
        return []
    valid = points[np.isfinite(points["cost"].astype(float))]
    valid = valid.sort_values("cost", kind="stable").drop_duplicates(["structure", "factors"])
    return [(str(r.structure), str(r.factors), float(r.cost))
            for r in valid.head(limit).itertuples()]


def learned_model(path: Path | None, style: str):
    """The stored learned model for this machine and `style`, or (None, why not)."""
    from tileflow.calibrate import learned

    if path is None:
        return None, "no learned model given"
    if learned.missing():
        return None, learned.missing()
    here = {**learned.current_fingerprint(), "kernel_style": style}
    try:
        return learned.load(path, here), ""
    except InputError as exc:
        return None, exc.render()


def model_rows(w, arch, flows, style: str) -> pd.DataFrame:
    """What the model says of each tree, in the campaign's columns, with the kernel's
    vectorised loops (the learned model's features)."""
    from tileflow.calibrate import learned
    from tileflow.kernels.campaign import CampaignConfig, model_row
    from tileflow.kernels.inner_loops import kernel_features
    from tileflow.kernels.nest import analyse

    config = CampaignConfig()
    rows = []
    for flow in flows:
        row = model_row(w, arch, flow, config)
        row.update(kernel_features(analyse(w, arch, flow), style))
        row.update(learned.kernel_features(w, arch, flow, style))
        rows.append(row)
    return pd.DataFrame(rows)


def measure_top(outcome, k: int, threads: int = 1, style: str = "registers",
                model_path: Path | None = None, repetitions: int = 5,
                blas_seconds: float = 2.0, progress=None) -> dict:
    """Measure the study's top `k` points; returns the table (a DataFrame under "rows")
    and the best measured against NumPy."""
    from tileflow.kernels.campaign import measured_row
    from tileflow.kernels.cpu import build_checked
    from tileflow.kernels.timing import time_kernel
    from tileflow.kernels.trees import single_core
    from tileflow.tree import to_dict

    w, arch = outcome.workload, outcome.arch
    check_host(arch)
    if outcome.structures is None:
        raise InputError("--measure-top: the study kept no structures to rebuild points from")
    kernel_arch = single_core(arch) if threads == 1 else arch
    model, why = learned_model(model_path, style)
    ranked = ranked_points(outcome, k * RERANK if model else k)
    if not ranked:
        raise InputError("--measure-top: the study found no valid point to measure")
    flows = [outcome.structures[s].dataflow([int(x) for x in f.split()]) for s, f, _ in ranked]
    frame = pd.DataFrame({"structure": [s for s, _, _ in ranked],
                          "factors": [f for _, f, _ in ranked],
                          "model_rank": range(1, len(ranked) + 1),
                          "model_s": [c / (arch.clock_ghz * 1e9) for _, _, c in ranked]})
    if model is not None and model.reference == "blas_min_s":
        from tileflow.kernels.blas import WORKLOADS as NUMPY_FORMS
        from tileflow.kernels.blas import time_numpy
        from tileflow.kernels.reference import random_inputs

        if w.name not in NUMPY_FORMS:  # the trees predict relative to NumPy's time
            model, why = None, (f"the learned model predicts relative to NumPy's time, and "
                                f"workload '{w.name}' has no NumPy form here")
            flows = flows[:k]
            frame = frame.iloc[:k]
    if model is not None:
        features = model_rows(w, single_core(arch), flows, style)
        if model.reference == "blas_min_s":
            features["blas_min_s"] = time_numpy(w.name, random_inputs(w), threads)["blas_min_s"]
        frame["learned_s"] = model.predict(features, single_core(arch))
        order = np.argsort(frame.learned_s.to_numpy(), kind="stable")[:k]
        frame, flows = frame.iloc[order].reset_index(drop=True), [flows[i] for i in order]
    measured, campaign_rows = [], []
    for flow in flows:
        checked = build_checked(w, kernel_arch, flow, threads=threads, style=style)
        t = time_kernel(checked.kernel, threads, 1, repetitions)
        measured.append((t.median_s, t.min_s, checked.max_error))
        campaign_rows.append(measured_row(
            w, arch, flow, threads, "measure-top",
            {"measured_s": t.median_s, "min_s": t.min_s, "max_s": t.max_s,
             "spread": t.spread, "repetitions": t.repetitions,
             "max_error": checked.max_error}))
        if progress:
            progress(1)
    frame["measured_median_s"] = [m[0] for m in measured]
    frame["measured_min_s"] = [m[1] for m in measured]
    frame["max_error"] = [m[2] for m in measured]
    best = int(np.argmin(frame.measured_min_s.to_numpy()))
    result = {"rows": frame, "campaign_rows": campaign_rows, "threads": threads,
              "kernel_style": style,
              "learned_model": str(model_path) if model else None, "learned_why_not": why,
              "best": {"structure": frame.structure[best], "factors": frame.factors[best],
                       "measured_min_s": float(frame.measured_min_s[best]),
                       "model_rank": int(frame.model_rank[best])}, "blas": None}
    from tileflow.commands.blas_bench import WORKLOADS, run_worker

    if w.name not in WORKLOADS:
        result["blas_why_not"] = (f"workload '{w.name}' has no NumPy form here (one of "
                                  f"{', '.join(WORKLOADS)})")
    else:
        result["blas"] = run_worker({"workload": w.name, "sizes": dict(w.sizes),
                                     "tree": to_dict(flows[best]), "threads": threads,
                                     "seconds": blas_seconds, "style": style,
                                     "arch": arch.name if arch.name == "cpu" else "host"},
                                    threads)
    return result


def table(result: dict) -> str:
    f = result["rows"]
    learned = "learned_s" in f
    lines = [f"{'#':>2} {'model rank':>10} {'model us':>9}"
             + (f" {'learned us':>10}" if learned else "")
             + f" {'measured us':>11} {'(fastest)':>9}  structure [factors]"]
    for i, r in enumerate(f.itertuples(), start=1):
        lines.append(f"{i:>2} {r.model_rank:>10} {r.model_s * 1e6:>9.1f}"
                     + (f" {r.learned_s * 1e6:>10.1f}" if learned else "")
                     + f" {r.measured_median_s * 1e6:>11.1f} {r.measured_min_s * 1e6:>9.1f}"
                       f"  {r.structure} [{r.factors}]")
    if not learned:
        lines.append(f"ranked by the model alone ({result['learned_why_not']})")
    b = result["blas"]
    if b:
        lines.append(f"best measured ({result['best']['structure']}, model rank "
                     f"{result['best']['model_rank']}) against NumPy, side by side on "
                     f"{b['threads']} thread(s): kernel {b['kernel_median_s'] * 1e6:.1f} us, "
                     f"NumPy {b['blas_median_s'] * 1e6:.1f} us (medians), ratio "
                     f"{b['ratio_median']:.2f} ({b['blas']})")
    else:
        lines.append(f"no NumPy comparison: {result.get('blas_why_not', '')}")
    return "\n".join(lines)


def write(result: dict, out: Path) -> Path:
    from tileflow.outputs import write_csv

    out.mkdir(parents=True, exist_ok=True)
    path = out / "measured.csv"
    write_csv(result["rows"], path)
    return path


def tqdm_progress(total: int):
    from tqdm import tqdm

    bar = tqdm(total=total, file=sys.stderr, desc="kernels", unit="kernel")
    return bar.update
