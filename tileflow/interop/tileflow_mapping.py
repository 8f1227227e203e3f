"""The original TileFlow's mapping trees (`node-type` Tile / Scope / Op, `subtree` children)
as TileFlow tile trees: a Tile node is a tile at its `target` level (a temporal node and the
spatial node under it at the same target become one tile), a Scope node is the primitive of
the tile above it (Sequential, Sharing, Parallel, Pipeline)."""

from __future__ import annotations

from pathlib import Path

from tileflow.interop.common import factors, names, permutation
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.specs.yamlfile import Field

PRIMITIVE = {"sequential": "Seq", "sharing": "Shar", "parallel": "Para", "pipeline": "Pipe"}
TILE_KEYS = {"node-type", "type", "factors", "permutation", "target", "split", "multicast",
             "bypass", "profile", "tag", "subtree"}


def is_tileflow_mapping(data: object) -> bool:
    m = data.get("mapping") if isinstance(data, dict) else None
    return isinstance(m, dict) and "node-type" in m


def convert_tileflow_mapping(doc: Field, workload: Workload, arch: Architecture) -> dict:
    dims = {d: 1 for op in workload.ops for d in op.dims}
    root = _node(doc.child("mapping"), workload, arch, dims, arch.levels[0].name)
    if "op" in root:
        root = {"level": arch.levels[0].name, "children": [root]}
    return {"name": Path(doc.source).stem, "root": root}


def _kind(f: Field) -> str:
    f.require_mapping()
    kind = f.get("node-type")
    if not isinstance(kind, str) or kind.lower() not in ("tile", "scope", "op"):
        raise f.error(f"'node-type' must be Tile, Scope or Op, got {kind!r}", "node-type")
    return kind.lower()


def _node(f: Field, w: Workload, arch: Architecture, dims: dict, level: str) -> dict:
    kind = _kind(f)
    if kind == "op":
        return _op(f, w)
    if kind == "scope":
        f.check_keys({"node-type", "type", "subtree", "tag"}, required={"type", "subtree"})
        primitive = _primitive(f)
        children = [_node(c, w, arch, dims, level) for c in _subtree(f)]
        return {"level": level, "primitive": primitive, "children": children}
    f.check_keys(TILE_KEYS, required={"target", "type", "subtree"})
    target = f.string("target")
    if target not in arch.level_index:
        raise f.error(f"unknown target '{target}'; levels are {', '.join(arch.level_index)}",
                      "target")
    loops = _loops(f, dims)
    subtree = _subtree(f)
    if len(subtree) != 1:
        raise f.error("a Tile node has one child (put a Scope under it for several)",
                      "subtree")
    child = subtree[0]
    child_kind = _kind(child)
    if child_kind == "scope":
        inner = _node(child, w, arch, dims, target)
        return {"level": target, "loops": loops, "primitive": inner["primitive"],
                "children": inner["children"]}
    inner = _node(child, w, arch, dims, target)
    if child_kind == "tile" and inner["level"] == target:
        return {**inner, "loops": loops + inner.get("loops", [])}
    return {"level": target, "loops": loops, "children": [inner]}


def _op(f: Field, w: Workload) -> dict:
    f.check_keys({"node-type", "name", "binding"}, required={"name"})
    name = f.string("name").strip()
    if name not in w.op_by_name:
        raise f.error(f"unknown operator '{name}' (the problem's: "
                      f"{', '.join(w.op_by_name)})", "name")
    if f.has("binding"):
        for pair in names(f, "binding"):
            left, sep, right = pair.partition(":")
            if not sep or left.strip() != right.strip():
                raise f.error(f"binding '{pair}' renames a dimension; only identity bindings "
                              "(M:M) are supported", "binding")
    return {"op": name}


def _primitive(f: Field) -> str:
    value = f.get("type")
    if not isinstance(value, str) or value.lower() not in PRIMITIVE:
        raise f.error(f"scope type must be one of Sequential, Sharing, Parallel, Pipeline, "
                      f"got {value!r}", "type")
    return PRIMITIVE[value.lower()]


def _subtree(f: Field) -> list[Field]:
    children = f.child("subtree").elements()
    if not children:
        raise f.error("an empty subtree", "subtree")
    return children


def _loops(f: Field, dims: dict) -> list[str]:
    kind = f.string("type").lower()
    if kind not in ("temporal", "spatial"):
        raise f.error(f"tile type must be Temporal or Spatial, got {f.get('type')!r}", "type")
    if f.has("bypass") and names(f, "bypass"):
        raise f.error(f"bypass of {', '.join(names(f, 'bypass'))}: per-tensor bypass is not "
                      "modelled by TileFlow (the counts would differ); remove it, or place "
                      "intermediates with 'homes' in a TileFlow dataflow", "bypass")
    if f.has("multicast") and f.get("multicast") is not True:
        raise f.error("'multicast: false' is not modelled (TileFlow reads a tile shared by "
                      "several instances once)", "multicast")
    for key in ("profile",):
        if f.has(key) and not isinstance(f.get(key), bool):
            raise f.error(f"'{key}' must be true or false", key)
    if f.has("split"):
        if kind != "spatial":
            raise f.error("'split' is for spatial tiles", "split")
        f.integer("split", minimum=0)
    chosen = factors(f, dims)
    suffix = ":Sp" if kind == "spatial" else ""
    return [f"{d}:{chosen[d]}{suffix}" for d in permutation(f, chosen, dims)]
