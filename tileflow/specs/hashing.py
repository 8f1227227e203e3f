"""Hashing for frozen specs whose fields include mappings (a workload's sizes, a unit's
cycles per function), which keep the generated `__hash__` from working: the hash of the
fields that take part in equality, mappings as their sorted items, computed once per object
and never pickled (a string's hash differs from one process to the next)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

_CACHED = "_spec_hash"


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


def spec_hash(spec: Any) -> int:
    """The hash of a frozen dataclass by its compared fields (a `__hash__`)."""
    found = spec.__dict__.get(_CACHED)
    if found is None:
        found = hash(tuple(_frozen(getattr(spec, f.name)) for f in fields(spec) if f.compare))
        spec.__dict__[_CACHED] = found
    return found


def spec_state(spec: Any) -> dict[str, Any]:
    """The pickled state of a spec (a `__getstate__`): its fields and cached values, less
    the hash."""
    return {k: v for k, v in spec.__dict__.items() if k != _CACHED}
