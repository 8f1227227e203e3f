"""Dataflow YAML files: a tile tree written by hand. Errors name the file and the line."""

from __future__ import annotations

from pathlib import Path

from tileflow.errors import InputError
from tileflow.specs.yamlfile import Field, load_yaml
from tileflow.tree import PRIMITIVES, Dataflow, Loop, Node, Op, Tile, parse_loop

TILE_KEYS = {"level", "name", "loops", "primitive", "children", "no_reuse"}


def parse_dataflow(data: Field) -> Dataflow:
    data.check_keys({"name", "description", "homes", "root"},
                    required={"root"})
    lines: dict[str, int] = {}
    root = _node(data.child("root"), "root", lines)
    if not isinstance(root, Tile):
        raise data.error("the root must be a tile (with 'level'), not an operator", "root")
    homes = {}
    if data.has("homes"):
        for tensor, value in data.child("homes").items():
            if not isinstance(value.data, str):
                raise value.error("expected a level name")
            homes[str(tensor)] = value.data
    return Dataflow(root, data.get("name", Path(data.source).stem), homes, data.source, lines)


def _node(f: Field, path: str, lines: dict[str, int]) -> Node:
    if isinstance(f.data, str):
        return Op(f.data)
    f.require_mapping()
    line = getattr(getattr(f.data, "lc", None), "line", None)
    if line is not None:
        lines[path] = line + 1
    if f.has("op"):
        f.check_keys({"op"})
        return Op(f.string("op"))
    f.check_keys(TILE_KEYS, required={"level", "children"})
    primitive = f.string("primitive", "Seq")
    if primitive not in PRIMITIVES:
        raise f.error(f"unknown primitive '{primitive}'; expected one of "
                      f"{', '.join(PRIMITIVES)}", "primitive")
    loops: list[Loop] = []
    if f.has("loops"):
        for item in f.child("loops").elements():
            loops.append(_loop(item))
    children = tuple(_node(c, f"{path}.{i}", lines)
                     for i, c in enumerate(f.child("children").elements()))
    if not children:
        raise f.error("a tile needs at least one child", "children")
    no_reuse = tuple(f.get("no_reuse") or ())
    return Tile(f.string("level"), tuple(loops), children, primitive, f.get("name", ""),
                no_reuse)


def _loop(f: Field) -> Loop:
    if isinstance(f.data, str):
        try:
            return parse_loop(f.data)
        except ValueError as exc:
            raise f.error(str(exc)) from None
    f.check_keys({"dim", "factor", "spatial", "axis"}, required={"dim", "factor"})
    axis = f.get("axis", "")
    if axis not in ("", "x", "y"):
        raise f.error(f"'axis' must be x or y, got '{axis}'", "axis")
    spatial = bool(f.get("spatial", False)) or bool(axis)
    return Loop(f.string("dim"), f.integer("factor"), spatial, axis)


def load_dataflow_file(path: str | Path) -> Dataflow:
    path = Path(path)
    if not path.exists():
        raise InputError(f"no such dataflow file '{path}'")
    try:
        return parse_dataflow(Field(load_yaml(path), str(path)))
    except InputError as exc:
        raise exc.located(str(path)) from None


def locate(error: InputError, flow: Dataflow) -> InputError:
    """Point a tree error at the YAML line of the node it names (when read from a file)."""
    if not flow.source:
        return error
    where = error.where or ""
    for path in sorted(flow.lines, key=len, reverse=True):
        if f"({path})" in where or where == path:
            return InputError(error.message, flow.source, f"line {flow.lines[path]}, {where}")
    return InputError(error.message, flow.source, where or None)


def save_dataflow(flow: Dataflow, path: str | Path) -> Path:
    """Write a dataflow as YAML that `load_dataflow_file` reads back."""
    from ruamel.yaml import YAML

    from tileflow.tree import to_dict

    path = Path(path)
    yaml = YAML()
    yaml.default_flow_style = None
    with path.open("w") as handle:
        yaml.dump(to_dict(flow), handle)
    return path
