"""Run the search-quality suite: `tileflow explore` on every chip x workload pair of
`pairs.yaml` for several seeds, each with a hard time budget, against the pair's best-known
latency (`best-known.json`), and the capacity and bandwidth sweeps of `sweeps/`; write
`summary.json` and `report.md`.

    PYTHONPATH=. python search/quality/run.py [--seeds 5] [--pairs a,b] [--budget-s 60]
        [--sweeps all|none|a,b] [--out search/quality] [--runs DIR] [--report-only]

One unit is one (pair, seed): a study config `RUNS/PAIR/seed-K/study.yaml` (structure search,
then the tile-factor search, `budget: {seconds: S}`, the pair's objective) run as its own
`tileflow explore` process, its result (with the found tree) saved as
`OUT/units/PAIR.seed-K.json`. The best found is re-evaluated from the study's `best.yaml` with
`tileflow evaluate` (a fresh process); the wall time is that of the whole `explore` process,
start-up and outputs included. A sweep (`sweeps/NAME.yaml`, one capacity or bandwidth) is one
unit too: a `tileflow sweep` (seed 0, `--budget-s` per point), checked to be monotone in
latency (a larger capacity or bandwidth can run the smaller point's dataflow, so it must never
be slower), saved as `OUT/units/sweep.NAME.json`. A unit whose result file exists is skipped
(delete it to run it again), so an interrupted run goes on where it stopped; `--report-only`
rebuilds the summary and report from the saved units. The studies' own outputs go to `--runs`
(default: a folder in the system's temporary folder, away from the suite's files).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from suite import HERE, Pair, fail, load_best_known, load_pairs, select, select_sweeps  # noqa: E402

WITHIN = 0.01  # a seed succeeds within 1 % of the best known ...
SEEDS_NEEDED = (4, 5)  # ... in at least 4 of 5 seeds (scaled to the seeds run)
KILL_AFTER_S = 240  # a process still running this long past its budget is killed


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def study_config(pair: Pair, seed: int, budget_s: float, out: Path) -> dict:
    """The study of one unit: the shipped studies' settings with a time budget only."""
    return {"name": f"{pair.name}.seed-{seed}", "accelerator": str(pair.chip_path),
            "workload": pair.workload_ref, "sizes": pair.sizes, "objective": pair.objective,
            "structures": "search", "budget": {"seconds": budget_s}, "seed": seed,
            "out": str(out)}


def evaluate_cycles(pair: Pair, tree: Path) -> float | None:
    """Cycles of a dataflow file from `tileflow evaluate --json` (None where invalid)."""
    done = subprocess.run(
        [sys.executable, "-m", "tileflow.cli", "evaluate", "--arch", str(pair.chip_path),
         "--workload", pair.workload_ref, *pair.set_flags(), "--dataflow", str(tree), "--json"],
        capture_output=True, text=True, env=env())
    if done.returncode != 0:
        return None
    data = json.loads(done.stdout)
    return float(data["cycles"]) if data["valid"] else None


def run_unit(pair: Pair, seed: int, budget_s: float, runs: Path) -> dict:
    """Explore one pair with one seed; the result record of the unit."""
    folder = runs / pair.name / f"seed-{seed}"
    config = folder / "study.yaml"
    atomic_write(config, yaml.safe_dump(study_config(pair, seed, budget_s, folder / "out"),
                                        sort_keys=False))
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "tileflow.cli", "explore", str(config),
                               "--quiet"], capture_output=True, text=True, env=env(),
                              timeout=budget_s + KILL_AFTER_S)
        code, error = done.returncode, done.stderr.strip()[-2000:]
    except subprocess.TimeoutExpired:
        code, error = None, f"killed after {budget_s + KILL_AFTER_S:g} s"
    wall_s = time.perf_counter() - start
    record = {"pair": pair.name, "seed": seed, "budget_s": budget_s, "wall_s": wall_s,
              "exit_code": code, "error": error if code != 0 else None,
              "found_cycles": None, "study_seconds": None, "evaluations": None}
    summary = folder / "out" / "summary.json"
    if code == 0 and summary.exists():
        data = json.loads(summary.read_text())
        record["study_seconds"] = data.get("seconds")
        record["evaluations"] = data.get("evaluations")
        found = data.get("found") or {}
        if found.get("valid"):
            record["found_cycles"] = found["cycles"]
            record["found_structure"] = found.get("structure")
            record["checked_cycles"] = evaluate_cycles(pair, folder / "out" / "best.yaml")
            record["found_tree"] = (folder / "out" / "best.yaml").read_text()
    return record


def run_sweep(name: str, config: Path, budget_s: float, runs: Path) -> dict:
    """One sweep (`tileflow sweep`, seed 0, `budget_s` per point); its points' cycles."""
    out = runs / "sweeps" / name
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "tileflow.cli", "sweep", str(config),
                               "--budget-seconds", f"{budget_s:g}", "--out", str(out),
                               "--quiet"], capture_output=True, text=True, env=env(),
                              timeout=10 * (budget_s + KILL_AFTER_S))
        code, error = done.returncode, done.stderr.strip()[-2000:]
    except subprocess.TimeoutExpired:
        code, error = None, "killed"
    record = {"sweep": name, "budget_s": budget_s, "wall_s": time.perf_counter() - start,
              "exit_code": code, "error": error if code != 0 else None, "points": []}
    summary = out / "summary.json"
    if code == 0 and summary.exists():
        data = json.loads(summary.read_text())
        record["points"] = [{"parameters": p["parameters"], "valid": p.get("valid"),
                             "cycles": p.get("cycles") if p.get("valid") else None}
                            for p in data["points"]]
    return record


def monotone(points: list[dict]) -> bool | None:
    """Latency never rises as the one swept resource grows (None: a point has no valid
    result). Capacities and bandwidths only add room, so a larger value can always run the
    smaller one's dataflow."""
    if not points or any(p["cycles"] is None for p in points):
        return None
    ordered = sorted(points, key=lambda p: list(p["parameters"].values()))
    return all(b["cycles"] <= a["cycles"] * (1 + 1e-9)
               for a, b in zip(ordered, ordered[1:], strict=False))


def gap(found: float | None, best: float | None) -> float | None:
    """How far above the best known the found latency is (a fraction; negative: better)."""
    if found is None or not best:
        return None
    return found / best - 1


def needed(seeds: int) -> int:
    """Seeds that must succeed: 4 of 5, scaled (at least one)."""
    return max(1, -(-seeds * SEEDS_NEEDED[0] // SEEDS_NEEDED[1]))


def summarise(pairs: list[Pair], seeds: int, budget_s: float, out: Path,
              sweeps: tuple[str, ...] = ()) -> dict:
    known = load_best_known()
    rows = []
    for pair in pairs:
        best = known.get(pair.name, {})
        units = []
        for seed in range(seeds):
            path = out / "units" / f"{pair.name}.seed-{seed}.json"
            if path.exists():
                u = json.loads(path.read_text())
                u["gap"] = gap(u["found_cycles"], best.get("cycles"))
                u["within_1pct"] = u["gap"] is not None and u["gap"] <= WITHIN
                u["within_budget"] = u["wall_s"] <= u["budget_s"]
                units.append(u)
        ok = sum(u["within_1pct"] and u["within_budget"] for u in units)
        found = [u for u in units if u["found_cycles"] is not None]
        top = min(found, key=lambda u: u["found_cycles"], default=None)
        rows.append({"pair": pair.name, "chip": pair.chip, "workload": pair.workload,
                     "sizes": pair.sizes, "objective": pair.objective,
                     "best_known_cycles": best.get("cycles"), "best_known_how": best.get("how"),
                     "best_known_tree": best.get("tree"), "units": units,
                     "seeds_run": len(units), "seeds_ok": ok,
                     "best_found_cycles": None if top is None else top["found_cycles"],
                     "best_found_seed": None if top is None else top["seed"],
                     "seeds_near_best_found": sum(
                         gap(u["found_cycles"], top["found_cycles"]) <= WITHIN
                         for u in found) if top is not None else 0,
                     "meets_target": len(units) == seeds and ok >= needed(seeds)})
    return {"budget_s": budget_s, "seeds": seeds, "seeds_needed": needed(seeds),
            "target": f"within {WITHIN:.0%} of the best known in at least {needed(seeds)} of "
                      f"{seeds} seeds, the whole explore process within its {budget_s:g} s",
            "pairs_meeting_target": sum(r["meets_target"] for r in rows),
            "pairs": rows, "sweeps": (swept := sweep_rows(sweeps, out)),
            "sweeps_monotone": sum(r["monotone"] is True for r in swept)}


def sweep_rows(names: tuple[str, ...], out: Path) -> list[dict]:
    rows = []
    for name in names:
        path = out / "units" / f"sweep.{name}.json"
        if path.exists():
            record = json.loads(path.read_text())
            rows.append({**record, "monotone": monotone(record["points"])})
        else:
            rows.append({"sweep": name, "points": [], "monotone": None, "not_run": True})
    return rows


def fmt_gap(g: float | None) -> str:
    return "-" if g is None else f"{g:+.2%}"


def report(summary: dict) -> str:
    lines = [
        "# Search-quality suite", "",
        f"Target: {summary['target']}. Pairs meeting it: {summary['pairs_meeting_target']} of "
        f"{len(summary['pairs'])}." + (
            f" Sweeps monotone in latency: {summary['sweeps_monotone']} of "
            f"{len(summary['sweeps'])}." if summary.get("sweeps") else ""), "",
        "Per seed: found cycles, gap to the best known, wall seconds of the whole `tileflow "
        "explore` process, start-up and outputs included (budget {:g} s), and in brackets the "
        "seconds the study itself reports. `ok`: within 1 % and within the budget; a negative "
        "gap is a point better than the best known.".format(summary["budget_s"]), "",
        "| pair | best known (cycles) | how | " + " | ".join(
            f"seed {k}" for k in range(summary["seeds"])) + " | ok / needed |",
        "|---|---:|---|" + "---|" * summary["seeds"] + "---|"]
    for r in summary["pairs"]:
        cells = []
        by_seed = {u["seed"]: u for u in r["units"]}
        for k in range(summary["seeds"]):
            u = by_seed.get(k)
            if u is None:
                cells.append("not run")
            elif u["found_cycles"] is None:
                cells.append(f"no valid result ({u['wall_s']:.0f} s)")
            else:
                mark = "ok" if u["within_1pct"] and u["within_budget"] else "MISS"
                study = ("" if u.get("study_seconds") is None
                         else f" (study {u['study_seconds']:.0f} s)")
                cells.append(f"{u['found_cycles']:,.0f} ({fmt_gap(u['gap'])}), "
                             f"{u['wall_s']:.0f} s{study} {mark}")
        best = "-" if r["best_known_cycles"] is None else f"{r['best_known_cycles']:,.0f}"
        lines.append(f"| {r['pair']} | {best} | {r['best_known_how'] or '-'} | "
                     + " | ".join(cells)
                     + f" | {r['seeds_ok']} / {summary['seeds_needed']}"
                     + (" (met)" if r["meets_target"] else "") + " |")
    beyond = [r for r in summary["pairs"] if r.get("best_found_cycles") is not None
              and r["best_known_cycles"] is not None
              and gap(r["best_found_cycles"], r["best_known_cycles"]) < -WITHIN]
    if beyond:
        lines += ["", "## Beyond the best known", "",
                  "Pairs where a seed found a dataflow more than 1 % better than the best "
                  "known (the best known stays as committed before the search work; the best "
                  "found is the sharper reference). Seeds within 1 % of the best found:", "",
                  "| pair | best known | best found (seed) | gap | seeds within 1 % of it |",
                  "|---|---:|---:|---:|---|"]
        for r in beyond:
            lines.append(f"| {r['pair']} | {r['best_known_cycles']:,.0f} | "
                         f"{r['best_found_cycles']:,.0f} ({r['best_found_seed']}) | "
                         f"{fmt_gap(gap(r['best_found_cycles'], r['best_known_cycles']))} | "
                         f"{r['seeds_near_best_found']} of {r['seeds_run']} |")
    if summary.get("sweeps"):
        lines += ["", "## Sweeps", "",
                  "Latency (cycles) of the best found at each point (seed 0, the budget per "
                  "point); more capacity or bandwidth must never give a slower answer.", "",
                  "| sweep | points | monotone in latency |", "|---|---|---|"]
        for r in summary["sweeps"]:
            pts = ", ".join(
                f"{'/'.join(f'{v:g}' for v in p['parameters'].values())}: "
                + ("invalid" if p["cycles"] is None else f"{p['cycles']:,.0f}")
                for p in r["points"]) or ("not run" if r.get("not_run") else
                                          f"failed: {r.get('error')}")
            flag = {True: "yes", False: "**NO**", None: "-"}[r["monotone"]]
            swept = ", ".join(r["points"][0]["parameters"]) if r["points"] else ""
            lines.append(f"| {r['sweep']} ({swept}) | {pts} | {flag} |")
    lines += ["", "Chips, workloads and the best-known trees: `pairs.yaml`, `best-known.json`, "
              "`trees/`, README.md (why each hand-written tree is good).", ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--pairs", help="comma-separated pair names (default: all)")
    p.add_argument("--budget-s", type=float, default=60,
                   help="seconds per study (and per sweep point)")
    p.add_argument("--sweeps", default="all",
                   help="sweeps/ to run: all (default), none or comma-separated names")
    p.add_argument("--out", type=Path, default=HERE,
                   help="folder for units/, summary.json and report.md")
    p.add_argument("--runs", type=Path,
                   default=Path(tempfile.gettempdir()) / "tileflow-quality-runs",
                   help="folder for the studies' own outputs")
    p.add_argument("--report-only", action="store_true",
                   help="rebuild summary.json and report.md from the saved units")
    args = p.parse_args()
    if args.seeds < 1 or args.budget_s <= 0:
        fail("--seeds must be at least 1 and --budget-s above 0")
    pairs = select(load_pairs(), args.pairs)
    sweeps = select_sweeps(args.sweeps)
    out = args.out.resolve()
    if not args.report_only:
        for pair in pairs:
            for seed in range(args.seeds):
                unit = out / "units" / f"{pair.name}.seed-{seed}.json"
                if unit.exists():
                    continue
                print(f"{pair.name} seed {seed} ...", end=" ", flush=True)
                record = run_unit(pair, seed, args.budget_s, args.runs.resolve())
                atomic_write(unit, json.dumps(record, indent=2) + "\n")
                print(f"{record['found_cycles']} cycles, {record['wall_s']:.1f} s"
                      + (f" (exit {record['exit_code']})" if record["exit_code"] else ""),
                      flush=True)
        for name, config in sweeps.items():
            unit = out / "units" / f"sweep.{name}.json"
            if unit.exists():
                continue
            print(f"sweep {name} ...", end=" ", flush=True)
            record = run_sweep(name, config, args.budget_s, args.runs.resolve())
            atomic_write(unit, json.dumps(record, indent=2) + "\n")
            print(f"monotone: {monotone(record['points'])}, {record['wall_s']:.0f} s", flush=True)
    summary = summarise(pairs, args.seeds, args.budget_s, out, tuple(sweeps))
    atomic_write(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    atomic_write(out / "report.md", report(summary))
    print(f"{summary['pairs_meeting_target']} of {len(pairs)} pairs meet the target; "
          f"{out / 'report.md'}")


if __name__ == "__main__":
    main()
