"""The RTL accuracy report: figures, plots and summary.json, written by `tileflow validate rtl`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tileflow.outputs import json_text, save_figure, write_text_atomic
from tileflow.provenance import MODEL_VERSION
from tileflow.rtl.evidence import (
    before_after,
    buffer_register_remainder,
    figures,
    missing_section,
)
from tileflow.rtl.ranking import rank_by_shape
from tileflow.rtl.study import (
    PARAMETERS,
    TRANSFERS,
    SetResult,
    mape,
    r2_identity,
)
from tileflow.rtl.targets import since_start, status, targets_section

SHAPES = {"gemm": ["M", "N", "K"], "fused": ["M", "L", "K", "N"]}
TILES = {"gemm": ["tile_M", "tile_N", "tile_K"], "fused": ["tile_M", "tile_K", "tile_L"]}
TITLES = {"gemm": "gemm_1152 (one GEMM, 1,152 mappings)",
          "fused": "gemm_chain_131 (two fused GEMMs, 131 dataflows)"}


def summary(results: dict[str, SetResult]) -> dict:
    out: dict = {}
    for kind, res in results.items():
        f = res.frame
        out[f"{kind}_mape"] = mape(f.predicted.to_numpy(), f.rtl_cycles.to_numpy())
        out[f"{kind}_r2"] = r2_identity(f.predicted.to_numpy(), f.rtl_cycles.to_numpy())
        out[f"{kind}_mape_calibrated_heldout"] = res.heldout_mape
        out[f"{kind}_r2_calibrated_heldout"] = r2_identity(f.calibrated_heldout.to_numpy(),
                                                           f.rtl_cycles.to_numpy())
        out[f"{kind}_max_abs_error"] = float(f.error.abs().max())
        out[f"{kind}_rows"] = len(f)
        out[f"{kind}_calibrated_dram_parameters"] = [
            dict(zip(PARAMETERS, values, strict=True)) for values in res.params_by_half]
        ranks = rank_by_shape(f, SHAPES[kind])
        out[f"{kind}_spearman_within_shape_mean"] = float(ranks.spearman.dropna().mean())
        regret = ranks.regret.dropna()
        out[f"{kind}_top1_regret_mean"] = float(regret.mean())
        out[f"{kind}_top1_regret_max"] = float(regret.max())
        out[f"{kind}_ranked_shapes"] = len(regret)
        out[f"{kind}_calibrated_heldout"] = figures(f, SHAPES[kind], "calibrated_heldout")
        out[f"{kind}_top1_regret_calibrated_mean"] = \
            out[f"{kind}_calibrated_heldout"]["top1_regret_mean"]
        for other in OTHER_OVERLAPS:
            if other in f:
                out[f"{kind}_{_overlap_key(other)}"] = figures(f, SHAPES[kind], other)
        if "predicted_before" in f:
            out[f"{kind}_before"] = figures(f, SHAPES[kind], "predicted_before")
        out[f"{kind}_bound_hits"] = [f"{h['parameter']} ({h['bound']}, half {h['half']})"
                                     for h in res.bound_hits]
    out["model_version"] = MODEL_VERSION
    out["bound_hits"] = [f"{kind}: {hit}" for kind in results
                         for hit in out[f"{kind}_bound_hits"]]
    fused = results["fused"].frame
    exact = np.ones(len(fused), dtype=bool)
    for column in ("dram_to_buffer", "buffer_to_dram"):
        exact &= np.isclose(fused[f"{column}_predicted"], fused[f"{column}_words"])
        out[f"fused_{column}_mape"] = mape(fused[f"{column}_predicted"].to_numpy(),
                                          fused[f"{column}_words"].to_numpy())
    for column in ("buffer_to_reg", "reg_to_buffer"):
        out[f"fused_{column}_mape"] = mape(fused[f"{column}_predicted"].to_numpy(),
                                          fused[f"{column}_words"].to_numpy())
    out["fused_dram_exact_rows"] = int(exact.sum())
    if "buffer_to_reg_predicted_before" in fused:
        exact = np.ones(len(fused), dtype=bool)
        for column in TRANSFERS:
            predicted = fused[f"{column}_predicted_before"].to_numpy()
            out[f"fused_{column}_mape_before"] = mape(predicted,
                                                      fused[f"{column}_words"].to_numpy())
            if column.startswith("dram") or column.endswith("dram"):
                exact &= np.isclose(predicted, fused[f"{column}_words"])
        out["fused_dram_exact_rows_before"] = int(exact.sum())
    out["fused_buffer_register_remainder"] = buffer_register_remainder(fused)
    out["targets"] = status(out)
    return out


OTHER_OVERLAPS = ("predicted_perfect", "predicted_fill_drain", "predicted_lockstep")


def _overlap_key(column: str) -> str:
    """summary.json key of a prediction column: predicted_perfect -> overlap_perfect."""
    return "overlap_" + column.removeprefix("predicted_")


def _overlap_table(s: dict) -> list[str]:
    """The uncalibrated figures under the other overlap convention, beside the table's."""
    rows = []
    for other in OTHER_OVERLAPS:
        if f"gemm_{_overlap_key(other)}" not in s:
            continue
        g, f = s[f"gemm_{_overlap_key(other)}"], s[f"fused_{_overlap_key(other)}"]
        name = other.removeprefix("predicted_").replace("_", "-")
        rows += [
            f"| `--overlap {name}` | {g['mape']:.2%} | {g['r2']:.4f} | "
            f"{g['spearman_within_shape_mean']:.3f} | {g['top1_regret_mean']:.2%} "
            f"({g['top1_regret_max']:.2%}) | {f['mape']:.2%} | {f['r2']:.4f} | "
            f"{f['spearman_within_shape_mean']:.3f} | {f['top1_regret_mean']:.2%} "
            f"({f['top1_regret_max']:.2%}) |"]
    if not rows:
        return []
    return [
        "The same uncalibrated figures under the other overlap conventions "
        "(docs/mechanisms.md): GEMM MAPE, R^2, Spearman, top-1 regret mean (max), then the"
        " same for the fused set.", "",
        "| convention | GEMM MAPE | R^2 | Spearman | regret | fused MAPE | R^2 | Spearman "
        "| regret |", "|---|---|---|---|---|---|---|---|---|",
        f"| this report's | {s['gemm_mape']:.2%} | {s['gemm_r2']:.4f} | "
        f"{s['gemm_spearman_within_shape_mean']:.3f} | {s['gemm_top1_regret_mean']:.2%} "
        f"({s['gemm_top1_regret_max']:.2%}) | {s['fused_mape']:.2%} | {s['fused_r2']:.4f} | "
        f"{s['fused_spearman_within_shape_mean']:.3f} | {s['fused_top1_regret_mean']:.2%} "
        f"({s['fused_top1_regret_max']:.2%}) |", *rows, ""]


def _before_after(s: dict) -> list[str]:
    table = before_after(s)
    if not table:
        return []
    return ["## Partial sums read at every pass: before and after", "",
            "`first_touch_fills: true` on the registers of both accelerators (the README's "
            "reduction \"combines across a PE row\", a chain that starts from the partial "
            "sum it reads from the buffer). Before: the same rows without it.", "",
            *table, ""]


def _plots(results: dict[str, SetResult], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    for ax, (kind, res) in zip(axes, results.items(), strict=True):
        f = res.frame
        ax.loglog(f.rtl_cycles, f.predicted, ".", alpha=0.6, label="model, uncalibrated")
        ax.loglog(f.rtl_cycles, f.calibrated_heldout, "x", alpha=0.5, markersize=4,
                  label="calibrated on the other half")
        lo, hi = f.rtl_cycles.min() * 0.8, f.rtl_cycles.max() * 1.25
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=1, label="y = x")
        ax.set_xlabel("measured RTL cycles")
        ax.set_ylabel("predicted cycles")
        ax.set_title(TITLES[kind], fontsize=10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out / "cycles.png", flag="--out", dpi=100)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, (kind, res) in zip(axes, results.items(), strict=True):
        f = res.frame
        bins = np.linspace(-0.4, 0.4, 41)
        ax.hist(100 * f.error.clip(-0.4, 0.4), bins=100 * bins, alpha=0.6, label="uncalibrated")
        ax.hist(100 * f.error_calibrated.clip(-0.4, 0.4), bins=100 * bins, alpha=0.6,
                label="calibrated, held out")
        ax.set_xlabel("cycle error (%), clipped to +-40")
        ax.set_title(TITLES[kind], fontsize=10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out / "error-distribution.png", flag="--out", dpi=100)
    plt.close(fig)

    fig, axes = plt.subplots(2, 3, figsize=(14, 7))
    for row, (kind, res) in enumerate(results.items()):
        f = res.frame
        for ax, column in zip(axes[row], TILES[kind], strict=True):
            values = sorted(f[column].unique())
            ax.boxplot([100 * f.error[f[column] == v] for v in values], tick_labels=values)
            ax.axhline(0, color="k", linewidth=0.8)
            ax.set_xlabel(column)
            ax.set_ylabel(f"{kind} cycle error (%)")
            ax.tick_params(axis="x", rotation=90, labelsize=7)
    fig.tight_layout()
    save_figure(fig, out / "error-vs-tiling.png", flag="--out", dpi=100)
    plt.close(fig)

    fused = results["fused"].frame
    fig, axes = plt.subplots(1, 4, figsize=(16, 4))
    for ax, column in zip(axes, TRANSFERS, strict=True):
        ax.loglog(fused[f"{column}_words"], fused[f"{column}_predicted"], ".")
        lo = fused[f"{column}_words"].min() * 0.8
        hi = fused[f"{column}_words"].max() * 1.25
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=1)
        ax.set_title(f"{column} ({TRANSFERS[column]})", fontsize=9)
        ax.set_xlabel("measured words")
        ax.set_ylabel("predicted words")
    fig.tight_layout()
    save_figure(fig, out / "transfers.png", flag="--out", dpi=100)
    plt.close(fig)


def _worst(frame: pd.DataFrame, kind: str, column: str, n: int = 6) -> list[str]:
    cols = SHAPES[kind] + TILES[kind]
    worst = frame.reindex(frame[column].abs().sort_values(ascending=False).index).head(n)
    lines = ["| " + " | ".join(cols) + " | measured | predicted | error | model's bottleneck "
             "| why |", "|" + "---|" * (len(cols) + 5)]
    for r in worst.itertuples():
        predicted = r.predicted if column == "error" else r.calibrated_heldout
        error = getattr(r, column)
        lines.append("| " + " | ".join(str(getattr(r, c)) for c in cols)
                     + f" | {r.rtl_cycles:,} | {predicted:,.0f} | {error:+.1%} "
                     f"| {r.bottleneck} "
                     f"| {_why(r.bottleneck_kind, r.bottleneck_level, error)} |")
    return lines


def _why(kind: str, level: str, error: float) -> str:
    """The mechanism behind a large error, from what bounds the row in the model (the kind
    and level of its bottleneck record)."""
    if (kind, level) == ("write", "DRAM") and error > 0:
        return "write-back bound: the README's write bandwidth is below what the RTL sustains"
    if (kind, level) == ("read", "DRAM") and error < 0:
        return ("load bound: per-step request overhead and a lower effective read bandwidth "
                "than the README's")
    if (kind, level) == ("read", "Buffer") and error < 0:
        return ("buffer-read bound in the model; the RTL pays per DRAM-level step, and a "
                "small tile_L makes many (see the mechanisms still missing)")
    if error < 0:
        return "write-backs partly serialised with the next tile's compute in the RTL"
    return "overlap the RTL does not achieve in this row"


def write(results: dict[str, SetResult], out_dir: str | Path, command: str) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    numbers = summary(results)
    write_text_atomic(out / "summary.json", json_text(numbers, indent=2) + "\n", "--out")
    for kind, res in results.items():
        write_text_atomic(out / f"predictions-{kind}.csv", res.frame.to_csv(index=False),
                          "--out")
    _plots(results, out)
    s = numbers
    gemm, fused = results["gemm"].frame, results["fused"].frame
    rho_f = rank_by_shape(fused, SHAPES["fused"])
    lines = [
        "# Model accuracy against RTL measurements of a 16 x 16 systolic accelerator",
        "",
        f"Regenerate with `{command}` (a few seconds). Data: `../shared/datasets/rtl-systolic/`"
        " (read in place, not copied). Accelerators: `accelerators/rtl-systolic-gemm.yaml` and"
        " `accelerators/rtl-systolic-chain.yaml` with the parameters of the dataset's README;"
        " mappings: `tileflow/rtl/mappings.py` (examples in `dataflows/rtl-*.yaml`).",
        "",
        "## Figures",
        "",
        "| | GEMM set (1,152) | fused set (131) | target |",
        "|---|---|---|---|",
        f"| cycle MAPE, uncalibrated | {s['gemm_mape']:.2%} | {s['fused_mape']:.2%} "
        "| < 10 % / < 2.5 % (published fused: 5.4 %) |",
        f"| R^2 on y = x, uncalibrated | {s['gemm_r2']:.4f} | {s['fused_r2']:.4f} | >= 0.99 |",
        f"| cycle MAPE, calibrated on one half, tested on the other | "
        f"{s['gemm_mape_calibrated_heldout']:.2%} | {s['fused_mape_calibrated_heldout']:.2%} | |",
        f"| R^2 on y = x, calibrated (held out) | {s['gemm_r2_calibrated_heldout']:.4f} | "
        f"{s['fused_r2_calibrated_heldout']:.4f} | |",
        f"| largest cycle error, uncalibrated | {s['gemm_max_abs_error']:.1%} | "
        f"{s['fused_max_abs_error']:.1%} | |",
        f"| Spearman rank correlation within a shape (mean over {s['gemm_ranked_shapes']} / "
        f"{s['fused_ranked_shapes']} shapes) | {s['gemm_spearman_within_shape_mean']:.3f} | "
        f"{s['fused_spearman_within_shape_mean']:.3f} | >= 0.80 / >= 0.90 |",
        f"| top-1 regret within a shape, mean | {s['gemm_top1_regret_mean']:.2%} | "
        f"{s['fused_top1_regret_mean']:.2%} | <= 3 % / <= 1.5 % |",
        f"| top-1 regret within a shape, max | {s['gemm_top1_regret_max']:.2%} | "
        f"{s['fused_top1_regret_max']:.2%} | |",
        f"| rows with DRAM traffic equal to the measurement | | "
        f"{s['fused_dram_exact_rows']} / {len(fused)} | all |",
        "",
        *_overlap_table(s),
        *targets_section(s),
        *since_start(s),
        *_before_after(s),
        "Calibration (`tileflow.calibrate`) fits four DRAM timing parameters (read and write"
        " words per cycle, cycles of overhead per DRAM-level step, latency before the first"
        " word) within declared physical bounds (rates 0.5-64 words per cycle, overhead"
        " 0-1,000 cycles, latency 0-10,000 cycles) by least squares on the log of predicted"
        " over measured cycles of a random half of the rows, and is tested on the other half,"
        " then the reverse; the table pools both held-out halves. Fitted values:",
        "",
        "| set | half | " + " | ".join(PARAMETERS) + " |",
        "|---|---|" + "---|" * len(PARAMETERS),
    ]
    for kind, res in results.items():
        for half, values in enumerate(res.params_by_half, 1):
            lines.append(f"| {kind} | {half} | " + " | ".join(f"{v:.3g}" for v in values) + " |")
    hits = s["bound_hits"]
    lines += ["", "Parameters that ended at a bound (the data cannot pin them within the "
              "physical range; the fit is flat there): " + ("; ".join(hits) if hits else
                                                            "none") + "."]
    loose = [f"{kind}: {name} ({a:.3g} and {b:.3g})" for kind, res in results.items()
             for name, a, b in zip(PARAMETERS, *res.params_by_half, strict=True)
             if max(a, b) > 1.25 * min(a, b) and max(a, b) > 1e-6]
    lines += ["", "Parameters whose two halves disagree by more than 25 % (inside the bounds "
              "but not determined by the data): " + ("; ".join(loose) or "none") + "."]
    lines += [
        "",
        "![predicted vs measured cycles](cycles.png)",
        "",
        "![error distribution](error-distribution.png)",
        "",
        "![error against each tiling parameter](error-vs-tiling.png)",
        "",
        "## Data movement (fused set)",
        "",
        "| transfer | model counts | MAPE |",
        "|---|---|---|",
    ]
    for column, what in TRANSFERS.items():
        lines.append(f"| {column} | {what} | {s[f'fused_{column}_mape']:.2%} |")
    lines += [
        "",
        "![predicted vs measured words](transfers.png)",
        "",
        "Within each fused shape: Spearman rank correlation of predicted and measured cycles,"
        " and top-1 regret (measured cycles of the model's fastest pick over the measured"
        " fastest, minus one). Shapes count in the means when they have at least 3 rows and"
        " more than one measured value.",
        "",
        "| M | L | K | N | rows | Spearman | top-1 regret |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rho_f.itertuples():
        rho = "-" if pd.isna(r.spearman) else f"{r.spearman:.3f}"
        regret = "-" if pd.isna(r.regret) else f"{r.regret:.2%}"
        lines.append(f"| {r.M} | {r.L} | {r.K} | {r.N} | {r.rows} | {rho} | {regret} |")
    lines += ["", "## Worst cases", "", "GEMM set, uncalibrated:", ""]
    lines += _worst(gemm, "gemm", "error")
    lines += ["", "GEMM set, calibrated (held out):", ""]
    lines += _worst(gemm, "gemm", "error_calibrated")
    lines += ["", "Fused set, uncalibrated:", ""]
    lines += _worst(fused, "fused", "error")
    lines += ["", *missing_section(gemm, fused, s, SHAPES, TILES)]
    lines += EXPLANATION.splitlines()
    path = out / "report.md"
    write_text_atomic(path, "\n".join(lines) + "\n", "--out")
    return path


EXPLANATION = """
## What the model does here, and why the worst cases are wrong

* **DRAM traffic is exact** on every fused row: A once, B and D once per row block of M,
  E written once, C never leaving the buffer (its home) where its row block (tile_M x L)
  stays between the two GEMMs. This needed no special case: the row-block loop is the
  common parent, the two GEMMs are Seq siblings (Seq drops A and B, which the second GEMM
  does not use, between row blocks), and C's home is the buffer.
* **GEMM set: the programs reload operand tiles at every DRAM step.** The dataset's README
  says so; the dataflow says it with `no_reuse: [A, B]` on the DRAM-level tile (the model's
  general semantics stay: without it, A and B would be reused across steps whose loop does
  not index them).
* **Steps in lock step** (the accelerators' `overlap: lockstep`; `--overlap perfect`
  gives the published perfect overlap and `--overlap fill-drain` the tile-total pipeline,
  figures in the convention table): the programs run their loop nests step by step, each
  transfer on the step where its slice changes, a step's loads, compute and write-backs
  overlapping those of its neighbours, and the first load and the last write-back of the
  whole run exposed once per run (the RTL keeps its pipeline running across row blocks).
* **Uncalibrated GEMM error (worst rows).** Two mechanisms, both visible in the worst rows
  and in the calibrated parameters (table above): (1) rows bound by C's write-back are
  over-predicted (up to about +36 %): the README's DRAM write bandwidth of 2.9 words/cycle
  is below what the RTL sustains when write-bound (calibration finds more than 4); (2) rows
  bound by operand loads are under-predicted: every DRAM step costs some cycles of request
  overhead, and the read bandwidth is about 4.0 rather than 4.3 words/cycle. The README
  gives neither, so the uncalibrated model cannot have them; calibration recovers them
  (held-out figures above). Lock step hides C's write-back behind the one step that shares
  its slot, which is how much of it the RTL overlaps; fully serialising it instead
  (`buffering: {C: 1}` on the GEMM buffer tile, measured under fill-drain) makes the GEMM
  figures worse (MAPE 15.1 %, R^2 0.956, Spearman 0.52, regret 10.5 % mean).
* **The other mechanisms of this round and the last** change nothing on these rows, and
  are kept because they are right: sibling sharing, bypass and summed output indices (the
  README gives one element of A, B and C per register, and the two GEMMs of a chain run as
  `Seq` siblings reading different inputs), halo caching (no consumer reads through a
  window). Partial sums read at every pass (`first_touch_fills`) add the same buffer reads
  to every row of a shape (M L + M N on the fused set): they matter only to rows bound by
  buffer reads.
"""
