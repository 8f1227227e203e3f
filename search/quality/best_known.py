"""Find each suite pair's best-known dataflow and write `best-known.json` and
`trees/PAIR.yaml` (run once, before the search work the suite judges; not run by the tests).

    PYTHONPATH=. python search/quality/best_known.py [--pairs a,b] [--seconds 60]

Candidates per pair: every named baseline that applies, with its factors fitted under its own
rule, and the expert trees `trees/hand/PAIR*.yaml`. For the structures of the `--searched`
best candidates (by their own factors' cycles) the branch and bound of
`tileflow.explore.factors.exhaustive` searches every divisor-factor assignment (loop order
fixed) starting from the candidate's own factors; where it finishes
within `--seconds` its result is the exact optimum of that structure's divisor space,
otherwise the best point it reached. The best candidate is saved and evaluated again with
`tileflow evaluate --json` (a fresh process reading the saved file): that is the value stored.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from suite import BASELINES, BEST_KNOWN_FILE, HERE, Pair, load_best_known, load_pairs, select  # noqa: E402

from tileflow.cost import evaluate  # noqa: E402
from tileflow.dataflows import build  # noqa: E402
from tileflow.evaluator.structure import structure_of  # noqa: E402
from tileflow.explore.factors import exhaustive as ex  # noqa: E402
from tileflow.explore.factors.space import Space, divisor_products  # noqa: E402
from tileflow.explore.tilesearch.fit import fit_baseline  # noqa: E402
from tileflow.interop.files import load_arch_any, load_workload_any  # noqa: E402
from tileflow.specs.dataflow import load_dataflow_file, save_dataflow  # noqa: E402


class OutOfTime(Exception):
    pass


def _alarm(signum, frame):
    raise OutOfTime


def bnb(structure, seconds: float) -> dict:
    """Branch and bound over the divisor space of one structure, stopped after `seconds`."""
    space = Space(structure, non_divisors=False)
    size = ex.space_size(space)
    state = ex.Enumeration()
    default = structure.default_factors
    if space.exact(default):
        result = ex.evaluate_batch(structure, default[None].astype("int64"))
        if result.valid[0]:
            state.best, state.best_row = float(result.cycles[0]), list(map(int, default))
    floor = ex.Floor(structure)
    start = time.perf_counter()
    complete = False
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        for shared, groups, options in divisor_products(space):
            ex._open_product(space, floor, shared, groups, options, state)
            state.products_done += 1
        complete = True
    except OutOfTime:
        pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return {"space_size": size, "complete": complete, "evaluated": state.evaluated,
            "pruned": state.pruned, "seconds": round(time.perf_counter() - start, 1),
            "cycles": state.best, "row": state.best_row}


def candidates(pair: Pair, workload, arch):
    """(source, dataflow) of every baseline that applies and every hand-written tree."""
    for name in BASELINES:
        try:
            build(name, workload, arch)
        except Exception:  # the builder does not apply to this workload
            continue
        try:
            yield f"baseline {name} (own-rule fit)", fit_baseline(name, workload, arch)
        except Exception as e:  # noqa: BLE001 - a baseline that cannot be fitted is skipped
            print(f"  {name}: not fitted ({str(e).splitlines()[0]})", flush=True)
    for path in pair.hand_trees():
        yield f"hand-written {path.relative_to(HERE)}", load_dataflow_file(path)


def cli_cycles(pair: Pair, tree: Path) -> float:
    """The tree's cycles from `tileflow evaluate --json`, in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-m", "tileflow.cli", "evaluate", "--arch", str(pair.chip_path),
         "--workload", pair.workload_ref, *pair.set_flags(), "--dataflow", str(tree), "--json"],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    data = json.loads(out.stdout)
    if not data["valid"]:
        raise SystemExit(f"{tree}: not valid: {data['violations']}")
    return float(data["cycles"])


def run_pair(pair: Pair, seconds: float, searched: int) -> dict:
    workload = load_workload_any(pair.workload_ref, pair.sizes)
    arch = load_arch_any(str(pair.chip_path))
    rows = []
    for source, flow in candidates(pair, workload, arch):
        own = evaluate(workload, arch, flow)
        rows.append({"source": source, "flow": flow,
                     "own_cycles": own.cycles if own.valid else None})
    valid = sorted((r for r in rows if r["own_cycles"] is not None),
                   key=lambda r: r["own_cycles"])
    if not valid:
        raise SystemExit(f"{pair.name}: no valid candidate")
    best = None
    for rank, row in enumerate(valid):
        flow = row["flow"]
        cycles, tree = row["own_cycles"], flow
        structure = structure_of(workload, arch, flow)
        if rank < searched and structure.slots:  # the best few structures: their factors
            found = bnb(structure, seconds)
            row["bnb"] = {k: v for k, v in found.items() if k != "row"}
            if found["row"] is not None and found["cycles"] < cycles:
                cycles, tree = found["cycles"], structure.dataflow(found["row"])
            print(f"  {row['source']}: own {row['own_cycles']:,.0f}, branch and bound "
                  f"{found['cycles']:,.0f} ({'complete' if found['complete'] else 'stopped'}, "
                  f"{found['evaluated']:,} evaluated of {found['space_size']:,}, "
                  f"{found['seconds']} s)", flush=True)
        row["cycles"] = cycles
        if best is None or cycles < best[0]:
            best = (cycles, tree, row)
    cycles, tree, row = best
    save_dataflow(tree, pair.best_tree)
    checked = cli_cycles(pair, pair.best_tree)
    if not math.isclose(checked, cycles, rel_tol=1e-9):
        raise SystemExit(f"{pair.name}: saved tree gives {checked}, search gave {cycles}")
    bnb_row = row.get("bnb")
    complete = bool(bnb_row and bnb_row["complete"])
    if complete:
        how = (f"exhaustive: the optimum of every divisor-factor assignment of the structure "
               f"of the {row['source']} (branch and bound, {bnb_row['space_size']:,} points)")
    elif bnb_row and cycles < row["own_cycles"]:
        how = (f"the {row['source']} with factors from a branch and bound over its divisor "
               f"factors stopped after {bnb_row['seconds']} s")
    else:
        how = f"the {row['source']} as written"
    floor = evaluate(workload, arch, tree).macs / arch.total_macs_per_cycle
    for r in rows:
        r.pop("flow")
    return {"cycles": checked, "tree": str(pair.best_tree.relative_to(HERE)), "how": how,
            "exhaustive": complete, "matrix_floor_cycles": floor, "candidates": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", help="comma-separated pair names (default: all)")
    p.add_argument("--seconds", type=float, default=60,
                   help="branch-and-bound time per candidate structure")
    p.add_argument("--searched", type=int, default=3,
                   help="candidates (best first) whose factors the branch and bound searches")
    args = p.parse_args()
    known = load_best_known()
    for pair in select(load_pairs(), args.pairs):
        print(pair.name, flush=True)
        known[pair.name] = run_pair(pair, args.seconds, args.searched)
        known[pair.name]["command"] = ("PYTHONPATH=. python search/quality/best_known.py "
                                       f"--seconds {args.seconds:g} --searched "
                                       f"{args.searched} --pairs {pair.name}")
        print(f"  best known {known[pair.name]['cycles']:,.0f}: {known[pair.name]['how']}",
              flush=True)
        data = {"objective": "latency (cycles)", "pairs": dict(sorted(known.items()))}
        tmp = BEST_KNOWN_FILE.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, BEST_KNOWN_FILE)


if __name__ == "__main__":
    main()
