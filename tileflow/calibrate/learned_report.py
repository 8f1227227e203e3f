"""`tileflow validate cpu --learn`: the learned cost model trained on a campaign, validated
on held-out groups against the calibrated model and the ridge correction, stored per
machine; learned.json and learned.md beside the campaign's report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tileflow.calibrate import learned
from tileflow.errors import InputError
from tileflow.outputs import json_text, write_text_atomic
from tileflow.specs.arch import Architecture

MODEL_FILE = "learned-model.pkl"
NAMES = {"calibrated": "calibrated model", "ridge": "ridge correction (baseline)",
         "learned": "learned model (trees)"}


def run(frame: pd.DataFrame, arch: Architecture, folder: Path, environment: dict | None,
        command: str, seed: int = 0, folds: int = 5) -> dict:
    """Validate (held-out groups; also k-fold over rows, for comparison), train on every
    row, store the model with the campaign's fingerprint, write the report files."""
    if learned.missing():
        raise InputError(learned.missing())
    style = (environment or {}).get("kernel_style", "plain")
    f = learned.add_operator_features(frame.reset_index(drop=True), arch, style)
    groups = f.workload.astype(str) + " " + f["shape"].astype(str)
    ranked = groups
    if "threads" in f and f.threads.nunique() > 1:  # a held-out shape: all its threads
        ranked = groups + " threads=" + f.threads.astype(int).astype(str)
    by_group = learned.grouped_validation(f, arch, groups, seed, ranked)
    rows = np.random.default_rng(seed).permutation(len(f)) % folds
    by_rows = learned.grouped_validation(f, arch, pd.Series(rows), seed)
    by_rows_figures = learned.figures(by_rows.frame, ranked)
    every = np.arange(len(f))
    calibration = _calibration(f, arch, every)
    f["calibrated_s"] = learned.calibrate(f, arch, every)
    columns = learned.feature_names(f, arch)
    _, model = learned.learned_prediction(f, columns, every, seed)
    print_ = learned.fingerprint(environment)
    result = {"rows": int(len(f)), "groups": sorted(ranked.unique().tolist()),
              "kernel_style": style, "features": columns, "fingerprint": print_,
              "held_out_groups": by_group.figures, "k_fold_rows": by_rows_figures,
              "k_fold_rows_folds": folds}
    result["reference"] = learned.reference_of(f)
    learned.save(folder / MODEL_FILE, model, columns, print_, result["held_out_groups"],
                 calibration, result["reference"])
    write_text_atomic(folder / "learned.json", json_text(result, indent=2) + "\n")
    write_text_atomic(folder / "learned.md", _markdown(result, command))
    return result


def _calibration(f: pd.DataFrame, arch: Architecture, rows: np.ndarray) -> dict:
    from tileflow.calibrate import latency
    from tileflow.calibrate.fit import fit

    params = latency.parameter_set(arch)
    feats = {c: f[c].to_numpy(float) for c in latency.feature_columns(arch)}

    def predict(values, r):
        return latency.cycles({k: v[r] for k, v in feats.items()}, values, arch) / (
            arch.clock_ghz * 1e9)

    return fit(params, predict, f[learned.MEASURED].to_numpy(float), rows).as_dict()


def _table(figures: dict) -> list[str]:
    """One row per group, each predictor's Spearman, MAPE, top-1 and top-10 regret."""
    groups = list(next(iter(figures.values()))["groups"])
    head = "| group | " + " | ".join(f"{NAMES[k].split(' (')[0]}: Spearman | MAPE | top-1 | "
                                     "top-10" for k in NAMES) + " |"
    lines = [head, "|" + "---|" * (1 + 4 * len(NAMES))]
    for g in groups:
        cells = []
        for key in NAMES:
            v = figures[key]["groups"][g]
            cells += [f"{v['spearman']:.2f}", f"{v['mape']:.0%}", f"{v['top1_regret']:.1%}",
                      f"{v['top10_regret']:.1%}"]
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    return lines


def _held_out_words(groups: list[str]) -> str:
    workloads = [g.split()[0] for g in {g.split(" threads=")[0] for g in groups}]
    if all(workloads.count(w) == 1 for w in workloads):
        return ("here one shape per workload: a workload is predicted from the other "
                "workloads' kernels")
    return ("a shape is predicted from the kernels of every other shape, the other shapes of "
            "its own workload included")


def _markdown(r: dict, command: str) -> str:
    groups = r["groups"]
    lines = [
        "# A learned cost model of this machine's kernels", "",
        f"Regenerate: `{command}`. {r['rows']} kernels ({r['kernel_style']} style), "
        f"{len(groups)} groups (workload and shape): {', '.join(groups)}.", "",
        "Gradient-boosted trees predict log(measured / calibrated) from what is known before "
        "a kernel runs: the latency function's terms, the model's traffic, the calibrated "
        "prediction, and per contraction the loops the compiler vectorised around it "
        "(`-fopt-info-vec`: position, width, trip), the innermost loop's trip and whether it "
        "reduces, and the operands that are unit-stride, strided or invariant along the "
        "innermost and the vectorised loop. Top-k regret: the measured latency of the best "
        "of a predictor's k first picks over the measured best, minus one.", "",
        "## Held-out groups", "",
        "Each group is predicted by a calibration, a ridge correction and trees fitted on the "
        f"other groups only ({_held_out_words(groups)}).", "",
        *_table(r["held_out_groups"]), "",
        f"## {r['k_fold_rows_folds']}-fold over rows (not held-out groups)", "",
        "For comparison only: every group is in every training set, so this is what the "
        "features allow within a known shape, not on a new one.", "",
        *_table(r["k_fold_rows"]), "",
        "## Machine", "",
        "The stored model (`learned-model.pkl`, with `learned-model.json`) applies to kernels "
        "built and run with: " + "; ".join(f"{k} `{v}`" for k, v in r["fingerprint"].items())
        + ". Loading it elsewhere is refused with the keys that differ.", ""]
    return "\n".join(lines)
