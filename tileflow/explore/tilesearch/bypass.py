"""Bypasses a chip's small levels need before any factors can fit.

A level holds one block of every tensor it does not skip, so a level whose capacity is
below the sum of the tensors' smallest blocks (one element each) cannot be valid under any
factors: a PE with 1-word weight, input and output registers (Timeloop's simple
weight-stationary and Eyeriss-like designs) keeps one tensor per register and the others
pass by. `forced_bypass` says which tensors skip such a level, keeping the ones the level
is for: the operator's output at the level its compute unit accumulates in, then a tensor
the level is named after ("weight_reg", "ifmap_spad", "psum_spad"), then one kept at fewer
of the small levels so far (each register keeps a different tensor), then the one with the
most reuse (the fewest of the operators' dims index it). Levels that can hold a block of
every tensor get no bypass, so chips with room everywhere are unchanged."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable
from dataclasses import replace

from tileflow.cost.result import Result
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, Node, Op, Tile, ops_under

# words in a level's name that say which role of tensor it keeps
_ROLE_WORDS = {
    "weight": ("weight", "filter", "kernel", "wgt"),
    "input": ("input", "ifmap", "activation", "act", "iact"),
    "output": ("output", "ofmap", "psum", "accum", "acc", "oact"),
}


def _words(name: str) -> set[str]:
    return {w for w in re.split(r"[^a-z]+", name.lower()) if w}


def _role_of_level(level: str) -> str | None:
    """The role a level's name gives ('output' for 'output_activation_reg': a name with
    both an activation and an output or input word takes the latter)."""
    words = _words(level)
    hits = [r for r, keys in _ROLE_WORDS.items()
            if any(k in words or any(w.startswith(k) for w in words) for k in keys)]
    for r in ("output", "weight", "input"):  # most specific first
        if r in hits:
            return r
    return None


def _role_of_tensor(workload: Workload, tensor: str) -> str:
    """'output' for a result, 'weight' for an input named like one, else 'input'."""
    if tensor in workload.outputs or tensor in workload.intermediates:
        return "output"
    words = _words(tensor)
    if any(any(w.startswith(k) for w in words) for k in _ROLE_WORDS["weight"]):
        return "weight"
    return "input"


def _minimal_words(workload: Workload, arch: Architecture, tensor: str) -> float:
    """Words one element of `tensor` takes (its smallest block)."""
    return workload.width_ratio(tensor, arch.word_bytes * 8)


def forced_bypass(workload: Workload, arch: Architecture,
                  chosen: Iterable[tuple[str, int]] = ()) -> set[tuple[str, int]]:
    """(tensor, level index) pairs to skip, on top of `chosen`, so every level can hold one
    element of each tensor it keeps (empty where every level has that room)."""
    skips = set(chosen)
    movable = [t for t in (*workload.inputs, *workload.outputs)
               if t not in workload.intermediates]
    kept_count = {t: 0 for t in movable}
    added: set[tuple[str, int]] = set()
    for lv in range(len(arch.levels) - 1, 0, -1):  # innermost first: registers pick first
        room = arch.levels[lv].capacity_words
        if not math.isfinite(room):
            continue
        for op in workload.ops:
            held = [t for t in op.tensors if (t, lv) not in skips]
            need = sum(_minimal_words(workload, arch, t) for t in held)
            if need <= room:
                continue
            role = _role_of_level(arch.levels[lv].name)

            def rank(t: str, role=role, op=op, lv=lv) -> tuple:
                access = op.access(t)
                return (t not in movable,  # an intermediate cannot skip: keep it first
                        # the operator's own output where its unit accumulates
                        not (arch.level_index[arch.unit(op.unit).level] == lv
                             and op.output.tensor == t),
                        role is None or _role_of_tensor(workload, t) != role,
                        kept_count.get(t, 0),
                        len(set(access.dims)), t)

            keep, used = [], 0.0
            for t in sorted(held, key=rank):
                w = _minimal_words(workload, arch, t)
                if t not in movable or used + w <= room:
                    keep.append(t)
                    used += w
            for t in held:
                if t not in keep:
                    added.add((t, lv))
                    skips.add((t, lv))
            for t in keep:
                if t in kept_count:
                    kept_count[t] += 1
    return added


def with_forced_bypass(flow: Dataflow, workload: Workload, arch: Architecture) -> Dataflow:
    """`flow` with every tile at a level that cannot hold one element of each tensor it
    keeps also skipping the tensors `forced_bypass` names (unchanged where none)."""
    index = arch.level_index
    present = {(t, index[n.level]) for n in _tiles(flow.root) for t in n.bypass}
    extra = forced_bypass(workload, arch, present)
    return with_bypass(flow, workload, arch, extra) if extra else flow


def with_bypass(flow: Dataflow, workload: Workload, arch: Architecture,
                pairs: Iterable[tuple[str, int]]) -> Dataflow:
    """`flow` with each tile at level `lv` also skipping `t` for every (t, lv) in `pairs`
    that an operator under the tile uses."""
    index = arch.level_index
    skip: dict[int, set[str]] = {}
    for t, lv in pairs:
        skip.setdefault(lv, set()).add(t)

    def go(node: Node) -> Node:
        if isinstance(node, Op):
            return node
        kids = tuple(go(c) for c in node.children)
        used = {t for o in ops_under(node) for t in workload.op_by_name[o].tensors}
        gone = tuple(sorted(set(node.bypass) | (skip.get(index[node.level], set()) & used)))
        return replace(node, children=kids, bypass=gone)

    return replace(flow, root=go(flow.root))


def overflow_bypass(workload: Workload, arch: Architecture,
                    result: Result) -> set[tuple[str, int]]:
    """(tensor, level) pairs for the inputs and outputs whose block alone overflows a level
    too small for one element of every tensor (the levels `forced_bypass` acts on): where a
    tree has no tile above such a level to take the loops out (a baseline's fixed shape),
    the level passes those tensors by instead. Empty for other levels' overflows."""
    small = {lv for _, lv in forced_bypass(workload, arch)}
    movable = {t for t in (*workload.inputs, *workload.outputs)
               if t not in workload.intermediates}
    fps = {f.level: f for f in result.footprints}
    out: set[tuple[str, int]] = set()
    for v in result.violations:
        if v.kind != "capacity" or not v.level or v.level not in fps or \
                arch.level_index.get(v.level) not in small or v.available is None:
            continue
        out |= {(t, arch.level_index[v.level]) for t, n in fps[v.level].by_tensor.items()
                if t in movable and n > v.available}
    return out


def _tiles(node: Node) -> Collection[Tile]:
    out: list[Tile] = []
    if isinstance(node, Tile):
        out.append(node)
        for c in node.children:
            out.extend(_tiles(c))
    return out
