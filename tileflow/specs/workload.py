"""Workloads: a DAG of einsum-like tensor operators over named, shared dimensions."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from tileflow import shipped as resources
from tileflow.errors import InputError
from tileflow.specs import keys
from tileflow.specs.expressions import (
    Access,
    ExpressionError,
    Statement,
    eval_size,
    parse_statement,
)
from tileflow.specs.hashing import spec_hash, spec_state
from tileflow.specs.yamlfile import (
    MAX_COUNT,
    Field,
    given,
    load_mapping,
    load_yaml,
    shown,
    type_name,
)

MATRIX = "matrix"
VECTOR = "vector"
MAX_OPERATORS = 64  # a chain of 64 evaluates in seconds; 300 takes minutes


@dataclass(frozen=True)
class Operator:
    """One tensor expression. `unit` is the compute unit that runs it (matrix or vector)."""

    name: str
    output: Access
    inputs: tuple[Access, ...]
    update: str  # "+=", "max=" or "="
    function: str  # "mul", "exp", "sub", ...
    dims: tuple[str, ...]  # every loop dimension of the operator, in order of appearance
    carried: str = ""  # a reduction dim whose partial result consumers may read (online)

    @cached_property
    def unit(self) -> str:
        is_contraction = self.update == "+=" and self.function == "mul" and len(self.inputs) == 2
        return MATRIX if is_contraction else VECTOR

    @cached_property
    def reduction_dims(self) -> tuple[str, ...]:
        out = set(self.output.dims)
        return tuple(d for d in self.dims if d not in out)

    @property
    def accumulates(self) -> bool:
        return self.update != "="

    @cached_property
    def tensors(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([a.tensor for a in self.inputs] + [self.output.tensor]))

    def access(self, tensor: str) -> Access:
        return self._accesses[tensor]

    @cached_property
    def _accesses(self) -> dict[str, Access]:
        return {a.tensor: a for a in (*self.inputs, self.output)}

    def __str__(self) -> str:
        sym = {"mul": "*", "sub": "-", "add": "+", "div": "/"}
        if self.function in sym:
            rhs = f" {sym[self.function]} ".join(str(a) for a in self.inputs)
        elif self.function == "copy":
            rhs = str(self.inputs[0])
        else:
            rhs = f"{self.function}({', '.join(str(a) for a in self.inputs)})"
        return f"{self.output} {self.update} {rhs}"


@dataclass(frozen=True)
class Workload:
    """Operators in topological order, dimension sizes, and per-tensor shapes."""

    __hash__ = spec_hash
    __getstate__ = spec_state

    name: str
    ops: tuple[Operator, ...]
    sizes: Mapping[str, int]  # loop dimensions
    shapes: Mapping[str, tuple[int, ...]]  # tensor -> extent per axis
    source: str = field(default="", compare=False)  # file it was read from, if any
    lines: Mapping[str, int] = field(default_factory=dict, compare=False)  # key -> line
    precision_bits: Mapping[str, int] = field(default_factory=dict)  # tensor -> bits

    def width_ratio(self, tensor: str, word_bits: int) -> float:
        """Accelerator words per element of `tensor`: its bits over the accelerator's word
        (1 for a tensor without its own precision)."""
        bits = self.precision_bits.get(tensor)
        return 1.0 if bits is None else bits / word_bits

    def place(self, key: str = "ops") -> str | None:
        """'line N (key)' for a top-level key of the file it was read from (for messages)."""
        return f"line {self.lines[key]} ({key})" if key in self.lines else None

    @cached_property
    def op_by_name(self) -> dict[str, Operator]:
        return {op.name: op for op in self.ops}

    @cached_property
    def producer(self) -> dict[str, str]:
        return {op.output.tensor: op.name for op in self.ops}

    @cached_property
    def consumers(self) -> dict[str, tuple[str, ...]]:
        found: dict[str, list[str]] = {}
        for op in self.ops:
            for a in op.inputs:
                found.setdefault(a.tensor, []).append(op.name)
        return {t: tuple(v) for t, v in found.items()}

    @cached_property
    def tensors(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t for op in self.ops for t in op.tensors))

    @cached_property
    def downstream(self) -> dict[str, tuple[str, ...]]:
        """Operator -> the operators that read its result, directly or through others."""
        out: dict[str, tuple[str, ...]] = {}
        for op in reversed(self.ops):
            found = dict.fromkeys(c for c in self.consumers.get(op.output.tensor, ()))
            for c in list(found):
                found.update(dict.fromkeys(out[c]))
            out[op.name] = tuple(o.name for o in self.ops if o.name in found)
        return out

    @cached_property
    def rescaled(self) -> dict[str, tuple[str, ...]]:
        """Carried operator -> the accumulators downstream of it that reduce over its carried
        dim: their partial results are rescaled whenever the carried state changes."""
        return {op.name: tuple(o for o in self.downstream[op.name]
                               if op.carried in self.op_by_name[o].reduction_dims)
                for op in self.ops if op.carried}

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(t for t in self.tensors if t not in self.producer)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(t for t in self.tensors if t in self.producer and t not in self.consumers)

    @property
    def intermediates(self) -> tuple[str, ...]:
        return tuple(t for t in self.tensors if t in self.producer and t in self.consumers)

    def tensor_words(self, tensor: str) -> int:
        words = 1
        for extent in self.shapes[tensor]:
            words *= extent
        return words

    def op_count(self, op: Operator) -> int:
        count = 1
        for d in op.dims:
            count *= self.sizes[d]
        return count

    def total_ops(self, unit: str | None = None) -> int:
        return sum(self.op_count(op) for op in self.ops if unit is None or op.unit == unit)


def parse_workload(
    data: Field, overrides: Mapping[str, int] | None = None, preset: str | None = None
) -> Workload:
    """Build a Workload from its YAML mapping; sizes come from dims/params, a preset and --set."""
    keys.WORKLOAD.check(data)
    params_field = data.child("params").require_mapping() if data.has("params") else None
    dims_field = data.child("dims").require_mapping()
    for f in (dims_field, params_field):
        for key in f.keys() if f else ():
            if not isinstance(key, str) or not NAME.fullmatch(key):
                raise f.error(f"'{key}' is not a name (letters, digits and _)", key)
    declared = set(dims_field.keys()) | set(params_field.keys() if params_field else [])
    if set(dims_field.keys()) & set(params_field.keys() if params_field else []):
        raise data.error("a name is both a dimension and a parameter", "params")
    presets = _presets(data, declared)
    flags = {}
    if preset is not None:
        if preset not in presets:
            known = ", ".join(presets) or "none"
            raise data.error(f"unknown preset '{preset}'; this workload has: {known}",
                             "presets" if presets else None)
        entry = data.child("presets").child(preset)
        flags = {k: (f"preset {preset}", entry) for k in presets[preset]}
    for key in overrides or {}:
        if key not in declared:
            raise InputError(
                f"cannot set '{key}': the workload has no dimension or parameter of that name "
                f"(known: {', '.join(sorted(declared))})", data.source, "--set")
        flags[key] = ("--set", None)
    overrides = {**(presets.get(preset, {}) if preset else {}), **(overrides or {})}
    params = _eval_sizes(params_field, overrides, {}, flags, -MAX_COUNT) if params_field else {}
    sizes = _eval_sizes(dims_field, overrides, params, flags, 1)
    ops = []
    items = data.child("ops").elements()
    if len(items) > MAX_OPERATORS:
        raise data.error(f"{len(items):,} operators; at most {MAX_OPERATORS} are supported (the "
                         "analysis of a fused tree grows with the square of its operators)",
                         "ops")
    for item in items:
        keys.OPERATOR.check(item)
        name = item.string("name")
        try:
            statement = parse_statement(item.string("expr"), set(sizes), params)
        except ExpressionError as exc:
            raise item.error(f"in operator '{name}': {exc}", "expr") from None
        op = _operator(name, statement, item)
        if item.has("carried"):
            op = replace(op, carried=item.string("carried"))
        ops.append(op)
    workload = Workload(data.string("name", "workload"), tuple(ops), sizes, {})
    _check_carried(workload, data)
    shapes = _shapes(workload, data, {**params, **sizes})
    lines = {}
    for key in data.keys():
        line = data.line_label(key)
        if line:
            lines[str(key)] = int(line.split()[1])
    workload = Workload(workload.name, workload.ops, sizes, shapes, data.source, lines)
    _check_graph(workload, data)
    if data.has("precision_bits"):
        workload = replace(workload, precision_bits=_precisions(workload, data))
    return workload


ROLES = ("inputs", "intermediates", "outputs")


def _precisions(workload: Workload, data: Field) -> dict[str, int]:
    """`precision_bits`: bits per element by tensor, or by role (a tensor's own wins)."""
    f = data.child("precision_bits").require_mapping()
    by_role = {role: getattr(workload, role) for role in ROLES}
    out: dict[str, int] = {}
    for key in f.keys():
        if key not in workload.tensors and key not in ROLES:
            raise f.error(f"'{key}' is neither a tensor ({', '.join(workload.tensors)}) nor a "
                          f"role ({', '.join(ROLES)})", key)
        f.integer(key, minimum=1, maximum=1024)
    for role in ROLES:
        if f.has(role):
            for t in by_role[role]:
                out[t] = f.integer(role)
    for key in f.keys():
        if key in workload.tensors:
            out[key] = f.integer(key)
    return out


NAME = re.compile(r"[A-Za-z_]\w*")


def _presets(data: Field, declared: set[str]) -> dict[str, dict[str, int | str]]:
    """Every preset: a mapping from declared dimensions or parameters to sizes."""
    if not data.has("presets") or data.get("presets") is None:
        return {}
    out: dict[str, dict[str, int | str]] = {}
    for name, entry in data.child("presets").items():
        if not isinstance(entry.data, dict):
            raise entry.error(f"preset '{name}' must be a mapping of sizes such as "
                              f"{{m: 512}}, got {type_name(entry.data)}")
        for key, value in entry.items():
            if key not in declared:
                raise value.error(f"preset '{name}' sets '{key}', which is not a dimension or "
                                  f"parameter (known: {', '.join(sorted(declared))})")
            if isinstance(value.data, bool) or not isinstance(value.data, (int, str)):
                raise value.error(f"preset '{name}': '{key}' must be an integer or a size "
                                  f"expression, got {type_name(value.data)}")
        out[str(name)] = dict(entry.data)
    return out


def _eval_sizes(f: Field, overrides: Mapping[str, int | str], known: Mapping[str, int],
                flags: Mapping[str, tuple[str, Field | None]], minimum: int) -> dict[str, int]:
    """Sizes in declaration order, each within [minimum, MAX_COUNT]; an error names the line
    of the value (the preset's when a preset set it), and the flag when --set did."""
    values: dict[str, int] = {}
    kind = "dimension" if minimum >= 1 else "parameter"
    for key, raw in f.require_mapping().data.items():
        raw = overrides.get(key, raw)
        label, entry = flags.get(key, ("", None))
        origin = f" (set by {label})" if label else ""
        place = (entry, key) if entry is not None and key in entry.data else (f, key)
        try:
            value = eval_size(raw, {**known, **values})
        except ExpressionError as exc:
            raise place[0].error(f"{exc}{origin}", place[1]) from None
        if not minimum <= value <= MAX_COUNT:
            low = "at least 1" if minimum >= 1 else f"at least {minimum:,}"
            raise place[0].error(f"{kind} '{key}' must be {low} and at most {MAX_COUNT:,} "
                                 f"(2**31), got {value:,}{origin}", place[1])
        values[key] = value
    return values


def _operator(name: str, s: Statement, where: Field) -> Operator:
    for axis in s.output.axes:
        if not axis.is_plain and len(axis.terms) > 1 and s.update == "=":
            raise where.error(f"operator '{name}': output index '{axis}' sums dimensions, so "
                              "several iterations write one element: use '+=' or 'max='",
                              "expr")
    dims = tuple(dict.fromkeys(s.output.dims + tuple(d for a in s.inputs for d in a.dims)))
    op = Operator(name, s.output, s.inputs, s.update, s.function, dims)
    if s.update == "=" and op.reduction_dims:
        raise where.error(
            f"operator '{name}' uses '=' but dimensions {', '.join(op.reduction_dims)} "
            "do not index its output; use '+=' or 'max=' for a reduction", "expr")
    summed = any(len(axis.terms) > 1 for axis in s.output.axes)
    if s.update != "=" and not op.reduction_dims and op.unit != MATRIX and not summed:
        raise where.error(f"operator '{name}' uses '{s.update}' but reduces no dimension", "expr")
    return op


def _check_carried(w: Workload, data: Field) -> None:
    """`carried: DIM` names a reduction dim of the operator whose running value its consumers
    may read; the state and the accumulators rescaled with it are indexed by plain dims."""
    items = list(data.child("ops").elements())
    for op, item in zip(w.ops, items, strict=True):
        if not op.carried:
            continue
        if op.carried not in op.reduction_dims:
            raise item.error(f"operator '{op.name}': carried '{op.carried}' must be one of "
                             f"its reduction dims ({', '.join(op.reduction_dims) or 'none'})",
                             "carried")
        for name in (op.name, *w.rescaled[op.name]):
            other = w.op_by_name[name]
            if not all(axis.is_plain for axis in other.output.axes):
                raise item.error(f"operator '{name}' carries or rescales state over "
                                 f"'{op.carried}', so its output must be indexed by plain "
                                 f"dims, not {other.output}", "carried")


def _shapes(w: Workload, data: Field, names: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    declared = data.child("shapes") if data.has("shapes") else None
    shapes: dict[str, tuple[int, ...]] = {}
    ranks: dict[str, int] = {}
    for op in w.ops:
        for a in (op.output, *op.inputs):
            if ranks.setdefault(a.tensor, len(a.axes)) != len(a.axes):
                raise data.error(f"tensor '{a.tensor}' is used with {ranks[a.tensor]} and "
                                 f"{len(a.axes)} indices", "ops")
            hull = tuple(
                max(0, sum(c * (w.sizes[d] - 1) for d, c in axis.terms) + axis.offset + 1)
                for axis in a.axes
            )
            old = shapes.get(a.tensor, hull)
            shapes[a.tensor] = tuple(max(x, y) for x, y in zip(old, hull, strict=True))
    if declared:
        for tensor, entry in declared.items():
            if tensor not in shapes:
                raise entry.error(f"shape given for '{tensor}', which no operator uses")
            values = entry.data if isinstance(entry.data, list) else None
            if values is None or len(values) != ranks[tensor]:
                raise entry.error(f"expected a list of {ranks[tensor]} extents for '{tensor}'")
            try:
                extents = tuple(eval_size(v, names) for v in values)
            except ExpressionError as exc:
                raise entry.error(str(exc)) from None
            for axis, extent in enumerate(extents):
                if not 1 <= extent <= MAX_COUNT:
                    raise entry.error(f"extent {axis + 1} of '{tensor}' must be at least 1 and "
                                      f"at most {MAX_COUNT:,}, got {extent:,}")
            shapes[tensor] = extents
    return shapes


def _check_graph(w: Workload, data: Field) -> None:
    produced: set[str] = set()
    for op in w.ops:
        for a in op.inputs:
            if a.tensor in w.producer and a.tensor not in produced:
                raise data.error(f"operator '{op.name}' reads '{a.tensor}' before the operator "
                                 "that produces it; list operators in dependency order", "ops")
        if op.output.tensor in produced:
            raise data.error(f"tensor '{op.output.tensor}' is produced by two operators", "ops")
        if op.output.tensor in {a.tensor for a in op.inputs}:
            raise data.error(f"operator '{op.name}' reads its own output", "ops")
        if any(a.tensor == op.output.tensor for o in w.ops for a in o.inputs) and any(
                len(axis.terms) > 1 for axis in op.output.axes):
            raise data.error(f"operator '{op.name}' writes '{op.output.tensor}' through a "
                             "summed index and another operator reads it: summed output "
                             "indices are supported on final outputs only", "ops")
        produced.add(op.output.tensor)
    if len({op.name for op in w.ops}) != len(w.ops):
        raise data.error("operator names must be unique", "ops")


def load_workload(
    name_or_path: str, overrides: Mapping[str, int] | None = None, preset: str | None = None
) -> Workload:
    """Load a workload by shipped name, preset name (G1..G12, C1..C8) or YAML path."""
    path, preset = resolve_workload(name_or_path, preset)
    try:
        return parse_workload(load_mapping(path), overrides, preset)
    except InputError as exc:
        raise exc.located(shown(path)) from None


def resolve_workload(name_or_path: str, preset: str | None = None) -> tuple[Path, str | None]:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or given(path):
        if not given(path):
            raise InputError(f"no such workload file '{shown(name_or_path)}'")
        return path, preset
    shipped = resources.find("workloads", name_or_path)
    if shipped is not None:
        return shipped, preset
    # a bare preset picks the base workload among those that have it (attention, not its
    # variants such as attention-online): the shortest name first
    candidates = sorted(resources.shipped("workloads").values(),
                        key=lambda p: (len(p.stem), p.stem))
    for candidate in candidates:
        presets = load_yaml(candidate).get("presets") or {}
        if name_or_path.upper() in presets:
            if preset is not None and preset != name_or_path.upper():
                raise InputError(f"--workload {name_or_path} is itself a preset and conflicts "
                                 f"with --preset {preset}: give the workload by name, e.g. "
                                 f"--workload {candidate.stem} --preset {preset}",
                                 where="--preset")
            return candidate, name_or_path.upper()
    names = list(resources.shipped("workloads"))
    raise InputError(f"unknown workload '{shown(name_or_path)}': give a YAML file, one of "
                     f"{', '.join(names)}, or a preset such as G1 or C1")
