"""Timeloop problems (`shape` + `instance`: one multiply-accumulate over data spaces with
projections) and the original TileFlow's problems (`ops`, each with its data spaces, `ins`
and `out`) as TileFlow workloads: one einsum-like expression per operator."""

from __future__ import annotations

from pathlib import Path

from tileflow.interop.common import IDENTIFIER, identifier, names
from tileflow.interop.report import note
from tileflow.specs.yamlfile import Field

# Original TileFlow op types -> (update, function) of a TileFlow expression.
ELEMENTWISE = {"exp": "exp", "copy": "", "add": "+", "sub": "-", "mul": "*", "div": "/"}
REDUCTIONS = {"max": "max=", "sum": "+="}


def is_timeloop_problem(data: object) -> bool:
    p = data.get("problem") if isinstance(data, dict) else None
    return isinstance(p, dict) and "shape" in p


def is_tileflow_problem(data: object) -> bool:
    p = data.get("problem") if isinstance(data, dict) else None
    return isinstance(p, dict) and "ops" in p


def _one_key(f: Field, *spellings: str, required: bool = False) -> str | None:
    """The one spelling of a key the mapping uses: two spellings together would leave one
    of them unread; a required key may not be missing."""
    present = [k for k in spellings if f.has(k)]
    if len(present) > 1:
        raise f.error(f"'{present[0]}' and '{present[1]}' are the same key: give one",
                      present[1])
    if not present and required:
        raise f.error(f"missing required key '{spellings[0]}' (the tensors and how the "
                      "dimensions index them)")
    return present[0] if present else None


def convert_timeloop_problem(doc: Field) -> dict:
    problem = doc.child("problem").require_mapping()
    problem.check_keys({"version", "shape", "instance"}, required={"shape", "instance"})
    shape = problem.child("shape").require_mapping()
    shape.check_keys({"name", "dimensions", "coefficients", "data-spaces", "data_spaces"},
                     required={"dimensions"})
    dims = _dims(shape)
    coefficients: dict[str, int] = {}
    if shape.has("coefficients"):
        for c in shape.child("coefficients").elements():
            c.check_keys({"name", "default"}, required={"name"})
            coefficients[identifier(c, "name", "a coefficient name")] = c.integer("default", 1)
    instance = problem.child("instance").require_mapping()
    sizes: dict[str, int] = {}
    for key in instance.keys():
        if key in dims:
            sizes[key] = instance.integer(key)
        elif key in coefficients:
            coefficients[key] = instance.integer(key, minimum=0)
        elif key == "densities":
            note(instance, "'densities' not modelled: TileFlow counts dense tensors", key)
        else:  # H, W, Hpad, Wpad...: the tutorials' bookkeeping, used by no projection
            note(instance, f"'{key}' is neither a dimension ({', '.join(dims)}) nor a "
                 "coefficient of the shape: not read", key)
    for d in dims:
        sizes.setdefault(d, 1)  # Timeloop: an unlisted dimension has size 1
    spaces = shape.child(_one_key(shape, "data-spaces", "data_spaces", required=True))
    accesses, outputs = {}, []
    for item in spaces.elements():
        item.check_keys({"name", "projection", "read-write", "read_write"},
                        required={"name", "projection"})
        _one_key(item, "read-write", "read_write")
        tensor = identifier(item, "name", "a data-space name")
        accesses[tensor] = _projection(item.child("projection"), dims, coefficients)
        if _flag(item, "read-write") or _flag(item, "read_write"):
            outputs.append(tensor)
            _plain_output(item, accesses[tensor], dims)
    if len(outputs) != 1 or len(accesses) != 3:
        raise spaces.error(f"expected three data spaces, one of them read-write (a multiply-"
                           f"accumulate); found {len(accesses)} with read-write: "
                           f"{', '.join(outputs) or 'none'}")
    out = outputs[0]
    a, b = (t for t in accesses if t != out)
    name = str(shape.get("name", "op"))
    op = name.lower().replace("-", "_") if IDENTIFIER.match(name.replace("-", "_")) else "op"
    expr = f"{out}[{accesses[out]}] += {a}[{accesses[a]}] * {b}[{accesses[b]}]"
    return {"name": name, "dims": sizes, "ops": [{"name": op, "expr": expr}]}


def convert_tileflow_problem(doc: Field) -> dict:
    problem = doc.child("problem").require_mapping()
    problem.check_keys({"io", "dimensions", "instance", "ops"}, required={"ops"})
    sizes: dict[str, int] = {}
    if problem.has("instance"):
        _sizes(problem.child("instance"), sizes)
    ops = []
    for item in problem.child("ops").elements():
        item.check_keys({"name", "dimensions", "data-spaces", "ins", "out", "type", "instance",
                         "inplace"}, required={"name", "dimensions", "data-spaces", "out"})
        name = identifier(item, "name", "an operator name")
        dims = _dims(item)
        if item.has("instance"):
            _sizes(item.child("instance"), sizes)
        accesses: dict[str, str] = {}
        written = set()
        for space in item.child("data-spaces").elements():
            space.check_keys({"name", "projection", "read-write"},
                             required={"name", "projection"})
            tensor = identifier(space, "name", "a data-space name")
            accesses[tensor] = _projection(space.child("projection"), dims, {})
            if _flag(space, "read-write") or tensor == item.get("out"):
                _plain_output(space, accesses[tensor], dims)
            if _flag(space, "read-write"):
                written.add(tensor)
        out = identifier(item, "out", "'out'")
        ins = names(item, "ins") or [t for t in accesses if t != out]
        for t in (out, *ins):
            if t not in accesses:
                raise item.error(f"operator '{name}' names '{t}', which is not one of its "
                                 "data spaces", "ins" if t != out else "out")
        ops.append({"name": name, "expr": _expression(item, name, out, ins, accesses,
                                                     out in written, dims)})
    for d in {d for item in problem.child("ops").elements() for d in _dims(item)}:
        if d not in sizes:
            raise problem.error(f"no size for dimension '{d}' (give it in 'instance')")
    return {"name": _stem(doc), "dims": sizes, "ops": ops}


def _expression(item: Field, name: str, out: str, ins: list[str], acc: dict[str, str],
                accumulate: bool, dims: list[str]) -> str:
    lhs = f"{out}[{acc[out]}]"
    refs = [f"{t}[{acc[t]}]" for t in ins]
    kind = item.get("type")
    if kind is None:
        if len(ins) == 2 and accumulate:
            return f"{lhs} += {refs[0]} * {refs[1]}"
        if len(ins) == 1:
            return f"{lhs} = {refs[0]}"
        raise item.error(f"operator '{name}': without a 'type', expected two inputs and a "
                         "read-write output (a multiply-accumulate) or one input (a copy)")
    if not isinstance(kind, str) or kind.lower() not in {*ELEMENTWISE, *REDUCTIONS}:
        raise item.error(f"operator type {kind!r} is not supported (supported: "
                         f"{', '.join([*ELEMENTWISE, *REDUCTIONS])})", "type")
    kind = kind.lower()
    if kind in REDUCTIONS:
        if len(ins) != 1:
            raise item.error(f"a '{kind}' reduction takes one input", "ins")
        return f"{lhs} {REDUCTIONS[kind]} {refs[0]}"
    symbol = ELEMENTWISE[kind]
    if symbol in ("+", "-", "*", "/"):
        if len(ins) != 2:
            raise item.error(f"a '{kind}' operator takes two inputs", "ins")
        return f"{lhs} = {refs[0]} {symbol} {refs[1]}"
    if len(ins) != 1:
        raise item.error(f"a '{kind}' operator takes one input", "ins")
    return f"{lhs} = {symbol}({refs[0]})" if symbol else f"{lhs} = {refs[0]}"


def _plain_output(space: Field, index: str, dims: list[str]) -> None:
    for axis in index.split(","):
        if axis not in dims:
            raise space.error(f"output index '{axis}' must be one dimension with coefficient 1",
                              "projection")


def _dims(f: Field) -> list[str]:
    value = f.get("dimensions")
    if isinstance(value, str):
        value = [v for v in value.replace(",", " ").split() if v]
    if not isinstance(value, list) or not all(isinstance(d, str) and IDENTIFIER.match(d)
                                              for d in value):
        raise f.error(f"'dimensions' must be a list of names, got {value!r}", "dimensions")
    return [d.strip() for d in value]


def _sizes(f: Field, sizes: dict[str, int]) -> None:
    for key, value in f.items():
        if isinstance(value.data, str):
            raise f.error(f"size of '{key}' is {value.data!r}, not an integer (substitute "
                          "macro names before importing)", key)
        size = f.integer(key)
        if sizes.get(key, size) != size:
            raise f.error(f"dimension '{key}' has size {size} here and {sizes[key]} elsewhere",
                          key)
        sizes[key] = size


def _flag(f: Field, key: str) -> bool:
    value = f.get(key, False)
    if not isinstance(value, bool):
        raise f.error(f"'{key}' must be true or false, got {value!r}", key)
    return value


def _projection(f: Field, dims: list[str], coefficients: dict[str, int]) -> str:
    """[[[C]], [[R, Wdilation], [P, Wstride]]] -> 'C, Wdilation*R+Wstride*P' with numbers."""
    axes = []
    for axis in f.elements():
        terms = axis.data if isinstance(axis.data, list) else [axis.data]
        parts = []
        for term in terms:
            term = term if isinstance(term, list) else [term]
            if not term or len(term) > 2 or not all(isinstance(t, (str, int)) for t in term):
                raise axis.error(f"cannot read projection term {term!r}: expected [DIM] or "
                                 "[DIM, COEFFICIENT]")
            dim, coef = term[0], term[1] if len(term) == 2 else 1
            if isinstance(dim, int) or dim not in dims:
                if isinstance(coef, str) and coef in dims:
                    dim, coef = coef, dim  # [COEFFICIENT, DIM]
                else:
                    raise axis.error(f"projection names '{dim}', which is not a dimension "
                                     f"({', '.join(dims)})")
            if isinstance(coef, str):
                if coef not in coefficients:
                    raise axis.error(f"unknown coefficient '{coef}' in the projection")
                coef = coefficients[coef]
            if coef < 0:
                raise axis.error(f"negative coefficient {coef} for '{dim}'")
            if coef:
                parts.append(dim if coef == 1 else f"{coef}*{dim}")
        if not parts:
            raise axis.error("a projection axis with no dimension (all coefficients zero)")
        axes.append("+".join(parts))
    return ",".join(axes)


def _stem(doc: Field) -> str:
    return Path(doc.source).stem
