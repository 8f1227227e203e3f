"""Counting the words a loop nest moves into a buffer, without enumerating its steps.

A buffer holds, at each step t of the temporal loops above it, a box-shaped slice S_t of a
tensor (one interval per tensor axis). The words moved in are

    DM = sum_t |S_t| - sum_{t >= 1} |S_t & S_{t-1}|

and the events t >= 1 are grouped by the loop i that advanced (inner loops resetting).
Each axis depends only on the loops over its own dimensions, so both sums factor into a
product over axes of small one-dimensional sums (exact under clipping, halos and offsets).
When an axis is tiled exactly (no clipping, no offset) its sums have closed forms.

Seen from the parent of spatial instances, the slice is the union of the instances' slices
and an element is new at a step when some instance did not hold it before (instances do not
pass data to each other): per axis, the union minus what every instance holding it now also
held before (`_kept`). Where the instances abut and the other loops step by whole multiples
of their union, no element ever changes instance and the union is one wider slice.
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


def _regular(axis: AxisRec, dims: Dims, loops: Sequence[LoopRec]) -> bool:
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


def _interval(axis: AxisRec, dims: Dims, pos: Mapping[str, int]) -> tuple[int, int]:
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


def _spans(axis: AxisRec, dims: Dims, pos: Mapping[str, int],
           union: Sequence[LoopRec]) -> Spans:
    """The axis's slice as disjoint sorted spans: one interval, or for the union over
    spatial instances of a strided axis, the merged intervals of every instance."""
    if not union:
        lo, hi = _interval(axis, dims, pos)
        return [(lo, hi)] if hi > lo else []
    found = []
    for values in product(*(range(lp.n) for lp in union)):
        shifted = dict(pos)
        for d, v in _positions(union, values).items():
            shifted[d] = shifted.get(d, 0) + v
        lo, hi = _interval(axis, dims, shifted)
        if hi > lo:
            found.append((lo, hi))
    merged: Spans = []
    for lo, hi in sorted(found):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def _length(spans: Spans) -> int:
    return sum(hi - lo for lo, hi in spans)


def _common(a: Spans, b: Spans) -> int:
    total = 0
    for alo, ahi in a:
        for blo, bhi in b:
            total += max(0, min(ahi, bhi) - max(alo, blo))
    return total


def _split_union(axes: Sequence[AxisRec], dims: Dims, union: Sequence[LoopRec],
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


def _positions(loops: Sequence[LoopRec], values: Sequence[int]) -> dict:
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


def _axis_loops(axis: AxisRec, loops: Sequence[LoopRec]) -> list[int]:
    axis_dims = {d for d, _ in axis.terms}
    return [i for i, lp in enumerate(loops) if lp.dim in axis_dims and lp.n > 1]


def _volume_sum(axis: AxisRec, dims: Dims, loops: Sequence[LoopRec],
                union: Sequence[LoopRec] = ()) -> int:
    """Sum over all steps of the axis's slice length (only loops over the axis's dims)."""
    idx = _axis_loops(axis, loops)
    if not union and _regular(axis, dims, loops):
        return dims[axis.terms[0][0]].extent * math.prod(loops[i].n for i in idx)
    sub = [loops[i] for i in idx]
    total = 0
    for values in product(*(range(lp.n) for lp in sub)):
        total += _length(_spans(axis, dims, _positions(sub, values), union))
    return total


def _overlap_sum(axis: AxisRec, dims: Dims, loops: Sequence[LoopRec], i: int,
                 union: Sequence[LoopRec] = ()) -> int:
    """Sum, over the events where loop i advances, of |slice before & slice after| on this axis.

    The multiplicity from loops over other dimensions is applied by the caller."""
    idx = _axis_loops(axis, loops)
    outer = [j for j in idx if j < i]
    inner = [j for j in idx if j > i]
    own = i in idx
    if not union and _regular(axis, dims, loops):
        count = math.prod(loops[j].n for j in outer) * ((loops[i].n - 1) if own else 1)
        moved = own or any(loops[j].n > 1 for j in inner)
        return 0 if moved else count * dims[axis.terms[0][0]].extent
    ranges = [range(loops[j].n) for j in outer] + ([range(loops[i].n - 1)] if own else [])
    total = 0
    for values in product(*ranges):
        before = list(zip((loops[j] for j in outer), values, strict=False))
        after = list(before)
        if own:
            v = values[-1]
            before.append((loops[i], v))
            after.append((loops[i], v + 1))
        before += [(loops[j], loops[j].n - 1) for j in inner]
        pos_before, pos_after = _pair_positions(before), _pair_positions(after)
        if union:
            total += _kept(axis, dims, pos_before, pos_after, union)
        else:
            total += _common(_spans(axis, dims, pos_before, ()), _spans(axis, dims, pos_after, ()))
    return total


def _kept(axis: AxisRec, dims: Dims, before: Mapping[str, int], after: Mapping[str, int],
          union: Sequence[LoopRec]) -> int:
    """Of the union of the instances' slices after a step, the elements that need no read
    from the parent: every instance holding them now held them before. (An element that
    moves from one instance's window into another's is read again: no sibling transfer.)"""
    covered: Spans = []
    new: Spans = []
    for values in product(*(range(lp.n) for lp in union)):
        shift = _positions(union, values)
        now = _interval(axis, dims, {d: after.get(d, 0) + shift.get(d, 0)
                                     for d in {*after, *shift}})
        if now[1] <= now[0]:
            continue
        old = _interval(axis, dims, {d: before.get(d, 0) + shift.get(d, 0)
                                     for d in {*before, *shift}})
        covered.append(now)
        if old[1] <= old[0] or old[1] <= now[0] or now[1] <= old[0]:
            new.append(now)
            continue
        if now[0] < old[0]:
            new.append((now[0], old[0]))
        if old[1] < now[1]:
            new.append((old[1], now[1]))
    return _union_length(covered) - _union_length(new)


def _pair_positions(pairs: Sequence[tuple[LoopRec, int]]) -> dict[str, int]:
    return _positions([lp for lp, _ in pairs], [v for _, v in pairs])


def largest_slice(axis: AxisRec, dims: Dims, loops: Sequence[LoopRec]) -> int:
    """The longest clipped interval of the axis over the positions of the loops above."""
    sub = [loops[i] for i in _axis_loops(axis, loops)]
    best = 0
    for values in product(*(range(lp.n) for lp in sub)):
        lo, hi = _interval(axis, dims, _positions(sub, values))
        best = max(best, hi - lo)
    return best


def iteration_count(axes: Sequence[AxisRec], dims: Dims, loops: Sequence[LoopRec],
                    union: Sequence[LoopRec] = ()) -> int:
    """Sum over all steps of the slice size (the operation count, for the op's own axes)."""
    dims, unions = _split_union(axes, dims, union, loops)
    return _iteration_count(axes, dims, loops, unions)


def _iteration_count(axes: Sequence[AxisRec], dims: Dims, loops: Sequence[LoopRec],
                     unions: Sequence[Sequence[LoopRec]]) -> int:
    tensor_dims = {d for a in axes for d, _ in a.terms}
    other = math.prod(lp.n for lp in loops if lp.dim not in tensor_dims)
    return other * math.prod(_volume_sum(a, dims, loops, u)
                             for a, u in zip(axes, unions, strict=True))


def words_moved(axes: Sequence[AxisRec], dims: Dims, loops: Sequence[LoopRec],
                fresh: Sequence[bool] | None = None, union: Sequence[LoopRec] = ()) -> int:
    """Total words filled into the buffer over the whole loop nest (loops outermost first).

    `union`: spatial loops whose instances share this buffer's parent, which sends the
    union of their slices. With `fresh` given, elements still resident when a marked loop
    advances count as entering again (an accumulation that restarts touches them anew)."""
    tensor_dims = {d for a in axes for d, _ in a.terms}
    dims, unions = _split_union(axes, dims, union, loops)
    total = _iteration_count(axes, dims, loops, unions)
    for i, lp in enumerate(loops):
        if lp.n <= 1 or _dropped(loops, i) or (fresh is not None and _restarts(loops, fresh, i)):
            continue
        mult = math.prod(o.n for o in loops[:i] if o.dim not in tensor_dims)
        if lp.dim not in tensor_dims:
            mult *= lp.n - 1
        if mult:
            total -= mult * math.prod(_overlap_sum(a, dims, loops, i, u)
                                      for a, u in zip(axes, unions, strict=True))
    return total


def _restarts(loops: Sequence[LoopRec], fresh: Sequence[bool], i: int) -> bool:
    """Advancing loop i changes the value of some marked loop (itself, or one that wraps)."""
    return fresh[i] or any(f and lp.n > 1 for f, lp in zip(fresh[i + 1 :], loops[i + 1 :],
                                                              strict=True))


def _dropped(loops: Sequence[LoopRec], i: int) -> bool:
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
    dims, unions = _split_union(axes, dims, union, loops)
    total = math.prod(lp.n for lp, e in zip(loops, epoch, strict=True)
                      if e and lp.dim not in tensor_dims)
    for g in guards:
        guard = AxisRec(((g, 1),), 0, dims[g].size)
        if _regular(guard, dims, loops):
            total *= math.prod(lp.n for lp, e in zip(loops, epoch, strict=True)
                               if e and lp.dim == g)
            continue
        total *= _epoch_sum(guard, dims, loops, epoch, lambda spans: int(bool(spans)))
    for axis, u in zip(axes, unions, strict=True):
        if not u and _regular(axis, dims, loops):
            total *= axis.size
            continue
        total *= _epoch_sum(axis, dims, loops, epoch, _union_length, u)
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
        base = _positions(ep, values)
        spans = []
        for inner in product(*(range(lp.n) for lp in rest)):
            pos = dict(base)
            for d, v in _positions(rest, inner).items():
                pos[d] = pos.get(d, 0) + v
            spans += _spans(axis, dims, pos, union)
        acc += measure(spans)
    return acc


def _union_length(spans: list[tuple[int, int]]) -> int:
    length, end = 0, None
    for lo, hi in sorted(spans):
        if end is None or lo >= end:
            length += hi - lo
            end = hi
        elif hi > end:
            length += hi - end
            end = hi
    return length


def timeloop_words_moved(axes: Sequence[AxisRec], dims: Dims,
                         loops: Sequence[LoopRec]) -> int:
    """Words filled into one instance of the buffer as Timeloop counts them (its delta
    rule, `deltas: timeloop`), loops outermost first.

    Timeloop (releases up to 2024) evaluates two iterations of each loop of more than one
    iteration, the first and the second, and counts the second's delta once per iteration
    past the first. At each evaluated step the buffer receives the elements of its slice it
    did not hold at the previous evaluated step, provided the slice moved (the shift of its
    centre, zero included) as at its last step; a step that moves it otherwise refills it
    whole and forgets the last move. A loop that drops the tensor (`LoopRec.drop`) refills
    the slice whole when it or a loop above it advances."""
    live = [lp for lp in loops if lp.n > 1]
    total = 0
    before: list[tuple[int, int]] | None = None
    last_move: tuple[int, ...] | None = None
    for values in product((0, 1), repeat=len(live)):
        weight = math.prod(lp.n - 1 for lp, v in zip(live, values, strict=True) if v)
        now = [_interval(axis, dims, _positions(live, values)) for axis in axes]
        size = _box_size(now)
        advanced = max((k for k, v in enumerate(values) if v), default=-1)
        if before is None or (advanced >= 0 and any(lp.drop for lp in live[advanced:])):
            delta, last_move = size, None
        else:
            move = _move(before, now)
            if last_move is None or move == last_move:
                delta = size - math.prod(max(min(a[1], b[1]) - max(a[0], b[0]), 0)
                                         for a, b in zip(before, now, strict=True))
                last_move = move
            else:  # another step than the last: the whole slice again
                delta, last_move = size, None
        total += weight * delta
        before = now
    return total


def _move(before: Sequence[tuple[int, int]], now: Sequence[tuple[int, int]]):
    """The shift of the slice's centre, rounded (none when it held nothing before; zero
    when it holds nothing now)."""
    if not _box_size(before):
        return None
    if not _box_size(now):
        return (0,) * len(now)
    return tuple(_rounded(_centre(b) - _centre(a)) for a, b in zip(before, now, strict=True))


def _box_size(box: Sequence[tuple[int, int]]) -> int:
    return math.prod(max(hi - lo, 0) for lo, hi in box)


def _centre(span: tuple[int, int]) -> float:
    return span[0] + (span[1] - 1 - span[0]) / 2


def _rounded(x: float) -> int:
    """Rounded half away from zero (C's round)."""
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def distinct_slices(axes: Sequence[AxisRec], union: Sequence[LoopRec]) -> int:
    """How many different slices of the tensor the spatial instances of `union` hold (their
    offsets on the tensor's axes): instances with the same slice receive the same words,
    sent once (multicast); the others are each sent their own."""
    offsets = set()
    for values in product(*(range(lp.n) for lp in union)):
        pos = _positions(union, values)
        offsets.add(tuple(sum(c * pos.get(d, 0) for d, c in axis.terms) for axis in axes))
    return len(offsets)


def epochs_revisited(loops: Sequence[LoopRec], epoch: Sequence[bool]) -> bool:
    """An unmarked loop of more than one iteration encloses a marked one: an epoch's steps
    are then not consecutive, and an element may stay resident from a step of another epoch
    into one of its own epoch that touched it before."""
    unmarked = False
    for lp, e in zip(loops, epoch, strict=True):
        if lp.n <= 1:
            continue
        if e and unmarked:
            return True
        unmarked = unmarked or not e
    return False


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
    dims, unions = _split_union(axes, dims, union, loops)
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
        if epoch[k] and lp.n > 1 and not _dropped(loops, k):
            outer = [o for o, e in zip(loops[lead:k], epoch[lead:k], strict=True)
                     if not e and o.n > 1 and o.dim in tensor_dims]
            inner = [o for o, e in zip(loops[k + 1:], epoch[k + 1:], strict=True)
                     if not e and o.n > 1 and o.dim in tensor_dims]
            kept = 0
            for values in product(*(range(o.n) for o in instances)):
                kept += _kept_first(axes, dims, _positions(instances, values), outer, inner)
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
        for d, v in _positions(outer, values).items():
            pos[d] = pos.get(d, 0) + v
        end = {**pos, **{d: pos.get(d, 0) + v for d, v in last.items()}}
        both = [_meet([_interval(a, dims, pos)], [_interval(a, dims, end)]) for a in axes]
        if not all(both):
            continue
        boxes = []
        for p, v in enumerate(values):
            if not v:
                continue
            fixed = dict(base)
            for d, x in _positions(outer[:p], values[:p]).items():
                fixed[d] = fixed.get(d, 0) + x
            free = [outer[p]._replace(n=v), *outer[p + 1:], *inner]
            boxes.append([_reach(a, dims, fixed, free) for a in axes])
        for r in range(len(boxes) + 1):
            for chosen in combinations(boxes, r):
                size = 1
                for i, spans in enumerate(both):
                    for box in chosen:
                        spans = _meet(spans, box[i])
                    size *= _length(spans)
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
    return _spans(axis, dims, fixed, mine)
