"""The published TileFlow comparison (the TileFlow paper's evaluation), re-run on our model: every
baseline for G1-G12 on Edge and Cloud and C1-C8 on Cloud, as a table of results."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
from tqdm import tqdm

from tileflow.cost import evaluate
from tileflow.dataflows import baselines_for
from tileflow.explore.tilesearch.fit import fit_baseline
from tileflow.outputs import save_figure, write_text_atomic
from tileflow.provenance import MODEL_VERSION
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload

ATTENTION = [f"G{i}" for i in range(1, 13)]
CONV = [f"C{i}" for i in range(1, 9)]

# (accelerator, workload presets): the published study, plus the variants that explain it
STUDIES = [
    ("edge", ATTENTION),
    ("cloud", ATTENTION),
    ("cloud", CONV),
    ("edge-softmax-on-array", ATTENTION),
    ("cloud-l1-per-subcore", ATTENTION),
    ("cloud-l1-per-subcore", CONV),
]

# Published speed-ups over Layerwise and DRAM-traffic reductions (the TileFlow paper).
# "searched" is what the published explorer found; tileflow-pipe is its shape with factors
# fitted for the lowest latency (`tileflow explore` searches further).
PUBLISHED_SPEEDUP = {
    ("edge", "attention"): {"uni-pipe": 1.62, "flat-hgran": 3.59, "flat-rgran": 2.89,
                            "chimera": 2.91, "tileflow-pipe": 6.65},
    ("cloud", "attention"): {"uni-pipe": 1.37, "flat-hgran": 12.63, "flat-rgran": 12.63,
                             "chimera": 12.63, "tileflow-pipe": 12.63},
    ("cloud", "conv-chain"): {"fused-layer": 1.01, "isos": None},
}
PUBLISHED_DRAM_REDUCTION = {
    ("edge", "attention"): {"uni-pipe": 0.904, "flat-hgran": 0.904, "flat-rgran": 0.815,
                            "chimera": 0.751, "tileflow-pipe": 0.871},
    ("cloud", "attention"): {"uni-pipe": 0.866, "flat-hgran": 0.866, "flat-rgran": 0.866,
                             "chimera": 0.866, "tileflow-pipe": 0.866},
    ("cloud", "conv-chain"): {"fused-layer": 0.73, "isos": None},
}


def run_studies(studies: Iterable[tuple[str, list[str]]] = STUDIES,
                progress: bool = True) -> pd.DataFrame:
    """One row per (accelerator, shape, dataflow) with the model's headline numbers."""
    jobs = [(arch, shape) for arch, shapes in studies for shape in shapes]
    rows = []
    for arch_name, shape in tqdm(jobs, disable=not progress, desc="reference experiments"):
        arch = load_arch(arch_name)
        workload = load_workload(shape)
        for name in baselines_for(workload):
            r = evaluate(workload, arch, fit_baseline(name, workload, arch))
            fp = {f.level: f.words for f in r.footprints}
            rows.append({
                "arch": arch_name, "workload": workload.name, "preset": shape, "dataflow": name,
                "valid": r.valid, "cycles": r.cycles, "dram_words": r.dram_words,
                "energy_pj": r.energy_pj, "utilization": r.utilization,
                "onchip_footprint_words": fp.get(arch.levels[-2].name, 0.0)
                if len(arch.levels) > 1 else 0.0,
                "l1_reads": r.level_reads(arch.levels[-2].name),
                "l1_updates": sum(m.update for m in r.traffic.get(arch.levels[-2].name,
                                                                  {}).values()),
                "l1_fills": sum(m.fill for m in r.traffic.get(arch.levels[-2].name,
                                                              {}).values()),
                "bottleneck": r.bottleneck.message,
            })
    frame = pd.DataFrame(rows)
    base = frame[frame.dataflow == "layerwise"].set_index(["arch", "preset"])
    key = list(zip(frame["arch"], frame["preset"], strict=True))
    frame["speedup"] = [base.loc[k, "cycles"] / c for k, c in zip(key, frame.cycles,
                                                                  strict=True)]
    frame["dram_reduction"] = [1 - d / base.loc[k, "dram_words"]
                               for k, d in zip(key, frame.dram_words, strict=True)]
    frame["energy_reduction"] = [1 - e / base.loc[k, "energy_pj"]
                                 for k, e in zip(key, frame.energy_pj, strict=True)]
    return frame


def _summary(frame: pd.DataFrame) -> pd.DataFrame:
    from scipy.stats import gmean

    return frame.groupby(["arch", "workload", "dataflow"], sort=False).agg(
        speedup=("speedup", gmean), dram_reduction=("dram_reduction", "mean"),
        energy_reduction=("energy_reduction", "mean"), valid=("valid", "sum"),
        shapes=("valid", "size"), footprint=("onchip_footprint_words", "mean"),
    ).reset_index()


def _fmt(x, pattern: str) -> str:
    return "-" if x is None or pd.isna(x) else pattern.format(x)


def _table(summary: pd.DataFrame, arch: str, workload: str) -> list[str]:
    rows = summary[(summary.arch == arch) & (summary.workload == workload)]
    published = PUBLISHED_SPEEDUP.get((arch, workload), {})
    dram = PUBLISHED_DRAM_REDUCTION.get((arch, workload), {})
    hgran = rows[rows.dataflow == "flat-hgran"].footprint
    out = ["| dataflow | speed-up (geomean) | published | DRAM reduction (mean) | published "
           "| energy reduction | valid shapes | on-chip footprint vs FLAT-HGran |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows.itertuples():
        rel = r.footprint / hgran.iloc[0] if len(hgran) and hgran.iloc[0] else None
        out.append(
            f"| {r.dataflow} | {r.speedup:.2f}x | {_fmt(published.get(r.dataflow), '{:.2f}x')} "
            f"| {r.dram_reduction:.1%} | {_fmt(dram.get(r.dataflow), '{:.1%}')} "
            f"| {r.energy_reduction:.1%} | {r.valid}/{r.shapes} | {_fmt(rel, '{:.1%}')} |")
    return out


def _plot(frame: pd.DataFrame, arch: str, workload: str, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = frame[(frame.arch == arch) & (frame.workload == workload)]
    pivot = rows.pivot(index="preset", columns="dataflow", values="speedup")
    pivot = pivot.reindex(sorted(pivot.index, key=lambda s: int(s[1:])))
    pivot = pivot[[d for d in rows.dataflow.unique()]]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    pivot.plot.bar(ax=axes[0], width=0.8)
    axes[0].set_title(f"speed-up over Layerwise: {workload} on {arch}")
    axes[0].set_ylabel("x")
    marks = [v for v in PUBLISHED_SPEEDUP.get((arch, workload), {}).values() if v]
    axes[0].set_ylim(0, max([pivot.max().max(), *marks]) * 1.35)
    dram = rows.pivot(index="preset", columns="dataflow", values="dram_reduction")
    dram = dram.reindex(pivot.index)[pivot.columns]
    (100 * dram).plot.bar(ax=axes[1], width=0.8, legend=False)
    axes[1].set_title("DRAM traffic reduction over Layerwise (%)")
    published = PUBLISHED_SPEEDUP.get((arch, workload), {})
    for i, name in enumerate(pivot.columns):
        if published.get(name):
            axes[0].axhline(published[name], color=f"C{i}", linestyle=":", linewidth=1)
    valid = rows.pivot(index="preset", columns="dataflow", values="valid")
    valid = valid.reindex(pivot.index)[pivot.columns]
    for ax in axes:  # bars are drawn column by column (dataflow), preset by preset
        for container, name in zip(ax.containers, pivot.columns, strict=True):
            for bar, ok in zip(container, valid[name], strict=True):
                if not ok:
                    bar.set(hatch="//", edgecolor="black", alpha=0.5)
    handles, _ = axes[0].get_legend_handles_labels()
    if any(published.get(name) for name in pivot.columns):
        handles.append(Line2D([], [], color="black", linestyle=":", linewidth=1,
                              label="published speed-up (dotted, dataflow's colour)"))
    if not valid.to_numpy().all():
        handles.append(Patch(facecolor="white", hatch="//", edgecolor="black",
                             label="invalid: does not fit the accelerator"))
    axes[0].legend(handles=handles, fontsize=7, ncol=3, loc="upper left")
    fig.tight_layout()
    try:
        save_figure(fig, path, flag="--out", dpi=100)
    finally:
        plt.close(fig)


def write_report(frame: pd.DataFrame, out_dir, command: str) -> str:
    """Write the Markdown report, its plots and the raw table; return the report's path."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "reference-experiments.csv",
                      frame.assign(model_version=MODEL_VERSION).to_csv(index=False), "--out")
    summary = _summary(frame)
    lines = REPORT_HEAD.format(command=command, version=MODEL_VERSION).splitlines()
    for arch, workload, title in [
        ("edge", "attention", "Attention G1-G12 on Edge"),
        ("cloud", "attention", "Attention G1-G12 on Cloud"),
        ("cloud", "conv-chain", "Conv chains C1-C8 on Cloud"),
        ("edge-softmax-on-array", "attention",
         "Attention on Edge with the softmax on the PE array (published convention)"),
        ("cloud-l1-per-subcore", "attention", "Attention on Cloud, L1 read per sub-core"),
        ("cloud-l1-per-subcore", "conv-chain", "Conv chains on Cloud, L1 read per sub-core"),
    ]:
        if not ((frame.arch == arch) & (frame.workload == workload)).any():
            continue
        png = f"reference-{arch}-{workload}.png"
        _plot(frame, arch, workload, out / png)
        lines += ["", f"## {title}", ""] + _table(summary, arch, workload)
        lines += ["", f"![{title}]({png})"]
    bottlenecks = frame.groupby(["arch", "dataflow"], sort=False).bottleneck.agg(
        lambda s: s.str.replace(r" \(.*", "", regex=True).value_counts().index[0])
    lines += ["", "## Most frequent bottleneck", "", "| accelerator | dataflow | bottleneck |",
              "|---|---|---|"]
    lines += [f"| {a} | {d} | {b} |" for (a, d), b in bottlenecks.items()]
    lines += REPORT_TAIL.format(**_tail_numbers(summary, frame)).splitlines()
    path = out / "reference-experiments.md"
    write_text_atomic(path, "\n".join(lines) + "\n", "--out")
    return str(path)


REPORT_HEAD = """# Reference experiments: the published TileFlow comparison, re-run

Regenerate with `{command}` (model version {version};
about 5 minutes alone on a 2-core machine, twice that with the online-softmax section;
the raw numbers are in `reference-experiments.csv`).
Speed-ups are over Layerwise on the same accelerator and shape (geometric mean over the
shapes), DRAM and energy reductions are means over the shapes; "published" columns are the
figures of the TileFlow paper's evaluation. The model was not tuned to them.

What is compared:

* `tileflow-pipe` is the *shape* the published search found (Q x K, softmax and x V
  pipelined, every loop tiled where the softmax allows) with its factors fitted by the
  tile search for the lowest modelled latency. The published "searched" figure came
  from a full 3-D search; ours will come from the explorer. Cloud's published 12.63x is the
  figure for all fused dataflows together.
* Chimera's factors minimise DRAM traffic among those that fit (its definition) and, among
  the many that reach that least traffic, take the lowest latency (the tile search, then a
  second search limited to that traffic); FLAT-RGran
  uses row blocks of twice the PE rows; Layerwise, FLAT-HGran and Uni-pipe tile only as far
  as capacity forces them to.
* Default Edge and Cloud have a vector unit per core (as many lanes as the array has rows;
  exp and divide take 4 cycles). `edge-softmax-on-array` runs every softmax operation on
  the PE array at one operation per PE per cycle, as the published model assumed; there
  `tileflow-pipe` gives a quarter of the array's columns to each matrix stage and half to
  the softmax stage, the three running at once.
"""

REPORT_TAIL = """
## Where and why we differ from the published figures

* **The vector unit decides attention on Edge.** With a 32-lane vector unit per core the
  five softmax operators (11 vector cycles per score element) take about as long as the two
  matrix products on a 32 x 32 array, so the fused dataflows are mostly vector-bound and
  their speed-ups shrink ({edge_range}). With the softmax on the PE array (the published
  convention, `edge-softmax-on-array`) the order is {arr_order} (published, on Edge:
  Uni-pipe 1.62x < FLAT-RGran 2.89x, Chimera 2.91x < FLAT-HGran 3.59x < the searched
  dataflow 6.65x). Our FLAT variants send P through DRAM (FLAT fuses Q x K and the
  softmax only), as Uni-pipe does; our Chimera fuses x V too and chooses the blocks that
  minimise traffic, which is why it beats FLAT here while the published Chimera did not.
  Our `tileflow-pipe` splits the array between its three stages at once (see above), so
  each matrix product runs on a quarter of the columns, while Chimera runs each operator in
  turn on the whole array; once the softmax costs no more than a MAC, that split costs more
  than the overlap gains, and Chimera ({arr_chimera}) overtakes `tileflow-pipe`
  ({arr_pipe}).
* **Energy of the fastest fits.** Chimera (least DRAM traffic, then the lowest latency) and
  `tileflow-pipe` (the lowest latency) are fitted without looking at energy. Their mean
  energy reductions against Layerwise are {edge_chimera_energy} and {edge_pipe_energy} on
  default Edge, {arr_chimera_energy} and {arr_pipe_energy} with the softmax on the array (a
  negative reduction is more energy than Layerwise). Where one is negative, the fastest
  factors keep the output's partial sums in L1 and update them there at every step over l,
  which costs more than the DRAM traffic they save: on G1 on default Edge, Chimera updates
  L1 {edge_chimera_updates} times as often as Layerwise.
* **Uni-pipe** pipelines on one core (no spatial split of heads or rows). On Cloud it uses
  1 of 64 sub-cores, hence {cloud_uni}; the published 1.37x implies a Layerwise baseline that
  was itself far from using the chip, which ours is not (Layerwise spreads every operator
  over all sub-cores). Where Uni-pipe's untiled head does not fit the L1 (the larger
  shapes), it is reported invalid, not silently costed.
* **DRAM traffic.** Our fused dataflows cut DRAM traffic by {dram_flat} (P through DRAM)
  and {dram_chimera} (fully fused), against the published 75-90 %. Chimera's published
  75.1 % reflects small blocks that reload K and V per row block; our Chimera picks the
  blocks that minimise traffic, so it reaches the fully fused figure.
* **Cloud.** Our Layerwise spreads each operator over all 64 sub-cores and is bound by
  DRAM; the fused dataflows then hit the per-sub-core vector units (softmax) or the
  matrix units, so the speed-up stays at {cloud_pipe} for tileflow-pipe. The published
  12.63x ran the softmax on the arrays and compared with a Layerwise that used the chip
  less well; `edge-softmax-on-array` shows how much the vector-unit assumption moves the
  result on Edge.
* **Conv chains.** Fusion removes the intermediate's round trip (about half the DRAM
  traffic here, {dram_conv}; published 73 %) and most of the energy. The speed-up
  ({conv_speedup} geomean, {conv_range} by shape; published 1.01x for Fused-Layer) comes
  from what bounds Layerwise: DRAM bandwidth ({conv_dram_bound}) or L1 read bandwidth
  ({conv_l1_bound}); fused, the matrix units bound most shapes. ISOS equals Fused-Layer on
  {isos_same} of the {conv_shapes} shapes: the largest fitting square tile already spans
  all columns.
* **Which L1 reading.** Reading Cloud's L1 as 20 MB per sub-core makes the dataflows that
  did not fit valid (Uni-pipe on every shape), moves the other attention speed-ups little
  (Chimera {cloud_chimera} -> {subcore_chimera}, `tileflow-pipe` {cloud_pipe} ->
  {subcore_pipe}) and changes the conv chains, where the larger L1 lets Layerwise keep
  bigger tiles (Fused-Layer {conv_speedup_subcore}).
"""


NAMES = {"uni-pipe": "Uni-pipe", "flat-hgran": "FLAT-HGran", "flat-rgran": "FLAT-RGran",
         "chimera": "Chimera", "tileflow-pipe": "`tileflow-pipe`"}


def _conv_numbers(frame: pd.DataFrame) -> dict[str, str]:
    """What bounds Layerwise on each conv shape on Cloud, and where ISOS equals Fused-Layer."""
    conv = frame[(frame.arch == "cloud") & (frame.workload == "conv-chain")]
    layer = conv[conv.dataflow == "layerwise"]
    fused = conv[conv.dataflow == "fused-layer"].set_index("preset")
    isos = conv[conv.dataflow == "isos"].set_index("preset")

    def bound_by(text: str) -> str:
        shapes = [p for p, b in zip(layer.preset, layer.bottleneck, strict=True)
                  if b.startswith(text)]
        return ", ".join(sorted(shapes, key=lambda p: int(p[1:]))) or "no shape"

    same = [p for p in fused.index if p in isos.index
            and abs(isos.cycles[p] / fused.cycles[p] - 1) < 1e-9]
    speed = fused.speedup if len(fused) else pd.Series([float("nan")])
    return {"conv_dram_bound": bound_by("DRAM"), "conv_l1_bound": bound_by("L1"),
            "conv_range": f"{speed.min():.2f}x-{speed.max():.2f}x",
            "isos_same": str(len(same)), "conv_shapes": str(len(fused))}


def _updates_ratio(frame: pd.DataFrame, arch: str, preset: str, dataflow: str) -> str:
    """The dataflow's L1 updates over Layerwise's on one shape, as text ('n/a' if absent)."""
    rows = frame[(frame.arch == arch) & (frame.workload == "attention")
                 & (frame.preset == preset)].set_index("dataflow").l1_updates
    if dataflow not in rows or "layerwise" not in rows or not rows["layerwise"]:
        return "n/a"
    return f"{rows[dataflow] / rows['layerwise']:.1f}"


def _tail_numbers(summary: pd.DataFrame, frame: pd.DataFrame) -> dict[str, str]:
    def get(arch: str, workload: str, dataflow: str, column: str = "speedup") -> float:
        rows = summary[(summary.arch == arch) & (summary.workload == workload)
                       & (summary.dataflow == dataflow)]
        return float(rows[column].iloc[0]) if len(rows) else float("nan")

    edge = [get("edge", "attention", d) for d in ("flat-hgran", "flat-rgran", "chimera",
                                                   "tileflow-pipe")]
    arr = "edge-softmax-on-array"
    order = sorted(NAMES, key=lambda d: get(arr, "attention", d))
    return {
        **_conv_numbers(frame),
        "arr_order": " < ".join(f"{NAMES[d]} {get(arr, 'attention', d):.2f}x" for d in order),
        "arr_chimera_energy": f"{get(arr, 'attention', 'chimera', 'energy_reduction'):.0%}",
        "arr_pipe_energy": f"{get(arr, 'attention', 'tileflow-pipe', 'energy_reduction'):.0%}",
        "edge_chimera_energy": f"{get('edge', 'attention', 'chimera', 'energy_reduction'):.0%}",
        "edge_pipe_energy": f"{get('edge', 'attention', 'tileflow-pipe', 'energy_reduction'):.0%}",
        "edge_chimera_updates": _updates_ratio(frame, "edge", "G1", "chimera"),
        "cloud_chimera": f"{get('cloud', 'attention', 'chimera'):.2f}x",
        "subcore_chimera": f"{get('cloud-l1-per-subcore', 'attention', 'chimera'):.2f}x",
        "subcore_pipe": f"{get('cloud-l1-per-subcore', 'attention', 'tileflow-pipe'):.2f}x",
        "edge_range": f"{min(edge):.1f}x-{max(edge):.1f}x",
        "arr_chimera": f"{get(arr, 'attention', 'chimera'):.2f}x",
        "arr_pipe": f"{get(arr, 'attention', 'tileflow-pipe'):.2f}x",
        "cloud_uni": f"{get('cloud', 'attention', 'uni-pipe'):.2f}x",
        "cloud_pipe": f"{get('cloud', 'attention', 'tileflow-pipe'):.2f}x",
        "dram_flat": f"{get('edge', 'attention', 'flat-hgran', 'dram_reduction'):.0%}",
        "dram_chimera": f"{get('edge', 'attention', 'chimera', 'dram_reduction'):.0%}",
        "dram_conv": f"{get('cloud', 'conv-chain', 'fused-layer', 'dram_reduction'):.0%}",
        "conv_speedup": f"{get('cloud', 'conv-chain', 'fused-layer'):.2f}x",
        "conv_speedup_subcore": f"{get('cloud-l1-per-subcore', 'conv-chain', 'fused-layer'):.2f}x",
    }
