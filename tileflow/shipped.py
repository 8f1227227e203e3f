"""The shipped YAML files (accelerators, workloads, dataflows, search studies), found through
importlib.resources: inside an installed wheel they live in `tileflow/_data/<kind>/` (the build
maps the repository's top-level folders there); in a source checkout, beside the package."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

KINDS = ("accelerators", "workloads", "dataflows", "search")
SUFFIXES = (".yaml", ".yml")


def folder(kind: str) -> Path:
    """The folder of shipped files of one kind (one of KINDS)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of shipped file '{kind}'; expected one of {KINDS}")
    installed = files("tileflow").joinpath("_data", kind)
    if installed.is_dir():
        return Path(str(installed))
    return Path(__file__).resolve().parent.parent / kind  # a source checkout


def shipped(kind: str) -> dict[str, Path]:
    """Shipped YAML files of one kind by name (the file name without its suffix), sorted."""
    root = folder(kind)
    if not root.is_dir():
        return {}
    return {p.stem: p for p in sorted(root.iterdir()) if p.suffix in SUFFIXES and p.is_file()}


def find(kind: str, name: str) -> Path | None:
    """The shipped file called `name` (case-insensitive), or None."""
    return shipped(kind).get(name.lower())
