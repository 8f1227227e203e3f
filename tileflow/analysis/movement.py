"""Per-axis records of the loops above a buffer (`LoopRec`, `DimRec`, `AxisRec`) and what
the evaluator and the footprints read from them without enumerating the steps: a slice's
interval on an axis at given loop positions, the largest slice, and how many of an
output's elements a loop nest touches for the first time (`first_touches`,
`resident_first_touches`). The tests' scalar copy counts the words moved on the same
intervals (`tests/scalar_movement.py`); the evaluator's sums are `evaluator/sums.py`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations, product
from typing import NamedTuple


class LoopRec(NamedTuple):
    """A loop above the buffer: `n` iterations of `dim`, moving the slice by `stride`.

    `drop`: the buffer keeps nothing of this tensor across iterations of this loop
    (spatial instances, Seq siblings that drop data, no-reuse programs). `mark` (halo
    caching, see DimRec.cut): 1 for a loop that places the region of a step of the common
    ancestor, 2 for the loop the kept halo slides along (also placing it)."""

    dim: str
    n: int
    stride: int
    drop: bool = False
    mark: int = 0


class AxisRec(NamedTuple):
    """A tensor axis sum(coef * dim) + offset, clipped to [0, size)."""

    terms: tuple[tuple[str, int], ...]
    offset: int
    size: int


class DimRec(NamedTuple):
    """A dimension's size, the slice extent inside the buffer, and the op's start shift.

    `cut` (halo caching): at every iteration but the first of the loop marked 2, the rows
    before (the region's start + cut) were computed in the previous iteration and kept, so
    the slice starts no earlier than there."""

    size: int
    extent: int
    shift: int = 0
    cut: int = 0


Dims = Mapping[str, DimRec]


def is_regular(axis: AxisRec, dims: Dims, loops: Sequence[LoopRec]) -> bool:
    """True when the axis is one dimension tiled exactly: every slice is the full extent."""
    if len(axis.terms) != 1 or axis.terms[0][1] != 1 or axis.offset:
        return False
    d = axis.terms[0][0]
    rec = dims[d]
    if rec.shift or rec.cut or rec.size != axis.size:
        return False
    span = rec.extent
    for stride, n in sorted((lp.stride, lp.n) for lp in loops if lp.dim == d and lp.n > 1):
        if stride != span:
            return False
        span *= n
    return span == rec.size


def clipped_interval(axis: AxisRec, dims: Dims, pos: Mapping[str, int]) -> tuple[int, int]:
    lo = hi = axis.offset
    for d, c in axis.terms:
        rec = dims[d]
        x = rec.shift + pos.get(d, 0)
        dlo, dhi = max(x, 0), min(x + rec.extent, rec.size)
        if rec.cut and pos.get(("slide", d)):
            dlo = max(dlo, rec.shift + pos.get(("base", d), 0) + rec.cut)
        if dhi <= dlo:
            return 0, 0
        lo += c * dlo
        hi += c * (dhi - 1)
    return max(lo, 0), min(hi + 1, axis.size)


Spans = list[tuple[int, int]]


def slice_spans(axis: AxisRec, dims: Dims, pos: Mapping[str, int],
           union: Sequence[LoopRec]) -> Spans:
    """The axis's slice as disjoint sorted spans: one interval, or for the union over
    spatial instances of a strided axis, the merged intervals of every instance."""
    if not union:
        lo, hi = clipped_interval(axis, dims, pos)
        return [(lo, hi)] if hi > lo else []
    found = []
    for values in product(*(range(lp.n) for lp in union)):
        shifted = dict(pos)
        for d, v in loop_positions(union, values).items():
            shifted[d] = shifted.get(d, 0) + v
        lo, hi = clipped_interval(axis, dims, shifted)
        if hi > lo:
            found.append((lo, hi))
    merged: Spans = []
    for lo, hi in sorted(found):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def spans_length(spans: Spans) -> int:
    return sum(hi - lo for lo, hi in spans)


def split_union(axes: Sequence[AxisRec], dims: Dims, union: Sequence[LoopRec],
                 loops: Sequence[LoopRec] = ()):
    """Spatial instances under one parent instance see the union of their slices. On a plain
    axis that union is an interval: widen the dimension's extent. On a strided axis it may
    have gaps: keep the union loops for that axis."""
    if not union:
        return dims, [()] * len(axes)
    widened = dict(dims)
    per_axis = []
    for axis in axes:
        names = {d for d, _ in axis.terms}
        mine = tuple(lp for lp in union if lp.dim in names and lp.n > 1)
        if len(axis.terms) == 1 and axis.terms[0][1] == 1 and _contiguous(dims, mine, loops):
            d = axis.terms[0][0]
            rec = widened[d]
            widened[d] = rec._replace(extent=rec.extent + sum((lp.n - 1) * lp.stride
                                                              for lp in mine))
            per_axis.append(())
        else:
            per_axis.append(mine)
    return widened, per_axis


def _contiguous(dims: Dims, union: Sequence[LoopRec], loops: Sequence[LoopRec]) -> bool:
    """The instances' slices of one dimension abut, without gaps or overlaps, and the other
    loops over it step by whole multiples of their union: every element then belongs to one
    instance only, at every step (none ever moves from one instance to another), and the
    union behaves as one wider slice."""
    if not union:
        return True
    d = union[0].dim
    extent = dims[d].extent
    for lp in sorted(union, key=lambda lp: lp.stride):
        if lp.stride != extent:
            return False
        extent += (lp.n - 1) * lp.stride
    return all(lp.stride % extent == 0 for lp in loops if lp.dim == d and lp.n > 1)


def loop_positions(loops: Sequence[LoopRec], values: Sequence[int]) -> dict:
    """Offset per dimension; with halo marks also ('base', dim), the offset of the common
    ancestor's step, and ('slide', dim) = 1 past the first iteration of the sliding loop."""
    pos: dict = {}
    for lp, v in zip(loops, values, strict=True):
        pos[lp.dim] = pos.get(lp.dim, 0) + v * lp.stride
        if lp.mark:
            key = ("base", lp.dim)
            pos[key] = pos.get(key, 0) + v * lp.stride
            if lp.mark == 2 and v:
                pos[("slide", lp.dim)] = 1
    return pos


def is_dropped(loops: Sequence[LoopRec], i: int) -> bool:
    return loops[i].drop or any(lp.drop and lp.n > 1 for lp in loops[i + 1 :])


def first_touches(axes: Sequence[AxisRec], dims: Dims, loops: Sequence[LoopRec],
                  epoch: Sequence[bool], guards: Sequence[str] = (),
                  union: Sequence[LoopRec] = ()) -> int:
    """Elements entering the buffer for the first time within an epoch (they need no fill).

    `epoch[i]` marks loops whose every iteration starts afresh (spatial instances,
    recomputation, steps of the intermediate's lowest common ancestor): the count is the sum,
    over the marked loops' iterations, of the distinct elements the other loops touch.
    `guards` are further dimensions of the work: an iteration of the marked loops whose
    range of a guard dimension is clipped empty does no work and touches nothing."""
    tensor_dims = {d for a in axes for d, _ in a.terms} | set(guards)
    dims, unions = split_union(axes, dims, union, loops)
    total = math.prod(lp.n for lp, e in zip(loops, epoch, strict=True)
                      if e and lp.dim not in tensor_dims)
    for g in guards:
        guard = AxisRec(((g, 1),), 0, dims[g].size)
        if is_regular(guard, dims, loops):
            total *= math.prod(lp.n for lp, e in zip(loops, epoch, strict=True)
                               if e and lp.dim == g)
            continue
        total *= _epoch_sum(guard, dims, loops, epoch, lambda spans: int(bool(spans)))
    for axis, u in zip(axes, unions, strict=True):
        if not u and is_regular(axis, dims, loops):
            total *= axis.size
            continue
        total *= _epoch_sum(axis, dims, loops, epoch, union_length, u)
    return total


def _epoch_sum(axis: AxisRec, dims: Dims, loops: Sequence[LoopRec], epoch: Sequence[bool],
               measure, union: Sequence[LoopRec] = ()) -> int:
    """Sum over the marked loops' iterations of `measure` of the axis's slices under the
    other loops (a list of non-empty (lo, hi) spans)."""
    names = {d for d, _ in axis.terms}
    ep = [lp for lp, e in zip(loops, epoch, strict=True) if e and lp.dim in names and lp.n > 1]
    rest = [lp for lp, e in zip(loops, epoch, strict=True)
            if not e and lp.dim in names and lp.n > 1]
    acc = 0
    for values in product(*(range(lp.n) for lp in ep)):
        base = loop_positions(ep, values)
        spans = []
        for inner in product(*(range(lp.n) for lp in rest)):
            pos = dict(base)
            for d, v in loop_positions(rest, inner).items():
                pos[d] = pos.get(d, 0) + v
            spans += slice_spans(axis, dims, pos, union)
        acc += measure(spans)
    return acc


def union_length(spans: list[tuple[int, int]]) -> int:
    length, end = 0, None
    for lo, hi in sorted(spans):
        if end is None or lo >= end:
            length += hi - lo
            end = hi
        elif hi > end:
            length += hi - end
            end = hi
    return length


def resident_first_touches(axes: Sequence[AxisRec], dims: Dims, loops: Sequence[LoopRec],
                           epoch: Sequence[bool], union: Sequence[LoopRec] = ()) -> int | None:
    """Elements whose first touch in an epoch finds them resident already (kept from the
    step before, of another epoch): they do not enter the buffer, so they are neither
    filled nor counted among the entries that `first_touches` removes from the refills.

    Partial sums refilled = words_moved - first_touches + this count (docs/counting.md:
    an element is filled again only if it left and comes back). Where the marked loops do
    not move the slice (but for the instances, a leading run of marked dropping loops), an
    element x first touched in epoch e at step s is resident only if the loop advancing
    into s is a marked loop k (with every loop inside it at 0) and x lies in the slice
    before that step (the loops inside k at their last iteration). Per k, that is
    (n_k - 1) x (the marked loops outside k) x the sum, over the positions of the unmarked
    loops outside k, of the elements the slice holds at both ends of k's inner loops and no
    earlier position of the outer loops touched. None where this does not apply (a marked
    loop moving the slice, instances whose union is not one slice, a kept halo)."""
    tensor_dims = {d for a in axes for d, _ in a.terms}
    dims, unions = split_union(axes, dims, union, loops)
    if any(unions) or any(rec.cut for rec in dims.values()):
        return None
    lead = 0  # the instances: every iteration is a world of its own
    while lead < len(loops) and (loops[lead].n <= 1 or (epoch[lead] and loops[lead].drop)):
        lead += 1
    if any(e and lp.n > 1 and lp.dim in tensor_dims
           for lp, e in zip(loops[lead:], epoch[lead:], strict=True)):
        return None
    instances = [lp for lp in loops[:lead] if lp.n > 1 and lp.dim in tensor_dims]
    total = 0
    marked_outer = math.prod(lp.n for lp in loops[:lead] if lp.dim not in tensor_dims)
    for k in range(lead, len(loops)):
        lp = loops[k]
        if epoch[k] and lp.n > 1 and not is_dropped(loops, k):
            outer = [o for o, e in zip(loops[lead:k], epoch[lead:k], strict=True)
                     if not e and o.n > 1 and o.dim in tensor_dims]
            inner = [o for o, e in zip(loops[k + 1:], epoch[k + 1:], strict=True)
                     if not e and o.n > 1 and o.dim in tensor_dims]
            kept = 0
            for values in product(*(range(o.n) for o in instances)):
                kept += _kept_first(axes, dims, loop_positions(instances, values), outer, inner)
            total += (lp.n - 1) * marked_outer * kept
        if epoch[k]:
            marked_outer *= lp.n
    return total


def _kept_first(axes: Sequence[AxisRec], dims: Dims, base: Mapping[str, int],
                outer: Sequence[LoopRec], inner: Sequence[LoopRec]) -> int:
    """Sum over the positions u of `outer` of |A(u) - seen(u)|: A(u) the slice at both the
    first and the last iteration of `inner`, seen(u) what every earlier position touched,
    the union over p of the boxes B_p where the outer loops before p are at u, loop p below
    u_p and the rest anywhere (inclusion-exclusion over the B_p, one box per axis each)."""
    last = {}
    for lp in inner:
        last[lp.dim] = last.get(lp.dim, 0) + (lp.n - 1) * lp.stride
    total = 0
    for values in product(*(range(o.n) for o in outer)):
        pos = dict(base)
        for d, v in loop_positions(outer, values).items():
            pos[d] = pos.get(d, 0) + v
        end = {**pos, **{d: pos.get(d, 0) + v for d, v in last.items()}}
        both = [_meet([clipped_interval(a, dims, pos)], [clipped_interval(a, dims, end)])
                for a in axes]
        if not all(both):
            continue
        boxes = []
        for p, v in enumerate(values):
            if not v:
                continue
            fixed = dict(base)
            for d, x in loop_positions(outer[:p], values[:p]).items():
                fixed[d] = fixed.get(d, 0) + x
            free = [outer[p]._replace(n=v), *outer[p + 1:], *inner]
            boxes.append([_reach(a, dims, fixed, free) for a in axes])
        for r in range(len(boxes) + 1):
            for chosen in combinations(boxes, r):
                size = 1
                for i, spans in enumerate(both):
                    for box in chosen:
                        spans = _meet(spans, box[i])
                    size *= spans_length(spans)
                    if not size:
                        break
                total += -size if r % 2 else size
    return total


def _meet(a: Spans, b: Spans) -> Spans:
    """The intersection of two span lists."""
    out = []
    for alo, ahi in a:
        for blo, bhi in b:
            lo, hi = max(alo, blo), min(ahi, bhi)
            if hi > lo:
                out.append((lo, hi))
    return sorted(out)


def _reach(axis: AxisRec, dims: Dims, fixed: Mapping[str, int],
           free: Sequence[LoopRec]) -> Spans:
    """The union of the axis's slices over every value of the `free` loops (merged spans)."""
    names = {d for d, _ in axis.terms}
    mine = [lp for lp in free if lp.dim in names and lp.n > 1]
    return slice_spans(axis, dims, fixed, mine)
