"""The CPU model-accuracy report: scatter plots, metrics, top-1 regret, worst cases,
summary.json; every file written atomically."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from tileflow.calibrate import metrics
from tileflow.calibrate.cpu import CACHE_TRAFFIC, VIEWS, CpuStudy, worst_cases
from tileflow.errors import InputError
from tileflow.outputs import json_text, save_figure
from tileflow.outputs import write_text_atomic as write_text
from tileflow.specs.dataflow import parse_dataflow
from tileflow.specs.yamlfile import Field
from tileflow.tree import render

VIEW_TITLES = ("tree view", "cache view")
TARGETS = ("traffic R^2 >= 0.97 at both boundaries; held-out latency Spearman >= 0.9 and "
           "MAPE <= 15 %; the model's top pick within 5 % of the measured best")


def plots(s: CpuStudy, out: Path, levels: dict[str, str]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    f = s.frame
    names = []
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    for ax, (column, title) in zip(axes, (("model_s", "before calibration (tree model)"),
                                          ("calibrated_s", "after calibration")), strict=True):
        for (workload, held), g in f.groupby(["workload", "heldout"]):
            ax.loglog(g.latency_s * 1e3, g[column] * 1e3, "x" if held else ".",
                      alpha=0.8 if held else 0.4,
                      label=f"{workload}{' (held out)' if held else ''}")
        lo, hi = f.latency_s.min() * 1e3 * 0.5, f.latency_s.max() * 1e3 * 2
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=1, label="y = x")
        ax.set_xlabel("measured latency (ms)")
        ax.set_ylabel("predicted latency (ms)")
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, out / "latency.png")
    plt.close(fig)
    names.append("latency.png")
    views = [(suffix, title, [(k, v) for k, v in pairs.items()
                              if v[0] in f and v[1] in f and f[v[1]].notna().any()])
             for (suffix, pairs), title in zip(VIEWS.items(), VIEW_TITLES, strict=True)]
    views = [v for v in views if v[2]]
    if views:
        ncols = max(len(v[2]) for v in views)
        fig, axes = plt.subplots(len(views), ncols, figsize=(6 * ncols, 5 * len(views)),
                                 squeeze=False)
        for row, (suffix, title, have) in zip(axes, views, strict=True):
            for ax, (name, (model, measured)) in zip(row, have, strict=False):
                for workload, g in f.groupby("workload"):
                    ax.loglog(g[measured] / 1e6, g[model] / 1e6, ".", alpha=0.5,
                              label=workload)
                lo = min(f[measured].min(), f[model].min()) / 1e6 * 0.5
                hi = max(f[measured].max(), f[model].max()) / 1e6 * 2
                ax.plot([lo, hi], [lo, hi], "k--", linewidth=1, label="y = x")
                ax.set_xlabel(f"measured misses x line (MB), into {levels[name]}")
                ax.set_ylabel("model: words brought in x word size (MB)")
                ax.set_title(f"{title}, into {levels[name]}: R^2 "
                             f"{s.summary['traffic_r2' + suffix][name]:.3f}")
                ax.legend(fontsize=7)
        fig.tight_layout()
        save_figure(fig, out / "traffic.png")
        plt.close(fig)
        names.append("traffic.png")
    return names


def _limits(s: CpuStudy, levels: dict[str, str]) -> list[str]:
    """What limits the accuracy, with the figures that show it."""
    f = s.frame
    out = ["", "## What limits the accuracy", ""]
    for pairs, title in zip(VIEWS.values(), VIEW_TITLES, strict=True):
        for name, (model, measured) in pairs.items():
            if model not in f or measured not in f or f[measured].isna().all():
                continue
            g = f.dropna(subset=[model, measured])
            q = g[measured] / g[model]
            near = float(((q >= 0.8) & (q <= 1.25)).mean())
            out.append(f"* Traffic into {levels[name]}, {title}: measured within 25 % of the "
                       f"model on {near:.0%} of the kernels (median measured / model "
                       f"{q.median():.2f}); the model predicts more than twice the "
                       f"measurement on {float((q < 0.5).mean()):.0%} and less than half on "
                       f"{float((q > 2).mean()):.0%}. Measured traffic spans "
                       f"{g[measured].max() / g[measured].min():.1f}x across the kernels, "
                       f"the model's {g[model].max() / g[model].min():.1f}x.")
    model, measured = CACHE_TRAFFIC["first_level"]
    if model in f and measured in f and f[measured].notna().any():
        g = f.dropna(subset=[model, measured]).copy()
        g["q"] = g[measured] / g[model]
        g["miss"] = np.abs(np.log(g.q))
        worst = g.sort_values("miss", ascending=False).head(6)
        out.append(f"* Largest cache-view misses into {levels['first_level']} (measured / "
                   "model): " + "; ".join(f"{r.workload} / {r.dataflow} {r.q:.2f}"
                                           for r in worst.itertuples()) + ".")
    out += [
        "* Why the tree view differs: a tile tree says what each level keeps (a level holds "
        "its tiles and nothing else, as a scratchpad would); a hardware cache keeps whatever "
        "was touched recently. A tree with no tile at the last level, or tiles smaller than "
        "it, is charged for reloads that a 1 MB cache never makes: here the whole working "
        "set of most kernels fits in the last level, so only first-touch misses remain, "
        "whatever the tree. The cache view evaluates the same model on the tree the caches "
        "realise (one candidate tile per loop, each placed at the innermost cache level its "
        "working set fits), and adds the first-touch allocation of the kernel's on-chip "
        "buffers, which a scratchpad would not need.",
        "* What the cache view still misses: least-recently-used replacement keeps a tile "
        "that fills most of a cache only partly (the model keeps it whole); a line brings "
        "16 words where a tile one to four words wide along the contiguous axis uses a few, "
        "and brings them back if it was evicted before the next tile uses the rest; limited "
        "associativity; rows padded by one line in the generated layout (allocated buffers "
        "are whole rows of the padded width).",
        "* Why latency differs: the latency function charges each operator's work by how "
        "its loop nest runs once compiled: in SIMD vectors (where the compiler vectorised a "
        "loop around the statement), in independent scalar iterations, or as a chain of "
        "dependent adds (a reduction loop kept innermost and not vectorised), each at a "
        "fitted cost per operation, plus a fitted overhead per start of an innermost loop. "
        f"Work in chains is {_share(f, 'chain_work'):.0%} of all work here, scalar "
        f"{_share(f, 'scalar_work'):.0%}, SIMD {_share(f, 'simd_work'):.0%}. What it "
        "does not see: how well the vectorised code runs (gathers for strided operands, "
        "unaligned and masked vectors, the overhead of short vector loops), the cache misses "
        "behind each transfer (the data side is one rate per boundary), and the other "
        "processes on this machine. Kernels with the same operation count span "
        f"{_same_work_spread(f):.0f}x in measured time here.",
    ]
    return out


def _stale(f: pd.DataFrame, environment: dict | None) -> list[str]:
    """Say where the saved measurements come from older code than the current one: kernels
    compiled with other flags, traffic measured by another method."""
    from tileflow.kernels.build import FLAGS
    from tileflow.kernels.campaign import TRAFFIC_METHOD

    out = []
    flags = (environment or {}).get("flags")
    if flags and flags != " ".join(FLAGS):
        out.append(f"The kernels were timed when built with `{flags}`; the current build "
                   f"uses `{' '.join(FLAGS)}`: rerun the campaign to time the current kernels.")
    if "traffic_measured_by" in f:
        methods = f.traffic_measured_by.fillna("").astype(str)
        has = f["measured_first_level_bytes"].notna() if "measured_first_level_bytes" in f \
            else pd.Series(False, f.index)
        old = methods[(methods != TRAFFIC_METHOD) & (has | (methods != ""))].value_counts()
        unmeasured = f.key[(methods == "") & ~has].nunique() if "key" in f else 0
        if unmeasured:
            config = (environment or {}).get("config") or {}
            sample = config.get("traffic_sample") or 0
            out.append(f"Traffic was measured on {f.key.nunique() - unmeasured} of the "
                       f"{f.key.nunique()} dataflows"
                       + (f" (a seeded random sample: `traffic_sample: {sample}`)"
                          if sample else " (`tileflow validate cpu --remeasure-traffic` "
                          "measures the others)")
                       + "; the traffic figures above are those of the measured ones.")
        if len(old):
            out.append(f"{int(old.sum())} kernels' traffic was measured by an earlier method ("
                       + "; ".join(f"'{m or 'kernel function only'}': {n}"
                                   for m, n in old.items())
                       + f"; current: '{TRAFFIC_METHOD}'): `tileflow validate cpu "
                       "--remeasure-traffic` measures it again, keeping the timings.")
    return [x for line in out for x in ("", line)]


def _passes(environment: dict | None) -> list[str]:
    """How the timings were taken: the campaign's repetitions, and whether traffic was
    measured in a separate pass."""
    config = (environment or {}).get("config") or {}
    if not config:
        return []
    text = (f"Each kernel was called {config.get('warmup', 1)} time(s) to warm up, then "
            f"timed over {config.get('repetitions')} calls.")
    if config.get("traffic") is False:
        text += (" The timing pass ran without cachegrind, with no other heavy job on the "
                 "machine; the traffic was measured in a separate pass (single-threaded "
                 "under cachegrind, whose counts do not depend on the load; `tileflow "
                 "validate cpu --remeasure-traffic` measures every kernel not yet measured), "
                 "which keeps the timings.")
    return [text, ""]


def _share(f: pd.DataFrame, column: str) -> float:
    work = f[["simd_work", "scalar_work", "chain_work"]].to_numpy(float).sum()
    return float(f[column].sum() / work) if work else 0.0


def _same_work_spread(f: pd.DataFrame) -> float:
    g = f.groupby(["workload", "macs"]).latency_s
    return float((g.max() / g.min()).max())


def _outline(tree_json: str) -> list[str]:
    flow = parse_dataflow(Field(json.loads(tree_json), "measurements.csv"))
    return render(flow.root).rstrip().splitlines()


def _explain(row: pd.Series) -> str:
    """Why the model misses a kernel, from the counts beside it."""
    reasons = []
    if row.ratio < 1:
        reasons.append(f"The kernel is {1 / row.ratio:.1f}x slower than predicted")
    else:
        reasons.append(f"The kernel is {row.ratio:.1f}x faster than predicted")
    work = row.simd_work + row.scalar_work + row.chain_work
    if work > 0:
        reasons.append(f"of its work {row.simd_work / work:.0%} runs in SIMD loops, "
                       f"{row.scalar_work / work:.0%} in scalar iterations and "
                       f"{row.chain_work / work:.0%} in reduction chains; "
                       f"{work / max(row.loop_starts, 1):.1f} operations per innermost loop "
                       "start")
    model = next((c for c in ("model_cache_first_level_bytes", "model_first_level_bytes")
                  if c in row and row[c] > 0), None)
    if "measured_first_level_bytes" in row and model:
        q = row.measured_first_level_bytes / row[model]
        if q < 0.5 or q > 2:
            reasons.append(f"first-level traffic measured {q:.2f}x the model's "
                           f"({'cache' if 'cache' in model else 'tree'} view)")
    strided, chained = _lane_findings(row)
    if strided:
        reasons.append("SIMD lanes along a dim that is not contiguous in memory ("
                       + ", ".join(strided) + "): strided loads and stores instead of vectors")
    if chained:
        reasons.append("a reduction loop right around the lanes (" + ", ".join(chained)
                       + "): each step waits for the previous update of the same outputs")
    reasons.append(f"model bottleneck: {row.model_bottleneck}")
    return "; ".join(reasons)


def _lane_findings(row: pd.Series) -> tuple[list[str], list[str]]:
    """Per operator, from the tree: lanes (the spatial loops of its own tile) along a dim
    that is not the last axis of its output (strided), and a reduction as the loop right
    around the lanes (a dependency chain through the output)."""
    from tileflow.specs.workload import load_workload
    from tileflow.tree import Op, Tile

    try:
        sizes = dict(item.split("=") for item in str(row["shape"]).split())
        w = load_workload(str(row["workload"]), {k: int(v) for k, v in sizes.items()})
    except (ValueError, OSError, InputError):
        return [], []
    flow = parse_dataflow(Field(json.loads(row["tree"]), "measurements.csv"))
    strided, chained = [], []

    def go(node: Tile, loops: tuple) -> None:
        loops = loops + tuple(lp for lp in node.loops if lp.factor > 1)
        for child in node.children:
            if not isinstance(child, Op):
                go(child, loops)
                continue
            op = w.op_by_name.get(child.op)
            if op is None:  # a tree that does not belong to the row's workload: no finding
                continue
            lanes = [lp for lp in node.loops if lp.spatial and lp.factor > 1]
            temporal = [lp for lp in loops if not lp.spatial]
            bad = [lp.dim for lp in lanes if lp.dim != op.output.dims[-1]
                   and lp.dim in op.output.dims]
            if bad:
                strided.append(f"'{op.name}' along {', '.join(bad)}")
            if temporal and temporal[-1].dim in op.reduction_dims:
                width = lanes[0].factor if lanes else 1
                chained.append(f"'{op.name}' over {temporal[-1].dim} (lanes: {width})")

    go(flow.root, ())
    return strided, chained


def _blas_section(summary: dict) -> list[str]:
    """The best generated kernel against NumPy's BLAS on the same shape and threads."""
    figures = summary.get("kernel_vs_blas") or {}
    if not figures:
        return ["", "## Generated kernels against NumPy's BLAS", "",
                "Not measured in this campaign (NumPy's time per shape and thread count is "
                "recorded by campaigns since it was added)."]
    lines = ["", "## Generated kernels against NumPy's BLAS", "",
             "Per shape and thread count: the fastest generated kernel's time over NumPy's "
             "for the same computation (float32, BLAS matrix products, the same threads), "
             "both the fastest of the repetitions; over the shapes: geometric mean, best, "
             "worst (target: within 1.5x).", "",
             "| workload | threads | shapes | geometric mean | best | worst |",
             "|---|---|---|---|---|---|"]
    for w, per in figures.items():
        for t, v in per.items():
            lines.append(f"| {w} | {t} | {len(v['shapes'])} | {v['geomean']:.2f}x | "
                         f"{v['best']:.2f}x | {v['worst']:.2f}x |")
    return lines


def _learned_section(learned: dict | None) -> list[str]:
    """The learned model's held-out-shape figures (learned.json), where it was trained."""
    if not learned:
        return []
    lines = ["", "## Learned cost model, held-out shapes", "",
             "Each shape predicted by models fitted on the other shapes only (`learned.md` "
             "has the details and the per-shape figures); targets: Spearman >= 0.9, MAPE <= "
             "20 %, top-10 regret <= 5 %, top-1 regret <= 15 %.", "",
             "| predictor | mean within-shape Spearman | MAPE | mean top-1 regret | mean "
             "top-10 regret |", "|---|---|---|---|---|"]
    for name, v in learned.get("held_out_groups", {}).items():
        per = list(v["groups"].values())
        top1 = float(np.mean([g["top1_regret"] for g in per]))
        top10 = float(np.mean([g["top10_regret"] for g in per]))
        lines.append(f"| {name} | {v['spearman_within_mean']:.3f} | {v['mape']:.1%} | "
                     f"{top1:.1%} | {top10:.1%} |")
    return lines


def write(s: CpuStudy, out: str | Path, command: str, levels: dict[str, str],
          environment: dict | None = None, learned: dict | None = None) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    images = plots(s, out, levels)
    summary = s.summary
    f = s.frame
    held = f[f.heldout]
    lines = [
        "# TileFlow on this CPU: model accuracy against real kernels", "",
        f"Regenerate: `{command}` (`--report-only` rebuilds this report from "
        "`measurements.csv` without measuring).", "",
        "Every dataflow below was turned into a C kernel that follows its tile tree, checked "
        "against a NumPy reference, timed (median of repeated calls after a warm-up, fixed "
        "thread count) and run once single-threaded under cachegrind with the caches of the "
        "host description. The model is evaluated for one core of the host description.", "",
        "Measured latency is the fastest of the repetitions: this machine is shared, and the "
        f"median carries other processes' load (median / fastest: median "
        f"{(f.measured_s / f.min_s).median():.2f}, up to {(f.measured_s / f.min_s).max():.1f}; "
        "both are in `measurements.csv` with the spread).", "",
        *_passes(environment),
        "## Targets", "", f"Targets: {TARGETS}.", "",
        "| figure | value | target | met |", "|---|---|---|---|",
    ]
    for (suffix, _), title in zip(VIEWS.items(), VIEW_TITLES, strict=True):
        for name, value in summary.get("traffic_r2" + suffix, {}).items():
            lines.append(f"| traffic R^2, {levels[name]}, {title} (Spearman "
                         f"{summary['traffic_spearman' + suffix][name]:.3f}) | {value:.3f} | "
                         f">= 0.97 | {'yes' if value >= 0.97 else 'no'} |")
    rho, err = summary["latency_spearman_heldout"], summary["latency_mape_heldout"]
    yes = {True: "yes", False: "no"}
    lines += [f"| held-out latency Spearman | {rho:.3f} | >= 0.9 | {yes[rho >= 0.9]} |",
              f"| held-out latency MAPE | {err:.1%} | <= 15 % | {yes[err <= 0.15]} |"]
    for w, r in summary["top1_regret"].items():
        lines.append(f"| top-1 regret, {w} (calibrated) | {r:.1%} | <= 5 % | "
                     f"{'yes' if r <= 0.05 else 'no'} |")
    for w, r in summary.get("top10_regret", {}).items():
        lines.append(f"| top-10 regret, {w} (calibrated) | {r:.1%} | <= 5 % | "
                     f"{'yes' if r <= 0.05 else 'no'} |")
    lines += ["", "## Points", "",
              "| workload | sizes | threads | kernels | baselines | near picks | measured "
              "latency (ms) |", "|---|---|---|---|---|---|---|"]
    for (w, shape, t), g in f.groupby(["workload", "shape", "threads"]):
        lines.append(f"| {w} | {shape} | {t} | {len(g)} | {(g.kind == 'baseline').sum()} | "
                     f"{(g.kind == 'near-pick').sum()} | {g.latency_s.min() * 1e3:.3f} - "
                     f"{g.latency_s.max() * 1e3:.3f} |")
    lines += ["", "Named baselines enter only where the model finds them valid on the one-core "
              "host description (most of the named fused dataflows, built for an "
              "accelerator's buffers, exceed one core's L1); the other dataflows are random "
              "valid trees, half of them (`near-pick`) one step from the model's best trees "
              "where the campaign asks for it (`near_picks`).", *_blas_section(summary),
              *_learned_section(learned), "", "## Latency", "", f"![latency]({images[0]})", "",
              f"Calibration fits on {len(f) - len(held)} rows and is tested on the other "
              f"{len(held)} (marked x in the plot): "
              + ("whole shapes held out (a seeded 30 % of each workload's shapes, every "
                 "thread count with them); regrets are per held-out shape and thread count, "
                 "averaged per workload." if summary.get("heldout") == "shapes" else
                 "a seeded 30 % of the rows held out (a workload measured on one shape "
                 "only: no shape can be held out)."), "",
              "| predictions | rows | MAPE | R^2 (y = x) | Spearman | Kendall |",
              "|---|---|---|---|---|---|"]
    for label, col, rows in (("tree model, uncalibrated", "model_s", f),
                             ("latency function, nominal parameters", "default_s", f),
                             ("calibrated, held-out rows", "calibrated_s", held),
                             ("calibrated, training rows", "calibrated_s", f[~f.heldout])):
        m = metrics.summary(rows[col], rows.latency_s)
        lines.append(f"| {label} | {m['rows']} | {m['mape']:.1%} | {m['r2']:.3f} | "
                     f"{m['spearman']:.3f} | {m['kendall']:.3f} |")
    lc = summary["learned_correction"]
    lines += ["", "Learned correction (optional): a ridge regression of the calibrated model's "
              "log error on the log of the counts the analysis computes, trained on the same "
              f"rows, gives held-out MAPE {lc['mape_heldout']:.1%} and Spearman "
              f"{lc['spearman_heldout']:.3f} against {err:.1%} and {rho:.3f} without it: "
              + ("it beats the calibrated model on both, yet leaves most of the error; the "
                 "figures above stay those of the calibrated analytical model."
                 if lc["beats_calibrated"] else
                 "it does not beat the calibrated model on both, so it is not used.")]
    lines += ["", "Within each workload (calibrated, every row):", "",
              "| workload | rows | Spearman | Kendall | top-1 regret | top-1 regret, "
              "uncalibrated |",
              "|---|---|---|---|---|---|"]
    within = metrics.within_groups(f, ["workload"], "calibrated_s", "latency_s")
    for r in within.itertuples():
        before = summary["top1_regret_uncalibrated"][r.workload]
        lines.append(f"| {r.workload} | {r.rows} | {r.spearman:.3f} | {r.kendall:.3f} | "
                     f"{r.top1_regret:.1%} | {before:.1%} |")
    lines += ["", "## Calibrated parameters", "",
              "| parameter | applies to | nominal | fitted | bounds | at a bound |",
              "|---|---|---|---|---|---|"]
    hits = {h["parameter"]: h["bound"] for h in s.fit.bound_hits}
    for p, v in zip(s.parameters.parameters, s.fit.values, strict=True):
        lines.append(f"| {p.name} | {p.applies_to} | {p.default:.4g} | {v:.4g} | "
                     f"[{p.lower:.3g}, {p.upper:.3g}] | {hits.get(p.name, '')} |")
    if hits:
        lines += ["", "Parameters at a bound are limited by the bound, not determined by the "
                  "data: " + ", ".join(f"{k} ({v})" for k, v in hits.items()) + "."]
    else:
        lines += ["", "No parameter ended at a bound."]
    if images[1:]:
        lines += ["", "## Traffic", "", f"![traffic]({images[1]})", "",
                  "Measured: cachegrind's read and write misses x line size for one call of "
                  "the kernel with everything it calls (the compiler's memset and memcpy, "
                  "malloc, libm): the whole driver's counts less those of the same driver "
                  "without the kernel call, after the driver has evicted the caches. "
                  "Cachegrind counts the lines brought into a cache (read misses and "
                  "write-allocate misses), not write-backs. Model: the words brought in the "
                  "same way (fills of the level below the boundary, plus one allocation per "
                  "element written back; a partial sum written back k times is filled again "
                  "k - 1 times) x 4 bytes. Tree view: the dataflow's own tree; cache view: "
                  "the tree the caches realise (see below)."]
        lines += _stale(f, environment)
    lines += _limits(s, levels)
    failures = out / "failures.csv"
    if failures.exists():
        failed = pd.read_csv(failures)
        lines += [f"* Kernels left out: {len(failed)} (dataflow, thread count) pairs could not "
                  "be generated, compiled or checked against the reference ("
                  + ", ".join(f"{stage}: {n}" for stage, n in
                              failed.groupby("stage").size().items())
                  + "; `failures.csv` names each with the error)."]
    retest = out / "retest.csv"
    if retest.exists():
        from tileflow.tables import Column, read_table

        time = Column("number", 0, strict=True)
        r = read_table(retest, {"min_s": time, "min_s_again": time})
        lines += [f"* Measurement noise: {len(r)} kernels timed again later give Spearman "
                  f"{metrics.spearman(r.min_s_again, r.min_s):.3f} and MAPE "
                  f"{metrics.mape(r.min_s_again, r.min_s):.1%} against their first "
                  "measurement (`retest.csv`): on this shared machine no model can be "
                  "checked more finely than that."]
    lines += ["", "## Worst-predicted held-out kernels", ""]
    for r in worst_cases(f).itertuples():
        lines += [f"* **{r.workload} / {r.dataflow}**: measured {r.latency_s * 1e3:.3f} ms, "
                  f"calibrated prediction {r.calibrated_s * 1e3:.3f} ms. "
                  f"{_explain(pd.Series(r._asdict()))}.",
                  "", "  ```", *["  " + x for x in _outline(r.tree)], "  ```"]
    if environment:
        lines += ["", "## Environment", "", *[f"* {k}: {v}" for k, v in environment.items()
                                              if k != "config"]]
    write_text(out / "report.md", "\n".join(lines) + "\n")
    write_text(out / "summary.json",
               json_text(summary, indent=2) + "\n")
    return out / "report.md"


