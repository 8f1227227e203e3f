"""The online softmax beside the five-operator form: for every attention shape (G1-G12) on
Edge and Cloud, the fitted baselines and the explorer's best dataflow of both workloads, as
a table and a section of the reference-experiments report (between markers, so that it can
be regenerated on its own: `tileflow reproduce --online-only`)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from tileflow.commands.experiments import ATTENTION
from tileflow.cost.result import Result
from tileflow.outputs import write_text_atomic
from tileflow.tree import Dataflow, Tile

FORMS = {"five-operator": "attention", "online": "attention-online"}
ARCHS = ("edge", "cloud")
BEGIN, END = "<!-- online-softmax:begin -->", "<!-- online-softmax:end -->"


def run_online(archs=ARCHS, presets=ATTENTION, budget_evals: int = 1000,
               progress: bool = True) -> pd.DataFrame:
    """One row per (accelerator, shape, form, dataflow): every fitted baseline and the
    explorer's best (dataflow 'explored', latency objective, `budget_evals` points)."""
    from tileflow.explore.studies.config import ExploreConfig
    from tileflow.explore.studies.session import explore

    jobs = [(a, p, f) for a in archs for p in presets for f in FORMS]
    rows = []
    for arch, preset, form in tqdm(jobs, disable=not progress, desc="online softmax"):
        config = ExploreConfig(source="", name=f"{form}-{arch}-{preset}", accelerator=arch,
                               workload=FORMS[form], preset=preset, budget_evals=budget_evals)
        outcome = explore(config, progress=False)
        found = [(c.name, c.flow, c.result) for c in outcome.baselines]
        if outcome.best_result is not None:
            found.append((f"explored ({outcome.best_structure})", outcome.best,
                          outcome.best_result))
        for name, flow, result in found:
            rows.append({"arch": arch, "preset": preset, "form": form, "dataflow": name,
                         "l_steps": _outer_steps(flow, outcome.arch.levels[0].name, "l"),
                         **_metrics(result)})
    frame = pd.DataFrame(rows)
    frame["budget_evals"] = budget_evals
    base = frame[(frame.form == "five-operator") & (frame.dataflow == "layerwise")]
    base = base.set_index(["arch", "preset"])
    key = list(zip(frame["arch"], frame["preset"], strict=True))
    frame["speedup"] = [base.loc[k, "cycles"] / c for k, c in zip(key, frame.cycles,
                                                                  strict=True)]
    return frame


def _outer_steps(flow: Dataflow, outer: str, dim: str) -> int:
    """Steps over `dim` of the outermost level's tiles above the operators that use it
    (the l tiles a sweep streams; 1 where the whole of l is held on chip)."""
    steps = 1
    node = flow.root
    while isinstance(node, Tile) and node.level == outer:
        steps *= math.prod(lp.factor for lp in node.loops if lp.dim == dim)
        below = [c for c in node.children if isinstance(c, Tile) and c.level == outer
                 and any(lp.dim == dim for lp in c.loops)]
        node = below[0] if below else None
    return steps


def _metrics(r: Result) -> dict:
    return {"valid": r.valid, "cycles": r.cycles, "dram_words": r.dram_words,
            "energy_pj": r.energy_pj, "vector_ops": r.vector_ops,
            "bottleneck": re.sub(r" \(.*", "", r.bottleneck.message)}


def _best(frame: pd.DataFrame, form: str) -> pd.DataFrame:
    """Per (arch, preset), the valid row of the form with the fewest cycles, among its
    fitted baselines and its explorer best."""
    rows = frame[(frame.form == form) & frame.valid]
    return rows.loc[rows.groupby(["arch", "preset"]).cycles.idxmin()].set_index(
        ["arch", "preset"])


def section(frame: pd.DataFrame, command: str) -> str:
    """The report's section: per accelerator and shape, the best dataflow of each form, and
    what the model predicts."""
    lines = [BEGIN, "", "## Online softmax beside the five-operator form", "",
             f"Regenerate this section alone with `{command}` (raw numbers in "
             "`online-softmax.csv`, every fitted baseline and explorer best). "
             "`attention-online` carries the running maximum over l "
             "([docs/online-softmax.md](../docs/online-softmax.md)): l may be tiled across "
             "the softmax, at the cost of rescaling the running sum and output at every l "
             "step, and the division moves from the probabilities (b x m x l) to the output "
             "(b x m x n). For each form, the best of its fitted baselines (five-operator: "
             "Layerwise, Uni-pipe, FLAT-HGran, FLAT-RGran, Chimera, TileFlow-Pipe; online: "
             "Layerwise, Flash, Flash-Pipe) and of its explorer study (latency objective, "
             f"{_budget(frame)} points, the same budget for both forms; `explored (x)` marks "
             "a point the explorer found in structure x). Speed-ups are over the "
             "five-operator Layerwise.", ""]
    five, on = _best(frame, "five-operator"), _best(frame, "online")
    for arch in frame.arch.unique():
        lines += [f"### {arch.capitalize()}", "",
                  "| shape | five-operator best | online best | online speed-up | online l "
                  "steps | DRAM words (five-op / online) | vector ops "
                  "(five-op / online) | bottleneck (five-op; online) |",
                  "|---|---|---|---|---|---|---|---|"]
        for preset in sorted(frame[frame.arch == arch].preset.unique(),
                             key=lambda s: int(s[1:])):
            f, o = five.loc[(arch, preset)], on.loc[(arch, preset)]
            lines.append(
                f"| {preset} | {f.speedup:.2f}x {f.dataflow} | {o.speedup:.2f}x {o.dataflow} "
                f"| {f.cycles / o.cycles:.2f}x | {o.l_steps} "
                f"| {f.dram_words / 1e6:.2f}M / "
                f"{o.dram_words / 1e6:.2f}M | {f.vector_ops / 1e6:.2f}M / "
                f"{o.vector_ops / 1e6:.2f}M | {f.bottleneck}; {o.bottleneck} |")
        lines.append("")
    lines += _predictions(frame, five, on) + ["", END]
    return "\n".join(lines)


def _budget(frame: pd.DataFrame) -> str:
    return f"{int(frame.budget_evals.iloc[0]):,}"


def _predictions(frame: pd.DataFrame, five: pd.DataFrame, on: pd.DataFrame) -> list[str]:
    from scipy.stats import gmean

    out = ["### What the model predicts", ""]
    for arch in frame.arch.unique():
        f, o = five.loc[arch], on.loc[arch]
        ratio = f.cycles / o.cycles
        bound = {name: (rows.bottleneck.value_counts().index[0],
                        int(rows.bottleneck.value_counts().iloc[0]), len(rows))
                 for name, rows in (("five", f), ("online", o))}
        flash = frame[(frame.arch == arch) & (frame.dataflow == "flash")].set_index("preset")
        sequential = gmean(f.cycles / flash.cycles.reindex(f.index)) if len(flash) else math.nan
        out.append(
            f"* **{arch.capitalize()}:** the online form is {gmean(ratio):.2f}x faster "
            f"(geomean over the shapes; {ratio.min():.2f}x to {ratio.max():.2f}x), with "
            f"{gmean(o.dram_words / f.dram_words):.2f}x the five-operator form's DRAM traffic "
            f"(geomean; more in {int((o.dram_words > f.dram_words * 1.001).sum())} of "
            f"{len(o)} shapes: the search optimises latency) and "
            f"{gmean(o.vector_ops / f.vector_ops):.2f}x its vector operations. The best "
            f"five-operator dataflows are bound by the {bound['five'][0]} "
            f"({bound['five'][1]} of {bound['five'][2]} shapes), the online ones by the "
            f"{bound['online'][0]} ({bound['online'][1]} of {bound['online'][2]}). The best "
            f"online dataflow tiles l (more than one l step) in {int((o.l_steps > 1).sum())} "
            f"of {len(o)} shapes; where it holds all of l, its gain is the division moved "
            f"after x V, which needs no carried state. Flash without the pipeline is "
            f"{sequential:.2f}x as fast as the five-operator best (geomean).")
    return out + ["", *PREDICTION]


PREDICTION = """
Why, in the model's terms: with the default vector unit (exp and divide take 4 cycles) the
five-operator softmax costs 11 vector-lane cycles per score element (max 1, sub 1, exp 4,
sum 1, div 4), and the best five-operator dataflows wait for the vector unit. The online
form divides the output (b x m x n) instead of the probabilities: 7 + 4n/l cycles per score
element while l is not tiled (7.5 at G1), hence fewer vector operations and most of the
speed-up. Tiling l, which only the carried state allows, adds the rescaling, (6 + n) / t_l
cycles per score element for l tiles of t_l (one subtraction, one exp of 4 cycles and
1 + n multiplications per row and step: about 1 cycle for t_l = 64 and n = 64), to
dataflows that already wait for the vector unit. On these chips a row block's scores fit
on chip for all of l (l <= 512), so the search tiles l only where that rescaling costs
less than what it saves elsewhere (the "online l steps" column). The model's prediction:
here the online form's gain comes from moving the division after x V (a rewrite that
needs no carried state when l is not tiled), and tiling l across the softmax pays only
where score rows stop fitting or the vector unit stops binding (longer sequences, faster
vector units). DRAM traffic does not decide: the search optimises latency. These are
predictions of the analytical model; no measured kernel backs the online form.
""".strip().splitlines()


def write_online(frame: pd.DataFrame, out_dir, command: str) -> str:
    """Write the raw table and put the section into the report (replacing the previous one
    between the markers, or appending it)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "online-softmax.csv", frame.to_csv(index=False), "--out")
    path = out / "reference-experiments.md"
    text = path.read_text() if path.exists() else ""
    block = section(frame, command)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + block + "\n"
    write_text_atomic(path, text, "--out")
    return str(path)
