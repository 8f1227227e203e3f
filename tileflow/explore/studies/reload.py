"""A study folder read back (what the explore notebook shows): its summary, its points, the
workload and accelerator it was run for and its best dataflow, from the folder alone.

The workload and the accelerator come from summary.json's `found_for` (a shipped name, or a
file as an absolute path, with every size); where that file has moved or gone, from the copy
of its text that summary.json keeps (`inputs`); then from best.yaml's `found_for`; then, for
a study written before `found_for`, from the names summary.json gives."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from tileflow.cost import evaluate
from tileflow.cost.result import Result
from tileflow.errors import InputError
from tileflow.explore.factors.space import COLUMNS, OBJECTIVES
from tileflow.specs.arch import Architecture, load_arch, parse_arch
from tileflow.specs.dataflow import found_for_file, load_dataflow_file
from tileflow.specs.workload import Workload, load_workload, parse_workload
from tileflow.specs.yamlfile import Field, given, parse_yaml, read_text, shown
from tileflow.tables import Column, read_json_object, read_table
from tileflow.tree import Dataflow


@dataclass(frozen=True)
class SavedStudy:
    """A study folder read back; `best` and `best_result` are None when it found nothing."""

    folder: Path
    summary: dict
    workload: Workload
    arch: Architecture
    best: Dataflow | None
    best_result: Result | None

    def points(self):
        """points.csv as a pandas DataFrame, its columns checked (a damaged file is an
        InputError naming the line and column): the cost, the time and each objective's
        column (+inf for an invalid point)."""
        objective = self.summary.get("objective", "latency")
        figure = Column("number", infinite=True)
        columns = {"cost": figure, "seconds": Column("number"), "valid": Column("text"),
                   **{COLUMNS[o]: figure for o in self.summary.get("objectives", [objective])}}
        return read_table(self.folder / "points.csv", columns, minimum_rows=0)


def inputs(config_workload: str, config_accelerator: str) -> dict[str, str]:
    """The text of the study's workload and accelerator files (none for shipped names), kept
    in summary.json so that the study reloads after the files move."""
    out = {}
    for key, value in (("workload", config_workload), ("accelerator", config_accelerator)):
        path = Path(value)
        if path.suffix in (".yaml", ".yml") and path.is_file():
            out[key] = read_text(path)
    return out


def load_study(folder: str | Path, accelerator: str | None = None) -> SavedStudy:
    """Read a folder written by `tileflow explore`; `accelerator` (a name or file) replaces
    the recorded one. Raises InputError naming the folder when it cannot say what it was run
    for."""
    folder = Path(folder)
    summary_path = folder / "summary.json"
    if not given(summary_path):
        raise InputError(f"'{shown(folder)}' is not a study folder: no summary.json")
    summary = check_summary(read_json_object(summary_path), summary_path)
    best_path = folder / "best.yaml"
    found = summary.get("found_for") or (found_for_file(best_path) if given(best_path)
                                         else None)
    embedded = summary.get("inputs") or {}
    sizes = {str(k): int(v) for k, v in ((found or {}).get("sizes") or
                                         summary.get("sizes") or {}).items()}
    workload = _workload((found or {}).get("workload") or summary.get("workload"),
                         sizes, (found or {}).get("preset"), embedded.get("workload"),
                         summary_path)
    arch = _given_arch(accelerator) if accelerator else _arch(
        (found or {}).get("accelerator") or summary.get("accelerator"),
        embedded.get("accelerator"), summary_path)
    best = load_dataflow_file(best_path) if given(best_path) else None
    try:
        result = evaluate(workload, arch, best) if best is not None else None
    except InputError as exc:  # a tree that does not fit what the study says it was for
        raise exc.located(shown(best_path)) from None
    return SavedStudy(folder, summary, workload, arch, best, result)


def check_summary(data: dict, path: Path) -> dict:
    """summary.json's fields that a reload reads, each of its type (an InputError naming
    the file and the key otherwise): what the study was run for, its objectives and the
    baselines' figures."""
    def fail(key: str, expected: str, value) -> InputError:
        return InputError(f"expected {expected}, got {str(value)[:60]!r}", str(path), key)

    def text(owner: dict, key: str, where: str, expected: str = "a name or a path") -> None:
        value = owner.get(key)
        if not (isinstance(value, str) or value is None):
            raise fail(where, expected, value)

    def sizes(value, where: str) -> None:
        if value is None:
            return
        if not isinstance(value, dict):
            raise fail(where, "a mapping of dimension sizes", value)
        for dim, size in value.items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise fail(f"{where}.{dim}", "a positive integer size", size)

    found = data.get("found_for")
    if found is not None and not isinstance(found, dict):
        raise fail("found_for", "a mapping (accelerator, workload, preset, sizes)", found)
    for owner, prefix in ((found or {}, "found_for."), (data, "")):
        for key in ("workload", "accelerator", "preset"):
            text(owner, key, prefix + key)
        sizes(owner.get("sizes"), prefix + "sizes")
    inputs = data.get("inputs")
    if inputs is not None and not (isinstance(inputs, dict) and all(
            isinstance(v, str) for v in inputs.values())):
        raise fail("inputs", "a mapping of file texts", inputs)
    for key in ("study", "method"):
        text(data, key, key, "a name")
    objective = data.get("objective", "latency")
    if objective not in OBJECTIVES:
        raise fail("objective", f"one of {', '.join(OBJECTIVES)}", objective)
    objectives = data.get("objectives", [objective])
    if not (isinstance(objectives, list) and 1 <= len(objectives) <= 2
            and all(o in OBJECTIVES for o in objectives)):
        raise fail("objectives", f"a list of one or two of {', '.join(OBJECTIVES)}", objectives)
    baselines = data.get("baselines", [])
    if not isinstance(baselines, list):
        raise fail("baselines", "a list", baselines)
    for k, base in enumerate(baselines):
        own = base.get("own_rule") if isinstance(base, dict) else None
        if not (isinstance(own, dict) and isinstance(base.get("dataflow"), str)):
            raise fail(f"baselines[{k}]", "a dataflow with its own rule's figures", base)
        if own.get("valid"):
            for key in ("cycles", "energy_pj", "dram_words"):
                value = own.get(key)
                if isinstance(value, bool) or not isinstance(value, (int, float)) \
                        or not math.isfinite(value) or value < 0:
                    raise fail(f"baselines[{k}].own_rule.{key}", "a finite number >= 0",
                               value)
    return data


def _given_arch(value: str) -> Architecture:
    try:
        return load_arch(value)
    except InputError as exc:
        raise exc.about("--accelerator") from None


def _missing_file(value: str | None) -> bool:
    return value is not None and Path(value).suffix in (".yaml", ".yml") and not given(value)


def _workload(value: str | None, sizes: dict[str, int], preset: str | None,
              text: str | None, where: Path) -> Workload:
    if value is None:
        raise InputError(f"{shown(where)}: no workload recorded (found_for.workload)")
    if _missing_file(value) and text is not None:
        return parse_workload(_mapping(text, value), sizes or None, preset)
    return load_workload(value, sizes or None, preset)


def _arch(value: str | None, text: str | None, where: Path) -> Architecture:
    if value is None:
        raise InputError(f"{shown(where)}: no accelerator recorded (found_for.accelerator)")
    if _missing_file(value) and text is not None:
        return parse_arch(_mapping(text, value))
    return load_arch(value)


def _mapping(text: str, source: str) -> Field:
    """The kept text of a moved file, its errors named after the recorded path."""
    return Field(parse_yaml(text, f"{shown(source)} (kept in summary.json)"),
                 f"{shown(source)} (kept in summary.json)", line=0).require_mapping()
