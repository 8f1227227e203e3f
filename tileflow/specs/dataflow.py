"""Dataflow YAML files: a tile tree written by hand. Errors name the file and the line."""

from __future__ import annotations

from pathlib import Path

from tileflow.errors import InputError
from tileflow.specs import keys
from tileflow.specs.yamlfile import MAX_COUNT, Field, given, load_mapping, shown
from tileflow.tree import PRIMITIVES, Dataflow, Loop, Node, Op, Tile, child_path, parse_loop, walk


def parse_dataflow(data: Field) -> Dataflow:
    keys.DATAFLOW.check(data)
    lines: dict[str, int] = {}
    root = _node(data.child("root"), "root", lines)
    if not isinstance(root, Tile):
        raise data.error("the root must be a tile (with 'level'), not an operator", "root")
    homes = {}
    if data.has("homes") and data.get("homes") is not None:
        homes_field = data.child("homes")
        lines["homes"] = _line_of(homes_field, data, "homes")
        for tensor, value in homes_field.items():
            if not isinstance(value.data, str):
                raise value.error("expected a level name")
            homes[str(tensor)] = value.data
            lines[f"homes.{tensor}"] = _line_of(value, homes_field, tensor)
    if data.has("found_for"):
        read_found_for(data)
    name = data.string("name", Path(data.source).stem)
    return Dataflow(root, name, homes, data.source, lines)


def read_found_for(data: Field) -> dict | None:
    """The run a dataflow was found for (`found_for`, written by `tileflow explore`):
    accelerator, workload, preset (or None), sizes and objective; None when absent."""
    if not data.has("found_for"):
        return None
    f = data.child("found_for").require_mapping()
    keys.FOUND_FOR.check(f)
    sizes: dict[str, int] = {}
    if f.has("sizes"):
        block = f.child("sizes").require_mapping()
        for key in block.keys():
            sizes[str(key)] = block.integer(key)
    return {"accelerator": f.string("accelerator"), "workload": f.string("workload"),
            "preset": f.string("preset") if f.has("preset") else None, "sizes": sizes,
            "objective": f.string("objective", "")}


def found_for_file(path: str | Path) -> dict | None:
    """`found_for` of a dataflow YAML file (None for a file without it, or not a mapping)."""
    path = Path(path)
    data = load_mapping(path)
    try:
        return read_found_for(data)
    except InputError as exc:
        raise exc.located(shown(path)) from None


def _line_of(value: Field, parent: Field, key) -> int:
    place = parent.line_label(key) or "line 1"
    return int(place.split()[1])


def _node(f: Field, path: str, lines: dict[str, int]) -> Node:
    if isinstance(f.data, str):
        if f.line is not None:
            lines[path] = f.line + 1
        return Op(f.data)
    f.require_mapping()
    line = getattr(getattr(f.data, "lc", None), "line", None)
    if line is not None:
        lines[path] = line + 1
    if f.has("op"):
        keys.LEAF.check(f)
        return Op(f.string("op"))
    keys.TILE.check(f)
    primitive = f.string("primitive", "Seq")
    if primitive not in PRIMITIVES:
        raise f.error(f"unknown primitive '{primitive}'; expected one of "
                      f"{', '.join(PRIMITIVES)}", "primitive")
    loops: list[Loop] = []
    if f.has("loops"):
        for i, item in enumerate(f.child("loops").elements()):
            loops.append(_loop(item))
            if item.line is not None:
                lines[f"{path}.loops[{i}]"] = item.line + 1
    children = tuple(_node(c, child_path(path, i), lines)
                     for i, c in enumerate(f.child("children").elements()))
    if not children:
        raise f.error("a tile needs at least one child", "children")
    return Tile(f.string("level"), tuple(loops), children, primitive, f.string("name", ""),
                f.strings("no_reuse"), _buffering(f), f.strings("bypass"), _halo(f))


def _buffering(f: Field) -> tuple[tuple[str, int], ...]:
    """`buffering: {TENSOR: 1 or 2, ...}` of a tile."""
    if not f.has("buffering") or f.get("buffering") is None:
        return ()
    depths = f.child("buffering")
    if not isinstance(depths.data, dict):
        raise f.error("'buffering' must be a mapping tensor -> 1 or 2, e.g. {C: 1}",
                      "buffering")
    return tuple(sorted((str(t), depths.integer(t, minimum=1, maximum=2))
                        for t in depths.keys()))


HALO_MODES = ("cache", "recompute")


def _halo(f: Field) -> tuple[tuple[str, str], ...]:
    """`halo: {INTERMEDIATE: cache or recompute, ...}` of a tile."""
    if not f.has("halo") or f.get("halo") is None:
        return ()
    modes = f.child("halo")
    if not isinstance(modes.data, dict):
        raise f.error("'halo' must be a mapping intermediate -> cache or recompute, e.g. "
                      "{A: cache}", "halo")
    out = []
    for t in modes.keys():
        mode = modes.get(t)
        if not isinstance(mode, str) or mode not in HALO_MODES:
            raise modes.error(f"halo of '{t}' must be cache or recompute, got {mode!r}", t)
        out.append((str(t), mode))
    return tuple(sorted(out))


def _loop(f: Field) -> Loop:
    if isinstance(f.data, str):
        try:
            loop = parse_loop(f.data[:200])
        except ValueError as exc:
            raise f.error(str(exc)) from None
        if not 1 <= loop.factor <= MAX_COUNT:
            raise f.error(f"the factor of loop '{f.data}' must be from 1 to {MAX_COUNT:,}")
        return loop
    keys.LOOP.check(f)
    axis = f.string("axis", "") if f.has("axis") else ""
    if axis not in ("", "x", "y"):
        raise f.error(f"'axis' must be x or y, got '{axis}'", "axis")
    spatial = f.boolean("spatial", False) or bool(axis)
    return Loop(f.string("dim"), f.integer("factor"), spatial, axis)


def load_dataflow_file(path: str | Path) -> Dataflow:
    path = Path(path)
    if not given(path):
        raise InputError(f"no such dataflow file '{shown(path)}'")
    try:
        return parse_dataflow(load_mapping(path))
    except InputError as exc:
        raise exc.located(shown(path)) from None


def check_operators(flow: Dataflow, operators: list[str] | tuple[str, ...]) -> None:
    """Every leaf names an operator of the workload, and every operator has exactly one leaf
    (an error names the leaf's line, or the root's, and the operators that exist)."""
    known = set(operators)
    seen: dict[str, str] = {}
    for path, node in walk(flow.root):
        if not isinstance(node, Op):
            continue
        if node.op not in known:
            raise _at(flow, path, f"leaf '{node.op}' is not an operator of the workload; "
                      f"its operators are {', '.join(operators)}")
        if node.op in seen:
            raise _at(flow, path, f"operator '{node.op}' has two leaves ({seen[node.op]} and "
                      f"{path}); each operator appears once")
        seen[node.op] = path
    missing = [o for o in operators if o not in seen]
    if missing:
        raise _at(flow, "root", f"operators {', '.join(missing)} of the workload have no leaf "
                  "in the tree; every operator appears once (was the dataflow written for "
                  "another workload?)")


def _at(flow: Dataflow, path: str, message: str) -> InputError:
    line = flow.lines.get(path)
    where = f"line {line} ({path})" if line else path
    return InputError(message, flow.source or None, where)


def locate(error: InputError, flow: Dataflow) -> InputError:
    """Point a tree error at the YAML line of the node it names (when read from a file)."""
    if not flow.source:
        return error
    where = error.where or ""
    for path in sorted(flow.lines, key=len, reverse=True):
        if f"({path})" in where or where == path:
            return InputError(error.message, flow.source, f"line {flow.lines[path]}, {where}")
    root = flow.lines.get("root")
    if root:  # a constraint of the whole tree: point at its root
        return InputError(error.message, flow.source,
                          f"line {root}, {where}" if where else f"line {root} (root)")
    return InputError(error.message, flow.source, where or None)


def save_dataflow(flow: Dataflow, path: str | Path) -> Path:
    """Write a dataflow as YAML that `load_dataflow_file` reads back."""
    from tileflow.outputs import write_yaml
    from tileflow.tree import to_dict

    return write_yaml(path, to_dict(flow), flag="--save-dataflow")
