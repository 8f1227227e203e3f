"""The factor part of the analysis for many rows at once: strides, extents, halos, words
moved per boundary and tensor, operations, footprints, fan-out, latency and energy, each an
array over rows. It mirrors the tests' scalar copy of the model (`tests/scalar_traffic.py`,
`tests/scalar_model.py`) step by step, and the tests hold the two equal; where the scalar
copy branches on a factor, both sides are computed and selected per row."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from tileflow.analysis.movement import DimRec, LoopRec, first_touches, resident_first_touches
from tileflow.evaluator import sums, timeloop_deltas
from tileflow.evaluator.compiled import Boundary, Compiled, Crossing, Path
from tileflow.evaluator.lattice import I64, VDim, VLoop, distinct_tuples
from tileflow.tree import ROOT, Op, Tile, child_path

FILL, READ, UPDATE = 0, 1, 2


class Rows:
    """Per-row values of one batch: trip counts and strides per slot, extents and shifts per
    operator path."""

    def __init__(self, c: Compiled, factors: np.ndarray):
        self.c = c
        self.count = len(factors)
        self.n = np.ascontiguousarray(factors.T)
        self.stride = np.ones_like(self.n)
        # one array of ones for every extent that starts at 1 (never written in place: the
        # extents grow into new arrays), instead of one per operator, dim and path
        self._one = np.ones(self.count, dtype=I64)
        self._strides(c.flow.root, ROOT)
        self.extents = {o: self._extents(p) for o, p in c.paths.items()}
        self.shift = {o: self._shift(o) for o in c.paths}
        # halo caching: per producer and dim, the rows kept and the sliding loop's index
        self.cut: dict[str, dict[str, np.ndarray]] = {}
        self.slide: dict[str, dict[str, np.ndarray]] = {}
        for o in c.cuts:
            self._cuts(o)
        # (operator, position, input) -> rows where an earlier sibling loaded the slice
        self.served: dict[tuple[str, int, str], np.ndarray] = {}

    def _strides(self, node: Tile, path: str) -> dict[str, dict[str, np.ndarray]]:
        """A loop strides over the smallest extent its inner loops cover among the operators
        below that use its dim."""
        w = self.c.workload
        extents: dict[str, dict[str, np.ndarray]] = {}
        for i, child in enumerate(node.children):
            if isinstance(child, Op):
                extents[child.op] = dict.fromkeys(w.op_by_name[child.op].dims, self._one)
            else:
                extents.update(self._strides(child, child_path(path, i)))
        for i in reversed(range(len(node.loops))):
            dim = node.loops[i].dim
            slot = self.c.slot_of[(path, i)]
            spans = [e[dim] for e in extents.values() if dim in e]
            # a dim no operator below uses: a repetition of stride 1
            stride = spans[0] if spans else self._one
            for s in spans[1:]:
                stride = np.minimum(stride, s)
            self.stride[slot] = stride
            grow = (self.n[slot] - 1) * stride
            for e in extents.values():
                if dim in e:
                    e[dim] = e[dim] + grow
        return extents

    def _extents(self, path: Path) -> list[dict[str, np.ndarray]]:
        """Per path position, each dim's extent covered by the tiles from there down."""
        dims = dict.fromkeys((*path.op.dims, *(lp.dim for lp in path.loops)))
        out = [dict.fromkeys(dims, self._one) for _ in range(len(path.chain) + 1)]
        for lp in path.loops:
            grow = (self.n[lp.slot] - 1) * self.stride[lp.slot]
            for position in range(lp.node + 1):
                out[position][lp.dim] = out[position][lp.dim] + grow
        return out

    def _shift(self, op: str) -> dict[str, np.ndarray]:
        path = self.c.paths[op]
        out: dict[str, np.ndarray] = {}
        for d, offset, tiling in self.c.halos.get(op, ()):
            tiled = self.any_above_one(path, tiling)
            current = out.get(d, np.zeros(self.count, dtype=I64))
            out[d] = np.where(tiled, np.minimum(current, offset), current)
        return out

    def _cuts(self, op: str) -> None:
        """Kept halos per row (`halo: cache`): along each dim, the innermost temporal loop of
        more than one iteration at or above the common ancestor slides; the regions of two of
        its iterations overlap by (the extent below the ancestor - its stride) rows, kept."""
        depth, slides, _ = self.c.cuts[op]
        path = self.c.paths[op]
        below = self.extents[op][depth + 1]
        for d, loops in slides.items():
            slide = np.full(self.count, -1, dtype=I64)
            stride = np.zeros(self.count, dtype=I64)
            for i in loops:
                slot = path.loops[i].slot
                longer = self.n[slot] > 1
                slide = np.where(longer, i, slide)
                stride = np.where(longer, self.stride[slot], stride)
            kept = below[d] - stride
            cut = np.where((slide >= 0) & (kept > 0), kept, 0)
            if cut.any():
                self.cut.setdefault(op, {})[d] = cut
                self.slide.setdefault(op, {})[d] = np.where(cut > 0, slide, -1)

    def any_above_one(self, path: Path, loops) -> np.ndarray:
        found = np.zeros(self.count, dtype=bool)
        for i in loops:
            found |= self.n[path.loops[i].slot] > 1
        return found

    def prod(self, path: Path, loops) -> np.ndarray:
        out = np.ones(self.count, dtype=I64)
        for i in loops:
            out = out * self.n[path.loops[i].slot]
        return out

    def vloop(self, path: Path, i: int, drop: bool) -> VLoop:
        slot = path.loops[i].slot
        lp = path.loops[i]
        slides = self.slide.get(path.op.name)
        if slides is None or lp.dim not in slides:
            return VLoop(lp.dim, self.n[slot], self.stride[slot], drop)
        slide = slides[lp.dim] == i
        return VLoop(lp.dim, self.n[slot], self.stride[slot], drop,
                     i in self.c.cuts[path.op.name].marked, slide if slide.any() else None)

    def dims(self, path: Path, position: int, extent: int | None = None) -> dict[str, VDim]:
        w = self.c.workload
        zero = np.zeros(self.count, dtype=I64)
        shifts = self.shift[path.op.name]
        ext = self.extents[path.op.name][position]
        one = np.ones(self.count, dtype=I64)
        cuts = self.cut.get(path.op.name, {})
        return {d: VDim(w.sizes[d], one if extent == 1 else ext[d], shifts.get(d, zero),
                        cuts.get(d)) for d in path.op.dims}


def nested_chain(start: np.ndarray, loops: list[tuple[np.ndarray, np.ndarray]]):
    """Loops (n, stride) sorted by stride, ignoring single iterations, each striding over the
    span of those before it, starting at `start`: (every row nests?, final span). Loop k's
    span below is `start` times the trips of the loops that sort before it (more than one
    trip, a smaller stride, or an equal stride and an earlier place); from four loops on,
    all at once as a loops x loops x rows product (integer products: any order gives the
    same value)."""
    if not loops:
        return np.ones(start.shape, dtype=bool), start.copy()
    if len(loops) == 1:
        n, s = loops[0]
        return (n <= 1) | (s == start), start * n
    if start.shape == (1,):
        return _nested_chain_one(int(start[0]), [(int(n[0]), int(s[0])) for n, s in loops])
    if len(loops) >= 4:
        n = np.stack([np.broadcast_to(trips, start.shape) for trips, _ in loops])
        s = np.stack([np.broadcast_to(stride, start.shape) for _, stride in loops])
        place = np.arange(len(loops))
        earlier = (place[None, :] < place[:, None])[:, :, None]  # [k, m]: m comes first
        sk, sm = s[:, None, :], s[None, :, :]
        before = (n > 1)[None, :, :] & ((sm < sk) | ((sm == sk) & earlier))
        below = start * np.where(before, n[None, :, :], 1).prod(axis=1)
        return ((n <= 1) | (s == below)).all(axis=0), start * n.prod(axis=0)
    several = [n > 1 for n, _ in loops]
    live = [bool(g.any()) for g in several]
    ok = np.ones(start.shape, dtype=bool)
    span = start
    for k, (n, s) in enumerate(loops):
        below = start
        for m, (n2, s2) in enumerate(loops):
            if m != k and live[m]:
                before = several[m] & ((s2 < s) | ((s2 == s) & (m < k)))
                below = below * np.where(before, n2, 1)
        ok &= (n <= 1) | (s == below)
        span = span * n
    return ok, span


def _nested_chain_one(start: int, loops: list[tuple[int, int]]):
    """`nested_chain` of one row, in Python's integers."""
    ok, span = True, start
    for k, (n, s) in enumerate(loops):
        below = start
        for m, (n2, s2) in enumerate(loops):
            if m != k and n2 > 1 and (s2 < s or (s2 == s and m < k)):
                below *= n2
        ok = ok and (n <= 1 or s == below)
        span *= n
    return np.array([ok]), np.array([span], dtype=I64)


Busy = dict[tuple[int, str], np.ndarray]  # (level, port): cycles the port is busy, per row


class Tally:
    """Words per (level, kind) summed over tensors, and per tile the time its loads and its
    stores keep each (level, port) busy; under `overlap: lockstep` also per tensor
    (`tensor_loads`, `tensor_stores`: a tensor moves on the steps where its slice changes)."""

    def __init__(self, rows: int, arch, widths: bool = False, per_tensor: bool = False):
        self.rows = rows
        self.arch = arch
        self.traffic = defaultdict(lambda: np.zeros(rows))  # (level, FILL/READ/UPDATE)
        # the same in accelerator words (`precision_bits`), what the energy is charged on:
        # kept apart only where some tensor's width differs from a word
        self.words = defaultdict(lambda: np.zeros(rows)) if widths else self.traffic
        # per (level, tensor, kind) at the levels that charge whole blocks (`block_words`):
        # a block is rounded up per tensor, so these are not summed over tensors
        self.blocks = {i for i, lv in enumerate(arch.levels) if lv.block_words}
        self.tensor_words: dict[tuple[int, str, int], np.ndarray] = \
            defaultdict(lambda: np.zeros(rows))
        # per (level, tensor, kind) in elements, kept only when asked (the explain pass's
        # records): the search reads the sums above
        self.by_tensor: dict[tuple[int, str, int], np.ndarray] | None = \
            defaultdict(lambda: np.zeros(rows)) if per_tensor else None
        self.loads: dict[str, Busy] = defaultdict(dict)
        self.stores: dict[str, Busy] = defaultdict(dict)
        # the single-buffered tensors' part of them (`Transfer.serial`)
        self.serial_loads: dict[str, Busy] = defaultdict(dict)
        self.serial_stores: dict[str, Busy] = defaultdict(dict)
        lockstep = arch.overlap == "lockstep"
        self.tensor_loads: dict[str, dict[str, Busy]] | None = \
            defaultdict(lambda: defaultdict(dict)) if lockstep else None
        self.tensor_stores: dict[str, dict[str, Busy]] | None = \
            defaultdict(lambda: defaultdict(dict)) if lockstep else None
        # per tile and single-buffered tensor, under lock step
        self.tensor_serial_loads: dict[str, dict[str, Busy]] | None = \
            defaultdict(lambda: defaultdict(dict)) if lockstep else None
        self.tensor_serial_stores: dict[str, dict[str, Busy]] | None = \
            defaultdict(lambda: defaultdict(dict)) if lockstep else None
        # per (level, port) of a one-instance level, the time all of the tree's transfers
        # through it need (`scalar_model._busiest_shared_port`)
        self.shared: dict[tuple[int, str], np.ndarray] = {}
        # per tile, the links (level above, level below) its loads and its stores move
        # words over, in the order first booked: the timeline's tracks (explain pass only)
        self.links: dict[bool, dict[str, dict[tuple[int, int], np.ndarray]]] | None = \
            {False: defaultdict(dict), True: defaultdict(dict)} if per_tensor else None
        # per operator, the time the tensors that bypass its innermost level keep each
        # (level, port) busy on their way to and from the unit (`feed`)
        self.fed: dict[str, Busy] = defaultdict(dict)
        # every booking that reads the accelerator's timing, in order, kept with the
        # records: `retime.retimed` books them again on a chip of other timings
        self.journal: list[tuple[str, tuple]] | None = [] if per_tensor else None

    def count(self, level: int, kind: int, elements, width: float, tensor: str) -> None:
        """Book `elements` of `tensor` moved at `level` (FILL, READ or UPDATE), `width`
        words each."""
        self.traffic[(level, kind)] += elements
        if self.by_tensor is not None:
            self.by_tensor[(level, tensor, kind)] += elements
        if self.words is not self.traffic:
            self.words[(level, kind)] += elements * width if width != 1.0 else elements
        if level in self.blocks:
            self.tensor_words[(level, tensor, kind)] += \
                elements * width if width != 1.0 else elements

    def link(self, store: bool, owner: str, upper: int, lower: int, words) -> None:
        """Book `words` moved between two levels by a load (or a store) of tile `owner`,
        where the records are kept (`links` is None otherwise)."""
        mine = self.links[store][owner]
        key = (upper, lower)
        if key in mine:
            mine[key] = mine[key] + words
        elif np.any(words):  # a link joins the order when it first moves a word
            mine[key] = words

    def transfer(self, store: bool, owner: str, tensor: str, level: int, words, instances,
                 kind: str, serial: bool = False) -> None:
        """Book one transfer of `tensor` by tile `owner`: a load, or a store (`store`);
        `serial`: a single-buffered tensor's, which does not overlap the compute."""
        if self.journal is not None:
            self.journal.append(("transfer", (store, owner, tensor, level, words, instances,
                                              kind, serial)))
        key, time = self._time(level, kind, words, instances)
        for mine in self._tables(store, owner, tensor, serial):
            mine[key] = mine[key] + time if key in mine else time
        self._one_port(level, kind, words)

    def feed(self, op: str, level: int, words, instances, kind: str) -> None:
        """Book a transfer between operator `op`'s unit and a level above its innermost one
        (a bypass); through a one-instance level's port, shared with the whole tree."""
        if self.journal is not None:
            self.journal.append(("feed", (op, level, words, instances, kind)))
        key, time = self._time(level, kind, words, instances)
        mine = self.fed[op]
        mine[key] = mine[key] + time if key in mine else time
        self._one_port(level, kind, words)

    def one_port(self, level: int, kind: str, words) -> None:
        """Book `words` through the `kind` ('read' or 'write') port of a level with one
        instance, which every transfer of the tree shares (nothing for other levels)."""
        if self.journal is not None:
            self.journal.append(("one_port", (level, kind, words)))
        self._one_port(level, kind, words)

    def _time(self, level: int, kind: str, words, instances) -> tuple[tuple[int, str], object]:
        """The (level, port) a transfer of `kind` uses, and the cycles it keeps it busy."""
        lv = self.arch.levels[level]
        rate = lv.read_words_per_cycle if kind == "read" else lv.write_words_per_cycle
        return (level, lv.port(kind)), words / (np.maximum(instances, 1) * rate)

    def _one_port(self, level: int, kind: str, words) -> None:
        lv = self.arch.levels[level]
        if lv.instances != 1:
            return
        key = (level, lv.port(kind))
        alone = words / (lv.read_words_per_cycle if kind == "read" else lv.write_words_per_cycle)
        self.shared[key] = self.shared[key] + alone if key in self.shared else alone

    def _tables(self, store: bool, owner: str, tensor: str, serial: bool) -> list[Busy]:
        """The busy tables one transfer adds to: the tile's (and its single-buffered part),
        under lock step its tensor's (overlapped or single-buffered) instead of the part."""
        if store:
            table, part, per_tensor, serial_tensor = (
                self.stores, self.serial_stores, self.tensor_stores, self.tensor_serial_stores)
        else:
            table, part, per_tensor, serial_tensor = (
                self.loads, self.serial_loads, self.tensor_loads, self.tensor_serial_loads)
        out = [table[owner]]
        if serial:
            out.append(part[owner])
        if per_tensor is not None:
            out.append((serial_tensor if serial else per_tensor)[owner][tensor])
        return out


def count_boundary(r: Rows, path: Path, b: Boundary, tally: Tally) -> None:
    """Words moved over one boundary of one path, for every crossing tensor."""
    ext = r.extents[path.op.name][b.j + 1]
    inst_x = r.prod(path, b.inst_x)
    inst_y = r.prod(path, b.inst_y)
    exact = exact_dims(r, path)
    regular = dict(exact)
    extent_x = {d: ext[d] for d in path.op.dims}
    for d in {path.loops[i].dim for i in b.union} & set(path.op.dims):
        mine = [(r.n[path.loops[i].slot], r.stride[path.loops[i].slot])
                for i in b.union if path.loops[i].dim == d]
        ok, span = nested_chain(ext[d], mine)
        regular[d] = regular[d] & ok
        extent_x[d] = span
    # outputs filled on their first touch too (the inner level's `first_touch_fills`), the
    # level above read for them unless `first_touch_reads_parent` is off
    inner = r.c.arch.levels[b.y]
    first = inner.first_touch_fills
    parent = first and inner.first_touch_reads_parent
    for cross in b.crossings:
        moved = _exact_counts(r, path, b, cross, ext, extent_x, inst_x, inst_y, first, parent)
        if cross.plain_dims is None:
            todo = np.arange(r.count)
        else:
            fine = np.ones(r.count, dtype=bool)
            for d in cross.plain_dims:
                fine &= regular[d]
            todo = np.flatnonzero(~fine)
        if len(todo):
            if not cross.is_out and inner.deltas == "timeloop":  # Timeloop's delta rule
                general = _timeloop_counts(r, path, b, cross, todo)
            else:
                general = _general_counts(r, path, b, cross, todo, first, parent)
            moved = [m.astype(float) if isinstance(m, np.ndarray) else np.full(r.count, float(m))
                     for m in moved]
            for m, g in zip(moved, general, strict=True):
                m[todo] = g
        served = None if cross.is_out else r.served.get((path.op.name, b.j, cross.tensor))
        if served is not None:  # resident already: an earlier sibling loaded the same slice
            moved = [np.where(served, 0, m) for m in moved]
        _record(tally, b, cross, inst_x, inst_y, *moved, width=r.c.width[cross.tensor])


def exact_dims(r: Rows, path: Path) -> dict[str, np.ndarray]:
    """Per dim and row, whether the operator's tiles cover it exactly (no clipping, no
    shift)."""
    key = ("exact", path.op.name)
    cache = r.__dict__.setdefault("_cache", {})
    if key in cache:
        return cache[key]
    w = r.c.workload
    shifts = r.shift[path.op.name]
    out = {}
    for d in path.op.dims:
        mine = [(r.n[lp.slot], r.stride[lp.slot]) for lp in path.loops if lp.dim == d]
        ok, span = nested_chain(np.ones(r.count, dtype=I64), mine)
        ok &= span == w.sizes[d]
        if d in shifts:
            ok &= shifts[d] == 0
        cut = r.cut.get(path.op.name, {}).get(d)
        if cut is not None:  # a kept halo: its slices start after the kept rows
            ok &= cut == 0
        out[d] = ok
    cache[key] = out
    return out


def _steps(r: Rows, path: Path, cross: Crossing, dims, fresh: bool) -> np.ndarray:
    """Product of trip counts down to the innermost loop that changes the slice."""
    result = np.ones(r.count, dtype=I64)
    prefix = np.ones(r.count, dtype=I64)
    for i, drop, epoch in cross.temporal:
        lp = path.loops[i]
        n = r.n[lp.slot]
        prefix = prefix * n
        if lp.dim in dims or drop or (fresh and epoch):
            result = np.where(n > 1, prefix, result)
    return result


def _exact_counts(r: Rows, path: Path, b: Boundary, cross: Crossing, ext, extent_x,
                  inst_x, inst_y, first: bool = False, parent: bool = False):
    """The closed forms of `scalar_traffic._ExactTiling` (valid where every dim is tiled exactly);
    `first`: outputs are filled on their first touch too, `parent`: the level above is
    read for those fills (else its reads are those without them)."""
    dims = cross.plain_dims
    if dims is None:
        return [0, 0, 0, 0]
    w = r.c.workload
    moved = _steps(r, path, cross, dims, fresh=False)
    slice_y = np.ones(r.count, dtype=I64)
    slice_x = np.ones(r.count, dtype=I64)
    for d in dims:
        slice_y = slice_y * ext[d]
        slice_x = slice_x * extent_x[d]
    moved_y = slice_y * inst_y * moved
    moved_x = slice_x * inst_x * moved
    if not cross.is_out:
        return [moved_y, moved_x, 0, 0]
    restarts = _steps(r, path, cross, dims, fresh=True)
    kept, revisited = _kept_epochs(r, path, cross, dims)
    if revisited.any():  # an epoch's steps not consecutive: `scalar_traffic._kept_epochs`
        restarts = np.where(revisited, moved + kept, restarts)
    if first and parent:  # every entry is filled, first touches included
        return [moved_y, moved_x, moved_y, moved_x]
    epochs = np.ones(r.count, dtype=I64)
    for i, _, epoch in cross.temporal:
        if epoch and path.loops[i].dim not in dims:
            epochs = epochs * r.n[path.loops[i].slot]
    words = int(np.prod([w.sizes[d] for d in dims], dtype=np.int64)) * epochs
    others = [i for i, lp in enumerate(path.loops) if lp.node <= b.j and lp.dim not in dims
              and lp.spatial]
    spread_y = r.prod(path, others)
    spread_x = r.prod(path, [i for i in others if path.loops[i].node < b.run_start])
    refill_y = slice_y * inst_y * restarts - words * spread_y
    refill_x = slice_x * inst_x * restarts - words * spread_x
    if first:  # filled on the first touch, the parent read only for partial sums
        refill_y = moved_y
    return [moved_y, moved_x, refill_y, refill_x]


def _kept_epochs(r: Rows, path: Path, cross: Crossing, dims) -> tuple[np.ndarray, np.ndarray]:
    """`scalar_traffic._kept_epochs` per row: the entries' multiplier, and the rows where it
    applies (an unmarked loop encloses a marked one, no marked loop moves the slice)."""
    count = r.count
    moves = np.zeros(count, dtype=bool)
    unmarked = np.zeros(count, dtype=bool)
    revisited = np.zeros(count, dtype=bool)
    for i, _, epoch in cross.temporal:
        lp = path.loops[i]
        live = r.n[lp.slot] > 1
        if epoch:
            if lp.dim in dims:
                moves = moves | live
            revisited = revisited | (unmarked & live)
        else:
            unmarked = unmarked | live
    still = {}  # per marked loop: nothing inside it moves or drops the slice
    blocked = np.zeros(count, dtype=bool)
    for i, drop, epoch in reversed(cross.temporal):
        lp = path.loops[i]
        if epoch:
            still[i] = ~blocked & (not drop)
        if drop or (not epoch and lp.dim in dims):
            blocked = blocked | (r.n[lp.slot] > 1)
    total = np.zeros(count, dtype=I64)
    marked_outer = np.ones(count, dtype=I64)
    unmarked_over_dims = np.ones(count, dtype=I64)
    for i, _, epoch in cross.temporal:
        lp = path.loops[i]
        n = r.n[lp.slot]
        if epoch:
            total = total + np.where(still[i] & (n > 1), (n - 1) * marked_outer, 0)
            marked_outer = marked_outer * n
        elif lp.dim in dims:
            unmarked_over_dims = unmarked_over_dims * n
    return total * unmarked_over_dims, revisited & ~moves


def _general_counts(r: Rows, path: Path, b: Boundary, cross: Crossing, rows: np.ndarray,
                    first: bool = False, parent: bool = False):
    """`scalar_traffic._general_counts` on the rows `rows`, by the per-axis sums of `sums`
    (`first`, `parent`: as `_exact_counts`)."""
    k = len(rows)
    dims = {d: v.take(rows) for d, v in r.dims(path, b.j + 1).items()}
    temporal = [(r.vloop(path, i, drop).take(rows), epoch) for i, drop, epoch in cross.temporal]
    inst_y = [(r.vloop(path, i, True).take(rows), True) for i in b.inst_y]
    inst_x = [(r.vloop(path, i, True).take(rows), True) for i in b.inst_x]
    union = [r.vloop(path, i, False).take(rows) for i in b.union]
    loops_y = [lp for lp, _ in inst_y + temporal]
    loops_x = [lp for lp, _ in inst_x + temporal]
    axes = cross.axes
    moved_y = sums.words_moved(axes, dims, loops_y, k)
    moved_x = sums.words_moved(axes, dims, loops_x, k, union=union)
    if not cross.is_out:
        return moved_y, moved_x, 0, 0
    epoch_y = [e for _, e in inst_y + temporal]
    epoch_x = [e for _, e in inst_x + temporal]
    refill_y = _refills(axes, dims, loops_y, epoch_y, (), moved_y, k, first)
    refill_x = _refills(axes, dims, loops_x, epoch_x, union, moved_x, k, parent)
    # `scalar_traffic._general_counts`: at most what the instances are refilled with
    plain_y = refill_y if first == parent else _refills(axes, dims, loops_y, epoch_y, (),
                                                         moved_y, k, False)
    refill_x = np.minimum(refill_x, plain_y)
    return moved_y, moved_x, refill_y, refill_x


def _timeloop_counts(r: Rows, path: Path, b: Boundary, cross: Crossing, rows: np.ndarray):
    """`scalar_traffic._timeloop_counts` on the rows `rows`: an input's words under Timeloop's
    delta rule (`deltas: timeloop`). Each instance below is filled by the rule on its own;
    the level above sends each fan-out stage's (a tile's spatial loops) different slices
    once, the product over the stages."""
    k = len(rows)
    dims = {d: v.take(rows) for d, v in r.dims(path, b.j + 1).items()}
    temporal = [r.vloop(path, i, drop).take(rows) for i, drop, _ in cross.temporal]
    per_instance = timeloop_deltas.words_moved(cross.axes, dims, temporal, k)
    stages: dict[int, list[VLoop]] = defaultdict(list)
    for i in b.union:
        stages[path.loops[i].node].append(r.vloop(path, i, False).take(rows))
    distinct = np.ones(k, dtype=I64)
    for loops in stages.values():
        distinct = distinct * distinct_tuples(k, loops, cross.axes)
    moved_y = r.prod(path, b.inst_y)[rows] * per_instance
    moved_x = r.prod(path, b.inst_x)[rows] * per_instance * distinct
    return moved_y, moved_x, 0, 0


def _refills(axes, dims, loops: list[VLoop], epoch: list[bool], union: list[VLoop],
             moved: np.ndarray, k: int, first: bool) -> np.ndarray:
    """`scalar_traffic._refills` per row: the per-axis sums where each epoch's steps are
    consecutive, `movement.resident_first_touches` row by row where they are not."""
    if first:  # every entry filled
        return moved
    refill = sums.words_moved(axes, dims, loops, k, epoch, union)
    refill = refill - sums.first_touches(axes, dims, loops, epoch, k, union=union)
    unmarked = np.zeros(k, dtype=bool)
    revisited = np.zeros(k, dtype=bool)
    for lp, e in zip(loops, epoch, strict=True):
        live = lp.n > 1
        if e:
            revisited = revisited | (unmarked & live)
        else:
            unmarked = unmarked | live
    if not revisited.any():
        return refill
    refill = np.array(refill, dtype=I64, copy=True)
    for row in np.flatnonzero(revisited):
        recs = [LoopRec(lp.dim, int(lp.n[row]), int(lp.stride[row]), lp.drop) for lp in loops]
        across = [LoopRec(lp.dim, int(lp.n[row]), int(lp.stride[row]), lp.drop)
                  for lp in union]
        one = {d: DimRec(v.size, int(v.extent[row]), int(v.shift[row]),
                         0 if v.cut is None else int(v.cut[row]))  # a kept halo: no closed form
               for d, v in dims.items()}
        resident = resident_first_touches(axes, one, recs, epoch, across)
        if resident is not None:
            refill[row] = (moved[row] - first_touches(axes, one, recs, epoch, union=across)
                           + resident)
    return refill


def _record(tally: Tally, b: Boundary, cross: Crossing, inst_x, inst_y, moved_y, moved_x,
            refill_y, refill_x, width: float = 1.0) -> None:
    """`scalar_traffic._record`: counts in elements, transfers (their time) in accelerator words,
    `width` per element (`precision_bits`)."""
    x, y, owner, t, serial = b.x, b.y, b.owner, cross.tensor, cross.serial

    def words(elements):
        return width * elements if width != 1.0 else elements

    if cross.is_out:
        tally.count(y, FILL, refill_y, width, t)
        tally.count(x, READ, refill_x, width, t)
        tally.count(x, UPDATE, moved_x, width, t)
        tally.transfer(False, owner, t, x, words(refill_x), inst_x, "read", serial)
        tally.transfer(False, owner, t, y, words(refill_y), inst_y, "write", serial)
        tally.transfer(True, owner, t, x, words(moved_x), inst_x, "write", serial)
        if tally.arch.levels[y].writeback_on_read_port:  # `scalar_model.charged_stores`
            tally.transfer(True, owner, t, y, words(moved_y), inst_y, "read", serial)
        if tally.links is not None:  # the records' tracks only: not the search's work
            tally.link(False, owner, x, y, refill_x + refill_y)
            tally.link(True, owner, x, y, moved_x + moved_y)
    else:
        tally.count(y, FILL, moved_y, width, t)
        tally.count(x, READ, moved_x, width, t)
        tally.transfer(False, owner, t, x, words(moved_x), inst_x, "read", serial)
        tally.transfer(False, owner, t, y, words(moved_y), inst_y, "write", serial)
        if tally.links is not None:
            tally.link(False, owner, x, y, moved_x + moved_y)
