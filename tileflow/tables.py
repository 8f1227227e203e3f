"""Measurement tables (CSV) read with their columns, types and ranges checked first: a damaged
file (empty, binary, not UTF-8, cut off mid-line, ragged rows, a missing or non-numeric
column, a time that is zero, negative or infinite) is an InputError naming the file, the
row's line and the column, never a traceback or a NaN carried into a report."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tileflow.errors import InputError


@dataclass(frozen=True)
class Column:
    """What a column must hold: `kind` 'text', 'json' (an object), 'integer' or 'number';
    numbers at least `minimum` (above it when `strict`) and at most `maximum`, finite (or
    +inf where `infinite`); `required`: the column must exist and no row may leave it
    empty."""

    kind: str = "number"
    minimum: float = 0.0
    strict: bool = False
    required: bool = True
    maximum: float = math.inf
    infinite: bool = False  # +inf allowed (an objective's value of an invalid point)

    def expected(self) -> str:
        if self.kind == "text":
            return "text"
        if self.kind == "json":
            return "a JSON object (the dataflow tree)"
        what = ("an integer" if self.kind == "integer" else
                "a number (inf for none)" if self.infinite else "a finite number")
        top = "" if not math.isfinite(self.maximum) else (
            f" and <= {self.maximum:,.0f}" if float(self.maximum).is_integer()
            else f" and <= {self.maximum:,g}")
        return f"{what} {'>' if self.strict else '>='} {self.minimum:g}{top}"


def _text(path: Path, empty: str = "a header line and measured rows", kind: str = "CSV") -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", str(path)) from None
    if not raw.strip():
        raise InputError(f"the file is empty (expected {empty})", str(path))
    if b"\x00" in raw:
        raise InputError(f"the file is binary, not {kind} text", str(path))
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise InputError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); save it as UTF-8",
                         str(path), f"line {line}") from None


def _check(value: str, column: Column, name: str, path: Path, line: int) -> None:
    where = f"line {line}, column '{name}'"
    if value.strip() == "":
        if column.required:
            raise InputError(f"empty; expected {column.expected()}", str(path), where)
        return
    if column.kind == "text":
        return
    if column.kind == "json":
        try:
            ok = isinstance(json.loads(value), dict)
        except ValueError:
            ok = False
        if not ok:
            raise InputError(f"{value[:40]!r} is not {column.expected()}", str(path), where)
        return
    try:
        number = float(value)
    except ValueError:
        raise InputError(f"{value[:40]!r} is not a number; expected {column.expected()}",
                         str(path), where) from None
    finite = math.isfinite(number) or (column.infinite and number == math.inf)
    bad = not finite or number < column.minimum or number > column.maximum or (
        column.strict and number <= column.minimum) or (
        column.kind == "integer" and not number.is_integer())
    if bad:
        raise InputError(f"{value[:40]!r} is out of range; expected {column.expected()}",
                         str(path), where)


def read_table(path: str | Path, columns: dict[str, Column], minimum_rows: int = 1
               ) -> pd.DataFrame:
    """The table in `path`, every row with the header's number of fields and every declared
    column's value as declared; other columns are kept unread."""
    path = Path(path)
    text = _text(path)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in next(reader)]
        absent = [c for c, spec in columns.items() if spec.required and c not in header]
        if absent:
            raise InputError(f"missing column{'s' if len(absent) > 1 else ''} "
                             f"{', '.join(absent)}; the header has {', '.join(header)[:300]}",
                             str(path), "line 1")
        index = {c: header.index(c) for c in columns if c in header}
        count, lines = 0, []
        for row in reader:
            line = reader.line_num
            if all(not x.strip() for x in row):
                continue
            if len(row) != len(header):
                cut = "" if text.endswith(("\n", "\r")) or line < text.count("\n") + 1 \
                    else "; the file was cut off mid-line"
                raise InputError(f"{len(row)} fields where the header has {len(header)}{cut}",
                                 str(path), f"line {line}")
            for name, i in index.items():
                _check(row[i], columns[name], name, path, line)
            count += 1
            lines.append(line)
    except csv.Error as exc:
        raise InputError(f"not a CSV table ({exc})", str(path),
                         f"line {reader.line_num}") from None
    if count < minimum_rows:
        raise InputError(f"{count} rows; at least {minimum_rows} needed", str(path))
    try:
        frame = pd.read_csv(io.StringIO(text))
    except (ValueError, pd.errors.ParserError) as exc:
        raise InputError(f"not a CSV table ({exc})", str(path)) from None
    if len(lines) == len(frame):
        frame.attrs["lines"] = lines
    return frame


def line_of(frame: pd.DataFrame, row: int) -> int:
    """The file line of a `read_table` frame's row (blank lines counted)."""
    lines = frame.attrs.get("lines")
    return lines[row] if lines is not None else row + 2


def read_json_object(path: str | Path) -> dict:
    """The JSON object in `path` (a summary or manifest the tool wrote): unreadable, not
    UTF-8, not JSON (NaN included: the tool never writes it) or not an object is an
    InputError naming the file and the line."""
    path = Path(path)
    text = _text(path, "a JSON object", "JSON")

    def refuse(token: str):
        raise ValueError(f"{token} is not a JSON number")

    try:
        value = json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON ({exc.msg}); the file is damaged or cut off", str(path),
                         f"line {exc.lineno}, column {exc.colno}") from None
    except ValueError as exc:
        raise InputError(f"not JSON ({exc})", str(path)) from None
    if not isinstance(value, dict):
        raise InputError(f"expected a JSON object, got {type(value).__name__}", str(path))
    return value

