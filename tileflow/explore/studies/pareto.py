"""Two objectives (`objective: [latency, energy]`): the Pareto front of a study's points (the
points no other valid point beats on both objectives), as a table and a plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tileflow.explore.factors.space import COLUMNS


def non_dominated(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mask of the points (a[i], b[i]) no other point beats: lower or equal on both and
    lower on one (both minimised; equal points are all kept)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    order = np.lexsort((b, a))  # by a, then b
    keep = np.zeros(len(a), dtype=bool)
    best_b, last = np.inf, None
    for i in order:
        point = (a[i], b[i])
        if b[i] < best_b or point == last:
            keep[i] = True
            best_b, last = min(best_b, b[i]), point
    return keep


def front(points: pd.DataFrame, objectives: tuple[str, str]) -> pd.DataFrame:
    """The valid points on the front, sorted by the first objective; points with equal
    values of both objectives (the same dataflow under two names) kept once."""
    if not len(points):
        return points
    valid = points[points["valid"].astype(bool)]
    x, y = (COLUMNS[o] for o in objectives)
    valid = valid[np.isfinite(valid[x].astype(float)) & np.isfinite(valid[y].astype(float))]
    mask = non_dominated(valid[x].to_numpy(float), valid[y].to_numpy(float))
    out = valid[mask].drop_duplicates([x, y])
    return out.sort_values([x, y]).reset_index(drop=True)


def plot(points: pd.DataFrame, on_front: pd.DataFrame, objectives: tuple[str, str],
         baselines: dict[str, tuple[float, float]], title: str, path: Path) -> None:
    """Every valid point, the front as a line, the baselines (own rule) as markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, y = (COLUMNS[o] for o in objectives)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    valid = points[points["valid"].astype(bool)] if len(points) else points
    if len(valid):
        ax.scatter(valid[x], valid[y], s=4, alpha=0.3, color="0.6", label="evaluated points")
    if len(on_front):
        ax.step(on_front[x], on_front[y], where="post", color="C0", linewidth=1.5)
        ax.scatter(on_front[x], on_front[y], s=18, color="C0", zorder=3,
                   label=f"Pareto front ({len(on_front)} points)")
    for k, (name, (bx, by)) in enumerate(sorted(baselines.items())):
        ax.scatter([bx], [by], marker="x", s=40, color=f"C{k + 1}", zorder=4, label=name)
    ax.set_xlabel(f"{objectives[0]} ({x})")
    ax.set_ylabel(f"{objectives[1]} ({y})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
