"""Parsing of einsum-like operator expressions and of integer size expressions."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

REF = re.compile(r"([A-Za-z_]\w*)\s*\[([^\]]*)\]")
STATEMENT = re.compile(r"^\s*(.+?)\s*(\+=|max=|=)\s*(.+?)\s*$")
FUNCTION = re.compile(r"^([A-Za-z_]\w*)\s*\((.*)\)$")
BINARY = {"*": "mul", "-": "sub", "+": "add", "/": "div"}
MAX_TEXT = 1000  # characters in one expression
MAX_MAGNITUDE = 2**62  # any integer met while evaluating sizes and indices


@dataclass(frozen=True)
class Axis:
    """One tensor axis as an affine function of loop dimensions: sum(coef * dim) + offset."""

    terms: tuple[tuple[str, int], ...]
    offset: int = 0

    @cached_property
    def dims(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.terms)

    @cached_property
    def is_plain(self) -> bool:
        return len(self.terms) == 1 and self.terms[0][1] == 1 and self.offset == 0

    def __str__(self) -> str:
        text = "+".join(d if c == 1 else f"{c}*{d}" for d, c in self.terms)
        if self.offset:
            text += f"{self.offset:+d}"
        return text or str(self.offset)


@dataclass(frozen=True)
class Access:
    """A tensor reference inside an operator: T[axis, axis, ...]."""

    tensor: str
    axes: tuple[Axis, ...]

    @cached_property
    def dims(self) -> tuple[str, ...]:
        return tuple(d for a in self.axes for d in a.dims)

    def __str__(self) -> str:
        return f"{self.tensor}[{','.join(str(a) for a in self.axes)}]"


@dataclass(frozen=True)
class Statement:
    output: Access
    update: str
    function: str
    inputs: tuple[Access, ...]


class ExpressionError(ValueError):
    pass


def parse_statement(text: str, dims: set[str], params: Mapping[str, int]) -> Statement:
    """Parse `OUT[..] (+=|max=|=) RHS`, RHS a product/difference/quotient, a function or a ref."""
    if len(text) > MAX_TEXT:
        raise ExpressionError(f"the expression is longer than {MAX_TEXT} characters")
    match = STATEMENT.match(text)
    if not match:
        raise ExpressionError("expected 'OUT[i,..] += A[..] * B[..]' (or '=', 'max=')")
    lhs, update, rhs = match.groups()
    outputs = REF.findall(lhs)
    if len(outputs) != 1 or REF.sub("", lhs).strip():
        raise ExpressionError(f"the left-hand side '{lhs}' must be one tensor reference")
    output = _access(outputs[0], dims, params)
    function_match = FUNCTION.match(rhs)
    if function_match and not REF.fullmatch(rhs):
        function, body = function_match.groups()
    else:
        function, body = "", rhs
    refs = REF.findall(body)
    if not refs:
        raise ExpressionError(f"the right-hand side '{rhs}' names no tensor")
    operators = [s.strip() for s in REF.split(body)[3::3][: len(refs) - 1]]
    if len(refs) > 2 or any(op not in BINARY for op in operators):
        raise ExpressionError(
            f"the right-hand side '{rhs}' must be one or two tensor references "
            "joined by *, +, - or /, optionally inside a function call like exp(..)"
        )
    leftover = REF.sub("", body)
    for op in operators:
        leftover = leftover.replace(op, "", 1)
    if leftover.strip():
        raise ExpressionError(f"cannot read '{leftover.strip()}' in '{rhs}'")
    if not function:
        function = BINARY[operators[0]] if operators else "copy"
    inputs = tuple(_access(r, dims, params) for r in refs)
    return Statement(output, update, function, inputs)


def _access(ref: tuple[str, str], dims: set[str], params: Mapping[str, int]) -> Access:
    name, index_text = ref
    indices = [i.strip() for i in index_text.split(",")] if index_text.strip() else []
    axes = tuple(parse_axis(i, dims, params) for i in indices)
    seen: set[str] = set()
    for axis in axes:
        for d in axis.dims:
            if d in seen:
                raise ExpressionError(f"dimension '{d}' indexes two axes of {name}")
            seen.add(d)
    return Access(name, axes)


TERM = re.compile(r"([+-]?)\s*([^+-]+)")


def parse_axis(text: str, dims: set[str], params: Mapping[str, int]) -> Axis:
    """Parse an affine index like '2*p+r-1' or 'st*p+r-pad' (params become integers)."""
    if not text:
        raise ExpressionError("empty index")
    terms: dict[str, int] = {}
    offset = 0
    compact = text.replace(" ", "")
    if not re.fullmatch(r"[+-]?[^+-]+([+-][^+-]+)*", compact):
        raise ExpressionError(f"cannot read index '{text}'")
    for sign, body in TERM.findall(compact):
        factor = -1 if sign == "-" else 1
        dim = None
        for part in body.split("*"):
            if re.fullmatch(r"\d{1,18}", part):
                factor *= int(part)
            elif part in dims:
                if dim is not None:
                    raise ExpressionError(f"index '{text}' multiplies two dimensions")
                dim = part
            elif part in params:
                factor *= int(params[part])
            else:
                raise ExpressionError(f"unknown name '{part}' in index '{text}'")
            if abs(factor) > MAX_MAGNITUDE:
                raise ExpressionError(f"a coefficient in index '{text}' is beyond {MAX_MAGNITUDE}")
        if dim is None:
            offset += factor
        elif factor <= 0:
            raise ExpressionError(f"dimension '{dim}' needs a positive coefficient in '{text}'")
        else:
            terms[dim] = terms.get(dim, 0) + factor
    if abs(offset) > MAX_MAGNITUDE or any(c > MAX_MAGNITUDE for c in terms.values()):
        raise ExpressionError(f"index '{text}' has a coefficient beyond {MAX_MAGNITUDE}")
    return Axis(tuple(terms.items()), offset)


_ALLOWED_BINOPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__,
                   ast.FloorDiv: int.__floordiv__}


def eval_size(text: str | int, names: Mapping[str, int]) -> int:
    """Evaluate an integer size expression such as 'h // st1' over known sizes."""
    if isinstance(text, bool):
        raise ExpressionError(f"expected an integer, got {text!r}")
    if isinstance(text, int):
        return _bounded(text, str(text))
    if not isinstance(text, str):
        raise ExpressionError(f"expected an integer or an expression, got {_short(text)}")
    if len(text) > MAX_TEXT:
        raise ExpressionError(f"the size expression is longer than {MAX_TEXT} characters")
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise ExpressionError(f"cannot read size expression '{_short(text)}'") from None
    try:
        return _eval(tree, names, text)
    except RecursionError:
        raise ExpressionError(f"size expression '{_short(text)}' is nested too deeply") from None


def _short(value: object) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def _bounded(value: int, text: str) -> int:
    if abs(value) > MAX_MAGNITUDE:
        raise ExpressionError(f"'{_short(text)}' is beyond {MAX_MAGNITUDE:,} in size")
    return value


def _eval(node: ast.AST, names: Mapping[str, int], text: str) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) \
            and not isinstance(node.value, bool):
        return _bounded(node.value, text)
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ExpressionError(f"unknown name '{node.id}' in '{text}'")
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, names, text)
    if isinstance(node, ast.BinOp) and type(node.op) in _ALLOWED_BINOPS:
        left, right = _eval(node.left, names, text), _eval(node.right, names, text)
        if isinstance(node.op, ast.FloorDiv) and right == 0:
            zero = ast.unparse(node.right)
            raise ExpressionError(f"division by zero in '{_short(text)}' ({zero} is 0)")
        return _bounded(_ALLOWED_BINOPS[type(node.op)](left, right), text)
    raise ExpressionError(f"only integers, names, +, -, * and // are allowed in "
                          f"'{_short(text)}'")
