"""Which tool a YAML file comes from (by its root keys), reading it as a TileFlow accelerator,
workload or dataflow, and `tileflow import`: the TileFlow YAML written beside it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tileflow.errors import InputError
from tileflow.evaluator.violations import check_tree
from tileflow.interop.report import collecting, settle
from tileflow.output_checks import check_out
from tileflow.outputs import write_yaml
from tileflow.specs.arch import Architecture, load_arch, parse_arch
from tileflow.specs.dataflow import load_dataflow_file, parse_dataflow
from tileflow.specs.workload import Workload, load_workload, parse_workload
from tileflow.specs.yamlfile import Field, load_yaml
from tileflow.tree import Dataflow

if TYPE_CHECKING:
    from tileflow.interop.accelergy import Ert


def _foreign(name_or_path: str | Path) -> Field | None:
    """The parsed document when the name is an existing YAML file of another tool (the
    converters are imported only then: a shipped name or a TileFlow file needs none)."""
    path = Path(name_or_path)
    try:
        if not path.is_file():
            return None
    except (OSError, ValueError):  # too long, no permission: the project's loader says why
        return None
    text = path.read_text(errors="replace")
    if "{%" in text or "{{" in text:
        raise InputError("a Jinja template (it holds '{%' or '{{'): render it first, as "
                         "Timeloop's front end does (timeloopfe), and give the rendered file",
                         str(path))
    data = load_yaml(path)
    from tileflow.interop.accelergy import is_ert
    from tileflow.interop.problems import is_tileflow_problem, is_timeloop_problem
    from tileflow.interop.tileflow_mapping import is_tileflow_mapping
    from tileflow.interop.timeloop_arch import is_arch
    from tileflow.interop.timeloop_mapping import is_timeloop_mapping

    if is_arch(data) or is_ert(data) or is_timeloop_problem(data) or is_tileflow_problem(data) or \
            is_timeloop_mapping(data) or is_tileflow_mapping(data):
        return Field(data, str(path))
    return None


def _parsed(convert: Callable[[], dict], parse: Callable[[Field], object], doc: Field,
            what: str):
    """Convert, then validate with TileFlow's own parser; its errors name the file too.
    Every problem the conversion finds in the file is reported in one error."""
    with collecting():
        try:
            converted = convert()
        except InputError as exc:
            settle(doc.source, exc)
            raise
        settle(doc.source)
    try:
        return parse(Field(converted, doc.source))
    except InputError as exc:
        key = next((k for k in ("architecture", "problem", "mapping") if doc.has(k)), None)
        place = doc.where(key) if key else None
        where = "; ".join(p for p in (place, exc.where and f"as read: {exc.where}") if p)
        raise InputError(f"{exc.message} (in the {what} as TileFlow reads it)",
                         doc.source, where or None) from None


def arch_document(doc: Field, ert: Ert | None = None) -> dict:
    from tileflow.interop.timeloop_arch import convert_arch, is_arch

    if not is_arch(doc.data):
        raise doc.error("no 'architecture:' here")
    return convert_arch(doc, ert)


def read_ert_file(path: str | Path) -> Ert:
    """An Accelergy energy reference table (ERT) file, for a Timeloop architecture."""
    from tileflow.interop.accelergy import read_ert

    if not Path(path).is_file():
        raise InputError("no such file (an Accelergy ERT was expected)", str(path))
    return read_ert(Field(load_yaml(path), str(path)))


def workload_document(doc: Field) -> dict:
    from tileflow.interop.problems import (
        convert_tileflow_problem,
        convert_timeloop_problem,
        is_tileflow_problem,
        is_timeloop_problem,
    )

    if is_timeloop_problem(doc.data):
        return convert_timeloop_problem(doc)
    if is_tileflow_problem(doc.data):
        return convert_tileflow_problem(doc)
    raise doc.error("no 'problem:' here (a Timeloop 'shape' or a TileFlow 'ops' list)")


def dataflow_document(doc: Field, workload: Workload, arch: Architecture) -> dict:
    from tileflow.interop.tileflow_mapping import convert_tileflow_mapping, is_tileflow_mapping
    from tileflow.interop.timeloop_mapping import convert_timeloop_mapping, is_timeloop_mapping

    if is_timeloop_mapping(doc.data):
        return convert_timeloop_mapping(doc, workload, arch)
    if is_tileflow_mapping(doc.data):
        return convert_tileflow_mapping(doc, workload, arch)
    raise doc.error("no 'mapping:' here (a Timeloop directive list or a TileFlow tree)")


def load_arch_any(name_or_path: str, ert: str | Path | None = None) -> Architecture:
    """A TileFlow accelerator (shipped name or file) or a Timeloop architecture file (with
    an Accelergy ERT file: its energies per level and action)."""
    doc = _foreign(name_or_path)
    if doc is None:
        if ert is not None:
            raise InputError("an Accelergy ERT goes with a Timeloop architecture, and this is "
                             "not one", str(name_or_path))
        return load_arch(name_or_path)
    tables = read_ert_file(ert) if ert is not None else None
    return _parsed(lambda: arch_document(doc, tables), parse_arch, doc,
                   "Timeloop architecture")


def load_workload_any(name_or_path: str, overrides: Mapping[str, int] | None = None,
                      preset: str | None = None) -> Workload:
    doc = _foreign(name_or_path)
    if doc is None:
        return load_workload(name_or_path, overrides, preset)
    return _parsed(lambda: workload_document(doc),
                   lambda f: parse_workload(f, overrides, preset), doc, "problem")


def load_dataflow_any(path: str | Path, workload: Workload, arch: Architecture) -> Dataflow:
    doc = _foreign(path)
    if doc is None:
        return load_dataflow_file(path)
    return _parsed(lambda: dataflow_document(doc, workload, arch), parse_dataflow, doc,
                   "mapping")


def _each_file_once(paths: Sequence[str]) -> list[str]:
    """The paths with a file given twice (under any spelling) kept once."""
    seen, unique = set(), []
    for p in paths:
        try:
            key: object = Path(p).resolve()
        except (OSError, ValueError, RuntimeError):
            key = p
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def import_files(paths: Sequence[str], out_dir: str | None = None,
                 ert_path: str | None = None) -> list[Path]:
    """Write the TileFlow YAML of every architecture, problem and mapping in the files:
    NAME.arch.yaml, NAME.workload.yaml, NAME.dataflow.yaml (beside each file, or in out_dir).
    Mappings need the problem and the architecture among the same files. An Accelergy ERT
    (`ert_path`, or an `ERT:` file among them, as Timeloop takes it) gives the architecture
    its energies per level and action."""
    from tileflow.interop.accelergy import is_ert, read_ert
    from tileflow.interop.problems import is_tileflow_problem, is_timeloop_problem
    from tileflow.interop.tileflow_mapping import is_tileflow_mapping
    from tileflow.interop.timeloop_arch import is_arch
    from tileflow.interop.timeloop_mapping import is_timeloop_mapping

    if out_dir is not None:
        check_out(out_dir)
    docs = []
    for p in _each_file_once(paths):
        if not Path(p).is_file():
            raise InputError("no such file", p)
        doc = _foreign(p)
        if doc is None:
            raise InputError("not a Timeloop or TileFlow file (no 'architecture:', "
                             "'problem:', 'mapping:' or 'ERT:' at the top)", p)
        docs.append(doc)
    erts = [doc for doc in docs if is_ert(doc.data)]
    docs = [doc for doc in docs if not is_ert(doc.data)]
    if ert_path is not None:
        if not Path(ert_path).is_file():
            raise InputError("no such file (an Accelergy ERT was expected)", ert_path)
        doc = _foreign(ert_path)
        if doc is None or not is_ert(doc.data):
            raise InputError("not an Accelergy energy reference table (no 'ERT:' at the "
                             "top)", ert_path)
        erts.insert(0, doc)
    if len({e.source for e in erts}) > 1:
        raise InputError(f"two energy reference tables ('{erts[0].source}' and "
                         f"'{erts[1].source}'): give one", erts[1].source)
    ert = read_ert(erts[0]) if erts else None
    if ert is not None and not any(is_arch(doc.data) for doc in docs):
        raise InputError("an Accelergy ERT gives a Timeloop architecture its energies: give "
                         "the architecture's file in the same 'tileflow import'", ert.source)
    arch = workload = None
    for doc in docs:
        if arch is None and is_arch(doc.data):
            arch = _parsed(lambda d=doc: arch_document(d, ert), parse_arch, doc,
                           "architecture")
        if workload is None and (is_timeloop_problem(doc.data) or
                                 is_tileflow_problem(doc.data)):
            workload = _parsed(lambda d=doc: workload_document(d),
                               lambda f: parse_workload(f), doc, "problem")
    planned: list[tuple[Path, dict, str, str]] = []
    for doc in docs:
        source = Path(doc.source)
        folder = Path(out_dir) if out_dir else source.parent
        stem = source.name.removesuffix(source.suffix)
        outputs = []
        if is_arch(doc.data):
            data = arch_document(doc, ert)
            _parsed(lambda d=data: d, parse_arch, doc, "architecture")
            outputs.append(("arch", data))
        if is_timeloop_problem(doc.data) or is_tileflow_problem(doc.data):
            data = workload_document(doc)
            _parsed(lambda d=data: d, parse_workload, doc, "problem")
            outputs.append(("workload", data))
        if is_timeloop_mapping(doc.data) or is_tileflow_mapping(doc.data):
            if arch is None or workload is None:
                raise InputError("a mapping needs its problem and architecture: give their "
                                 "files in the same 'tileflow import'", doc.source)
            data = dataflow_document(doc, workload, arch)
            flow = _parsed(lambda d=data: d, parse_dataflow, doc, "mapping")
            try:
                check_tree(workload, arch, flow)
            except InputError as exc:
                raise InputError(f"{exc.message} (in the mapping as TileFlow reads it)",
                                 doc.source, exc.where) from None
            outputs.append(("dataflow", data))
        for kind, data in outputs:
            planned.append((folder / f"{stem}.{kind}.yaml", data,
                            f"# {kind} imported by `tileflow import` from {source.name}\n",
                            doc.source))
    sources: dict[Path, str] = {}
    for target, _, _, source in planned:  # two inputs, one output: refuse, never overwrite
        if target in sources:
            raise InputError(f"'{sources[target]}' and '{source}' would both write "
                             f"'{target}' (the same file name): import them with different "
                             "--out folders, or rename one", source)
        sources[target] = source
    written = []
    for target, data, header, _ in planned:  # everything converted and checked: now write
        target.parent.mkdir(parents=True, exist_ok=True)
        written.append(write_yaml(target, data, header))
    return written
