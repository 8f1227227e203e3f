"""Timeloop mappings (a list of `target`/`type` directives: temporal and spatial factors
with permutations written innermost first, bypass with keep/bypass lists) as TileFlow tile
trees for a single-operator workload: one tile per storage level, outermost first, its
temporal loops then its spatial loops, the operator under the innermost tile."""

from __future__ import annotations

import re
from pathlib import Path

from tileflow.interop.common import factors, names, permutation
from tileflow.interop.report import note, problem
from tileflow.interop.timeloop_arch import SPATIAL_HOLDERS
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
    skipped: dict[str, Field] = {}  # level -> its directive keeping no tensor
    partial: dict[str, list[str]] = {}  # level -> tensors it does not keep (tile bypass)
    seen: set[tuple[str, str]] = set()
    inner: dict[str, list[str]] = {}  # holder level -> temporal loops of its inter_* levels
    for d in directives.elements():
        d.check_keys(DIRECTIVE_KEYS, required={"target", "type"})
        target, kind = d.string("target"), d.string("type").lower()
        if kind == "dataspace":
            kind = "datatype"
        if (target, kind) in seen:
            raise d.error(f"a second '{kind}' directive for '{target}'")
        seen.add((target, kind))
        spatial_level = target not in arch.level_index and _spatial_holder(d, target, arch)
        if target not in arch.level_index and not spatial_level:
            problem(d.error(f"unknown target '{target}'; the architecture's storage levels are "
                          f"{', '.join(arch.level_index)} (and the mapper's "
                          "inter_<container>_spatial levels of its spatial containers)",
                          "target"))
            continue
        if spatial_level:  # the mapper's stand-in for a container's fan-out: keeps nothing
            if kind in ("bypass", "datatype"):
                if set(names(d, "keep")):
                    raise d.error(f"'{target}' is the fan-out of a container: it keeps no "
                                  "data space", "keep")
                continue
            if kind not in ("temporal", "spatial"):
                raise d.error(f"directive type '{kind}' is not supported (temporal, spatial, "
                              "bypass, datatype, dataspace)", "type")
            chosen = factors(d, sizes, rest=True)
            loops = [f"{dim}:{chosen[dim]}" + (":Sp" if kind == "spatial" else "")
                     for dim in permutation(d, chosen, sizes)]
            if kind == "spatial":  # each inter_* level a fan-out stage of its own
                stage = f"{STAGE}{target}"
                spatial[spatial_level] = spatial.get(spatial_level, []) + [
                    lp + stage for lp in loops]
            else:
                inner[spatial_level] = inner.get(spatial_level, []) + loops
            continue
        if kind in ("bypass", "datatype"):
            out = _bypassed(d, tensors, target)
            if out == tensors:
                skipped[target] = d
            elif out:
                if arch.level_index[target] == 0:
                    raise d.error(f"'{target}' is the outermost level, where every tensor "
                                  "starts: it cannot bypass one")
                partial[target] = sorted(out)
            continue
        if kind not in ("temporal", "spatial"):
            problem(d.error(f"directive type '{kind}' is not supported (temporal, spatial, "
                            "bypass, datatype, dataspace)", "type"))
            continue
        for key in ("keep", "bypass"):
            if d.has(key):
                raise d.error(f"'{key}' belongs in a 'type: bypass' directive", key)
        if kind == "spatial" and d.has("split"):
            d.integer("split", minimum=0)  # X/Y placement: TileFlow checks the total fan-out
        elif d.has("split"):
            raise d.error("'split' is for spatial directives", "split")
        chosen = factors(d, sizes, rest=True)
        loops = [f"{dim}:{chosen[dim]}" + (":Sp" if kind == "spatial" else "")
                 for dim in permutation(d, chosen, sizes)]
        table = temporal if kind == "temporal" else spatial
        table[target] = loops + table.get(target, [])  # a holder's own loops come first
    for level, loops in inner.items():  # below the holder's own temporal loops
        temporal[level] = temporal.get(level, []) + loops
    for table in (temporal, spatial):  # a factor 0 takes what the others leave
        for level, loops in table.items():
            table[level] = [_rest(loop, sizes, temporal, spatial, directives) for loop in loops]
            table[level] = [lp for lp in table[level] if lp.split(":")[1] != "1"]
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
    carried: list[str] = []  # loops of levels that keep nothing, for the next level out
    for level in reversed([lv.name for lv in arch.levels]):
        stages = _stages(spatial.get(level, []))
        loops = temporal.get(level, []) + stages[0]
        if level in skipped:
            if len(stages) > 1:
                raise directives.error(
                    f"'{level}' bypasses every tensor but has the spatial loops of several "
                    "fan-out stages; give them to a level that keeps data")
            if loops:
                carried = loops + carried
                note(skipped[level], f"'{level}' keeps no tensor but has loops "
                     f"{' '.join(loops)}: read at the innermost position of the next level "
                     "out that keeps data (Timeloop iterates them there: the levels below "
                     "refetch their tiles from it at each iteration)")
            continue
        stages = [loops, *stages[1:]]
        stages[-1] = stages[-1] + carried  # innermost: the loops of the levels it stands for
        carried = []
        node: dict = {"level": level}
        if stages[0]:
            node["loops"] = stages[0]
        if level in partial:
            node["bypass"] = partial[level]
        child = tile if tile is not None else {"op": op}
        for more in reversed(stages[1:]):  # further stages: tiles of the same level
            child = {"level": level, "loops": more, "children": [child]}
        node["children"] = [child]
        tile = node
    if tile is None:
        raise directives.error("every level bypasses every tensor")
    return {"name": Path(doc.source).stem, "root": tile}


STAGE = "@"  # marks a spatial loop of an inter_* level with the level's name


def _stages(loops: list[str]) -> list[list[str]]:
    """A level's spatial loops as Timeloop's fan-out stages: its own directive's (first),
    then one per inter_* level whose loops it holds, when there are several. Timeloop
    multicasts within each stage on its own (docs/interop.md), so each further stage
    becomes a tile of the same level below the level's tile."""
    groups: dict[str, list[str]] = {}
    for lp in loops:
        loop, _, stage = lp.partition(STAGE)
        groups.setdefault(stage, []).append(loop)
    own = groups.pop("", [])
    rest = [g for g in groups.values() if g]
    return [own, *rest] if own else rest or [[]]


def _rest(loop: str, sizes: dict[str, int], temporal: dict, spatial: dict,
          where: Field) -> str:
    """'K:0' -> K's size over the product of its other factors (Timeloop's 0)."""
    name, factor, *tail = loop.split(":")
    if factor != "0":
        return loop
    others = [int(lp.split(":")[1]) for loops in (*temporal.values(), *spatial.values())
              for lp in loops if lp.split(":")[0] == name and lp != loop]
    if 0 in others:
        raise where.error(f"'{name}' has two factors 0 (the rest): which takes it is unclear")
    product = 1
    for n in others:
        product *= n
    if sizes[name] % product:
        raise where.error(f"the factors of '{name}' ({product}) do not divide its size "
                          f"{sizes[name]}, so its factor 0 (the rest) is not a whole number")
    return ":".join([name, str(sizes[name] // product), *tail])


def _spatial_holder(d: Field, target: str, arch: Architecture) -> str | None:
    """The level that holds the spatial factors of a spatial !Container named as a target,
    or of the mapper's `inter_<container>_spatial` (the level above the container): as the
    architecture file placed it, else the one level above a fan-out when there is just
    one."""
    holders = SPATIAL_HOLDERS.get(tuple(lv.name for lv in arch.levels), {})
    if target in holders:  # the container itself as the target
        return holders[target]
    match = re.fullmatch(r"inter_(.+)_spatial", target)
    if not match:
        return None
    if match.group(1) in holders:
        return holders[match.group(1)]
    fanned = [i for i, lv in enumerate(arch.levels) if i and lv.fanout > 1]
    if len(fanned) == 1:
        return arch.levels[fanned[0] - 1].name
    raise d.error(f"cannot tell which level '{target}' spreads from: read the architecture "
                  "from its Timeloop file in the same run", "target")


def _bypassed(d: Field, tensors: set[str], target: str) -> set[str]:
    """Tensors a bypass directive keeps out of `target` (all of them: the level is left out
    of the tree; some: the tile's `bypass` list)."""
    keep, bypass = set(names(d, "keep")), set(names(d, "bypass"))
    for t in keep | bypass:
        if t not in tensors:
            raise d.error(f"unknown data space '{t}' (the operator's: "
                          f"{', '.join(sorted(tensors))})")
    return bypass if d.has("bypass") or not d.has("keep") else tensors - keep
