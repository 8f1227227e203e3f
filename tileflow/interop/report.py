"""What an import found besides the model: notes (constructs read but without effect on
TileFlow's numbers, such as mapper constraints) and problems (constructs TileFlow cannot
read). Problems are gathered over a whole file, so that one refusal lists all of them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from tileflow.errors import InputError
from tileflow.specs.yamlfile import Field


@dataclass
class Findings:
    notes: list[str] = field(default_factory=list)
    problems: list[InputError] = field(default_factory=list)


_CURRENT: ContextVar[Findings | None] = ContextVar("import_findings", default=None)


@contextmanager
def collecting() -> Iterator[Findings]:
    """Gather notes and problems of the imports run inside (nested: the outer one)."""
    outer = _CURRENT.get()
    if outer is not None:
        yield outer
        return
    found = Findings()
    token = _CURRENT.set(found)
    try:
        yield found
    finally:
        _CURRENT.reset(token)


def note(f: Field, message: str, key: object = None) -> None:
    """Something read and left without effect: kept for the import's report."""
    found = _CURRENT.get()
    if found is not None:
        text = f"{f.source}, {f.where(key)}: {message}"
        if text not in found.notes:
            found.notes.append(text)


def problem(error: InputError) -> None:
    """Something TileFlow cannot read: gathered while collecting (the file is still read to
    its end, so that every problem is listed), raised at once otherwise."""
    found = _CURRENT.get()
    if found is None:
        raise error
    if all(e.render() != error.render() for e in found.problems):
        found.problems.append(error)


def settle(source: str, first: InputError | None = None) -> None:
    """Raise one error listing every problem gathered for `source` (and `first`, the one
    that stopped the reading, if any)."""
    found = _CURRENT.get()
    gathered = [e for e in (found.problems if found else []) if e.source in (source, None)]
    if first is not None and all(e.render() != first.render() for e in gathered):
        gathered.append(first)
    if found is not None:
        found.problems = [e for e in found.problems if e not in gathered]
    if not gathered:
        return
    if len(gathered) == 1:
        raise gathered[0]
    lines = "\n".join(f"  - {e.where + ': ' if e.where else ''}{e.message}" for e in gathered)
    raise InputError(f"{len(gathered)} things TileFlow cannot read:\n{lines}", source)
