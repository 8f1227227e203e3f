"""How well the model orders the dataflows of one shape: what a design-space search relies
on. Per shape with at least 3 rows and more than one measured value: the Spearman rank
correlation of predicted and measured cycles (0 where the model predicts one value for every
row: it gives no order), and the top-1 regret (measured cycles of the model's best pick over
the measured best, minus one; rows tied for the best prediction count by their mean, the
expected regret of breaking the tie at random)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from scipy.stats import spearmanr


def ranked(group: pd.DataFrame) -> bool:
    """A shape whose order means something: at least 3 rows, not all measured the same."""
    return len(group) >= 3 and group.rtl_cycles.nunique() > 1


def top1_regret(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Measured cycles of the row predicted fastest (the mean over rows tied for it) over
    the fastest measured, minus one."""
    pairs = list(zip(predicted, measured, strict=True))
    best = min(p for p, _ in pairs)
    picks = [m for p, m in pairs if p == best]
    return sum(picks) / len(picks) / min(m for _, m in pairs) - 1


def rank_by_shape(frame: pd.DataFrame, shape: Sequence[str],
                  column: str = "predicted") -> pd.DataFrame:
    """One row per shape: `rows`, `spearman` and `regret` (None where the shape does not
    count: fewer than 3 rows or a single measured value)."""
    out = []
    for key, group in frame.groupby(list(shape)):
        rho = regret = None
        if ranked(group):
            rho = 0.0 if group[column].nunique() < 2 else float(
                spearmanr(group[column], group.rtl_cycles).statistic)
            regret = top1_regret(group[column].tolist(), group.rtl_cycles.tolist())
        out.append({**dict(zip(shape, key, strict=True)), "rows": len(group),
                    "spearman": rho, "regret": regret})
    return pd.DataFrame(out)
