"""The gap between the explorer's latency-optimal dataflow and the data-movement bound at each
point of a finished `tileflow sweep`: both dataflows evaluated again on the point's
accelerator, their DRAM words per tensor and their cycles side by side. Writes
FOLDER/gaps.md and copies the sweep's table and plots into FOLDER (run once; not part of
the tests).

    python search/bound_report.py sweep-gemm-chain search/sweep-gemm-chain"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tileflow.cost import evaluate  # noqa: E402
from tileflow.outputs import write_text_atomic  # noqa: E402
from tileflow.specs.arch import load_arch  # noqa: E402
from tileflow.specs.dataflow import load_dataflow_file  # noqa: E402
from tileflow.specs.workload import load_workload  # noqa: E402


def fastest_at_bound(w, arch, level: str, bound_flow_factors, name: str):
    """The lowest latency among the tilings that share the bound's dataflow's factors above
    `level` (the same DRAM words and footprint there; the loops below it free), evaluated on
    the point's accelerator: what reaching the bound costs in cycles."""
    import itertools

    import numpy as np

    from tileflow.evaluator.batch import evaluate_batch
    from tileflow.explore.structures import bound as b
    from tileflow.explore.sweeps.sweep import bound_structures

    s = dict(bound_structures(w, arch, level))[name]
    outer = b.outer_slots(s, level)
    target = np.asarray(bound_flow_factors)
    per_dim = []
    for d in dict.fromkeys(x.dim for x in s.slots):
        keep = [r for r in b._dim_assignments(s, d)
                if all(r[k] == target[k] for k in r if outer[k])]
        per_dim.append(keep)
    rows = []
    for parts in itertools.product(*per_dim):
        row = np.ones(len(s.slots), dtype=np.int64)
        for part in parts:
            for k, x in part.items():
                row[k] = x
        rows.append(row)
    real = dataclasses.replace(s, arch=arch)
    result = evaluate_batch(real, np.array(rows))
    ok = result.valid
    if not ok.any():
        return None
    i = int(np.argmin(np.where(ok, result.cycles, np.inf)))
    return float(result.cycles[i]), float(result.dram_words[i]), len(rows)


def per_tensor(result) -> dict[str, float]:
    outer = result.levels[0]
    return {t: m.read + m.writes for t, m in result.traffic.get(outer, {}).items()
            if m.read + m.writes}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("sweep", help="the sweep's output folder")
    p.add_argument("folder", help="where gaps.md and the copies go")
    args = p.parse_args(argv)
    src, dst = Path(args.sweep), Path(args.folder)
    dst.mkdir(parents=True, exist_ok=True)
    data = json.loads((src / "summary.json").read_text())
    w = load_workload(data["workload"], data["sizes"], data["preset"])
    lines = ["| L1 per core | found: structure | cycles | DRAM words | bound | gap | "
             "fastest at the bound: cycles | found DRAM words per tensor | bound's per tensor |",
             "|---:|---|---:|---:|---:|---:|---:|---|---|"]
    bounds = {k: json.loads((src / "bounds" / f"{k}.json").read_text())
              for k in data["bounds"]}
    for row in data["points"]:
        arch = load_arch(str(src / "accelerators" / f"{row['label']}.yaml"))
        folder = src / "points" / row["label"]
        cap = f"{row['capacity_bytes']:,.0f} B"
        if not (folder / "best.yaml").exists():
            lines.append(f"| {cap} | nothing valid found | - | - | "
                         f"{row['bound_dram_words'] or '-'} | - | - | - | - |")
            continue
        found = evaluate(w, arch, load_dataflow_file(folder / "best.yaml"))
        bound = evaluate(w, arch, load_dataflow_file(folder / "bound.yaml")) \
            if (folder / "bound.yaml").exists() else None
        fast = None
        if bound is not None:
            front = [p for b in bounds.values() for p in b["front"]
                     if p["footprint_words"] <= arch.level(b["level"]).capacity_words]
            best = min(front, key=lambda p: p["dram_words"])
            fast = fastest_at_bound(w, arch, next(iter(bounds.values()))["level"],
                                    best["factors"], best["structure"])
            if fast and fast[1] != bound.dram_words:  # the class shares its DRAM words
                raise SystemExit(f"{row['label']}: {fast[1]} DRAM words, bound "
                                 f"{bound.dram_words}")

        def tensors(r) -> str:
            return ", ".join(f"{t} {v:,.0f}" for t, v in sorted(per_tensor(r).items()))

        lines.append(
            f"| {cap} | {row['structure']} | {found.cycles:,.0f} | {found.dram_words:,.0f} | "
            f"{bound.dram_words:,.0f} | {found.dram_words / bound.dram_words:.2f}x | "
            f"{fast[0] if fast else math.nan:,.0f} | {tensors(found)} | "
            f"{tensors(bound)} |" if bound else
            f"| {cap} | {row['structure']} | {found.cycles:,.0f} | {found.dram_words:,.0f} | "
            "- | - | - | - | - |")
    for name in ("sweep.csv", "sweep.png", "bound.png"):
        if (src / name).exists():
            shutil.copyfile(src / name, dst / name)
    bounds = data["bounds"]
    notes = [f"Bound: {b['tilings']:,} exact tilings, {b['evaluated']:,} evaluated after "
             f"pruning; compulsory {b['compulsory_words']:,.0f} words; left out: "
             f"{', '.join(b['skipped']) or 'nothing'}." for b in bounds.values()]
    write_text_atomic(dst / "gaps.md", "\n".join(lines + [""] + notes) + "\n")
    print((dst / "gaps.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
