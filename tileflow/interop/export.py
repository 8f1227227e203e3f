"""A single-operator tile tree written as a Timeloop mapping: per storage level a temporal
directive (every dimension's factor, the permutation innermost first), a spatial directive
when the tile has spatial loops (those on the Y axis after `split`), and a bypass of every
tensor at levels the tree skips. A loopless tile above a tile of its own level (a layer of
a layerwise tree) adds nothing and is left out."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from tileflow.errors import InputError
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload, parse_workload
from tileflow.specs.yamlfile import Field
from tileflow.tree import ROOT, Dataflow, Op, Tile, label, ops_under


def timeloop_mapping(flow: Dataflow, workload: Workload, arch: Architecture) -> dict:
    """{'mapping': [...]} for a tree that is one chain of tiles down to one operator."""
    held = ops_under(flow.root)
    if len(held) > 1:
        raise InputError(f"the tree holds {len(held)} operators ({', '.join(held)}) and a "
                         "Timeloop mapping is of a single-operator tree: export to a folder "
                         "instead, which "
                         "writes one problem and mapping per operator of a tree that runs "
                         "them one after another", flow.source or None, "root")
    if flow.homes:
        raise InputError("'homes' has no Timeloop equivalent", flow.source or None, "homes")
    chain: list[tuple[str, Tile]] = []
    node, path = flow.root, ROOT
    while isinstance(node, Tile):
        if len(node.children) != 1:
            raise InputError(f"{label(path, node)} has {len(node.children)} children: only a "
                             "single-operator chain of tiles is a Timeloop mapping",
                             flow.source or None, path)
        if node.no_reuse:
            raise InputError(f"{label(path, node)}: 'no_reuse' has no Timeloop equivalent",
                             flow.source or None, path)
        if node.buffering:
            raise InputError(f"{label(path, node)}: 'buffering' per tensor has no Timeloop "
                             "mapping equivalent (Timeloop sets multiple_buffering per level "
                             "in the architecture)", flow.source or None, path)
        chain.append((path, node))
        node, path = node.children[0], f"{path}.0"
    assert isinstance(node, Op)
    op = workload.op_by_name.get(node.op)
    if op is None:
        raise InputError(f"unknown operator '{node.op}'", flow.source or None, path)
    for d in op.dims:
        if len(d) != 1:
            raise InputError(f"dimension '{d}': Timeloop permutations need one-letter "
                             "dimension names", flow.source or None)
    by_level: dict[str, tuple[str, Tile]] = {}
    for p, t in chain:
        if t.level in by_level and not by_level[t.level][1].loops \
                and not by_level[t.level][1].bypass:  # a loopless wrapper (one operator's
            by_level[t.level] = (p, t)  # layer in a layerwise tree): the tile below says all
            continue
        if t.level in by_level and not t.loops and not t.bypass:
            continue  # likewise below a tile of its own level
        if t.level in by_level and t.loops and all(lp.spatial for lp in t.loops) \
                and not t.bypass:  # a further fan-out stage (imported inter_* level)
            above_path, above = by_level[t.level]
            by_level[t.level] = (above_path, replace(above, loops=above.loops + t.loops))
            continue
        if t.level in by_level:
            raise InputError(f"two tiles at {t.level} on the path ({by_level[t.level][0]}, {p}):"
                             " Timeloop has one set of loops per level", flow.source or None, p)
        by_level[t.level] = (p, t)
    _check_exact(chain, workload, op.dims, flow)
    directives = []
    tensors = list(op.tensors)
    for lv in arch.levels:
        if lv.name not in by_level:
            directives.append({"target": lv.name, "type": "bypass", "bypass": list(tensors)})
            continue
        p, t = by_level[lv.name]
        if t.bypass:
            directives.append({"target": lv.name, "type": "bypass",
                               "keep": [x for x in tensors if x not in t.bypass],
                               "bypass": [x for x in tensors if x in t.bypass]})
        for spatial in (False, True):
            loops = [lp for lp in t.loops if lp.spatial == spatial]
            if spatial and not loops:
                continue
            dims_seen = [lp.dim for lp in loops]
            if len(set(dims_seen)) != len(dims_seen):
                raise InputError(f"{label(p, t)} has two {'spatial' if spatial else 'temporal'}"
                                 " loops over one dimension: Timeloop has one factor per "
                                 "dimension and level", flow.source or None, p)
            factors = {d: 1 for d in op.dims}
            factors.update({lp.dim: lp.factor for lp in loops})
            if spatial and _two_dimensional(arch, lv.name):
                order, split = _across_mesh(loops, op.dims)
            else:
                inner_first = [lp.dim for lp in reversed(loops)]
                order = inner_first + [d for d in op.dims if d not in inner_first]
                split = len(order)  # a row of instances: every loop along X
            entry = {"target": lv.name, "type": "spatial" if spatial else "temporal",
                     "factors": " ".join(f"{d}={factors[d]}" for d in op.dims),
                     "permutation": "".join(order)}
            if spatial:
                entry["split"] = split
            directives.append(entry)
    return {"mapping": directives}


def _two_dimensional(arch: Architecture, level: str) -> bool:
    """Whether the instances a tile at `level` spreads over form a rows x cols array (the
    level below one per PE, or the MAC array of the innermost level)."""
    i = arch.level_index[level]
    m = arch.matrix
    if i + 1 < len(arch.levels):
        below = arch.levels[i + 1]
        return bool(below.mesh) or (below.name == m.level and m.parallelism == 1
                                    and m.rows * m.cols == below.fanout
                                    and m.rows > 1 and m.cols > 1)
    return m.parallelism == m.rows * m.cols and m.rows > 1 and m.cols > 1


def _across_mesh(loops, dims) -> tuple[list[str], int]:
    """The permutation and split of spatial loops over an array: TileFlow's y loops (its
    columns, Timeloop's meshX) first, so along Timeloop's X; its x loops (rows, meshY) after
    the split. An unmarked loop takes x when it is the first unmarked one, as TileFlow
    places them; a loop of one iteration claims nothing."""
    along: dict[str, list[str]] = {"x": [], "y": []}
    unmarked = "x"
    for lp in loops:
        axis = lp.axis
        if not axis and lp.factor > 1:
            axis, unmarked = unmarked, "y"
        along[axis or "y"].append(lp.dim)
    placed = along["y"][::-1] + along["x"][::-1]
    return placed + [d for d in dims if d not in placed], len(along["y"])


def _check_exact(chain, workload: Workload, dims, flow: Dataflow) -> None:
    for d in dims:
        product = math.prod(lp.factor for _, t in chain for lp in t.loops if lp.dim == d)
        if product != workload.sizes[d]:
            raise InputError(f"the factors of '{d}' multiply to {product}, not its size "
                             f"{workload.sizes[d]}: Timeloop needs exact factors",
                             flow.source or None)
    for _, t in chain:
        for lp in t.loops:
            if lp.dim not in dims:
                raise InputError(f"loop over '{lp.dim}', which the operator does not use",
                                 flow.source or None)


def operator_runs(flow: Dataflow, workload: Workload) -> list[tuple[Workload, Dataflow]]:
    """The tree as Timeloop runs: itself for one operator; for several, one (operator,
    tree) pair per child of a loopless Seq root whose children each hold one operator (a
    layerwise tree: the operators one after another, each through the root's level), so
    that the tree's counts, cycles and energy are the runs' sums. Any other tree of several
    operators is refused, naming them: a Timeloop problem holds one."""
    if len(workload.ops) == 1:
        return [(workload, flow)]
    names = ", ".join(op.name for op in workload.ops)
    root = flow.root
    refusal = (f"workload '{workload.name}' has {len(workload.ops)} operators ({names}) and "
               "a Timeloop problem holds one: only a tree that runs them one after another "
               "(a loopless Seq root tile whose children each hold one operator, as "
               "'layerwise' builds) is written, as one problem and mapping per operator")
    if not isinstance(root, Tile) or root.loops or root.bypass or root.primitive != "Seq" \
            or len(root.children) != len(workload.ops):
        raise InputError(refusal, flow.source or None, "root")
    away = {t: lv for t, lv in flow.homes.items() if lv != root.level}
    if away:  # each run starts and ends with its tensors at the outermost level
        raise InputError(f"'homes' {away}: an intermediate kept below '{root.level}' has no "
                         "Timeloop equivalent (each run reads and writes its tensors there)",
                         flow.source or None, "homes")
    runs = []
    for child in root.children:
        held = ops_under(child)
        if len(held) != 1:
            raise InputError(refusal, flow.source or None, "root")
        op = workload.op_by_name[held[0]]
        alone = parse_workload(Field({"name": op.name,
                                      "dims": {d: workload.sizes[d] for d in op.dims},
                                      "ops": [{"name": op.name, "expr": str(op)}]},
                                     workload.source or workload.name))
        runs.append((alone, replace(flow, root=replace(root, children=(child,)), homes={})))
    return runs


def export_folder(folder: str | Path, flow: Dataflow, workload: Workload,
                  arch: Architecture) -> tuple[list[Path], list[str]]:
    """Write a Timeloop v0.4 architecture (arch.yaml), its energy table (ERT.yaml), and
    per operator a problem and a mapping (problem.yaml and mapping.yaml for one operator;
    problem.OP.yaml and mapping.OP.yaml for each of several) into `folder`. Every file is
    built before the folder is made and the first is written (an error writes none).
    Returns the paths and the notes on what the files cannot state (also comments atop
    arch.yaml)."""
    from tileflow.interop.export_arch import timeloop_architecture, timeloop_problem
    from tileflow.outputs import check_output_folder, write_yaml

    runs = operator_runs(flow, workload)
    files: list[tuple[str, dict]] = []
    for alone, tree in runs:
        suffix = f".{alone.ops[0].name}" if len(runs) > 1 else ""
        files.append((f"problem{suffix}.yaml", timeloop_problem(alone)))
        files.append((f"mapping{suffix}.yaml", timeloop_mapping(tree, alone, arch)))
    exported = timeloop_architecture(arch)
    notes = list(exported.notes)
    if workload.precision_bits:
        notes.append(f"precision_bits {dict(workload.precision_bits)} not written: a "
                     "Timeloop problem has no word widths (every tensor is the architecture's "
                     f"{arch.word_bytes * 8}-bit datawidth): those tensors' footprints, transfer "
                     "times and access energies are at the datawidth there")
    if len(runs) > 1:
        notes.append(f"the {len(runs)} operators run one after another: each problem and "
                     "mapping is a Timeloop run of its own, and the tree's counts, cycles and "
                     "energy are the runs' sums (an intermediate tensor is written by one run "
                     "and read by the next through the outermost level)")
    header = "".join(f"# note: {text}\n" for text in notes)
    header = (f"# Timeloop v0.4 architecture of TileFlow accelerator '{arch.name}'; energies "
              f"per action in ERT.yaml (block size 1: per word)\n{header}")
    files = [("arch.yaml", exported.arch), ("ERT.yaml", exported.ert), *files]
    folder = check_output_folder(folder, "--out")
    paths = [write_yaml(folder / name, data, header if name == "arch.yaml" else "",
                        flag="--out") for name, data in files]
    return paths, notes
