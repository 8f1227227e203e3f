"""What `tileflow explore` writes into its output folder, each file atomically (a temporary
file in the same folder, then a rename): the best dataflow (YAML that `tileflow evaluate`
reads), every point (CSV), the convergence plot, summary.md and summary.json, and the
found dataflow's timeline (PNG and a Chrome trace)."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tileflow.cost.result import Result
from tileflow.explore.studies import figures, pareto, timeline
from tileflow.explore.studies.reload import inputs, load_study
from tileflow.explore.studies.session import Outcome, objective_value
from tileflow.outputs import check_output_file, finite, json_text
from tileflow.provenance import MODEL_VERSION
from tileflow.tree import Dataflow, Op, Tile

FILES = ("best.yaml", "points.csv", "convergence.png", "summary.md", "summary.json",
         "timeline.png", "timeline.json", "front.csv", "front.png")


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file in the same folder, then rename over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; other outputs follow umask
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def describe(flow: Dataflow, arch) -> list[str]:
    """The tree in words, one sentence per tile."""
    lines: list[str] = []

    def go(node, depth: int) -> None:
        if isinstance(node, Op):
            return
        pad = "  " * depth
        temporal = [str(lp) for lp in node.loops if not lp.spatial and lp.factor > 1]
        spatial = [f"{lp.dim}:{lp.factor}" for lp in node.loops if lp.spatial and lp.factor > 1]
        ops = [c.op for c in node.children if isinstance(c, Op)]
        text = f"{pad}- A tile at {node.level}"
        if node.name:
            text += f" ('{node.name}')"
        text += (f" steps over {' '.join(temporal)}" if temporal else " takes one step")
        if spatial:
            text += f", spread over {' x '.join(spatial)} instances below it"
        if ops:
            units = ", ".join(f"'{o}'" for o in ops)
            text += f"; it runs {units}"
        tiles = [c for c in node.children if isinstance(c, Tile)]
        if len(node.children) > 1:
            text += f"; its {len(node.children)} children run {node.semantics.words}"
        lines.append(text + ".")
        for c in tiles:
            go(c, depth + 1)

    go(flow.root, 0)
    return lines


def _figures(result: Result, arch, layerwise: float | None) -> dict:
    on_chip = {f.level: f.words for f in result.footprints}
    return {"valid": result.valid, "cycles": result.cycles,
            "speedup_over_layerwise": (layerwise / result.cycles) if layerwise else None,
            "dram_words": result.dram_words, "energy_pj": result.energy_pj,
            "footprint_words": on_chip, "bottleneck": result.bottleneck.to_dict(),
            "violations": [v.to_dict() for v in result.violations]}


def summary(outcome: Outcome) -> dict:
    """The figures of summary.md as one JSON-ready object."""
    cfg = outcome.config
    layer = next((b.result.cycles for b in outcome.baselines if b.name == "layerwise"), None)
    best = outcome.best_result
    data: dict = {
        "study": cfg.name, "accelerator": outcome.arch.name, "workload": outcome.workload.name,
        "sizes": dict(outcome.workload.sizes), "objective": cfg.objective,
        "objectives": list(cfg.objectives), "structures": _mode(cfg.structures),
        "trees": list(cfg.trees),
        "tie_break": {"objective": cfg.tie_break.objective,
                      "tolerance": cfg.tie_break.tolerance},
        "method": cfg.method, "evaluations": int(len(outcome.points)),
        "valid_points": int(outcome.points["valid"].sum()) if len(outcome.points) else 0,
        "seconds": outcome.seconds, "interrupted": outcome.interrupted,
        "model_version": MODEL_VERSION, "found_for": found_for(outcome), "found": None,
        "baselines": []}
    kept = inputs(cfg.workload, cfg.accelerator)
    if kept:
        data["inputs"] = kept
    if outcome.workers is not None:
        data["workers"] = outcome.workers
    if best is not None:
        data["found"] = {"structure": outcome.best_structure,
                         **_figures(best, outcome.arch, layer),
                         "objective_value": objective_value(best, cfg.objective),
                         "description": describe(outcome.best, outcome.arch)}
    for b in outcome.baselines:
        entry = {"dataflow": b.name, "own_rule": _figures(b.result, outcome.arch, layer)}
        if best is not None:
            entry["own_rule"]["found_speedup"] = b.result.cycles / best.cycles
        if b.searched_result is not None:
            entry["searched"] = _figures(b.searched_result, outcome.arch, layer)
            if best is not None:
                entry["searched"]["found_speedup"] = b.searched_result.cycles / best.cycles
        data["baselines"].append(entry)
    valid = [b.result.cycles for b in outcome.baselines if b.result.valid]
    if best is not None and valid:
        data["found"]["speedup_over_best_baseline"] = min(valid) / best.cycles
    if outcome.structure_search is not None:
        data["structure_search"] = outcome.structure_search
    if outcome.budget is not None:
        data["budget"] = outcome.budget
    if outcome.merged:
        data["merged_structures"] = outcome.merged
    if len(cfg.objectives) == 2:
        table = pareto.front(outcome.points, cfg.objectives)
        keep = ["structure", "factors", "cycles", "energy_pj", "dram_words", "edp"]
        data["front"] = table[[k for k in keep if k in table]].to_dict("records")
    return data


def found_for(outcome: Outcome) -> dict:
    """The run the study's dataflows are for, as `tileflow evaluate` reads it from best.yaml:
    the accelerator and workload (a file as an absolute path), the preset, every size and
    the objective."""
    cfg = outcome.config

    def source(value: str) -> str:
        path = Path(value)
        return str(path.resolve()) if path.suffix in (".yaml", ".yml") and path.is_file() \
            else value

    out: dict = {"accelerator": source(cfg.accelerator), "workload": source(cfg.workload)}
    if cfg.preset:
        out["preset"] = cfg.preset
    out["sizes"] = {str(k): int(v) for k, v in outcome.workload.sizes.items()}
    out["objective"] = "+".join(cfg.objectives) if len(cfg.objectives) > 1 else cfg.objective
    return out


def budget_lines(budget: dict | None) -> list[str]:
    """summary.md's paragraph on the budget: the caps, their split and what each phase
    used."""
    if not budget:
        return []

    def cap(evals, seconds) -> str:
        parts = ([f"{evals:,} evaluations"] if evals is not None else []) + \
            ([f"{seconds:,.1f} s"] if seconds is not None else [])
        return " and ".join(parts) or "no cap"

    s, t = budget["phases"]["structure_search"], budget["phases"]["tile_search"]
    text = f"Budget: {cap(budget['evaluations'], budget['seconds'])} for the whole run"
    if budget["structure_share"]:
        text += (f", split {budget['structure_share']:.0%} to the structure search "
                 f"({cap(s['evaluations_cap'], s['seconds_cap'])}; it used "
                 f"{s['evaluations']:,} evaluations in {s['seconds']:,.1f} s"
                 + (f", stopped by its {s['stopped_by']} cap" if s["stopped_by"] else "")
                 + ") and the rest to the tile-factor search")
    text += (f" ({cap(t['evaluations_cap'], t['seconds_cap'])}; it used "
             f"{t['evaluations']:,} evaluations in {t['seconds']:,.1f} s). Used in all: "
             f"{budget['evaluations_used']:,} evaluations in {budget['seconds_used']:,.1f} s.")
    return [text, ""]


def _mode(structures) -> str | list[str]:
    return list(structures) if isinstance(structures, tuple) else structures


def _num(x, pattern: str = "{:,.0f}") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else pattern.format(x)


def summary_markdown(outcome: Outcome, data: dict) -> str:
    levels = [lv.name for lv in outcome.arch.levels[1:]]
    head = ("| dataflow | factors | valid | cycles | speed-up over Layerwise | found is faster by "
            "| DRAM words | energy (uJ) | " + " | ".join(f"footprint {lv}" for lv in levels)
            + " |")
    rows = [head, "|" + "---|" * (8 + len(levels))]

    def row(name: str, how: str, fig: dict) -> str:
        fp = " | ".join(_num(fig["footprint_words"].get(lv)) for lv in levels)
        return (f"| {name} | {how} | {'yes' if fig['valid'] else 'no'} | {_num(fig['cycles'])} "
                f"| {_num(fig['speedup_over_layerwise'], '{:.2f}x')} "
                f"| {_num(fig.get('found_speedup'), '{:.2f}x')} | {_num(fig['dram_words'])} "
                f"| {_num(fig['energy_pj'] / 1e6, '{:,.1f}')} | {fp} |")

    found = data["found"]
    if found:
        rows.append(row(f"**found** ({found['structure']})", "searched", found))
    for b in data["baselines"]:
        rows.append(row(b["dataflow"], "own rule", b["own_rule"]))
        if "searched" in b:
            rows.append(row(b["dataflow"], "searched", b["searched"]))
    cfg = outcome.config
    text = [f"# Exploration: {cfg.name}", "",
            f"{outcome.workload.name} {dict(outcome.workload.sizes)} on {outcome.arch.name}; "
            f"objective {cfg.objective}; {data['evaluations']:,} points evaluated "
            f"({data['valid_points']:,} valid) by {cfg.method} in {outcome.seconds:,.1f} s"
            + (" (interrupted)" if outcome.interrupted else "") + ".", ""]
    if found:
        text += [f"The best dataflow found has the `{found['structure']}` structure: "
                 f"{found['cycles']:,.0f} cycles"
                 + (f", {found['speedup_over_layerwise']:.2f}x faster than Layerwise"
                    if found["speedup_over_layerwise"] else "")
                 + (f" and {found['speedup_over_best_baseline']:.2f}x faster than the best "
                    "baseline with its own rule" if found.get("speedup_over_best_baseline")
                    else "")
                 + f". Bottleneck: {found['bottleneck']['message']}.", "",
                 "The found tree (`best.yaml`):",
                 "", *found["description"], ""]
    else:
        text += ["No valid dataflow was found within the budget.", ""]
    text += budget_lines(data.get("budget"))
    search = data.get("structure_search")
    if search:
        text += [f"Structures: a genetic search over tree structures (seeded with the "
                 f"baselines' {', '.join(search['baseline_seeds'])}) evaluated "
                 f"{search['structures']:,} structures with {search['evaluations']:,} "
                 f"tile-factor evaluations in {search['seconds']:,.1f} s; its best "
                 f"structures (`searched-1`, ...) and the baselines' were then searched "
                 f"above. Repairs by rule: {search['repairs']}; children rejected: "
                 f"{search['rejected']}.", ""]
    if data.get("merged_structures"):
        text += ["Structures that several sources gave (baselines, your trees, the structure "
                 "search) were each searched once, under all their names and from every "
                 "source's factors: " + ", ".join(
                     f"`{label}`" for label in data["merged_structures"]) + ".", ""]
    if "front" in data:
        x, y = cfg.objectives
        text += [f"Pareto front of {x} and {y} over the valid points ({len(data['front'])} "
                 "points; `front.csv`, `front.png`):", "",
                 "| structure | factors | cycles | energy (uJ) | DRAM words |",
                 "|---|---|---|---|---|"]
        text += [f"| {r['structure']} | {r['factors']} | {_num(r['cycles'])} | "
                 f"{_num(r['energy_pj'] / 1e6, '{:,.2f}')} | {_num(r['dram_words'])} |"
                 for r in data["front"]]
        text += ["", "![front](front.png)", ""] if _drawn(data, "front.png") else [""]
    text += ["Baselines: *own rule* is each baseline's factors chosen by its own rule (Chimera: "
             "least DRAM traffic that fits; TileFlow-Pipe: lowest latency; the others: "
             "largest tiles that fit); *searched* is the best point of its structure in this "
             "study.", "", *rows, ""]
    text += [f"![{name[:-4]}]({name})\n" for name in ("convergence.png", "timeline.png")
             if _drawn(data, name)]
    skipped = data.get("figures_skipped")
    if skipped:
        text += [f"Figures not drawn: {', '.join(skipped['files'])} ({skipped['why']}; "
                 f"`{skipped['redraw']}` draws them from this folder).", ""]
    return "\n".join(text)


def _drawn(data: dict, name: str) -> bool:
    """Whether this run wrote a figure (every figure where the file list is not known)."""
    return "files" not in data or name in data["files"]


def write_all(outcome: Outcome, out_dir: str | Path, deadline: float | None = None) -> dict:
    """Write every output file; returns the summary object. With `deadline` (a
    `time.perf_counter()` instant: the end of the run's time budget) the figures come last
    and only as far as the time allows (see `figures.draw_within`); those left out are
    listed in summary.json `figures_skipped` and redrawn by `tileflow figures OUT`."""
    from ruamel.yaml import YAML

    from tileflow.tree import to_dict

    out = Path(out_dir)
    cfg = outcome.config
    data = summary(outcome)
    data["files"] = {}
    jobs: list[tuple[str, figures.Draw]] = []
    if outcome.best is not None:
        def dump_yaml(p: Path) -> None:
            yaml = YAML()
            yaml.default_flow_style = None
            with p.open("w") as handle:
                yaml.dump({**to_dict(outcome.best), "found_for": found_for(outcome)}, handle)

        atomic_write(out / "best.yaml", dump_yaml)
        line = timeline.layout(outcome.workload, outcome.arch, outcome.best,
                               outcome.best_result)
        title = figures.timeline_title(outcome.config.name, line)
        atomic_write(out / "timeline.json", lambda p: p.write_text(
            timeline.trace_json(line.events, outcome.arch.clock_ghz)))
        jobs.append(("timeline.png", lambda p: timeline.plot(line, title, p)))
    atomic_write(out / "points.csv", lambda p: outcome.points.to_csv(p, index=False))
    jobs.insert(0, ("convergence.png", lambda p: figures.convergence_plot(
        _convergence(outcome), p)))
    if len(cfg.objectives) == 2:
        table = pareto.front(outcome.points, cfg.objectives)
        atomic_write(out / "front.csv", lambda p: table.to_csv(p, index=False))
        marks = {b.name: tuple(objective_value(b.result, o) for o in cfg.objectives)
                 for b in outcome.baselines if b.result.valid}
        jobs.append(("front.png", lambda p: pareto.plot(
            outcome.points, table, cfg.objectives, marks, f"{cfg.name}: Pareto front", p)))
    drawn = (figures.draw_in_process(jobs, out, atomic_write) if deadline is None
             else figures.draw_within(jobs, out, deadline, atomic_write))
    skipped = [name for name, _ in jobs if name not in drawn]
    for name in skipped:  # an earlier run's figure would not match this run's outputs
        (out / name).unlink(missing_ok=True)
    if skipped:
        data["figures_skipped"] = {"files": skipped, "why": "the time budget ran out",
                                   "redraw": f"tileflow figures {out}"}
    data["slots"] = outcome.slots
    # this run's files only: a front.csv or best.yaml left by an earlier run is not listed
    written = [name for name in FILES if name not in ("summary.md", "summary.json")
               and name in _this_run(outcome) and name not in skipped]
    data["files"] = {name: str(out / name) for name in [*written, "summary.md",
                                                         "summary.json"]}
    data = finite(data)
    atomic_write(out / "summary.json", lambda p: p.write_text(json_text(data, indent=2)))
    atomic_write(out / "summary.md", lambda p: p.write_text(summary_markdown(outcome, data)))
    return data


def _convergence(outcome: Outcome) -> figures.Convergence:
    pts = outcome.points
    return figures.Convergence(
        outcome.config.name, outcome.config.method, outcome.config.objective,
        pts["cost"].to_numpy(float) if len(pts) else np.array([]),
        pts["seconds"].to_numpy(float) if len(pts) else np.array([]),
        [(b.name, objective_value(b.result, outcome.config.objective))
         for b in outcome.baselines if b.result.valid])


def _this_run(outcome: Outcome) -> set[str]:
    """The files write_all writes for this outcome."""
    names = {"points.csv", "convergence.png", "summary.md", "summary.json"}
    if outcome.best is not None:
        names |= {"best.yaml", "timeline.png", "timeline.json"}
    if len(outcome.config.objectives) == 2:
        names |= {"front.csv", "front.png"}
    return names


def redraw(folder: str | Path, accelerator: str | None = None) -> list[str]:
    """Draw a saved study's figures again from its folder (summary.json, points.csv,
    best.yaml): `tileflow figures DIR`. Returns the names written."""
    saved = load_study(folder, accelerator)
    out, data = saved.folder, saved.summary
    points = saved.points()  # the convergence curve: without it, no figure is redrawn
    for name in ("convergence.png", "timeline.png", "front.png"):
        check_output_file(out / name, (".png",), "folder")
    objective = data.get("objective", "latency")
    own = [(b["dataflow"], b["own_rule"]) for b in data.get("baselines", [])
           if b.get("own_rule", {}).get("valid")]
    name = data.get("study", out.name)
    progress = figures.Convergence(
        name, data.get("method", "mcts"), objective,
        points["cost"].to_numpy(float) if len(points) else np.array([]),
        points["seconds"].to_numpy(float) if len(points) else np.array([]),
        [(b, figures.objective_of(fig, objective)) for b, fig in own])
    jobs: list[tuple[str, figures.Draw]] = [
        ("convergence.png", lambda p: figures.convergence_plot(progress, p))]
    if saved.best is not None and saved.best_result is not None:
        line = timeline.layout(saved.workload, saved.arch, saved.best, saved.best_result)
        title = figures.timeline_title(name, line)
        jobs.append(("timeline.png", lambda p: timeline.plot(line, title, p)))
    objectives = tuple(data.get("objectives", [objective]))
    if len(objectives) == 2:
        table = pareto.front(points, objectives)
        marks = {b: tuple(figures.objective_of(fig, o) for o in objectives) for b, fig in own}
        jobs.append(("front.png", lambda p: pareto.plot(
            points, table, objectives, marks, f"{name}: Pareto front", p)))
    return figures.draw_in_process(jobs, out, atomic_write)
