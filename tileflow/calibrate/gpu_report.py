"""The GPU campaign's report: measurements.csv (every measured dataflow with its
predictions), summary.json (metrics, fitted parameters, the machine's fingerprint) and
report.md (predicted against measured, held out by shape)."""

from __future__ import annotations

from pathlib import Path

from tileflow.calibrate.gpu_results import MAX_REL_ERR, TF32_REL_ERR, GpuStudy
from tileflow.outputs import check_output_file, json_text, write_csv, write_text_atomic


def _fmt(v, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "n/a"
    return f"{v:.1%}" if pct else f"{v:.3f}"


def check_outputs(folder: Path, learn: bool = False) -> None:
    """Every file the report writes (and the learned model's) may be written: checked
    before any is, so that a refusal leaves the folder as it was."""
    names = ["measurements.csv", "summary.json", "report.md"]
    names += ["learned.json", "learned-model.pkl"] if learn else []
    for name in names:
        check_output_file(folder / name, (Path(name).suffix,), "--out")


def write(study: GpuStudy, folder: Path, command: str, fingerprint: dict, counts: dict,
          notes: list[str], sections: list[str] = ()) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    check_outputs(folder)
    columns = [c for c in study.frame.columns if c != "tree"] + ["tree"]
    write_csv(study.frame[columns], folder / "measurements.csv")
    summary = {**study.summary, "machine": fingerprint, "counts": counts, "notes": notes,
               "measured": "median of CUDA-event timings of each dataflow's launches"}
    write_text_atomic(folder / "summary.json", json_text(summary, indent=2, default=str)
                      + "\n")
    s, f = study.summary, study.frame
    c = s.get("cpu_form", {})
    lines = [
        "# GPU campaign: the model against measured CUDA kernels", "",
        f"Command: `{command}`", "",
        f"Machine: {fingerprint.get('device')} ({fingerprint.get('sm_count')} SMs, L2 "
        f"{int(fingerprint.get('l2_bytes') or 0) / 2**20:.0f} MiB, compute capability "
        f"{fingerprint.get('cc')}), driver {fingerprint.get('driver_version')}, runtime "
        f"{fingerprint.get('runtime_version')}; kernels built with "
        f"{fingerprint.get('nvcc')} ({fingerprint.get('nvcc_flags')}).", "",
        f"Dataflows: {counts['prepared']} prepared, {counts['reported']} reported, "
        f"{counts['ran']} ran, {counts['correct']} correct (max relative error <= "
        f"{MAX_REL_ERR:g}, {TF32_REL_ERR:g} on tensor cores) and used below; "
        f"{counts['wrong_results']} with wrong results; "
        f"not run: {counts['not_run'] or 'none'}; missing from the results: "
        f"{counts['missing_from_results']}."
        + _retest_words(s.get("retest", {}), counts, s.get("runs", [])), "",
        "Each time is the median of CUDA-event timings of the dataflow's whole launch "
        "sequence after a warm-up run. The GPU kernels' latency form "
        "(`tileflow.calibrate.gpu_latency`: per launch, per serial statement of one thread "
        "over the waves of blocks, per warp-instruction of an SM, per global word of one "
        "thread, all counted from the tree and its generated kernels before they run) and, "
        "for comparison, the CPU path's form (`tileflow.calibrate.latency`) are fitted with "
        f"each workload's shape held out in turn ({s['heldout']}): every held-out prediction "
        "comes from parameters that never saw that shape.", "",
        f"Input tiles loaded into shared memory: {s['staged_tiles']['tiles']} in "
        f"{s['staged_tiles']['dataflows']} of the dataflows. Contractions on tensor cores "
        f"(TF32 WMMA): {s.get('tensor_cores', {}).get('operators', 0)} in "
        f"{s.get('tensor_cores', {}).get('dataflows', 0)} of the dataflows.", "",
        "## Latency: GPU form against the CPU path's form (held out by shape)", "",
        "| metric | GPU form | CPU form |", "|---|---|---|",
        f"| Spearman (all rows) | {_fmt(s['latency_spearman_heldout'])} | "
        f"{_fmt(c.get('latency_spearman_heldout'))} |",
        f"| MAPE | {_fmt(s['latency_mape_heldout'], True)} | "
        f"{_fmt(c.get('latency_mape_heldout'), True)} |",
        f"| fit on all rows, rms log error | {_fmt(s['fit_rms_log_error_all'])} | "
        f"{_fmt(c.get('fit_rms_log_error_all'))} |"]
    for key in s["best_measured"]:
        lines.append(
            f"| {key}: Spearman / top-1 / top-10 regret | "
            f"{_fmt(s['latency_spearman_within_shape_heldout'].get(key))} / "
            f"{_fmt(s['top1_regret'].get(key), True)} / "
            f"{_fmt(s['top10_regret'].get(key), True)} | "
            f"{_fmt(c.get('latency_spearman_within_shape_heldout', {}).get(key))} / "
            f"{_fmt(c.get('top1_regret', {}).get(key), True)} / "
            f"{_fmt(c.get('top10_regret', {}).get(key), True)} |")
    lines += [
        "", "## Latency (GPU form, held out by shape)", "",
        "| metric | value |", "|---|---|",
        f"| uncalibrated model Spearman | {_fmt(s['uncalibrated']['model_spearman'])} |",
        f"| uncalibrated model MAPE | {_fmt(s['uncalibrated']['model_mape'], True)} |", "",
        "| workload shape | rows | held-out Spearman | top-1 regret | top-10 regret | "
        "uncalibrated top-1 regret | best measured (GFLOP/s) |", "|---|---|---|---|---|---|---|"]
    for key, best in s["best_measured"].items():
        rows = int((f.workload + " " + f["shape"] == key).sum())
        lines.append(
            f"| {key} | {rows} | {_fmt(s['latency_spearman_within_shape_heldout'].get(key))} "
            f"| {_fmt(s['top1_regret'].get(key), True)} "
            f"| {_fmt(s['top10_regret'].get(key), True)} "
            f"| {_fmt(s['uncalibrated']['top1_regret'].get(key), True)} "
            f"| {best['dataflow']} ({best['kind']}): {best['median_s'] * 1e3:.3f} ms, "
            f"{best['gflops']:.0f} |")
    lines += _vendor_lines(s.get("kernel_vs_vendor", {}))
    lines += list(sections)
    lines += ["", "## Traffic (ncu)", ""]
    if s["traffic_r2"]:
        lines += ["| view | points | R^2 (y = x) | Spearman | median measured / predicted |",
                  "|---|---|---|---|---|"]
        for name in s["traffic_r2"]:
            lines.append(f"| {name} | {s['traffic_points'][name]} | "
                         f"{_fmt(s['traffic_r2'][name])} | {_fmt(s['traffic_spearman'][name])} "
                         f"| {_fmt(s['traffic_ratio_median'].get(name))} |")
        lines += ["", "Measured DRAM is `dram__bytes_read.sum + dram__bytes_write.sum`, "
                  "measured L2 `lts__t_bytes.sum` (ncu flushes the caches before each kernel). "
                  "`dram`: the tree's words across HBM-L2 x 4 bytes (float32); "
                  "`dram_compulsory`: every input read once and every output written once; "
                  "`l2`: the tree's words across L2-SMEM x 4 bytes; `l2_global_accesses`: "
                  "every global operand access of the kernels' statements x 4 bytes (before "
                  "L1 catches the reuse). The view whose median ratio is near 1 with the "
                  "higher R^2 is the one the GPU follows: where the working set fits in L2, "
                  "DRAM sees the compulsory traffic, not the tree's HBM-L2 words."]
    else:
        lines.append("No traffic measurements (ncu was not available or measured nothing).")
    for title, params, hits in (("GPU form", s["parameters"], s["bound_hits"]),
                                ("CPU path's form", c.get("parameters", {}),
                                 c.get("bound_hits", []))):
        lines += ["", f"## Fitted parameters, {title} (all rows)", "",
                  "| parameter | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4g} |" for k, v in params.items()]
        if hits:
            lines += ["", f"At a bound: {', '.join(hits)}."]
    lines += ["", "## Predicted against measured (held out), fastest 15 per workload", "",
              "| workload | shape | dataflow | kind | measured ms | held-out ms | model ms |",
              "|---|---|---|---|---|---|---|"]
    for _, g in f.sort_values("latency_s").groupby("workload", sort=True):
        for r in g.head(15).itertuples():
            lines.append(f"| {r.workload} | {r.shape} | {r.dataflow} | {r.kind} | "
                         f"{r.latency_s * 1e3:.4f} | {r.calibrated_s * 1e3:.4f} | "
                         f"{r.model_s * 1e3:.4f} |")
    if notes:
        lines += ["", "Notes: " + "; ".join(notes) + "."]
    return write_text_atomic(folder / "report.md", "\n".join(lines) + "\n")



def _vendor_lines(table: dict) -> list[str]:
    """The best generated kernel of each shape against the vendor libraries (PyTorch on
    cuBLAS), float32 and TF32."""
    lines = ["", "## Best generated kernel against the vendor libraries", ""]
    if not table:
        return lines + ["No vendor times (the GPU machine's python3 had no PyTorch, or "
                        "vendor.py did not run)."]
    lines += ["| workload shape | best float32 kernel ms | vendor fp32 ms (library) | ratio | "
              "best kernel ms (any precision) | vendor tf32 ms | ratio |",
              "|---|---|---|---|---|---|---|"]
    for key, e in table.items():
        fp32, tf32 = e.get("vendor_fp32_s"), e.get("vendor_tf32_s")
        best32 = e.get("best_fp32_kernel_s")
        lines.append(
            f"| {key} | " + (f"{best32 * 1e3:.4f}" if best32 else "n/a")
            + " | " + (f"{fp32 * 1e3:.4f} ({e.get('vendor_fp32_library')})" if fp32 else "n/a")
            + f" | {_fmt(e.get('ratio_fp32'))} | {e['best_kernel_s'] * 1e3:.4f} "
            f"({e['best_kernel']}) | " + (f"{tf32 * 1e3:.4f}" if tf32 else "n/a")
            + f" | {_fmt(e.get('ratio_tf32'))} |")
    lines += ["", "Vendor times: the fastest of PyTorch's batched products on cuBLAS (with its "
              "softmax for attention) and its scaled_dot_product_attention, median of "
              "CUDA-event timings after three warm-ups, on the same shapes and GPU; fp32 "
              "with TF32 off, tf32 with it on. Ratios are kernel over vendor (below 1: the "
              "generated kernel is faster): the best float32 kernel against float32, the "
              "best kernel of any precision (TF32 tensor cores included) against TF32."]
    return lines


def _retest_words(retest: dict, counts: dict, runs: list[str]) -> str:
    """The runs read and how far a dataflow measured in two of them moved."""
    if len(runs) < 2:
        return ""
    text = f" Runs: {', '.join(f'`{r}`' for r in runs)}."
    if retest.get("dataflows"):
        text += (f" {retest['dataflows']} dataflows were measured in more than one run (kept "
                 f"once; {counts.get('repeated_across_runs', 0)} repeated rows left out): "
                 f"their medians differ by {retest['median_spread']:.2%} at the median and "
                 f"{retest['max_spread']:.1%} at most, the noise under any model's error.")
    return text
