"""What `tileflow sweep` writes into its output folder, each file atomically and after every
point: sweep.csv (one row per point), summary.json, summary.md, sweep.png (the best
dataflow's cycles and DRAM words against the swept parameter) and bound.png (the
data-movement bound against capacity, compulsory traffic as the floor, the explorer's best
at each swept capacity). The summaries and sweep.png flag every point whose objective is
worse than a neighbour's with fewer resources (`monotone.flags`), and give each point's chip
area where the accelerator has one."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from tileflow.explore.sweeps.monotone import flags, not_compared_note
from tileflow.explore.sweeps.sweep import SweepState, fingerprint
from tileflow.explore.sweeps.sweep_config import describe_point
from tileflow.outputs import json_text, save_figure, write_csv, write_text_atomic
from tileflow.provenance import MODEL_VERSION

FILES = ("sweep.csv", "summary.json", "summary.md", "sweep.png", "bound.png")
COLUMNS = ("label", "status", "structure", "valid", "cycles", "latency_ms", "dram_words",
           "energy_pj", "area_mm2", "evaluations", "seconds", "capacity_bytes",
           "found_footprint_bytes", "bound_dram_words", "compulsory_words", "gap",
           "worse_than")


def table(state: SweepState) -> pd.DataFrame:
    names = [p.name for p in state.config.parameters]
    records = []
    worse = _worse_than(state)
    for r in state.rows:
        rec = {"label": r["label"], **{n: r["parameters"][n] for n in names}}
        rec.update({c: r.get(c) for c in COLUMNS[1:]})
        rec["worse_than"] = " ".join(worse.get(r["label"], ())) or None
        records.append(rec)
    return pd.DataFrame(records, columns=["label", *names, *COLUMNS[1:]])


def monotonicity(state: SweepState) -> dict:
    """The flagged points (`monotone.flags`), what was compared and what was not."""
    c = state.config
    found = flags(c, state.rows, _tie_break_tolerance(state))
    return {"objective": c.explore.objective, "flags": found,
            "flagged_points": sorted({f["point"] for f in found}),
            "monotone": not found, "not_compared": not_compared_note(c),
            "rule": "a point with more capacity or bandwidth can run its neighbour's best "
                    "dataflow (it starts from it), so its latency and DRAM words are never "
                    "worse; a point worse than a neighbour with fewer resources is flagged"}


def _tie_break_tolerance(state: SweepState) -> float:
    e = state.config.explore
    return e.tie_break.tolerance if e.tie_break.objective and len(e.objectives) == 1 else 0.0


def _worse_than(state: SweepState) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in flags(state.config, state.rows, _tie_break_tolerance(state)):
        out.setdefault(f["point"], []).append(f["neighbour"])
    return out


def summary(state: SweepState) -> dict:
    c = state.config
    done = [r for r in state.rows if r.get("status") == "done"]
    return {"sweep": c.explore.name, "fingerprint": fingerprint(c),
            "model_version": MODEL_VERSION,
            "accelerator": c.explore.accelerator, "workload": c.explore.workload,
            "sizes": dict(c.explore.sizes), "preset": c.explore.preset,
            "objective": c.explore.objective, "mode": c.mode,
            "parameters": {p.name: list(p.values) for p in c.parameters},
            "bound_level": c.bound_level, "points_total": len(c.points()),
            "points_done": len(done), "max_area_mm2": c.max_area_mm2,
            "points_over_area_limit": [r["label"] for r in state.rows
                                       if r.get("status") == "over_area_limit"],
            "monotonicity": monotonicity(state), "seconds": state.seconds,
            "interrupted": state.interrupted, "points": state.rows,
            "bounds": {k: {"compulsory_words": b.compulsory_words, "tilings": b.tilings,
                           "evaluated": b.evaluated, "skipped": list(b.skipped),
                           "front": [[p.footprint_words * b.word_bytes, p.dram_words]
                                     for p in b.front],
                           "sampled_front": [[p.footprint_words * b.word_bytes, p.dram_words]
                                             for p in b.sampled]}
                       for k, b in state.bounds.items()}}


def _num(x, pattern: str = "{:,.0f}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return pattern.format(x)


def markdown(state: SweepState) -> str:
    c = state.config
    lines = [f"# Sweep {c.explore.name}", "",
             f"Workload {c.explore.workload} "
             f"({', '.join(f'{k}={v}' for k, v in c.explore.sizes.items()) or c.explore.preset})"
             f" on {c.explore.accelerator}, objective {c.explore.objective}; "
             f"{sum(r.get('status') == 'done' for r in state.rows)} of {len(c.points())} "
             "points done"
             + (" (interrupted: `--resume` continues)" if state.interrupted else "") + ".", "",
             "| point | values | best structure | cycles | DRAM words | area mm2 | bound | gap "
             "| worse than |",
             "|---|---|---|---:|---:|---:|---:|---:|---|"]
    worse = _worse_than(state)
    for r in state.rows:
        structure = r["structure"] or ("over the area limit" if r.get("status") ==
                                       "over_area_limit" else "-")
        lines.append(f"| {r['label']} | {describe_point(r['parameters'])} | "
                     f"{structure} | {_num(r['cycles'])} | {_num(r['dram_words'])} | "
                     f"{_num(r.get('area_mm2'), '{:.3f}')} | "
                     f"{_num(r.get('bound_dram_words'))} | {_num(r.get('gap'), '{:.2f}x')} | "
                     f"{', '.join(worse.get(r['label'], ())) or '-'} |")
    lines += ["", *_monotonicity_lines(state), *_area_lines(state)]
    for key, b in state.bounds.items():
        lines += [f"Data-movement bound over {c.bound_level} capacity ({key}): "
                  f"{b.tilings:,} exact tilings of {len(b.names)} structures, "
                  f"{b.evaluated:,} evaluated after pruning by dominance; compulsory traffic "
                  f"{b.compulsory_words:,.0f} words, reached from "
                  f"{_num(_compulsory_capacity(b))} bytes."]
        for s in b.skipped:
            lines.append(f"Left out of the bound: {s}.")
        below = [r["label"] for r in state.rows if r.get("sampled_left_out_dram_words")
                 and r.get("bound_dram_words")
                 and r["sampled_left_out_dram_words"] < r["bound_dram_words"]]
        if b.skipped:
            lines.append("Random tilings of the left-out structures: "
                         + (f"below the bound at {', '.join(below)}." if below else
                            "none below the bound at any point."))
        lines.append("")
    lines += ["`gap`: the latency-optimal dataflow's DRAM words over the bound at the "
              "point's capacity (1.00x: it moves no more than any dataflow of the space)."]
    return "\n".join(lines) + "\n"


def _monotonicity_lines(state: SweepState) -> list[str]:
    """What the flags say: none, or each flagged point, and what is not compared."""
    m = monotonicity(state)
    what = {"latency": "latency", "dram": "DRAM words", "energy": "energy",
            "edp": "energy-delay product"}.get(m["objective"], m["objective"])
    lines = []
    if m["flags"]:
        lines.append(f"**Not monotone**: {len(m['flagged_points'])} point(s) with more "
                     f"resources than a neighbour have a worse {what} (`worse than`):")
        for f in m["flags"]:
            note = " (within the tie-break's tolerance)" if f["within_tie_break"] else ""
            lines.append(f"- {f['point']}: {f['value']:,.6g} against {f['neighbour']}'s "
                         f"{f['neighbour_value']:,.6g} (+{100 * f['excess']:.3g} %, more "
                         f"{' and '.join(f['resources'])}){note}")
    else:
        lines.append(f"Monotone: no point has a worse {what} than a neighbour with fewer "
                     "resources (more capacity or bandwidth can run the smaller point's "
                     "dataflow, and every point starts from its neighbours' best).")
    if m["not_compared"]:
        lines.append(f"Not flagged: {m['not_compared']}.")
    return [*lines, ""]


def _area_lines(state: SweepState) -> list[str]:
    c = state.config
    over = [r["label"] for r in state.rows if r.get("status") == "over_area_limit"]
    lines = []
    if all(r.get("area_mm2") is None for r in state.rows):
        lines.append("Area: none (the accelerator names no `technology_nm`, so the component "
                     "model gives no level or lane an area).")
    else:
        lines.append("Area: on-chip storage and compute lanes from the component model "
                     "(docs/energy.md); DRAM is off chip.")
        left = sorted({x for r in state.rows for x in r.get("area_left_out") or ()})
        if left:
            lines.append(f"Without an area (not counted): {', '.join(left)}.")
    if c.max_area_mm2 is not None:
        lines.append(f"Area limit {c.max_area_mm2:g} mm2: "
                     + (f"{', '.join(over)} over it, not run." if over else "every point "
                        "within it."))
    return [*lines, ""]


def _compulsory_capacity(b) -> float | None:
    hits = [p.footprint_words * b.word_bytes for p in b.front
            if p.dram_words <= b.compulsory_words]
    return min(hits) if hits else None


def sweep_plot(state: SweepState, path: Path) -> None:
    """Cycles and DRAM words of the best dataflow against the first parameter (one line per
    combination of the others)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = state.config
    first = c.parameters[0].name
    others = [p.name for p in c.parameters[1:]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    groups: dict[str, list[dict]] = {}
    for r in state.rows:
        key = describe_point({k: r["parameters"][k] for k in others}) if others else ""
        groups.setdefault(key, []).append(r)
    for key, rows in groups.items():
        rows = sorted((r for r in rows if r["cycles"] is not None),
                      key=lambda r: r["parameters"][first])
        x = [r["parameters"][first] for r in rows]
        axes[0].plot(x, [r["cycles"] for r in rows], "o-", label=key or None)
        axes[1].plot(x, [r["dram_words"] for r in rows], "o-", label=key or None)
    flagged = [r for r in state.rows if r["label"] in _worse_than(state) and r["cycles"]]
    if flagged:
        x = [r["parameters"][first] for r in flagged]
        for ax, column in zip(axes, ("cycles", "dram_words"), strict=True):
            ax.plot(x, [r[column] for r in flagged], "o", ms=12, mfc="none", mec="red",
                    label=f"worse {c.explore.objective} than a neighbour with fewer "
                          "resources")
    plotted = any(r["cycles"] for r in state.rows)
    for ax, what in zip(axes, ("cycles of the best dataflow", "its DRAM words"), strict=True):
        if plotted:  # a log axis needs positive data
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
        else:
            ax.text(0.5, 0.5, "no valid dataflow yet", ha="center", transform=ax.transAxes)
        ax.set_xlabel(first)
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
        if others or flagged:
            ax.legend(fontsize=7)
    fig.suptitle(f"sweep {c.explore.name}")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def bound_plot(state: SweepState, path: Path) -> None:
    """The ski-slope: least DRAM words against capacity, compulsory traffic as the floor,
    the explorer's latency-optimal dataflow at each swept capacity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = state.config
    fig, ax = plt.subplots(figsize=(7, 4.5))
    rows = [r for r in state.rows if r.get("capacity_bytes")]
    caps = [r["capacity_bytes"] for r in rows]
    for k, (key, b) in enumerate(state.bounds.items()):
        fps = [p.footprint_words * b.word_bytes for p in b.front]
        if not fps:
            continue
        high = max([*fps, *caps]) * 2
        xs = [*fps, high]
        ys = [p.dram_words for p in b.front] + [b.front[-1].dram_words]
        tag = "" if len(state.bounds) == 1 else f" ({key})"
        ax.step(xs, ys, where="post", color=f"C{k}", label=f"bound{tag}: least DRAM words "
                "of any tiling that fits")
        ax.axhline(b.compulsory_words, color="gray", ls="--",
                   label="compulsory: inputs read once, outputs written once" if k == 0
                   else None)
    found = [(r["capacity_bytes"], r["dram_words"]) for r in rows if r["dram_words"]]
    if found:
        ax.plot(*zip(*found, strict=True), "v", color="C3", ms=8,
                label="explorer's best (optimising latency), at the swept capacity")
    used = [(r["found_footprint_bytes"], r["dram_words"]) for r in rows
            if r["dram_words"] and r.get("found_footprint_bytes")]
    if used:
        ax.plot(*zip(*used, strict=True), "v", color="C3", ms=8, mfc="none", alpha=0.6,
                label="the same, at the footprint it uses")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(f"{c.bound_level} capacity per instance (bytes)")
    ax.set_ylabel("DRAM words")
    ax.set_title(f"data-movement bound: {c.explore.name}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def write_all(state: SweepState) -> dict:
    """Write the table, summaries and plots; returns summary.json's object."""

    out = Path(state.config.out)
    out.mkdir(parents=True, exist_ok=True)
    data = summary(state)
    write_csv(table(state), out / "sweep.csv")
    if state.rows:
        sweep_plot(state, out / "sweep.png")
        if state.bounds:
            bound_plot(state, out / "bound.png")
    data["files"] = {n: str(out / n) for n in FILES if (out / n).exists() or n == "summary.json"}
    write_text_atomic(out / "summary.md", markdown(state))
    data["files"]["summary.md"] = str(out / "summary.md")
    write_text_atomic(out / "summary.json", json_text(data, indent=2))
    return data

