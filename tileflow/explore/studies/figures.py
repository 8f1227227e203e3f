"""The figures of a study folder (convergence.png, timeline.png, front.png): drawn from plain
data, so that `tileflow explore` draws them from its outcome and `tileflow figures DIR`
redraws them from a saved folder; and drawn within a deadline.

A time budget caps the whole `explore` process. The figures are the only outputs that can
be left out (matplotlib's import and the drawing take seconds on a loaded machine), so they
are drawn last, in a forked child that is stopped at the deadline; a figure not finished by
then is not written, and `summary.md` says which command draws it later."""

from __future__ import annotations

import glob
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tileflow.explore.studies import timeline

Draw = Callable[[Path], None]
EXIT_MARGIN_S = 0.5  # kept for summary.json, summary.md and the interpreter's exit


@dataclass(frozen=True)
class Convergence:
    """What the convergence plot shows: each point's cost and seconds, and the baselines'
    own-rule values as lines."""

    name: str
    method: str
    objective: str
    cost: np.ndarray
    seconds: np.ndarray
    baselines: Sequence[tuple[str, float]]


def convergence_plot(data: Convergence, path: Path) -> None:
    """Best cost so far against evaluations and against seconds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    cost = np.asarray(data.cost, dtype=float)
    best = np.minimum.accumulate(np.where(np.isfinite(cost), cost, np.inf)) if len(cost) else cost
    shown = np.isfinite(best)
    axes[0].step(np.arange(1, len(best) + 1)[shown], best[shown], where="post",
                 label=f"best found ({data.method})")
    seconds = np.asarray(data.seconds, dtype=float)
    axes[1].step(seconds[shown], best[shown], where="post", label=f"best found ({data.method})")
    for k, (name, value) in enumerate(data.baselines):
        for ax in axes:
            ax.axhline(value, color=f"C{k + 1}", linestyle="--", linewidth=1,
                       label=f"{name} (own rule)")
    unit = {"latency": "cycles", "energy": "pJ", "edp": "cycles x pJ",
            "dram": "DRAM words"}.get(data.objective, "")
    for ax, xlabel in zip(axes, ("evaluations", "seconds"), strict=True):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{data.objective} ({unit})")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="upper right")
    fig.suptitle(f"{data.name}: best {data.objective} so far")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def timeline_title(name: str, line: timeline.Timeline) -> str:
    return f"{name}: the found dataflow, {line.cycles:,.0f} cycles ({line.overlap} overlap)"


def draw_in_process(jobs: Sequence[tuple[str, Draw]], out: Path,
                    write: Callable[[Path, Draw], None]) -> list[str]:
    """Draw every figure here; returns their names."""
    for name, draw in jobs:
        write(out / name, draw)
    return [name for name, _ in jobs]


def draw_within(jobs: Sequence[tuple[str, Draw]], out: Path, deadline: float,
                write: Callable[[Path, Draw], None]) -> list[str]:
    """Draw the figures in order in a forked child until `deadline` (a `time.perf_counter()`
    instant, less `EXIT_MARGIN_S`); returns the names of those written. A child stopped at
    the deadline leaves no partial file (each figure is renamed into place when complete;
    its temporary file is removed here). Without `fork`, figures are drawn here only when
    there is time left at all."""
    room = deadline - EXIT_MARGIN_S - time.perf_counter()
    if room <= 0 or not jobs:
        return []
    if "fork" not in multiprocessing.get_all_start_methods():
        return draw_in_process(jobs, out, write)
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_draw_child, args=(jobs, out, write, send), daemon=True)
    child.start()
    send.close()
    done: list[str] = []
    while True:
        left = deadline - EXIT_MARGIN_S - time.perf_counter()
        if left <= 0 or not receive.poll(left):
            break
        try:
            done.append(receive.recv())
        except EOFError:  # the child finished (or failed): nothing more comes
            break
    if child.is_alive():
        child.kill()
    child.join()
    for name, _ in jobs:  # a figure stopped half-way: its temporary file
        if name not in done:
            for tmp in glob.glob(str(out / f".{name}.*")):
                os.unlink(tmp)
    return done


def _draw_child(jobs, out: Path, write, send) -> None:
    for name, draw in jobs:
        write(out / name, draw)
        send.send(name)
    send.close()


def objective_of(fig: dict, objective: str) -> float:
    """An objective's value from summary.json's figures of one dataflow."""
    return {"latency": fig["cycles"], "energy": fig["energy_pj"], "dram": fig["dram_words"],
            "edp": fig["cycles"] * fig["energy_pj"]}[objective]
