"""Sweep configs (`tileflow sweep CONFIG.yaml`): an exploration config plus a `sweep` section
naming accelerator parameters and their values; validated with file and line. A point's
accelerator is the config's accelerator file with the point's values written in, parsed and
validated like any accelerator file."""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from tileflow import shipped as resources
from tileflow.errors import InputError
from tileflow.explore.studies.config import CONFIG_KEYS, ExploreConfig, parse_config
from tileflow.specs import keys
from tileflow.specs.arch import Architecture, parse_arch
from tileflow.specs.yamlfile import Field, describe, load_yaml

LEVEL_PARAMETERS = tuple(k.name.split(".", 1)[1] for k in keys.SWEEP_PARAMETERS.keys
                         if k.name.startswith("LEVEL."))
UNIT_PARAMETERS = tuple(k.name for k in keys.SWEEP_PARAMETERS.keys
                        if not k.name.startswith("LEVEL."))
INTEGER_PARAMETERS = ("fanout", "matrix.size", "matrix.rows", "matrix.cols", "vector.lanes")
CAPACITY_PARAMETERS = ("capacity_bytes", "capacity_words")
MODES = ("grid", "zip")
DEFAULT_BOUND_MAX_TILINGS = 300_000  # a default bound takes seconds, not minutes
DEFAULT_BOUND_SAMPLE_TILINGS = 5_000
MAX_POINTS = 10_000


@dataclass(frozen=True)
class Parameter:
    """One swept parameter: `target` is a level name, 'matrix' or 'vector'."""

    name: str  # as written, e.g. "L1.capacity_bytes"
    target: str
    attribute: str
    values: tuple[float, ...]
    where: str  # file and line of its values, for errors at a point


@dataclass(frozen=True)
class SweepConfig:
    explore: ExploreConfig
    parameters: tuple[Parameter, ...]
    mode: str = "grid"
    bound_level: str | None = None
    bound_max_tilings: int = DEFAULT_BOUND_MAX_TILINGS
    bound_sample_tilings: int = DEFAULT_BOUND_SAMPLE_TILINGS
    out: str = ""
    bound_where: str = "sweep.bound"  # the line of `bound`, for errors about the level
    max_area_mm2: float | None = None  # points whose chip area exceeds this are not run
    area_where: str = "sweep.max_area_mm2"  # its line, for errors about it

    @property
    def source(self) -> str:
        return self.explore.source

    def points(self) -> list[dict[str, float]]:
        """Every point: parameter name -> value, in sweep order."""
        names = [p.name for p in self.parameters]
        if self.mode == "zip":
            combos = zip(*(p.values for p in self.parameters), strict=True)
        else:
            combos = itertools.product(*(p.values for p in self.parameters))
        return [dict(zip(names, c, strict=True)) for c in combos]


def _number(value) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def point_label(index: int) -> str:
    return f"p{index:03d}"


def describe_point(point: dict[str, float]) -> str:
    return ", ".join(f"{k}={_number(v)}" for k, v in point.items())


def _parameter(name: str, f: Field) -> Parameter:
    allowed = [k.name for k in keys.SWEEP_PARAMETERS.keys]
    target, dot, attribute = str(name).partition(".")
    known = (target in ("matrix", "vector") and str(name) in UNIT_PARAMETERS) or (
        target not in ("matrix", "vector") and dot and target and attribute in LEVEL_PARAMETERS)
    if not known:
        raise f.error(f"unknown key '{name}'; expected one of: {', '.join(allowed)}")
    items = f.elements()
    if not items:
        raise f.error(f"'{name}' needs at least one value")
    integer = attribute in INTEGER_PARAMETERS or str(name) in INTEGER_PARAMETERS
    values = []
    for item in items:
        values.append(float(item.as_integer(name, 1)) if integer else item.as_number(name))
    if len(set(values)) != len(values):
        raise f.error(f"'{name}' lists a value twice: {describe(list(f.data))}")
    return Parameter(str(name), target, attribute, tuple(values), f.where())


def parse_sweep(data: Field) -> SweepConfig:
    """A sweep config: the exploration keys (checked by the explore parser) and `sweep`."""
    data.require_mapping()
    data.check_keys((*CONFIG_KEYS, "sweep"), required={"accelerator", "workload", "sweep"})
    s = data.child("sweep").require_mapping()
    rest = copy.copy(data.data)  # the rest is an exploration config (its lines kept)
    del rest["sweep"]
    explore = parse_config(Field(rest, data.source, data.path, data.line))
    keys.SWEEP.check(s)
    block = s.child("parameters").require_mapping()
    if not block.keys():
        raise block.error("'parameters' needs at least one parameter")
    parameters = tuple(_parameter(name, block.child(name)) for name in block.keys())
    mode = s.string("mode", "grid")
    if mode not in MODES:
        raise s.error(f"'mode' must be one of {', '.join(MODES)}, got {describe(mode)}", "mode")
    if mode == "zip" and len({len(p.values) for p in parameters}) > 1:
        raise s.error("mode zip: every parameter needs as many values", "parameters")
    count = math.prod(len(p.values) for p in parameters) if mode == "grid" else \
        len(parameters[0].values)
    if count > MAX_POINTS:
        raise s.error(f"the sweep has {count:,} points; at most {MAX_POINTS:,} are supported",
                      "parameters")
    capacity = next((p.target for p in parameters if p.attribute in CAPACITY_PARAMETERS), None)
    bound = s.string("bound", capacity or "none")
    name = explore.name
    out = explore.out if "out" in data.data else f"sweep-{name}"
    return SweepConfig(explore, parameters, mode, None if bound == "none" else bound,
                       s.integer("bound_max_tilings", DEFAULT_BOUND_MAX_TILINGS),
                       s.integer("bound_sample_tilings", DEFAULT_BOUND_SAMPLE_TILINGS, minimum=0),
                       out, s.where("bound") if s.has("bound") else s.where(),
                       s.number("max_area_mm2") if s.has("max_area_mm2") else None,
                       s.where("max_area_mm2") if s.has("max_area_mm2") else s.where())


def load_sweep(path: str | Path) -> SweepConfig:
    path = Path(path)
    if not path.exists():
        raise InputError(f"no such sweep config '{path}'")
    try:
        return parse_sweep(Field(load_yaml(path), str(path)))
    except InputError as exc:
        raise exc.located(str(path)) from None


# ---- the accelerator at a point -----------------------------------------------------------

def accelerator_document(name_or_path: str) -> tuple[dict, str]:
    """The accelerator file's YAML document (a shipped name or a path) and where it is."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        found = resources.find("accelerators", name_or_path)
        if found is None:
            names = list(resources.shipped("accelerators"))
            raise InputError(f"a sweep needs an accelerator file or one of {', '.join(names)}, "
                             f"got '{name_or_path}'")
        path = found
    if not path.exists():
        raise InputError(f"no such accelerator file '{path}'")
    return load_yaml(path), str(path)


def check_parameters(config: SweepConfig, document: dict) -> None:
    """Every parameter names a level (or unit) the accelerator has."""
    levels = [lv.get("name") for lv in document.get("levels") or () if isinstance(lv, dict)]
    for p in config.parameters:
        if p.target in ("matrix", "vector"):
            continue
        if p.target not in levels:
            raise InputError(f"sweep parameter '{p.name}' names level '{p.target}'; the "
                             f"accelerator has {', '.join(map(str, levels))}", config.source,
                             p.where)
        if p.attribute == "fanout" and levels.index(p.target) == 0:
            raise InputError(f"sweep parameter '{p.name}': the outermost level has no "
                             "fan-out", config.source, p.where)
    if config.bound_level is not None and config.bound_level not in levels[1:]:
        raise InputError(f"sweep.bound names '{config.bound_level}'; it must be an on-chip "
                         f"level: {', '.join(map(str, levels[1:]))} (or none)", config.source,
                         config.bound_where)


def _plain(value: float):
    return int(value) if float(value).is_integer() else float(value)


def apply_point(document: dict, point: dict[str, float],
                parameters: tuple[Parameter, ...]) -> dict:
    """A copy of the accelerator document with the point's values written in."""
    doc = copy.deepcopy(document)
    by_name = {p.name: p for p in parameters}
    levels = {lv["name"]: lv for lv in doc["levels"]}
    compute = doc["compute"]
    for name, value in point.items():
        p = by_name[name]
        v = _plain(value)
        if p.target == "vector":
            compute["vector"]["lanes"] = v
        elif p.target == "matrix":
            matrix = compute["matrix"]
            fed = levels.get(matrix.get("level"))
            before = matrix["rows"] * matrix["cols"]
            rows, cols = {"size": (v, v), "rows": (v, matrix["cols"]),
                          "cols": (matrix["rows"], v)}[p.attribute]
            matrix["rows"], matrix["cols"] = rows, cols
            if fed is not None and fed.get("fanout") == before:  # one register per PE
                fed["fanout"] = rows * cols
                fed.pop("mesh", None)
        else:
            level = levels[p.target]
            _set_level(level, p.attribute, v)
    return doc


def _set_level(level: dict, attribute: str, value) -> None:
    twins = {"capacity_bytes": ("capacity_words",), "capacity_words": ("capacity_bytes",),
             "read_bandwidth_gbps": ("read_words_per_cycle",),
             "write_bandwidth_gbps": ("write_words_per_cycle",)}
    if attribute == "bandwidth_gbps":
        _set_level(level, "read_bandwidth_gbps", value)
        _set_level(level, "write_bandwidth_gbps", value)
        return
    for other in twins.get(attribute, ()):
        level.pop(other, None)
    if attribute == "fanout":
        level.pop("mesh", None)
    level[attribute] = value


def point_arch(config: SweepConfig, document: dict, source: str, point: dict[str, float]
               ) -> tuple[dict, Architecture]:
    """The point's accelerator document and model; a value the accelerator rejects is an
    error naming the sweep config and the parameter."""
    doc = apply_point(document, point, config.parameters)
    doc["name"] = f"{document.get('name', 'accelerator')} ({describe_point(point)})"
    try:
        return doc, parse_arch(Field(doc, source))
    except InputError as exc:
        names = ", ".join(point)
        raise InputError(f"the accelerator rejects the point {describe_point(point)}: "
                         f"{exc.message}", config.source, f"sweep.parameters ({names})") \
            from None
