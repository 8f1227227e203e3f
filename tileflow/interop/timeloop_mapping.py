"""Timeloop mappings (a list of `target`/`type` directives: temporal and spatial factors
with permutations written innermost first, bypass with keep/bypass lists) as TileFlow tile
trees for a single-operator workload: one tile per storage level, outermost first, its
temporal loops then its spatial loops, the operator under the innermost tile."""

from __future__ import annotations

from pathlib import Path

from tileflow.interop.common import factors, names, permutation
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.specs.yamlfile import Field

DIRECTIVE_KEYS = {"target", "type", "factors", "permutation", "split", "keep", "bypass",
                  "name"}


def is_timeloop_mapping(data: object) -> bool:
    return isinstance(data, dict) and isinstance(data.get("mapping"), list)


def single_op(workload: Workload, where: Field) -> str:
    if len(workload.ops) != 1:
        raise where.error(f"a Timeloop mapping maps one operator; the workload has "
                          f"{len(workload.ops)} ({', '.join(o.name for o in workload.ops)})")
    return workload.ops[0].name


def convert_timeloop_mapping(doc: Field, workload: Workload, arch: Architecture) -> dict:
    """The `mapping:` list -> a TileFlow dataflow mapping (`root:` tile tree)."""
    directives = doc.child("mapping")
    op = single_op(workload, directives)
    sizes = dict(workload.sizes)
    tensors = set(workload.op_by_name[op].tensors)
    temporal: dict[str, list[str]] = {}
    spatial: dict[str, list[str]] = {}
    skipped: set[str] = set()
    seen: set[tuple[str, str]] = set()
    for d in directives.elements():
        d.check_keys(DIRECTIVE_KEYS, required={"target", "type"})
        target, kind = d.string("target"), d.string("type").lower()
        if target not in arch.level_index:
            raise d.error(f"unknown target '{target}'; the architecture's storage levels are "
                          f"{', '.join(arch.level_index)}", "target")
        if (target, kind) in seen:
            raise d.error(f"a second '{kind}' directive for '{target}'")
        seen.add((target, kind))
        if kind in ("bypass", "datatype"):
            if _bypassed(d, tensors, target) == tensors:
                skipped.add(target)
            continue
        if kind not in ("temporal", "spatial"):
            raise d.error(f"directive type '{kind}' is not supported (temporal, spatial, "
                          "bypass)", "type")
        for key in ("keep", "bypass"):
            if d.has(key):
                raise d.error(f"'{key}' belongs in a 'type: bypass' directive", key)
        if kind == "spatial" and d.has("split"):
            d.integer("split", minimum=0)  # X/Y placement: TileFlow checks the total fan-out
        elif d.has("split"):
            raise d.error("'split' is for spatial directives", "split")
        chosen = factors(d, sizes)
        loops = [f"{dim}:{chosen[dim]}" + (":Sp" if kind == "spatial" else "")
                 for dim in permutation(d, chosen, sizes)]
        (temporal if kind == "temporal" else spatial)[target] = loops
    for dim, size in sizes.items():
        product = 1
        for loops in (*temporal.values(), *spatial.values()):
            for loop in loops:
                name, factor = loop.split(":")[:2]
                product *= int(factor) if name == dim else 1
        if product != size:
            raise directives.error(f"the factors of '{dim}' multiply to {product}, not its "
                                   f"size {size} (Timeloop needs exact factors)")
    tile: dict | None = None
    for level in reversed([lv.name for lv in arch.levels]):
        loops = temporal.get(level, []) + spatial.get(level, [])
        if level in skipped:
            if loops:
                raise directives.error(
                    f"'{level}' bypasses every tensor but has loops {' '.join(loops)}; move "
                    "them to a level that keeps data")
            continue
        node: dict = {"level": level}
        if loops:
            node["loops"] = loops
        node["children"] = [tile if tile is not None else {"op": op}]
        tile = node
    if tile is None:
        raise directives.error("every level bypasses every tensor")
    return {"name": Path(doc.source).stem, "root": tile}


def _bypassed(d: Field, tensors: set[str], target: str) -> set[str]:
    """Tensors a bypass directive keeps out of `target`; only all or none is expressible."""
    keep, bypass = set(names(d, "keep")), set(names(d, "bypass"))
    for t in keep | bypass:
        if t not in tensors:
            raise d.error(f"unknown data space '{t}' (the operator's: "
                          f"{', '.join(sorted(tensors))})")
    out = bypass if d.has("bypass") or not d.has("keep") else tensors - keep
    if out and out != tensors:
        raise d.error(
            f"'{target}' bypasses {', '.join(sorted(out))} but keeps "
            f"{', '.join(sorted(tensors - out))}: per-tensor bypass is not modelled by TileFlow "
            "(its counts would differ); keep every tensor or none at a level")
    return out
