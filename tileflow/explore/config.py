"""Exploration configs (`tileflow explore CONFIG.yaml`): validated with file and line, unknown
keys are errors; and the candidate structures a study searches."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from tileflow.errors import InputError
from tileflow.explore.search import METHODS
from tileflow.explore.space import OBJECTIVES, Limits
from tileflow.explore.structure import Structure, structure_of
from tileflow.specs.arch import Architecture, load_arch
from tileflow.specs.workload import Workload, load_workload
from tileflow.specs.yamlfile import Field, load_yaml

# Every key an exploration config accepts (the docs' key reference checks against these).
CONFIG_KEYS = {
    "accelerator": "shipped name or YAML file (relative to the config's folder)",
    "workload": "shipped name, preset (G1..G12, C1..C8) or YAML file",
    "preset": "size preset of the workload, e.g. G3",
    "sizes": "mapping of dimension -> size overriding the workload's",
    "objective": "latency (default), energy, edp or dram",
    "limits": "footprint_words: {LEVEL: words} and/or dram_words: extra constraints",
    "structures": "list of baseline names whose structures are searched, or 'baselines'",
    "method": "mcts (default), random or tpe",
    "budget": "evaluations: N and/or seconds: S (default evaluations: 2000)",
    "batch": "evaluations per trial (default 64)",
    "seed": "random seed (default 0)",
    "out": "output folder, relative to the current folder (default: explore-NAME)",
    "name": "study name in reports (default: the config file's name)",
}
LIMIT_KEYS = ("footprint_words", "dram_words")
BUDGET_KEYS = ("evaluations", "seconds")


@dataclass(frozen=True)
class ExploreConfig:
    source: str
    name: str
    accelerator: str
    workload: str
    preset: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    objective: str = "latency"
    limits: Limits = field(default_factory=Limits)
    structures: tuple[str, ...] | str = "baselines"
    method: str = "mcts"
    budget_evals: int | None = 2000
    budget_seconds: float | None = None
    batch: int = 64
    seed: int = 0
    out: str = ""

    def load(self) -> tuple[Workload, Architecture]:
        return (load_workload(self.workload, self.sizes, self.preset),
                load_arch(self.accelerator))

    def with_budget(self, evals: int | None, seconds: float | None) -> ExploreConfig:
        if evals is None and seconds is None:
            return self
        return replace(self, budget_evals=evals, budget_seconds=seconds)


def _path_or_name(f: Field, key: str, base: Path) -> str:
    value = f.string(key)
    candidate = base / value
    if value.endswith((".yaml", ".yml")) and candidate.exists():
        return str(candidate)
    return value


def parse_config(data: Field) -> ExploreConfig:
    data.require_mapping()
    data.check_keys(CONFIG_KEYS, required={"accelerator", "workload"})
    base = Path(data.source).parent
    sizes: dict[str, int] = {}
    if data.has("sizes"):
        block = data.child("sizes").require_mapping()
        for key in block.keys():
            sizes[str(key)] = block.integer(key)
    objective = data.string("objective", "latency")
    if objective not in OBJECTIVES:
        raise data.error(f"'objective' must be one of {', '.join(OBJECTIVES)}, got "
                         f"{objective!r}", "objective")
    method = data.string("method", "mcts")
    if method not in METHODS:
        raise data.error(f"'method' must be one of {', '.join(METHODS)}, got {method!r}",
                         "method")
    limits = _limits(data.child("limits")) if data.has("limits") else Limits()
    evals, seconds = 2000, None
    if data.has("budget"):
        budget = data.child("budget").require_mapping()
        budget.check_keys(BUDGET_KEYS)
        if not budget.keys():
            raise budget.error("'budget' needs evaluations and/or seconds")
        evals = budget.integer("evaluations") if budget.has("evaluations") else None
        seconds = budget.number("seconds") if budget.has("seconds") else None
        if seconds is not None and not math.isfinite(seconds):
            raise budget.error("'seconds' must be finite", "seconds")
    structures: tuple[str, ...] | str = "baselines"
    if data.has("structures"):
        f = data.child("structures")
        if isinstance(f.data, str):
            if f.data != "baselines":
                raise data.error("'structures' must be a list of baseline names or "
                                 f"'baselines', got {f.data!r}", "structures")
        else:
            items = f.elements()
            if not items:
                raise f.error("'structures' must name at least one structure")
            names = []
            for item in items:
                if not isinstance(item.data, str):
                    raise item.error(f"expected a baseline name, got {item.data!r}")
                names.append(item.data)
            structures = tuple(names)
    name = data.string("name", Path(data.source).stem)
    out = data.string("out", "")
    return ExploreConfig(
        source=data.source, name=name,
        accelerator=_path_or_name(data, "accelerator", base),
        workload=_path_or_name(data, "workload", base),
        preset=data.string("preset") if data.has("preset") else None, sizes=sizes,
        objective=objective, limits=limits, structures=structures, method=method,
        budget_evals=evals, budget_seconds=seconds, batch=data.integer("batch", 64),
        seed=data.integer("seed", 0, minimum=0),
        out=out or f"explore-{name}")


def _limits(f: Field) -> Limits:
    f.require_mapping()
    f.check_keys(LIMIT_KEYS)
    footprint = {}
    if f.has("footprint_words"):
        block = f.child("footprint_words").require_mapping()
        for key in block.keys():
            footprint[str(key)] = block.number(key)
    dram = math.inf
    if f.has("dram_words"):
        dram = f.number("dram_words")
        if not math.isfinite(dram):
            raise f.error("'dram_words' must be finite", "dram_words")
    return Limits(footprint, dram)


def load_config(path: str | Path) -> ExploreConfig:
    path = Path(path)
    if not path.exists():
        raise InputError(f"no such exploration config '{path}'")
    try:
        return parse_config(Field(load_yaml(path), str(path)))
    except InputError as exc:
        raise exc.located(str(path)) from None


def check_against(config: ExploreConfig, w: Workload, arch: Architecture) -> None:
    """Names in the config that only the workload and accelerator can check."""
    levels = {lv.name for lv in arch.levels}
    for level in config.limits.footprint_words:
        if level not in levels:
            raise InputError(f"limits.footprint_words names level '{level}'; the accelerator "
                             f"has {', '.join(sorted(levels))}", config.source)


def candidate_structures(config: ExploreConfig, w: Workload,
                         arch: Architecture) -> list[tuple[str, Structure]]:
    """The structures a study searches, by name. Named baselines give their own tree
    shapes; this is where generated structures (a structure search) plug in."""
    from tileflow.dataflows import baselines_for, build

    names = baselines_for(w) if config.structures == "baselines" else config.structures
    out = []
    for name in names:
        try:
            flow = build(name, w, arch)
        except InputError as exc:
            raise InputError(f"structures: {exc.message}", config.source) from None
        out.append((name, structure_of(w, arch, flow)))
    return out
