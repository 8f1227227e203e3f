"""Human-readable summaries, comparison tables and plots of model results."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from tileflow.cost.result import Result
from tileflow.outputs import save_figure, write_atomic, write_csv  # noqa: F401 (re-export)
from tileflow.provenance import MODEL_VERSION
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


def summary(result: Result, arch_name: str, workload_name: str, source: str = "",
            lines_of: Mapping[str, int] | None = None) -> str:
    """A readable summary of one evaluation: totals, bottleneck, per-level table. With the
    dataflow's file and node lines, each violation names the line of its node."""
    r = result
    lines = [
        f"dataflow {r.dataflow} on {arch_name}, workload {workload_name}",
        f"  valid        {'yes' if r.valid else 'NO'}",
    ]
    for v in r.violations:
        line = (lines_of or {}).get(v.node or "")
        place = f"  [{source}, line {line}]" if source and line else ""
        lines.append(f"  violation    {v.message}{place}")
    lines += [
        f"  cycles       {r.cycles:,.0f}  ({r.latency_ms:.4f} ms at {r.clock_ghz:g} GHz)",
        f"  bottleneck   {r.bottleneck.message}",
        f"  energy       {r.energy_pj / 1e6:,.2f} uJ  "
        f"(compute {r.compute_energy_pj / 1e6:,.2f} uJ"
        + (f", leakage {sum(r.leakage_pj.values()) / 1e6:,.2f} uJ" if r.leakage_pj else "")
        + ")",
        f"  operations   {r.macs:,} MACs, {r.vector_ops:,} vector ops",
        f"  utilization  {r.utilization:.1%} of the matrix units",
        f"  DRAM traffic {r.dram_words:,.0f} words",
        "",
        f"  {'level':<6} {'reads':>12} {'fills':>12} {'updates':>12} {'energy uJ':>10} "
        f"{'footprint':>12} {'capacity':>12}",
    ]
    fps = {f.level: f for f in r.footprints}
    for lv in r.levels:
        moves = r.traffic.get(lv, {}).values()
        fill = sum(m.fill for m in moves)
        upd = sum(m.update for m in moves)
        energy = (sum(r.energy_by_level_pj.get(lv, {}).values())
                  + r.leakage_pj.get(lv, 0.0)) / 1e6
        fp = fps.get(lv)
        lines.append(
            f"  {lv:<6} {_si(r.level_reads(lv)):>12} {_si(fill):>12} {_si(upd):>12} "
            f"{energy:>10.2f} {(_si(fp.words) if fp else '-'):>12} "
            f"{(_si(fp.capacity_words) if fp else 'unbounded'):>12}"
        )
    return "\n".join(lines)


def violation_reason(result: Result) -> str:
    """Why a dataflow is invalid, in one line: for a capacity, the level, the words needed
    (by tensor, largest first) and the words it holds; for any other violation its
    message. Empty for a valid dataflow."""
    fps = {f.level: f for f in result.footprints}
    parts = []
    for v in result.violations:
        fp = fps.get(v.level or "")
        if v.kind == "capacity" and fp is not None and v.needed is not None:
            largest = [(t, n) for t, n in sorted(fp.by_tensor.items(), key=lambda kv: -kv[1])
                       if n]
            tensors = ", ".join(f"{t} {n:,.0f}" for t, n in largest[:5])
            tensors += f", {len(largest) - 5} more" if len(largest) > 5 else ""
            parts.append(f"level {v.level} needs {v.needed:,.0f} words ({tensors}) but holds "
                         f"{v.available:,.0f}")
        else:
            parts.append(v.message)
    return "; ".join(parts)


def comparison_rows(results: Sequence[Result]) -> list[dict]:
    """One row per dataflow, with speed-up and DRAM reduction against the first (Layerwise).
    An invalid row has its `reason` and no speed-up or utilization (None): numbers of a
    dataflow the chip cannot run are not results; where the first row is invalid, no row
    has a speed-up."""
    base = results[0]
    rows = []
    for r in results:
        comparable = r.valid and base.valid and r.cycles > 0
        rows.append({
            "dataflow": r.dataflow,
            "valid": r.valid,
            "reason": violation_reason(r) or None,
            "cycles": r.cycles,
            "speedup": base.cycles / r.cycles if comparable else None,
            "dram_words": r.dram_words,
            "dram_reduction": 1 - r.dram_words / base.dram_words if base.dram_words else 0.0,
            "energy_pj": r.energy_pj,
            "utilization": r.utilization if r.valid else None,
            "bottleneck": r.bottleneck.message,
            "footprint_words": {f.level: f.words for f in r.footprints},
        })
        rows[-1]["note"] = slow_note(rows[-1], base.dataflow)
    return rows


SLOW_SPEEDUP = 0.5  # a row this much slower than the first one is flagged, not shown as usual


def slow_note(row: dict, first: str) -> str | None:
    """Why a valid row runs far slower than the first (Layerwise): a fused dataflow that
    needs more than twice its cycles has lost its spread or its tiles (its fit failed, or
    its shape does not suit the workload), not a result to read as a speed-up."""
    if row["speedup"] is None or row["speedup"] >= SLOW_SPEEDUP:
        return None
    return (f"{row['speedup']:.2f}x of {first} ({row['utilization']:.1%} of the matrix "
            "units busy): its factors or its shape do not suit this workload and chip")


def comparison_json(results: Sequence[Result]) -> list[dict]:
    """What `compare --json` prints: each result's `evaluate` object with the row's
    `speedup` and `reason`, and `utilization` null where the dataflow is invalid."""
    out = []
    for row, r in zip(comparison_rows(results), results, strict=True):
        out.append({**r.to_dict(), "speedup": row["speedup"], "reason": row["reason"],
                    "utilization": row["utilization"], "note": row["note"]})
    return out


def comparison_frame(results: Sequence[Result]):
    """`comparison_rows` as a flat table (one column per level's footprint; violations joined
    by '; '): what `compare --csv` writes (empty cells where a row has no speed-up)."""
    import pandas as pd

    flat = []
    for row, r in zip(comparison_rows(results), results, strict=True):
        row = dict(row)
        for level, words in row.pop("footprint_words").items():
            row[f"footprint_words_{level}"] = words
        row["violations"] = "; ".join(v.message for v in r.violations)
        row["model_version"] = MODEL_VERSION
        flat.append(row)
    return pd.DataFrame(flat)


def _sizes_text(workload: Workload, overrides: Mapping[str, int], sep: str, eq: str) -> str:
    sizes = dict(workload.sizes)
    sizes.update({k: v for k, v in overrides.items() if k not in sizes})  # parameters set
    return sep.join(f"{k}{eq}{v}" for k, v in sizes.items())


def run_title(workload: Workload, arch: Architecture, preset: str | None = None,
              overrides: Mapping[str, int] | None = None) -> str:
    """The run in words: workload, its preset and sizes, and the accelerator."""
    overrides = dict(overrides or {})
    sizes = _sizes_text(workload, overrides, ", ", "=")
    changed = ", ".join(f"{k}={v}" for k, v in overrides.items())
    which = f"preset {preset}" if preset else "default sizes"
    if changed:
        which += f" with --set {changed}"
    if changed != sizes:  # the sizes in full, unless --set already gave every one
        which += f"; {sizes}" if preset or changed else f" {sizes}"
    where = f"{arch.name} ({arch.description})" if arch.description else arch.name
    return f"workload {workload.name} ({which}) on accelerator {where}"


def default_plot_name(workload: Workload, arch: Architecture,
                      overrides: Mapping[str, int] | None = None) -> str:
    """compare-WORKLOAD-SIZES-ARCH.png: runs with other sizes do not overwrite each other."""
    sizes = _sizes_text(workload, dict(overrides or {}), "-", "_")
    return f"compare-{workload.name}-{sizes}-{arch.name}.png"


def comparison_table(results: Sequence[Result], title: str) -> str:
    """The table `compare` prints: an invalid row shows '-' for speed-up and utilization and
    ends with its reason."""
    rows = comparison_rows(results)
    levels = [f.level for f in results[0].footprints]
    head = (f"{'dataflow':<14} {'cycles':>11} {'speedup':>8} {'DRAM words':>11} {'DRAM red.':>9} "
            f"{'energy uJ':>10} {'util':>6} " + " ".join(f"{'fp ' + lv:>9}" for lv in levels))
    out = [title, head, "-" * len(head)]
    for row in rows:
        fp = " ".join(f"{_si(row['footprint_words'][lv]):>9}" for lv in levels)
        speedup = "-" if row["speedup"] is None else f"{row['speedup']:.2f}x"
        util = "-" if row["utilization"] is None else f"{row['utilization']:.1%}"
        flag = f"  INVALID: {row['reason']}" if not row["valid"] else \
            (f"  NOTE: {row['note']}" if row["note"] else "")
        out.append(
            f"{row['dataflow']:<14} {row['cycles']:>11,.0f} {speedup:>8} "
            f"{_si(row['dram_words']):>11} {row['dram_reduction']:>8.1%} "
            f"{row['energy_pj'] / 1e6:>10.1f} {util:>6} {fp}{flag}"
        )
    out.append("")
    if not rows[0]["valid"]:
        out.append(f"  no speed-ups: the first dataflow ({rows[0]['dataflow']}) is invalid")
    out += [f"  {row['dataflow']}: bottleneck {row['bottleneck']}" for row in rows
            if row["valid"]]
    return "\n".join(out)


INVALID_LABEL = "invalid: does not fit (no speed-up; the reason is in the table)"


def comparison_plot(results: Sequence[Result], title: str, path: str | Path) -> Path:
    """Bar charts: speed-up over Layerwise, DRAM traffic, energy — one bar per dataflow.
    Invalid dataflows are hatched grey in the traffic and energy panels and have no
    speed-up bar (a mark says why); the legend names both kinds of bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = comparison_figure(results, title)
    try:
        return save_figure(fig, path, flag="--plot", dpi=110)
    finally:
        plt.close(fig)


def comparison_figure(results: Sequence[Result], title: str):
    """The figure of `comparison_plot` (a matplotlib Figure)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = comparison_rows(results)
    names = [r["dataflow"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    panels = [
        ("speed-up over " + names[0], [r["speedup"] for r in rows], "x"),
        ("DRAM traffic (M words)", [r["dram_words"] / 1e6 for r in rows], ""),
        ("energy (uJ)", [r["energy_pj"] / 1e6 for r in rows], ""),
    ]
    style = {True: {"facecolor": "#3b6ea8"},
             False: {"facecolor": "#bbbbbb", "hatch": "//", "edgecolor": "#555555"}}
    for ax, (label, values, suffix) in zip(axes, panels, strict=True):
        heights = [0.0 if v is None else v for v in values]
        bars = ax.bar(names, heights, **style[True])
        for bar, row in zip(bars, rows, strict=True):
            bar.set(**style[row["valid"]])
        ax.set_title(label)
        ax.tick_params(axis="x", rotation=40)
        for bar, v, row in zip(bars, values, rows, strict=True):
            x = bar.get_x() + bar.get_width() / 2
            if v is None:
                ax.annotate("invalid" if not row["valid"] else "-", (x, 0), ha="center",
                            va="bottom", fontsize=7, color="#aa0000", rotation=90)
                continue
            text = f"{v:.2f}{suffix}" if abs(v) < 100 else f"{v:,.0f}{suffix}"
            ax.annotate(text, (x, bar.get_height()), ha="center", va="bottom", fontsize=7)
    marks = [Patch(**style[True], label="valid dataflow")]
    if not all(r["valid"] for r in rows):
        marks.append(Patch(**style[False], label=INVALID_LABEL))
    fig.legend(handles=marks, loc="lower center", ncol=len(marks), fontsize=8, frameon=False)
    fig.suptitle(textwrap.fill(title, 130), fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig
