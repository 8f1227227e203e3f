"""An enumerating reference simulator (the oracle) for the tile-tree rules of docs/
(concepts, counting, footprints), independent of the analytic model.

It reads only the YAML-level description (the Dataflow tree, the Workload's expressions and
the levels' order) and derives everything else itself: every loop's stride, a windowed
producer's start offset, where intermediates live. It then executes every operator's loop
nest step by step on small sizes, holding explicit sets of tensor elements per buffer
instance, and counts fills, reads and updates per level and tensor, the operations, and
each level's footprint (the largest set resident in one instance). Nothing is imported from
`tileflow.analysis`.

The rules, as executed here:
* A buffer instance holds, at each step of the loops above it, the slice its subtree needs
  for that step (a box per tensor axis: the loops below it run in full, clipped to the
  tensor). What it did not hold before is filled. The parent reads, per parent instance and
  step, the union of what the child instances under it are filled with (multicast; an
  element that one instance held is never passed to another).
* Output elements leaving an instance are written back; the parent is updated once per
  element and step (spatial reduction). An output element entering an instance is filled
  only if that instance touched it before in the current epoch (a partial sum coming back).
  Epochs are the values of the loops over dimensions the operator does not use (each
  repetition of a recomputed operator accumulates on its own) and, for an intermediate, of
  the loops of its producer's and consumers' lowest common ancestor and above (it is
  produced afresh at every such step).
* A Seq tile whose next child (wrapping, only with two children or more) does not use a
  tensor drops it from every buffer below it after each of its steps; `no_reuse` drops it
  below its tile at every step of that tile's loops.
* An intermediate moves only at and below its home level. Compute reads each operand and
  updates the result once per valid iteration at the innermost level, and does not read an
  accumulator on its first touch per spatial instance and epoch.
* Mechanisms (docs/mechanisms.md): a tensor a tile bypasses moves between the nearest
  levels above and below that hold it (the slice takes every loop above the lower level,
  the upper level sends the union per its instance) and the compute unit reads (updates) it
  at the innermost level holding it; an intermediate is never bypassed at its home. A
  level with first-touch fills fills every output element that enters it. A buffer holds
  a tensor's slice as many times as its depth (the tile's, else the level's, else 2 under
  double buffering, else 1).
* Timeloop's delta rule (`deltas: timeloop`, docs/mechanisms.md), for an input filled into
  such a level: one instance below the link (the spatial loops at their first value) is
  filled over the sampled steps of the temporal loops above it, every loop of more than
  one iteration at its first and second iteration in order, a step weighing the product of
  (iterations - 1) of the loops at their second. A step receives the elements of its slice
  that the step before did not hold, if the slice's centre moved (rounded half away from
  zero, per tensor axis) as at the step before, a move of zero included; otherwise, at the
  first step, and when a loop at or above one that drops the tensor advances, the whole
  slice, and the move is forgotten. Every instance below is filled so; the level above
  sends them, per instance of its own, those words times, per tile between them, the
  number of different places where that tile's spatial instances' slices start (equal ones
  share one send: multicast).

For latency (`reference_timing`) the oracle also records, per link and tensor, the words
each port moves (`moves`), the link's instances (`links`) and each leaf's steps and reads
and updates per level (`leaf`).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, Op, Tile

FILL, READ, UPDATE = 0, 1, 2


def _product(loops, chosen: list[int]) -> int:
    """The product of the factors of the chosen loops (instances in use)."""
    out = 1
    for n in chosen:
        out *= loops[n][3].factor
    return out


def _centre_move(before: frozenset, now: frozenset) -> tuple[int, ...] | None:
    """How far a slice's centre moved per tensor axis, rounded half away from zero (None when
    it held nothing before; zero when it holds nothing now)."""
    if not before:
        return None
    if not now:
        return (0,) * len(next(iter(before)))

    def centre(box: frozenset, a: int) -> float:
        lo, hi = min(e[a] for e in box), max(e[a] for e in box)
        return (lo + hi) / 2

    out = []
    for a in range(len(next(iter(before)))):
        x = centre(now, a) - centre(before, a)
        out.append(int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1))
    return tuple(out)


class Oracle:
    """Executes one dataflow: `traffic` {(level name, tensor): [fill, read, update]}, `ops`
    {operator: operations}, `footprints` {level name: words}, `rescale` {carried operator:
    {function: operations}}."""

    def __init__(self, w: Workload, level_names: list[str], flow: Dataflow, *,
                 first_touch: frozenset[str] = frozenset(),
                 depths: dict[str, int | None] | None = None, double_buffer: bool = False,
                 word_bits: int | None = None, timeloop: frozenset[str] = frozenset()):
        """`first_touch`: levels that fill an output element on its first touch too;
        `depths`: each level's default buffering depth (None: unset); `double_buffer`:
        unset depths count as 2 in footprints; `word_bits`: the accelerator's word, against
        which a tensor's own `precision_bits` make its footprints and the words its
        transfers move (counts stay in elements); `timeloop`: levels whose inputs are filled
        by Timeloop's delta rule."""
        self.w = w
        self.width = {t: (w.precision_bits.get(t, word_bits) / word_bits if word_bits else 1.0)
                      for t in w.tensors}
        self.flow = flow
        self.first_touch = first_touch
        self.timeloop = timeloop
        self.depths = depths or {}
        self.double_buffer = double_buffer
        self.names = list(level_names)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.paths: dict[str, list[tuple[str, Tile]]] = {}
        self._leaf_paths(flow.root, "root", [])
        self.tiles = {p: t for chain in self.paths.values() for p, t in chain}
        self.stride: dict[tuple[str, int], int] = {}
        self._strides(flow.root, "root")
        self.lca = {t: self._lca([w.producer[t], *w.consumers[t]]) for t in self._intermediates()}
        self.shift = self._shifts()
        self.cut = self._cuts()
        self.home = {t: self._home(t) for t in self.lca}
        self.traffic: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        self.ops: dict[str, int] = {}
        self.record: dict = {}  # (op, j, input) -> what the link below path position j carried
        # words over each port, for latency: (op, j, tensor) -> {(level index, "r"/"w"): words}
        self.moves: dict = defaultdict(lambda: defaultdict(int))
        # (op, j, tensor) -> (tile path, parent level, child level, child instances, parent
        # instances, the first tile of the child level)
        self.links: dict = {}
        # op -> {"steps", "reads", "updates", "instances", "level"} of its leaf
        self.leaf: dict = {}
        for op in w.ops:
            self._run(op.name)
        self._share()
        for (_, _, t), ports in self.moves.items():  # elements to accelerator words
            for port in ports:
                ports[port] *= self.width[t]
        self.rescale = self._rescaling()
        self.footprints = {name: self._footprint(i) for i, name in enumerate(self.names)
                           if i > 0}

    # ---- structure, derived from the tree -------------------------------------------

    def _intermediates(self) -> list[str]:
        w = self.w
        return [t for t in w.tensors if t in w.producer and t in w.consumers]

    def _leaf_paths(self, node: Tile, path: str, chain: list) -> None:
        chain = [*chain, (path, node)]
        for i, child in enumerate(node.children):
            if isinstance(child, Op):
                self.paths[child.op] = chain
            else:
                self._leaf_paths(child, f"{path}.{i}", chain)

    def _ops_below(self, node) -> list[str]:
        if isinstance(node, Op):
            return [node.op]
        return [o for c in node.children for o in self._ops_below(c)]

    def _strides(self, node: Tile, path: str) -> dict[str, dict[str, int]]:
        """A loop moves each operator below by the extent the loops inside it cover; when
        operators cover different extents, by the smallest. Returns, per operator below,
        the extent of every dimension this tile and its subtree cover."""
        covered: dict[str, dict[str, int]] = {}
        for i, child in enumerate(node.children):
            if isinstance(child, Op):
                covered[child.op] = {d: 1 for d in self.w.op_by_name[child.op].dims}
            else:
                covered.update(self._strides(child, f"{path}.{i}"))
        for i in range(len(node.loops) - 1, -1, -1):
            lp = node.loops[i]
            users = [c for c in covered.values() if lp.dim in c]
            step = min((c[lp.dim] for c in users), default=1)
            self.stride[(path, i)] = step
            for c in users:
                c[lp.dim] += (lp.factor - 1) * step
        return covered

    def loops(self, op: str):
        """(depth on the path, tile path, loop index, loop) for every loop, outermost first."""
        return [(k, p, i, lp) for k, (p, t) in enumerate(self.paths[op])
                for i, lp in enumerate(t.loops)]

    def _lca(self, ops: list[str]) -> int:
        chains = [[p for p, _ in self.paths[o]] for o in ops]
        depth = 0
        while all(len(c) > depth + 1 for c in chains) and \
                len({c[depth + 1] for c in chains}) == 1:
            depth += 1
        return depth

    def _shifts(self) -> dict[str, dict[str, int]]:
        """A producer tiled along d in the common ancestor with a consumer that reads its
        output through a window (A[p+t-1]) computes, per step, from the window's offset."""
        w = self.w
        out: dict[str, dict[str, int]] = defaultdict(dict)
        for t, depth in self.lca.items():
            producer = w.op_by_name[w.producer[t]]
            for consumer in w.consumers[t]:
                axes = w.op_by_name[consumer].access(t).axes
                for mine, theirs in zip(producer.output.axes, axes, strict=True):
                    d = mine.terms[0][0]
                    tiled = any(lp.dim == d and lp.factor > 1 and k <= depth
                                for k, _, _, lp in self.loops(producer.name))
                    if tiled and (len(theirs.terms) > 1 or theirs.offset):
                        out[producer.name][d] = min(out[producer.name].get(d, 0),
                                                    theirs.offset)
        return out

    def _cuts(self) -> dict[str, dict[str, tuple[int, int, int]]]:
        """`halo: cache` on an intermediate's common ancestor: per windowed dimension d of
        its producer, (rows kept, the ancestor's depth, the index of the innermost temporal
        loop over d at or above it): that loop's consecutive iterations give the producer
        regions overlapping by (its extent below the ancestor - the loop's stride) rows,
        which are not computed again."""
        w = self.w
        out: dict[str, dict[str, tuple[int, int, int]]] = defaultdict(dict)
        for t, depth in self.lca.items():
            producer = w.producer[t]
            node = self.paths[producer][depth][1]
            if dict(node.halo).get(t) != "cache":
                continue
            loops = self.loops(producer)
            for consumer in w.consumers[t]:
                axes = w.op_by_name[consumer].access(t).axes
                for mine, theirs in zip(w.op_by_name[producer].output.axes, axes, strict=True):
                    d = mine.terms[0][0]
                    above = [n for n, (k, _, _, lp) in enumerate(loops)
                             if lp.dim == d and k <= depth and not lp.spatial and lp.factor > 1]
                    if len(theirs.terms) < 2 or not above:
                        continue
                    extent = 1 + sum((lp.factor - 1) * self.stride[(p, i)]
                                     for k, p, i, lp in loops if lp.dim == d and k > depth)
                    _, p, i, _ = loops[above[-1]]
                    kept = extent - self.stride[(p, i)]
                    if kept > 0:
                        out[producer][d] = (kept, depth, above[-1])
        return out

    def _floor(self, op: str, d: str, loops, values: dict, depth: int) -> int | None:
        """The first row of d the producer computes at these loop values under a kept
        halo (None where nothing is kept: no cut, the sweep's first iteration, or the
        sliding loop inside the slice below `depth`)."""
        if d not in self.cut.get(op, {}):
            return None
        kept, lca, slide = self.cut[op][d]
        if loops[slide][0] > depth or not values.get(slide):
            return None
        base = sum(values.get(n, 0) * self.stride[(p, i)]
                   for n, (k, p, i, lp) in enumerate(loops)
                   if lp.dim == d and k <= lca)
        return self.shift.get(op, {}).get(d, 0) + base + kept

    def _home(self, t: str) -> int:
        """Named by the dataflow; else the common ancestor's level when on chip; else the
        outermost on-chip level that every operator's path passes through below it."""
        if t in self.flow.homes:
            return self.index[self.flow.homes[t]]
        w = self.w
        ops = [w.producer[t], *w.consumers[t]]
        depth = self.lca[t]
        here = self.index[self.paths[ops[0]][depth][1].level]
        if here > 0:
            return here
        below = [{self.index[tl.level] for _, tl in self.paths[o][depth + 1:]} - {0}
                 for o in ops]
        common = set.intersection(*below)
        return min(common) if common else here

    # ---- slices -------------------------------------------------------------------------

    def _box(self, op: str, tensor: str, start: dict[str, int], extent: dict[str, int]):
        """The elements of `tensor` the operator touches over a box of its iterations."""
        w = self.w
        access = w.op_by_name[op].access(tensor)
        ranges = []
        for axis, size in zip(access.axes, w.shapes[tensor], strict=True):
            lo = hi = axis.offset
            for d, c in axis.terms:
                a, b = max(start[d], 0), min(start[d] + extent[d], w.sizes[d])
                if b <= a:
                    return frozenset()
                lo += c * a
                hi += c * (b - 1)
            lo, hi = max(lo, 0), min(hi + 1, size)
            if hi <= lo:
                return frozenset()
            ranges.append(range(lo, hi))
        return frozenset(itertools.product(*ranges))

    def _slice(self, op: str, tensor: str, loops, values: dict, depth: int):
        """The slice below path position `depth`: loops at or above it at `values`, the
        loops below it in full."""
        dims = {d: 0 for d in self.w.op_by_name[op].dims}
        start = {d: self.shift.get(op, {}).get(d, 0) for d in dims}
        extent = dict.fromkeys(dims, 1)
        for key, (k, p, i, lp) in enumerate(loops):
            if lp.dim not in dims:
                continue
            if k <= depth:
                start[lp.dim] += values[key] * self.stride[(p, i)]
            else:
                extent[lp.dim] += (lp.factor - 1) * self.stride[(p, i)]
        for d in dims:
            floor = self._floor(op, d, loops, values, depth)
            if floor is not None and floor > start[d]:
                extent[d] -= floor - start[d]
                start[d] = floor
        return self._box(op, tensor, start, extent)

    # ---- execution of one operator ------------------------------------------------------

    def _run(self, name: str) -> None:
        w = self.w
        op = w.op_by_name[name]
        chain = self.paths[name]
        loops = self.loops(name)
        temporal = [n for n, (_, _, _, lp) in enumerate(loops) if not lp.spatial]
        spatial = [n for n, (_, _, _, lp) in enumerate(loops) if lp.spatial]
        tensors = [(a.tensor, False) for a in op.inputs] + [(op.output.tensor, True)]
        drops = {t: self._drop_depths(name, chain, t) for t, _ in tensors}
        fresh = {t: self._epoch_loops(op, loops, t) for t, _ in tensors}
        buffers = []  # per tensor, the links between the levels that hold it
        for t, _ in tensors:
            held_runs = [r for r in self._runs(chain) if not self.skips(name, t, r[2])]
            for (first, _, x), (lower, _, y) in zip(held_runs, held_runs[1:], strict=False):
                j = lower - 1  # the slice takes every loop above the lower level
                child_inst = [n for n in spatial if loops[n][0] <= j]
                parent_inst = [n for n in spatial if loops[n][0] < first]
                buffers.append((j, x, y, child_inst, parent_inst, t))
                self.links[(name, j, t)] = (chain[j][0], x, y, _product(loops, child_inst),
                                            _product(loops, parent_inst),
                                            self._holder(chain, lower))
        sampled = {(j, t) for j, _, y, _, _, t in buffers  # Timeloop's rule: counted apart
                   if t != op.output.tensor and self.names[y] in self.timeloop}
        held = defaultdict(frozenset)  # (j, tensor, child instance) -> elements
        # output elements touched per (boundary, tensor, child instance, epoch): an epoch is
        # a value of the loops that start the tensor afresh
        seen = defaultdict(set)
        touched = defaultdict(set)  # compute: (spatial instance, epoch) -> elements
        ops = 0
        previous = None
        out = op.output.tensor
        # the compute unit reads (updates) each tensor at the innermost level holding it
        inner = {t: [r for r in self._runs(chain) if not self.skips(name, t, r[2])][-1]
                 for t, _ in tensors}
        leaf = self.leaf[name] = {"steps": 0, "reads": defaultdict(int),
                                  "updates": defaultdict(int), "instances": {
                                      lv: _product(loops, [n for n in spatial
                                                           if loops[n][0] < first])
                                      for first, _, lv in inner.values()}}
        # an input read straight from a level above the innermost one (it bypasses the
        # innermost): per step, that level sends the distinct elements the spatial
        # instances under each of its instances read (multicast), not one per operation
        innermost = self._runs(chain)[-1][2]
        sent = {a.tensor: [n for n in spatial if loops[n][0] < inner[a.tensor][0]]
                for a in op.inputs if inner[a.tensor][2] != innermost}
        for tvals in itertools.product(*(range(loops[n][3].factor) for n in temporal)):
            now = dict(zip(temporal, tvals, strict=True))
            multicast: dict = defaultdict(set)  # (tensor, holder instance) -> elements
            moved = set() if previous is None else {n for n in temporal
                                                    if now[n] != previous[n]}
            for j, x, y, child_inst, parent_inst, t in buffers:
                is_out = t == out
                if t in self.home and x < self.home[t]:
                    continue
                drop = any(loops[n][0] <= j and self._dropping(loops[n], j, drops[t])
                           for n in moved)
                epoch = tuple(now[n] for n in sorted(fresh[t]) if n in now)
                entering: dict = defaultdict(set)
                leaving: dict = defaultdict(set)
                moves = self.moves[(name, j, t)]
                for svals in itertools.product(*(range(loops[n][3].factor)
                                                 for n in child_inst)):
                    values = {**now, **dict(zip(child_inst, svals, strict=True))}
                    key = (j, t, svals)
                    mark = (*key, epoch)
                    group = tuple(values[n] for n in parent_inst)
                    want = self._slice(name, t, loops, values, j)
                    have = frozenset() if drop else held[key]
                    gone = (held[key] if drop else frozenset()) | (have - want)
                    leaving[group] |= gone
                    if is_out:  # each instance sends its own partial sums
                        moves[(y, "r")] += len(gone)
                    new = want - have
                    if is_out:
                        if self.names[y] not in self.first_touch:
                            new = new & seen[mark]
                        seen[mark] |= want
                    held[key] = want
                    if (j, t) in sampled:
                        new = frozenset()
                    self.traffic[(self.names[y], t)][FILL] += len(new)
                    moves[(y, "w")] += len(new)
                    entering[group] |= new
                    if not is_out:  # what the link carries, for sibling sharing
                        rec = self.record.setdefault(
                            (name, j, t),
                            {"x": 0, "y": 0, "slices": {}, "level": y, "parent": x})
                        rec["y"] += len(new)
                        steps = tuple(now[n] for n in temporal if loops[n][0] <= j)
                        rec["slices"][(steps, svals)] = want
                parent = self.traffic[(self.names[x], t)]
                parent[READ] += sum(len(v) for v in entering.values())
                moves[(x, "r")] += sum(len(v) for v in entering.values())
                if is_out:
                    moves[(x, "w")] += sum(len(v) for v in leaving.values())
                if not is_out:
                    self.record[(name, j, t)]["x"] += sum(len(v) for v in entering.values())
                if is_out:
                    parent[UPDATE] += sum(len(v) for v in leaving.values())
            # compute at the innermost level, one point per spatial instance
            epoch = tuple(now[n] for n in sorted(fresh[out]) if n in now)
            leaf["steps"] += 1
            for svals in itertools.product(*(range(loops[n][3].factor) for n in spatial)):
                values = {**now, **dict(zip(spatial, svals, strict=True))}
                point = {d: self.shift.get(name, {}).get(d, 0) for d in op.dims}
                for n, (_, p, i, lp) in enumerate(loops):
                    if lp.dim in point:
                        point[lp.dim] += values[n] * self.stride[(p, i)]
                if any(not 0 <= point[d] < w.sizes[d] for d in op.dims):
                    continue
                if any(point[d] < (self._floor(name, d, loops, values, len(chain)) or -1)
                       for d in op.dims):
                    continue  # a kept halo row, computed in the previous step
                ops += 1
                for a in op.inputs:
                    if a.tensor in sent:
                        multicast[(a.tensor, tuple(values[n] for n in sent[a.tensor]))].add(
                            tuple(sum(c * point[d] for d, c in axis.terms) + axis.offset
                                  for axis in a.axes))
                        continue
                    self.traffic[(self.names[inner[a.tensor][2]], a.tensor)][READ] += 1
                    leaf["reads"][inner[a.tensor][2]] += self.width[a.tensor]
                self.traffic[(self.names[inner[out][2]], out)][UPDATE] += 1
                leaf["updates"][inner[out][2]] += self.width[out]
                if op.accumulates:
                    element = tuple(sum(c * point[d] for d, c in axis.terms) + axis.offset
                                    for axis in op.output.axes)
                    if element in touched[(svals, epoch)]:
                        self.traffic[(self.names[inner[out][2]], out)][READ] += 1
                        leaf["reads"][inner[out][2]] += self.width[out]
                    touched[(svals, epoch)].add(element)
            for (tensor, _), elements in multicast.items():
                self.traffic[(self.names[inner[tensor][2]], tensor)][READ] += len(elements)
                leaf["reads"][inner[tensor][2]] += len(elements) * self.width[tensor]
            previous = now
        for j, x, y, child_inst, parent_inst, t in buffers:
            if (j, t) in sampled and not (t in self.home and x < self.home[t]):
                self._sampled_fills(name, loops, j, x, y, child_inst, parent_inst, t, drops[t])
        for j, x, _y, _child, parent_inst, t in buffers:  # what is still held leaves at the end
            if t != out or (out in self.home and x < self.home[out]):
                continue
            groups: dict = defaultdict(set)
            for (jj, t, svals), elements in held.items():
                if jj == j and t == out:
                    values = dict(zip(_child, svals, strict=True))
                    groups[tuple(values[n] for n in parent_inst)] |= elements
                    self.moves[(name, j, out)][(_y, "r")] += len(elements)
            self.traffic[(self.names[x], out)][UPDATE] += sum(len(v) for v in groups.values())
            self.moves[(name, j, out)][(x, "w")] += sum(len(v) for v in groups.values())
        self.ops[name] = ops

    def _sampled_fills(self, name: str, loops, j: int, x: int, y: int, child_inst,
                       parent_inst, t: str, drops: set[int]) -> None:
        """Book the link's fills and the parent's reads of input `t` by Timeloop's delta rule
        (the module's rules)."""
        live = [n for n, (k, _, _, lp) in enumerate(loops)
                if k <= j and not lp.spatial and lp.factor > 1]
        one = 0
        before, last = None, None
        for values in itertools.product((0, 1), repeat=len(live)):
            weight = math.prod(loops[n][3].factor - 1
                               for n, v in zip(live, values, strict=True) if v)
            at = dict.fromkeys(range(len(loops)), 0) | dict(zip(live, values, strict=True))
            now = self._slice(name, t, loops, at, j)
            advanced = max((k for k, v in enumerate(values) if v), default=-1)
            if before is None or (advanced >= 0 and any(
                    self._dropping(loops[n], j, drops) for n in live[advanced:])):
                delta, last = len(now), None
            else:
                move = _centre_move(before, now)
                if last is None or move == last:
                    delta, last = len(now - before), move
                else:
                    delta, last = len(now), None
            one += weight * delta
            before = now
        access = self.w.op_by_name[name].access(t)
        sends = one
        for depth in sorted({loops[n][0] for n in child_inst if n not in parent_inst}):
            stage = [n for n in child_inst if loops[n][0] == depth and n not in parent_inst]
            starts = set()
            for svals in itertools.product(*(range(loops[n][3].factor) for n in stage)):
                moved = defaultdict(int)
                for n, v in zip(stage, svals, strict=True):
                    _, p, i, lp = loops[n]
                    moved[lp.dim] += v * self.stride[(p, i)]
                starts.add(tuple(sum(c * moved[d] for d, c in axis.terms)
                                 for axis in access.axes))
            sends *= len(starts)
        fills = _product(loops, child_inst) * one
        reads = _product(loops, parent_inst) * sends
        self.traffic[(self.names[y], t)][FILL] += fills
        self.traffic[(self.names[x], t)][READ] += reads
        self.moves[(name, j, t)][(y, "w")] += fills
        self.moves[(name, j, t)][(x, "r")] += reads
        rec = self.record[(name, j, t)]
        rec["x"] += reads
        rec["y"] += fills

    def _runs(self, chain) -> list[tuple[int, int, int]]:
        """(first path position, last path position, level index) of each run of
        consecutive tiles at one level on a path."""
        runs: list[tuple[int, int, int]] = []
        for k, (_, t) in enumerate(chain):
            lv = self.index[t.level]
            if runs and runs[-1][2] == lv:
                runs[-1] = (runs[-1][0], k, lv)
            else:
                runs.append((k, k, lv))
        return runs

    @staticmethod
    def _holder(chain, first: int) -> tuple[Tile, ...]:
        """The tiles of the lower level's run on the path, innermost first: the buffering
        depth that counts for a link is the innermost one of them that sets one."""
        k = first
        while k + 1 < len(chain) and chain[k + 1][1].level == chain[k][1].level:
            k += 1
        return tuple(t for _, t in reversed(chain[first:k + 1]))

    def skips(self, op: str, tensor: str, level: int) -> bool:
        """Whether the operator's tiles at the level bypass the tensor (never the outermost
        level, nor an intermediate's home)."""
        home = self.home.get(tensor) if hasattr(self, "home") else None
        return level > 0 and level != home and any(
            tensor in t.bypass for _, t in self.paths[op] if self.index[t.level] == level)

    def _share(self) -> None:
        """Children of a Shar, Para or Pipe tile that load an input into the same level with
        exactly the slices (element sets, step by step) an earlier child loaded do not load
        it: the copy is resident. Their loads over the link below that tile are taken back."""
        for path, node in self.tiles.items():
            if node.primitive not in ("Shar", "Para", "Pipe") or len(node.children) < 2:
                continue
            j = self._depth(path)
            earlier = []
            for index, child in enumerate(node.children):
                for o in self._ops_below(child):
                    for (op, jj, t), rec in self.record.items():
                        if op != o or jj != j or t in self.lca:
                            continue
                        mine = (t, rec["level"], rec["slices"])
                        if any(i < index and other == mine for i, other in earlier):
                            self.traffic[(self.names[rec["level"]], t)][FILL] -= rec["y"]
                            self.traffic[(self.names[rec["parent"]], t)][READ] -= rec["x"]
                            self.moves.pop((o, j, t), None)  # nothing moves: resident
                        earlier.append((index, mine))

    def _drop_depths(self, name: str, chain, tensor: str) -> set[int]:
        """Path positions of Seq tiles (two children or more) whose next child, wrapping,
        does not use the tensor; and of tiles that name it `no_reuse` (as -depth - 1)."""
        out = set()
        for k, (_, tile) in enumerate(chain):
            if tensor in tile.no_reuse:
                out.add(-k - 1)
            if tile.primitive != "Seq" or len(tile.children) < 2:
                continue
            if k + 1 < len(chain):
                mine = int(chain[k + 1][0].rsplit(".", 1)[1])
            else:
                mine = next(i for i, c in enumerate(tile.children)
                            if isinstance(c, Op) and c.op == name)
            nxt = tile.children[(mine + 1) % len(tile.children)]
            if not any(tensor in self.w.op_by_name[o].tensors for o in self._ops_below(nxt)):
                out.add(k)
        return out

    @staticmethod
    def _dropping(loop, j: int, depths: set[int]) -> bool:
        """Advancing this loop drops the tensor from the buffer below path position j: a
        Seq tile between (at or below the loop, at or above j) finishes a step, or the
        loop's own tile says no_reuse."""
        k = loop[0]
        return any(k <= d <= j for d in depths if d >= 0) or (-k - 1) in depths

    def _epoch_loops(self, op, loops, tensor: str) -> set[int]:
        """Loops whose advance starts the tensor afresh (see the module's rules)."""
        marks = {n for n, (_, _, _, lp) in enumerate(loops) if lp.dim not in op.dims}
        if tensor in self.lca:
            carried = self.w.op_by_name[self.w.producer[tensor]].carried
            marks |= {n for n, (k, _, _, lp) in enumerate(loops) if k <= self.lca[tensor]
                      and not (lp.dim == carried and not lp.spatial)}
        return marks

    # ---- carried state: rescaling -----------------------------------------------------

    def _rescaling(self) -> dict[str, dict[str, int]]:
        """Per carried operator, the rescaling operations by function, by enumeration: at
        every value of the loops at or above the common ancestor of it and its consumers
        where a carried loop (temporal, over its carried dim) is past its first step and the
        step covers part of the dim, a subtraction and an exponential per element of the
        state its slice holds, and a multiplication per element of the slice of every
        accumulator over that dim downstream of it and under the same ancestor."""
        w = self.w
        out: dict[str, dict[str, int]] = {}
        for op in w.ops:
            t = op.output.tensor
            if not op.carried or t not in self.lca:
                continue
            depth = self.lca[t]
            loops = [x for x in self.loops(op.name) if x[0] <= depth]
            carried = [n for n, (_, _, _, lp) in enumerate(loops)
                       if lp.dim == op.carried and not lp.spatial and lp.factor > 1]
            if not carried:
                continue
            ancestor = self.paths[op.name][depth][0]
            inside = [a for a in w.rescaled[op.name]
                      if len(self.paths[a]) > depth and self.paths[a][depth][0] == ancestor]
            counts = {"sub": 0, "exp": 0, "mul": 0}
            for values in itertools.product(*(range(lp.factor) for _, _, _, lp in loops)):
                if all(values[n] == 0 for n in carried):
                    continue
                start = sum(values[n] * self.stride[(loops[n][1], loops[n][2])]
                            for n in carried)
                if start >= w.sizes[op.carried]:
                    continue
                keyed = {(p, i): v for (_, p, i, _), v in zip(loops, values, strict=True)}
                state = len(self._keyed_slice(op.name, t, keyed, depth))
                counts["sub"] += state
                counts["exp"] += state
                for a in inside:
                    acc = w.op_by_name[a].output.tensor
                    counts["mul"] += len(self._keyed_slice(a, acc, keyed, depth))
            out[op.name] = counts
        return out

    def _keyed_slice(self, op: str, tensor: str, keyed: dict, depth: int):
        loops = self.loops(op)
        values = {n: keyed.get((p, i), 0) for n, (_, p, i, _) in enumerate(loops)}
        return self._slice(op, tensor, loops, values, depth)

    # ---- footprints ---------------------------------------------------------------------

    def _footprint(self, level: int) -> int:
        return self._fp("root", self.flow.root, level, {})[0]

    def _fp(self, path: str, node, level: int, above: dict) -> tuple[int, dict]:
        """(words, {tensor: words}) resident in one instance of `level` for the subtree at
        the loop values `above` (tile path, loop index) -> value, the largest over the
        subtree's own steps. Seq: the largest child; Shar: every tensor once, at the largest
        of the children's slices of it (the model's rule: the union of the slices would be
        larger where the children's slices of a tensor differ); Para and Pipe: the sum,
        unless each child spreads over instances of the level of its own."""
        if isinstance(node, Op):
            return 0, {}
        mine = self.index[node.level]
        if mine > level:
            return 0, {}
        group = (mine == level and len(node.children) > 1
                 and not any(lp.factor > 1 for lp in node.loops)
                 and all(isinstance(c, Tile) and c.level == node.level for c in node.children))
        if mine == level and not group:
            return self._own(path, node, level, above)
        best: tuple[int, dict] = (0, {})
        for values in itertools.product(*(range(lp.factor) for lp in node.loops)):
            here = {**above, **{(path, i): v for i, v in enumerate(values)}}
            kids = [self._fp(f"{path}.{i}", c, level, here) for i, c in enumerate(node.children)]
            sizes: dict = {}
            if node.primitive == "Seq" or (node.primitive in ("Para", "Pipe")
                                           and self._disjoint(path, node, level)):
                sizes = dict(max(kids, key=lambda k: k[0])[1])
            elif node.primitive == "Shar":  # a shared tensor once, at its largest slice
                for _, k in kids:
                    for t, n in k.items():
                        sizes[t] = max(sizes.get(t, 0), n)
            else:  # each child on its own resources
                for _, k in kids:
                    for t, n in k.items():
                        sizes[t] = sizes.get(t, 0) + n
            for t, depth in self.lca.items():
                if self.home[t] == level and self._depth(path) == depth and \
                        self.paths[self.w.producer[t]][depth][0] == path:
                    sizes[t] = sizes.get(t, 0) + len(self._tensor_set(t, here, depth)) * \
                        self.buffers((), t, level) * self.width[t]
            words = sum(sizes.values())
            if words > best[0]:
                best = (words, sizes)
        return best

    def _depth(self, path: str) -> int:
        return path.count(".")

    def _disjoint(self, path: str, node: Tile, level: int) -> bool:
        depth = self._depth(path)
        return all(any(lp.spatial and lp.factor > 1 and k > depth
                       and self.index[self.paths[o][k][1].level] < level
                       for k, _, _, lp in self.loops(o))
                   for o in self._ops_below(node))

    def _tensor_set(self, t: str, values: dict, depth: int):
        """The intermediate's elements its producer and consumers touch in one step of
        their common ancestor (the loops at or above it at `values`)."""
        w = self.w
        found: frozenset = frozenset()
        for o in (w.producer[t], *w.consumers[t]):
            loops = self.loops(o)
            keyed = {n: values.get((p, i), 0) for n, (_, p, i, _) in enumerate(loops)}
            found |= self._slice(o, t, loops, keyed, depth)
        return found

    def _own(self, path: str, node: Tile, level: int, above: dict) -> tuple[int, dict]:
        """A tile at the level holds, for one step of the loops above it, every tensor its
        operators touch under its loops (intermediates counted at their common ancestor's
        step instead, or above their home level not at all)."""
        depth = self._depth(path)
        sets: dict = {}
        copies: dict = {}
        for o in self._ops_below(node):
            loops = self.loops(o)
            keyed = {n: above.get((p, i), 0) for n, (_, p, i, _) in enumerate(loops)}
            for t in self.w.op_by_name[o].tensors:
                if self.skips(o, t, level):
                    continue
                if t in self.home:
                    home = self.home[t]
                    if home > level or (home == level and self.lca[t] < depth):
                        continue
                sets[t] = sets.get(t, frozenset()) | self._slice(o, t, loops, keyed, depth - 1)
                copies[t] = max(copies.get(t, 1), self.buffers((node,), t, level))
        sizes = {t: len(s) * copies[t] * self.width[t] for t, s in sets.items()}
        return sum(sizes.values()), sizes

    def buffers(self, tiles: tuple[Tile, ...], tensor: str, level: int) -> int:
        """How many copies of the tensor's slice a buffer of the level holds: the depth the
        first of `tiles` that sets one gives it (in footprints, the tile holding the data),
        else the level's, else 2 under double buffering, else 1."""
        depth = next((dict(t.buffering)[tensor] for t in tiles if tensor in dict(t.buffering)),
                     None)
        if depth is None:
            depth = self.depths.get(self.names[level])
        if depth is None:
            depth = 2 if self.double_buffer else 1
        return depth

