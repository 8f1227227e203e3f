"""One `tileflow sweep` run: at every point of the sweep, the explorer's best dataflow on the
accelerator with the point's values (one study per point, stored in OUT/studies/, resumable),
and the data-movement bound at the point's capacity; the table and plots are rewritten after
every point, so an interrupted sweep keeps everything completed.

Points run fewer resources first (`monotone.sweep_order`), and each starts from its finished
neighbours' best dataflows (warm starts): every one still valid on the point's accelerator is
searched there as a user's tree is, its own factors a point of the study, so the point's best
is never worse than a neighbour's best re-evaluated on it. With more capacity or bandwidth
a dataflow's cycles and DRAM words never grow, so a sweep is monotone in them by
construction; the tie-break (energy after latency) may not pick a point worse than a
neighbour with fewer resources (`monotone.ceiling`). A point whose chip area exceeds
`max_area_mm2` is not run.

OUT/ holds: accelerators/pNNN.yaml (each point's accelerator), studies/pNNN.db (its study),
points/pNNN/ (the explore outputs of the point, and bound.yaml, a dataflow that reaches the
bound there), warm/pNNN/warm-pMMM.yaml (the neighbours' best trees the point started from),
bounds/*.json (each bound's Pareto front), sweep.csv, summary.json, summary.md, sweep.png and
bound.png."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tileflow import provenance
from tileflow.cost.components import ChipArea, chip_area
from tileflow.errors import InputError
from tileflow.evaluator.structure import Structure
from tileflow.explore.structures.bound import Bound, FrontPoint, data_movement_bound, lifted
from tileflow.explore.sweeps.monotone import ceiling, neighbours, sweep_order
from tileflow.explore.sweeps.sweep_config import (
    CAPACITY_PARAMETERS,
    SweepConfig,
    accelerator_document,
    check_parameters,
    describe_point,
    point_arch,
    point_label,
)
from tileflow.outputs import write_text_atomic, write_yaml
from tileflow.specs.arch import Architecture


@dataclass
class SweepState:
    """What a sweep has done so far (rows in sweep order; bounds by key)."""

    config: SweepConfig
    rows: list[dict] = field(default_factory=list)
    bounds: dict[str, Bound] = field(default_factory=dict)
    seconds: float = 0.0
    interrupted: bool = False


def fingerprint(config: SweepConfig) -> str:
    """What a sweep was started from: the model version, the contents of its accelerator and
    workload (not only their names) and its settings; resuming with others is an error."""
    e = config.explore
    w, arch = e.load()
    parts = [e.objective, repr(e.structures), e.method, repr(config.mode),
             repr(config.bound_level), repr([(p.name, p.values) for p in config.parameters]),
             repr(sorted(provenance.marks(arch, w, [e.limits, e.genetic, e.top]).items()))]
    if config.max_area_mm2 is not None:
        parts.append(f"max_area_mm2={config.max_area_mm2!r}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def bound_key(config: SweepConfig, point: dict[str, float]) -> str:
    """The bound's file name: what it depends on (the workload, the accelerator, the level,
    the points' values other than that level's capacity). Points that differ only in the
    capacity share one bound, and a sweep finds a bound computed before in OUT/bounds/."""
    e = config.explore
    rest = {k: v for k, v in point.items()
            if not (k.split(".", 1)[0] == config.bound_level
                    and k.split(".", 1)[-1] in CAPACITY_PARAMETERS)}
    text = json.dumps([e.workload, e.preset, sorted(e.sizes.items()), e.accelerator,
                       config.bound_level, config.bound_max_tilings,
                       config.bound_sample_tilings, sorted(rest.items())])
    return "b" + hashlib.sha256(text.encode()).hexdigest()[:10]


def bound_structures(w, arch: Architecture, level: str) -> list[tuple[str, Structure]]:
    """The structures the bound covers, on the accelerator with `level` unbounded: every
    structure of the generated space (an operator's share of the array fixed to all of it,
    the largest spatial limits), each also with every operator's own tiles at the levels
    above `level` (a lone operator has none by default, and without them nothing is tiled
    against DRAM); and the named baselines' structures. Loop orders are the defaults."""
    from tileflow.explore.structures.structure_space import SpaceOptions, StructureSpace, structures

    space = StructureSpace(w, lifted(arch, level), SpaceOptions(shares=(1,)))
    f = space.frame
    above = arch.level_index[level]
    out: list[tuple[str, Structure]] = []
    seen = set()

    def add(name: str, enc) -> None:
        if enc not in seen:
            seen.add(enc)
            out.append((name, space.structure(enc)))

    found = list(structures(space))
    for k, enc in enumerate(found):
        add(f"space-{k}", enc)
    for k, enc in enumerate(found):
        loops = dict(enc.loop_map)
        for o in range(space.n):
            for lv in range(min(above, f.loop_level[o])):
                if not loops.get(f.own_key(o, lv)):
                    loops[f.own_key(o, lv)] = space.own_loops(o, lv)
        add(f"space-{k}-outer", space.repair(enc.with_loops(loops))[0])
    for name, enc in space.baselines().items():
        add(name, enc)
    return out


def _bound_from_dict(data: dict) -> Bound:
    sampled = data.get("sampled", [])
    names = tuple(dict.fromkeys(p["structure"] for p in [*data["front"], *sampled]))
    front = tuple(FrontPoint(p["footprint_words"], p["dram_words"], names.index(p["structure"]),
                             tuple(p["factors"])) for p in data["front"])
    others = tuple(FrontPoint(p["footprint_words"], p["dram_words"],
                              names.index(p["structure"]), ()) for p in sampled)
    return Bound(data["level"], data["word_bytes"], data["compulsory_words"], front, names,
                 data["tilings"], data["evaluated"], tuple(data["skipped"]), others)


def _load_previous(config: SweepConfig, out: Path, resume: bool) -> SweepState:
    state = SweepState(config)
    summary = out / "summary.json"
    if not summary.exists():
        if resume and not (out / "studies").exists():
            raise InputError(f"--resume: there is no sweep in '{out}' to resume")
        return state
    if not resume:
        raise InputError(f"a sweep already exists in '{out}'; give --resume to continue it, "
                         "or another --out")
    try:
        data = json.loads(summary.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read '{summary}' to resume: {exc}") from None
    if data.get("fingerprint") != fingerprint(config):
        raise InputError(f"the sweep in '{out}' was started from other contents (the "
                         "accelerator's or workload's contents, the structures, objective, "
                         "parameters or model version differ); give another --out")
    state.rows = [r for r in data.get("points", []) if r.get("status") == "done"]
    for key in {bound_key(config, r["parameters"]) for r in state.rows}:
        path = out / "bounds" / f"{key}.json"
        if config.bound_level and path.exists():
            state.bounds[key] = _bound_from_dict(json.loads(path.read_text()))
    return state


def estimate(config: SweepConfig, points: int, done: int, over_area: int = 0) -> str:
    """The work ahead, said before it starts: points left times each point's budget
    (`over_area`: points left that exceed the area limit and are not run)."""
    e, left = config.explore, points - done - over_area
    per = " and ".join(([f"{e.budget_evals:,} evaluations"] if e.budget_evals else [])
                       + ([f"{e.budget_seconds:,.0f} s"] if e.budget_seconds else []))
    total = " and ".join(([f"{left * e.budget_evals:,} evaluations"] if e.budget_evals else [])
                         + ([f"{left * e.budget_seconds:,.0f} s"] if e.budget_seconds else []))
    text = (f"sweep {e.name}: {left} of {points} points to run, each within {per or 'no cap'}"
            f": at most {total or 'no cap'} in all")
    if over_area:
        text += (f" ({over_area} over the area limit of {config.max_area_mm2:g} mm2 are not "
                 "run)")
    if config.bound_level:
        text += (f", plus a data-movement bound per point (at {config.bound_level}; "
                 "not capped by the budget)")
    return text


def point_areas(config: SweepConfig, archs: list[Architecture]) -> list[ChipArea]:
    """Each point's chip area; with `max_area_mm2`, an accelerator without an area model is
    an error naming the config's line."""
    areas = [chip_area(arch) for arch in archs]
    if config.max_area_mm2 is not None and any(a.total_mm2 is None for a in areas):
        raise InputError("sweep.max_area_mm2 needs the chip's area, and the accelerator has "
                         "none: name its 'technology_nm' (and the compute units' 'precision') "
                         "so that the component model gives the levels and lanes an area",
                         config.source, config.area_where)
    return areas


def over_area(config: SweepConfig, area: ChipArea) -> bool:
    return (config.max_area_mm2 is not None and area.total_mm2 is not None
            and area.total_mm2 > config.max_area_mm2)


def run_sweep(config: SweepConfig, resume: bool = False, progress: bool = True,
              write: Callable[[SweepState], None] | None = None,
              heartbeat_s: float | None = None) -> SweepState:
    """Run every point not finished yet, fewer resources first, each warm-started from its
    finished neighbours' best dataflows; `write(state)` after each (the table and plots).
    It says the work ahead first (`estimate`) unless silent; `heartbeat_s`: each point's
    progress lines on stderr that often."""
    from tqdm import tqdm

    from tileflow.explore.studies.outputs import write_all
    from tileflow.explore.studies.session import explore

    out = Path(config.out)
    document, source = accelerator_document(config.explore.accelerator)
    check_parameters(config, document)
    points = config.points()
    # every point's accelerator is validated before any work starts
    archs = [point_arch(config, document, source, p) for p in points]
    areas = point_areas(config, [arch for _, arch in archs])
    state = _load_previous(config, out, resume)
    done = {r["label"] for r in state.rows}
    labels = [point_label(i) for i in range(len(points))]
    over = {i for i in range(len(points)) if over_area(config, areas[i])
            and labels[i] not in done}
    w = config.explore.load()[0]
    if progress or heartbeat_s is not None:
        print(estimate(config, len(points), len(done & set(labels)), len(over)),
              file=sys.stderr, flush=True)
    near = neighbours(config)
    start = time.perf_counter()
    bar = tqdm(total=len(points), disable=not progress, unit="point",
               desc=f"sweep {config.explore.name}", initial=len(done))
    try:
        for index in sweep_order(config):
            point, (doc, arch), label = points[index], archs[index], labels[index]
            if label in done:
                continue
            if index in over:
                state.rows.append(_over_area_row(label, point, areas[index]))
                bar.update(1)
                continue
            bar.set_postfix_str(describe_point(point))
            arch_file = out / "accelerators" / f"{label}.yaml"
            arch_file.parent.mkdir(parents=True, exist_ok=True)
            write_yaml(arch_file, _plain(doc), header=f"# sweep point {label}: "
                       f"{describe_point(point)}\n")
            bound = None
            if config.bound_level:
                if heartbeat_s is not None:
                    print(f"sweep {config.explore.name} {label}: data-movement bound",
                          file=sys.stderr, flush=True)
                bound = _bound_for(config, state, w, arch, point, out, progress)
            finished = {r["label"]: r for r in state.rows if r.get("status") == "done"}
            warm = warm_starts(config, w, arch, [finished[labels[j]] for j in near[index]
                                                  if labels[j] in finished],
                               out / "warm" / label)
            db = out / "studies" / f"{label}.db"
            db.parent.mkdir(parents=True, exist_ok=True)
            url = f"sqlite:///{db.resolve()}"
            cap = ceiling(config, index, finished, near)
            point_config = dataclasses.replace(
                config.explore, accelerator=str(arch_file), name=f"{config.explore.name} "
                f"{label}", out=str(out / "points" / label),
                trees=config.explore.trees + tuple(s["file"] for s in warm if s["valid"]),
                tie_break=dataclasses.replace(config.explore.tie_break, ceiling=cap))
            outcome = explore(point_config, url, 1, _has_study(url), progress=False,
                              heartbeat_s=heartbeat_s)
            if outcome.interrupted:
                state.interrupted = True
                break
            summary = write_all(outcome, point_config.out)
            row = _row(config, label, point, outcome, summary, bound)
            row["area_mm2"] = areas[index].total_mm2
            row["area_left_out"] = list(areas[index].missing)
            row["warm_starts"] = warm
            row["tie_break_ceiling"] = cap
            if bound is not None:
                _write_bound_dataflow(config, w, arch, bound, row, out / "points" / label)
            state.rows.append(row)
            state.seconds = time.perf_counter() - start
            if write:
                write(state)
            bar.update(1)
    except KeyboardInterrupt:
        state.interrupted = True
    finally:
        bar.close()
    state.rows.sort(key=lambda r: r["label"])
    state.seconds = time.perf_counter() - start
    if write:
        write(state)
    return state


def warm_starts(config: SweepConfig, w, arch: Architecture, rows: list[dict],
                folder: Path) -> list[dict]:
    """The finished neighbours' best dataflows re-evaluated on this point's accelerator: one
    record each (the neighbour, whether its tree is valid here, its cycles, DRAM words and
    energy here); a valid one is copied to `folder`/warm-LABEL.yaml (`file`), the tree the
    point's study searches. A neighbour without a valid best gives none."""
    from tileflow.cost import evaluate
    from tileflow.specs.dataflow import load_dataflow_file

    found = []
    for row in sorted(rows, key=lambda r: r["label"]):
        best = Path(config.out) / "points" / row["label"] / "best.yaml"
        if not row.get("valid") or not best.exists():
            continue
        result = evaluate(w, arch, load_dataflow_file(best))
        record = {"from": row["label"], "valid": bool(result.valid),
                  "cycles": result.cycles if result.valid else None,
                  "dram_words": result.dram_words if result.valid else None,
                  "energy_pj": result.energy_pj if result.valid else None, "file": None}
        if result.valid:
            path = folder / f"warm-{row['label']}.yaml"
            folder.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, best.read_text())
            record["file"] = str(path)
        found.append(record)
    return found


def _over_area_row(label: str, point: dict, area: ChipArea) -> dict:
    """A point not run: its chip area exceeds the sweep's limit."""
    return {"label": label, "status": "over_area_limit", "parameters": point,
            "point": describe_point(point), "structure": None, "valid": False,
            "cycles": None, "latency_ms": None, "dram_words": None, "energy_pj": None,
            "evaluations": 0, "seconds": 0.0, "area_mm2": area.total_mm2,
            "area_left_out": list(area.missing), "files": {},
            "warm_starts": []}


def _has_study(url: str) -> bool:
    """Whether a point's storage holds a study: the tile-factor study, or the structure
    search of a point stopped before its tile-factor study began."""
    path = Path(url[len("sqlite:///"):])
    if not path.exists():
        return False
    import optuna

    from tileflow.explore.studies import study as studies

    with studies.storage_errors(url):
        return bool(optuna.get_all_study_names(studies.open_storage(url)))


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _bound_for(config, state, w, arch, point, out: Path, progress: bool) -> Bound:
    from tqdm import tqdm

    key = bound_key(config, point)
    path = out / "bounds" / f"{key}.json"
    if key not in state.bounds and path.exists():
        state.bounds[key] = _bound_from_dict(json.loads(path.read_text()))
    if key in state.bounds:
        return state.bounds[key]
    level = config.bound_level
    found = bound_structures(w, arch, level)
    bar = tqdm(disable=not progress, unit="tiling", leave=False, desc="data-movement bound")
    bound = data_movement_bound(found, level, config.bound_max_tilings,
                                sample_rows=config.bound_sample_tilings,
                                progress=lambda n: bar.update(n))
    bar.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps({**bound.to_dict(), "parameters": point}, indent=2))
    state.bounds[key] = bound
    return bound


def _write_bound_dataflow(config, w, arch, bound: Bound, row: dict, folder: Path) -> None:
    """The dataflow that reaches the bound at this point's capacity (bound.yaml)."""
    from tileflow.tree import to_dict

    fp = bound.point_at(arch.level(bound.level).capacity_words)
    if fp is None:
        return
    name = bound.names[fp.structure]
    structures = dict(bound_structures(w, arch, bound.level))
    if name not in structures:
        return
    flow = structures[name].dataflow(list(fp.factors))
    folder.mkdir(parents=True, exist_ok=True)
    write_yaml(folder / "bound.yaml", to_dict(dataclasses.replace(flow, name=f"bound-{name}")),
               header=f"# a dataflow reaching the data-movement bound at {row['label']}: "
                      f"{fp.dram_words:,.0f} DRAM words\n")
    row["files"]["bound.yaml"] = str(folder / "bound.yaml")


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _row(config: SweepConfig, label: str, point: dict, outcome, summary: dict,
         bound: Bound | None) -> dict:
    best = outcome.best_result
    row = {"label": label, "status": "done", "parameters": point,
           "point": describe_point(point), "structure": outcome.best_structure,
           "valid": bool(best.valid) if best else False,
           "cycles": best.cycles if best else None,
           "latency_ms": best.latency_ms if best else None,
           "dram_words": best.dram_words if best else None,
           "energy_pj": best.energy_pj if best else None,
           "evaluations": summary["evaluations"], "seconds": outcome.seconds,
           "speedup_over_layerwise": (summary["found"] or {}).get("speedup_over_layerwise"),
           "files": {k: v for k, v in summary["files"].items() if k in ("best.yaml",
                                                                      "summary.md")}}
    if bound is not None:
        level = outcome.arch.level(bound.level)
        found_fp = {f.level: f.words for f in best.footprints}.get(bound.level) if best else None
        value = bound.at(level.capacity_words)
        row.update({
            "capacity_bytes": level.capacity_words * outcome.arch.word_bytes,
            "found_footprint_bytes": found_fp * outcome.arch.word_bytes
            if found_fp is not None else None,
            "bound_dram_words": value if math.isfinite(value) else None,
            "compulsory_words": bound.compulsory_words,
            "gap": (best.dram_words / value) if best and math.isfinite(value) and value else None,
            "sampled_left_out_dram_words":
                _finite_or_none(bound.sampled_at(level.capacity_words)),
        })
    return row
