"""Accuracy of predictions against measurements: errors, fit to y = x, rank agreement and
what the model's choice costs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import kendalltau, spearmanr


def mape(predicted, measured) -> float:
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    return float(np.mean(np.abs(p - m) / m))


def r2_identity(predicted, measured) -> float:
    """R^2 of the line y = x (no fit): 1 - SS(measured - predicted) / SS(measured - mean)."""
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    total = np.sum((m - m.mean()) ** 2)
    return float(1 - np.sum((m - p) ** 2) / total) if total > 0 else float("nan")


def spearman(predicted, measured) -> float:
    return float(spearmanr(predicted, measured).statistic) if len(measured) > 2 else float("nan")


def kendall(predicted, measured) -> float:
    return float(kendalltau(predicted, measured).statistic) if len(measured) > 2 else float("nan")


def top1_regret(predicted, measured) -> float:
    """Measured cost of the model's best pick over the measured best, minus one."""
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    return float(m[int(np.argmin(p))] / m.min() - 1)


def top_k_regret(predicted, measured, k: int) -> float:
    """Measured cost of the best of the model's k first picks over the measured best,
    minus one (k = 1: top1_regret)."""
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    picks = np.argsort(p, kind="stable")[:k]
    return float(m[picks].min() / m.min() - 1)


def within_groups(frame: pd.DataFrame, by: Sequence[str], predicted: str,
                  measured: str) -> pd.DataFrame:
    """Spearman, Kendall and top-1 regret within each group (e.g. one workload shape)."""
    rows = []
    for key, g in frame.groupby(list(by)):
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, key, strict=True)), "rows": len(g),
                     "spearman": spearman(g[predicted], g[measured]),
                     "kendall": kendall(g[predicted], g[measured]),
                     "top1_regret": top1_regret(g[predicted], g[measured])})
    return pd.DataFrame(rows)


def summary(predicted, measured) -> dict[str, float]:
    return {"mape": mape(predicted, measured), "r2": r2_identity(predicted, measured),
            "spearman": spearman(predicted, measured), "kendall": kendall(predicted, measured),
            "top1_regret": top1_regret(predicted, measured), "rows": int(len(measured))}
