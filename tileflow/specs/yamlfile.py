"""Read YAML with line numbers, and typed field access that reports where a value was bad."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from tileflow.errors import InputError


def load_yaml(path: str | Path) -> Any:
    """Parse a YAML file, keeping line information; errors name the file and the line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror})", str(path)) from None
    try:
        return YAML(typ="rt").load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        raise InputError(f"YAML syntax error: {exc.problem}", str(path), where) from None


@dataclass(frozen=True)
class Field:
    """A YAML mapping with the file it came from; lookups raise InputError naming the place."""

    data: Any
    source: str
    path: str = ""
    line: int | None = None  # 0-based line of this value, when its parent knows it

    def _line(self, key: Any = None) -> str | None:
        lc = getattr(self.data, "lc", None)
        if lc is None:
            return f"line {self.line + 1}" if self.line is not None else None
        try:
            if key is not None and isinstance(self.data, CommentedMap):
                line = self.data.lc.key(key)[0]
            elif key is not None and isinstance(self.data, CommentedSeq):
                line = self.data.lc.item(key)[0]
            else:
                line = lc.line
        except (KeyError, IndexError, TypeError):
            line = lc.line
        return f"line {line + 1}"

    def where(self, key: Any = None) -> str:
        name = self._child_path(key) if key is not None else self.path or "(top level)"
        line = self._line(key)
        return f"{line} ({name})" if line else name

    def _child_path(self, key: Any) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else str(key)

    def error(self, message: str, key: Any = None) -> InputError:
        return InputError(message, self.source, self.where(key))

    def require_mapping(self) -> Field:
        if not isinstance(self.data, dict):
            raise self.error(f"expected a mapping, got {type_name(self.data)}")
        return self

    def keys(self) -> list[str]:
        return list(self.require_mapping().data.keys())

    def check_keys(self, allowed: Iterable[str], required: Iterable[str] = ()) -> None:
        """Unknown keys are errors (never silently ignored); required ones must be present."""
        allowed = set(allowed) | set(required)
        for key in self.keys():
            if key not in allowed:
                raise self.error(
                    f"unknown key '{key}'; expected one of: {', '.join(sorted(allowed))}", key
                )
        for key in required:
            if key not in self.data:
                raise self.error(f"missing required key '{key}'")

    def has(self, key: str) -> bool:
        return isinstance(self.data, dict) and key in self.data

    def child(self, key: Any) -> Field:
        line = None
        try:
            if isinstance(self.data, CommentedMap):
                line = self.data.lc.value(key)[0]
            elif isinstance(self.data, CommentedSeq):
                line = self.data.lc.item(key)[0]
        except (KeyError, IndexError, TypeError, AttributeError):
            line = None
        return Field(self.data[key], self.source, self._child_path(key), line)

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default) if isinstance(self.data, dict) else default

    def items(self) -> list[tuple[Any, Field]]:
        self.require_mapping()
        return [(k, self.child(k)) for k in self.data]

    def elements(self) -> list[Field]:
        if not isinstance(self.data, list):
            raise self.error(f"expected a list, got {type_name(self.data)}")
        return [self.child(i) for i in range(len(self.data))]

    def number(self, key: str, default: float | None = None, positive: bool = True) -> float:
        if key not in self.require_mapping().data:
            if default is None:
                raise self.error(f"missing required key '{key}' (a number)")
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"'{key}' must be a number, got {value!r}", key)
        if positive and value <= 0:
            raise self.error(f"'{key}' must be positive, got {value!r}", key)
        if not positive and value < 0:
            raise self.error(f"'{key}' must not be negative, got {value!r}", key)
        return float(value)

    def integer(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        if key not in self.require_mapping().data:
            if default is None:
                raise self.error(f"missing required key '{key}' (an integer)")
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"'{key}' must be an integer >= {minimum}, got {value!r}", key)
        return int(value)

    def string(self, key: str, default: str | None = None) -> str:
        if key not in self.require_mapping().data:
            if default is None:
                raise self.error(f"missing required key '{key}' (a string)")
            return default
        value = self.data[key]
        if not isinstance(value, str):
            raise self.error(f"'{key}' must be a string, got {value!r}", key)
        return value


def type_name(value: Any) -> str:
    if value is None:
        return "nothing (an empty value or file)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"
