"""Per-shape speed-ups of the dataflow `tileflow explore` finds, over Layerwise and over the
best baseline (with the baselines' own rules, and with their structures' factors searched
by the same tile search), beside the published averages; writes search/speedups.md and
search/speedups.json (run once; not part of the tests; saves after every shape and skips
shapes already in the JSON).

    python search/speedups.py --evaluations 1500
    python search/speedups.py --evaluations 1500 --only attention-cloud  # missing shapes"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tileflow.explore.studies.config import load_config  # noqa: E402
from tileflow.explore.studies.session import explore  # noqa: E402

GROUPS = [("attention-edge", [f"G{i}" for i in range(1, 13)]),
          ("attention-cloud", [f"G{i}" for i in range(1, 13)]),
          ("conv-cloud", [f"C{i}" for i in range(1, 9)])]
# Published averages (the TileFlow evaluation): the searched dataflow over Layerwise, and
# over the best fixed dataflow where the paper gives it.
PUBLISHED = {"attention-edge": ("6.65x", "1.85x"), "attention-cloud": ("12.63x (all fused)", "-"),
             "conv-cloud": ("1.59x", "1.59x (over Fused-Layer)")}


def one(group: str, shape: str, evaluations: int, seed: int) -> dict:
    config = load_config(HERE / group / f"{shape}.yaml")
    config = config.with_budget(evaluations, None)
    start = time.perf_counter()
    outcome = explore(config, progress=False)
    found = outcome.best_result
    by = {b.name: b for b in outcome.baselines}
    own = {n: b.result.cycles for n, b in by.items() if b.result.valid}
    searched = {n: b.searched_result.cycles for n, b in by.items()
                if b.searched_result is not None and b.searched_result.valid}
    layer = by["layerwise"].result.cycles
    best_own = min(own, key=own.get)
    best_searched = min(searched, key=searched.get) if searched else None
    return {
        "group": group, "shape": shape, "found_structure": outcome.best_structure,
        "found_cycles": found.cycles if found else None, "layerwise_cycles": layer,
        "best_own_rule": best_own, "best_own_rule_cycles": own[best_own],
        "best_searched": best_searched,
        "best_searched_cycles": searched[best_searched] if best_searched else None,
        "own_rule_cycles": own, "searched_cycles": searched,
        "evaluations": int(len(outcome.points)), "seconds": time.perf_counter() - start}


def gmean(values) -> float:
    values = [v for v in values if v]
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def markdown(rows: list[dict], command: str) -> str:
    out = ["# Speed-ups of the explored dataflows", "",
           f"Rows come from `{command}` (each row's budget is in its evaluations column; "
           "rows already in `search/speedups.json` are kept, so a run adds the missing shapes "
           "only). For every shape: the dataflow `tileflow explore` found with the shipped "
           "study of that shape (`searched-N` is a structure of the structure search, where "
           "the study says `structures: search`; the rows run before the studies searched "
           "structures searched every applicable baseline structure), its speed-up over "
           "Layerwise, "
           "over the best baseline with its own rule (Chimera: least DRAM traffic that fits; "
           "TileFlow-Pipe: lowest latency; the others: largest tiles that fit) and over the "
           "best baseline structure with its factors searched by the same tile search. The "
           "last two separate what the tiling gains from what the structure gains.", ""]
    for group, _ in GROUPS:
        part = sorted((r for r in rows if r["group"] == group),
                      key=lambda r: int(r["shape"].lstrip("GC")))
        if not part:
            continue
        out += [f"## {group}", "",
                "| shape | found (structure) | cycles | over Layerwise | over best own-rule "
                "baseline | over best searched baseline | evaluations | seconds |",
                "|---|---|---|---|---|---|---|---|"]
        for r in part:
            over_l = r["layerwise_cycles"] / r["found_cycles"]
            over_own = r["best_own_rule_cycles"] / r["found_cycles"]
            over_s = (r["best_searched_cycles"] / r["found_cycles"]
                      if r["best_searched_cycles"] else None)
            out.append(f"| {r['shape']} | {r['found_structure']} | {r['found_cycles']:,.0f} | "
                       f"{over_l:.2f}x | {over_own:.2f}x ({r['best_own_rule']}) | "
                       + (f"{over_s:.2f}x ({r['best_searched']})" if over_s else "-")
                       + f" | {r['evaluations']:,} | {r['seconds']:.0f} |")
        published = PUBLISHED[group]
        out += ["", f"Geometric means: over Layerwise "
                f"{gmean(r['layerwise_cycles'] / r['found_cycles'] for r in part):.2f}x "
                f"(published {published[0]}); over the best own-rule baseline "
                f"{gmean(r['best_own_rule_cycles'] / r['found_cycles'] for r in part):.2f}x "
                f"(published {published[1]}); over the best searched baseline "
                f"{gmean(r['best_searched_cycles'] / r['found_cycles'] for r in part if r['best_searched_cycles']):.2f}x.",  # noqa: E501
                ""]
    return "\n".join(out)


def write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--evaluations", type=int, default=1500, help="budget per shape")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", help="one group: attention-edge, attention-cloud or conv-cloud")
    p.add_argument("--rewrite", action="store_true",
                   help="only rewrite speedups.md from speedups.json")
    args = p.parse_args()
    store = HERE / "speedups.json"
    rows = json.loads(store.read_text())["rows"] if store.exists() else []
    done = {(r["group"], r["shape"]) for r in rows}
    command = "python search/speedups.py [--evaluations N] [--only GROUP]"
    if args.rewrite:
        write(HERE / "speedups.md", markdown(rows, command))
        return
    for group, shapes in GROUPS:
        if args.only and group != args.only:
            continue
        for shape in shapes:
            if (group, shape) in done:
                continue
            rows.append(one(group, shape, args.evaluations, args.seed))
            print(json.dumps(rows[-1]), flush=True)
            write(store, json.dumps({"command": command, "rows": rows}, indent=2) + "\n")
            write(HERE / "speedups.md", markdown(rows, command))


if __name__ == "__main__":
    main()
