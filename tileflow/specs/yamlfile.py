"""Read YAML with line numbers, and typed field access that reports where a value was bad."""

from __future__ import annotations

import math
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, NodeEvent
from ruamel.yaml.parser import RoundTripParser

from tileflow.errors import InputError

# Limits on what a spec file may be: they are a few kilobytes written by hand.
MAX_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 64  # nested mappings and lists
MAX_NODES = 100_000  # scalars, mappings and lists
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufeff\ufffe\uffff]")

# Ranges of the numbers in spec files (documented in the README, "Robustness").
MAX_COUNT = 2**31  # sizes, factors, extents
MAX_NUMBER = 1e15  # any real-valued field (capacities, bandwidths, energies, clocks)
MIN_POSITIVE = 1e-9  # the smallest value of a field that must be positive (we divide by it)


def given(path: str | Path) -> bool:
    """Whether a name on the command line points at something in the file system: it exists,
    or looking at it fails for another reason than absence (too long, no permission); then
    reading it reports the reason."""
    try:
        Path(path).stat()
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    return True


def shown(path: str | Path) -> str:
    """A path as messages show it (a very long one shortened)."""
    text = str(path)
    return text if len(text) <= 200 else f"{text[:100]}...{text[-60:]}"


def read_text(path: str | Path) -> str:
    """The text of a spec file, read defensively: a regular file of at most MAX_FILE_BYTES,
    UTF-8 without control characters. Errors name the file (and the line of a bad byte)."""
    path = Path(path)
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise InputError("expected a YAML file, got a folder", shown(path))
        if not stat.S_ISREG(info.st_mode):
            raise InputError("expected a YAML file, got a special file (a device or a pipe)",
                             shown(path))
        if info.st_size > MAX_FILE_BYTES:
            raise InputError(f"the file is {info.st_size:,} bytes; spec files are limited to "
                             f"{MAX_FILE_BYTES:,}", shown(path))
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", shown(path)) from None
    if len(raw) > MAX_FILE_BYTES:
        raise InputError(f"the file is larger than {MAX_FILE_BYTES:,} bytes", shown(path))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(f"byte 0x{raw[exc.start]:02x} is not UTF-8 text; spec files are "
                         "UTF-8", shown(path), f"line {line}") from None
    bad = CONTROL.search(text)
    if bad:
        line = text[: bad.start()].count("\n") + 1
        raise InputError(f"control character {ord(bad.group()):#04x} in the text; spec files "
                         "hold printable text, tabs and newlines only", shown(path), f"line {line}")
    return text


def load_yaml(path: str | Path) -> Any:
    """Parse a YAML file, keeping line information; errors name the file and the line."""
    return parse_yaml(read_text(path), str(path))


class _Refused(Exception):
    """A shape rule broken at an event: the message and the event's mark."""

    def __init__(self, message: str, mark: Any) -> None:
        super().__init__(message)
        self.mark = mark


class _CheckedParser(RoundTripParser):
    """The round-trip parser, refusing as each event is consumed what a spec file may not
    hold, so the checks cost no second pass: aliases (no expansion bombs), nesting deeper
    than MAX_DEPTH, more than MAX_NODES values."""

    def __init__(self, loader: Any) -> None:
        super().__init__(loader)
        self.depth = self.nodes = 0

    def get_event(self) -> Any:
        event = super().get_event()
        if isinstance(event, AliasEvent):
            raise _Refused("YAML aliases (*name) are not supported; write the value out",
                           event.start_mark)
        if isinstance(event, NodeEvent):
            self.nodes += 1
            if self.nodes > MAX_NODES:
                raise _Refused(f"more than {MAX_NODES:,} values", event.start_mark)
        if isinstance(event, CollectionStartEvent):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _Refused(f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        elif isinstance(event, CollectionEndEvent):
            self.depth -= 1
        return event


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text after checking its shape: no aliases (no expansion bombs), nesting at
    most MAX_DEPTH, at most MAX_NODES values. Errors name `source` and the line."""
    yaml = YAML(typ="rt")
    yaml.Parser = _CheckedParser
    try:
        return yaml.load(text)
    except _Refused as exc:
        where = f"line {exc.mark.line + 1}" if exc.mark else None
        raise InputError(str(exc), source, where) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        problem = " ".join(str(exc.problem or exc.context or "unreadable").split())
        raise InputError(f"YAML syntax error: {problem}", source, where) from None
    except (YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        message = " ".join(str(exc).split())[:300]
        raise InputError(f"YAML could not be read: {message}", source) from None


@dataclass(frozen=True)
class Field:
    """A YAML mapping with the file it came from; lookups raise InputError naming the place."""

    data: Any
    source: str
    path: str = ""
    line: int | None = None  # 0-based line of this value, when its parent knows it

    def line_label(self, key: Any = None) -> str | None:
        """'line N' of this value (or of its entry `key`), when the file knows it."""
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
        except (KeyError, IndexError, TypeError, AttributeError):
            line = lc.line
        if not isinstance(line, int):  # tagged values may carry no position
            line = lc.line if isinstance(lc.line, int) else self.line
        return f"line {line + 1}" if isinstance(line, int) else None

    def where(self, key: Any = None) -> str:
        name = self._child_path(key) if key is not None else self.path or "top level"
        line = self.line_label(key)
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
        if not isinstance(line, int):
            line = self.line if self.line is not None else None
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

    def number(self, key: str, default: float | None = None, positive: bool = True,
               maximum: float = MAX_NUMBER) -> float:
        """A finite real number: positive (at least MIN_POSITIVE, since we divide by it) or,
        with positive=False, at least 0; at most `maximum`."""
        if key not in self.require_mapping().data:
            if default is None:
                raise self.error(f"missing required key '{key}' (a number)")
            return default
        return self.child(key).as_number(key, positive, maximum)

    def as_number(self, name: str, positive: bool = True, maximum: float = MAX_NUMBER) -> float:
        value = self.data
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"'{name}' must be a number, got {describe(value)}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise self.error(f"'{name}' must be a finite number, got {describe(value)}")
        low = MIN_POSITIVE if positive else 0.0
        if number < low or number > maximum:
            kind = f"at least {low:g}" if positive else "not negative"
            raise self.error(f"'{name}' must be {kind} and at most {maximum:g}, "
                             f"got {describe(value)}")
        return number

    def integer(self, key: str, default: int | None = None, minimum: int = 1,
                maximum: int = MAX_COUNT) -> int:
        if key not in self.require_mapping().data:
            if default is None:
                raise self.error(f"missing required key '{key}' (an integer)")
            return default
        return self.child(key).as_integer(key, minimum, maximum)

    def as_integer(self, name: str, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
        value = self.data
        if isinstance(value, bool) or not isinstance(value, int) or not (
                minimum <= value <= maximum):
            raise self.error(f"'{name}' must be an integer from {minimum} to {maximum:,}, "
                             f"got {describe(value)}")
        return int(value)

    def boolean(self, key: str, default: bool) -> bool:
        """A real YAML boolean (true or false), never a string such as 'no' or 'yes'."""
        if key not in self.require_mapping().data:
            return default
        value = self.data[key]
        if not isinstance(value, bool):
            raise self.error(f"'{key}' must be true or false, got {describe(value)}", key)
        return value

    def string(self, key: str, default: str | None = None) -> str:
        if key not in self.require_mapping().data:
            if default is None:
                raise self.error(f"missing required key '{key}' (a string)")
            return default
        value = self.data[key]
        if not isinstance(value, str):
            raise self.error(f"'{key}' must be a string, got {describe(value)}", key)
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        """A list of strings (absent: empty); a lone string is an error, not split."""
        if key not in self.require_mapping().data or self.data[key] is None:
            return ()
        items = self.child(key)
        if not isinstance(items.data, list):
            raise self.error(f"'{key}' must be a list of names, got {describe(items.data)}",
                             key)
        for i, item in enumerate(items.data):
            if not isinstance(item, str):
                raise items.error(f"expected a name, got {describe(item)}", i)
        return tuple(items.data)


def describe(value: Any) -> str:
    """A short rendering of a bad value for a message (never a huge dump)."""
    if isinstance(value, (dict, list)):
        return type_name(value)
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else \
        f"an integer of {len(str(abs(value)))} digits"
    return text if len(text) <= 60 else text[:57] + "..."


def type_name(value: Any) -> str:
    if value is None:
        return "nothing (an empty value or file)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {describe(value)}"


def load_mapping(path: str | Path) -> Field:
    """A spec file whose top level must be a mapping (an empty file is an error at line 1)."""
    return Field(load_yaml(path), shown(path), line=0).require_mapping()
