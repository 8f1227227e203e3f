"""Latency and energy of the enumerating oracle (`reference_sim.Oracle`), from the written
conventions of docs/latency.md, docs/mechanisms.md and docs/energy.md, independent of the
analytic model (nothing of `tileflow.analysis` or `tileflow.cost` is imported).

The oracle executes every operator's loops and records, per link (the boundary below the
last tile of a level on an operator's path) and tensor, the words each port moves: a
fill enters the child level (its write port) after leaving the parent (its read port, once
per parent instance for a multicast); an output leaving a child instance uses the child's
read port once per instance (before the spatial reduction) and the parent's write port
once per reduced element. From those totals this module rebuilds the time, tile by tile:

* a port's busy time: words / (instances in use x words per cycle per instance), summed
  over the operators under the tile (their instances in use: the product of the spatial
  factors above the level); a level's `step_overhead_cycles` adds to its read port once
  per step of a tile that reads from it;
* load (store): the busiest port of the loads (stores) of the links below the tile;
* inner: the children's cycles, summed (`Seq`, `Shar`), the largest (`Para`), or piped
  over the tile's steps (`Pipe`: sum of stages + (n - 1) x the slowest);
* a leaf: max(temporal steps x cycles per operation, operand reads / (instances x read
  bandwidth), result updates / (instances x write bandwidth)) at its innermost level;
* `perfect`: max(load, inner, store); `fill-drain`: that plus (load + inner + store - max)
  / n, n the tile's steps over the whole run, plus the source level's `latency_cycles`;
  `lockstep`: slots 0..n+1, slot s the largest of step s's loads, step s-1's compute
  (inner / n) and step s-2's stores, a tensor's words placed on the first step of each of
  its periods (loads) and after the last (stores), plus `latency_cycles`.

Energy: fills x write + reads x read + updates x update energy per word, per level and
tensor (a tensor's elements in accelerator words: its `precision_bits` over the word), plus
each operator's operations x its unit's energy per operation; at a level with `block_words`,
each action's words rounded up to whole blocks per instance in use; leakage apart, per
component over the run's cycles (docs/energy.md).
"""

from __future__ import annotations

import math
from collections import defaultdict

from reference_sim import FILL, READ, UPDATE, Oracle

from tileflow.specs.arch import Architecture
from tileflow.tree import Op, Tile

OVERLAPS = ("perfect", "fill-drain", "lockstep")


class Timing:
    """Cycles of one dataflow under one overlap convention, from an executed Oracle:
    `cycles`, and per tile path `tiles[path] = (load, inner, store, cycles)`."""

    def __init__(self, oracle: Oracle, arch: Architecture, overlap: str,
                 double_buffer: bool = False):
        assert overlap in OVERLAPS
        self.o, self.arch, self.overlap = oracle, arch, overlap
        self.double_buffer = double_buffer
        self.levels = arch.levels
        self.tiles: dict[str, tuple[float, float, float, float]] = {}
        self.cycles = max(self._tile("root", oracle.flow.root, 1), self._one_port_bound())

    def _one_port_bound(self) -> float:
        """docs/latency.md: a level with one instance has one read and one write port for
        the whole tree (one port under `ports: shared`), so everything the tree moves
        through such a port, over its bandwidth, is a lower bound on the cycles: the links'
        transfers and what each unit reads and updates there (its innermost level, or a
        level above it for a tensor that bypasses)."""
        busy: dict = defaultdict(float)
        ports = [((lv, port), words) for moves in self.o.moves.values()
                 for (lv, port), words in moves.items()]
        for leaf in self.o.leaf.values():
            ports += [((lv, "r"), words) for lv, words in leaf["reads"].items()]
            ports += [((lv, "w"), words) for lv, words in leaf["updates"].items()]
        for (lv, port), words in ports:
            level = self.levels[lv]
            if words and level.instances == 1:
                bw = level.read_words_per_cycle if port == "r" else level.write_words_per_cycle
                busy[(lv, "shared" if level.ports == "shared" else port)] += words / bw
        return max(busy.values(), default=0.0)

    # ---- one tile -----------------------------------------------------------------------

    def _ports(self, path: str) -> dict[tuple[int, str], dict[tuple[str, bool], float]]:
        """(level, port) -> {(tensor, single-buffered): busy cycles} of the links below the
        tile at `path`, and which ports are the loads'."""
        o = self.o
        busy: dict = defaultdict(lambda: defaultdict(float))
        self._loading: set = set()
        for key, moves in o.moves.items():
            tile_path, x, y, child, parent, lower = o.links[key]
            if tile_path != path:
                continue
            t = key[2]
            single = self._depth(lower, t, y) == 1
            for (lv, port), words in moves.items():
                if not words:
                    continue
                level = self.levels[lv]
                bw = level.read_words_per_cycle if port == "r" else level.write_words_per_cycle
                busy[(lv, port)][(t, single)] += words / ((child if lv == y else parent) * bw)
                if (lv == x) == (port == "r"):
                    self._loading.add((lv, port))
        return busy

    def _depth(self, tiles: tuple[Tile, ...], tensor: str, level: int) -> int | None:
        """The buffering depth of the tensor in the buffer a transfer fills or drains: the
        tiles' (of that level on the path, innermost first), else the level's, else 2 under
        double buffering, else unset (None)."""
        depth = next((dict(t.buffering)[tensor] for t in tiles if tensor in dict(t.buffering)),
                     self.levels[level].buffering)
        if depth is None and self.double_buffer:
            depth = 2
        return depth

    def _tile(self, path: str, node: Tile, above: int) -> float:
        """The tile's cycles over the whole run; `above`: steps of the tiles above it."""
        steps = above
        for lp in node.loops:
            if not lp.spatial:
                steps *= lp.factor
        x = self.o.index[node.level]
        kids = [self._leaf(c.op) if isinstance(c, Op) else self._tile(f"{path}.{i}", c, steps)
                for i, c in enumerate(node.children)]
        inner = _combine(node.primitive, kids, steps)
        busy = self._ports(path)
        loads = {k: v for k, v in busy.items() if k in self._loading}
        stores = {k: v for k, v in busy.items() if k not in loads}
        reads_here = (x, "r") in loads
        level = self.levels[x]
        def busiest(table: dict, only_single: bool) -> float:
            return max((sum(c for (_, single), c in v.items()
                            if single or not only_single) + self._overhead(k) * steps
                        for k, v in table.items()
                        if any(single or not only_single for _, single in v)),
                       default=0.0)

        # the loads and the stores alone: the busiest port over the run (every convention)
        load, store = busiest(loads, False), busiest(stores, False)
        if self.overlap == "lockstep":
            cycles = self._lockstep(node, loads, stores, inner, above, x)
        else:
            serial = inner + busiest(loads, True) + busiest(stores, True)
            top = max(load, serial, store)
            cycles = top
            if self.overlap == "fill-drain":
                cycles += (load + inner + store - top) / steps
                if reads_here:
                    cycles += level.latency_cycles
        self.tiles[path] = (load, inner, store, cycles)
        return cycles

    def _overhead(self, port: tuple[int, str]) -> float:
        """A read port's request overhead per step (a tile's loads read from its level,
        its stores from the level below)."""
        return self.levels[port[0]].step_overhead_cycles if port[1] == "r" else 0.0

    def _leaf(self, op: str) -> float:
        o = self.o
        leaf = o.leaf[op]
        operator = o.w.op_by_name[op]
        unit = self.arch.unit(operator.unit)
        n = leaf["instances"]
        feed = [words / (n[lv] * self.levels[lv].read_words_per_cycle)
                for lv, words in leaf["reads"].items()]
        feed += [words / (n[lv] * self.levels[lv].write_words_per_cycle)
                 for lv, words in leaf["updates"].items()]
        return max([leaf["steps"] * unit.cycles(operator.function), *feed])

    # ---- lock step ----------------------------------------------------------------------

    def _lockstep(self, node: Tile, loads: dict, stores: dict, inner: float, above: int,
                  x: int) -> float:
        """Slots over the tile's steps in the run (`above` runs of its own loops), each
        tensor's words on the first step of each of its periods (loads) or the last
        (stores); single-buffered ones join the compute of their step."""
        n = above
        for lp in node.loops:
            if not lp.spatial:
                n *= lp.factor
        # per step and stage: (level, port) -> cycles
        stage = {name: [defaultdict(float) for _ in range(n)]
                 for name in ("load", "store", "load1", "store1")}
        for table, name, first in ((loads, "load", True), (stores, "store", False)):
            for port, by_tensor in table.items():
                for (t, single), cycles in by_tensor.items():
                    p = self._period(node, t)
                    periods = n // p
                    at = stage[name + ("1" if single else "")]
                    for k in range(periods):
                        at[k * p if first else k * p + p - 1][port] += cycles / periods
        # a step overhead is charged on the steps whose port reads (docs/latency.md)
        def busiest(name: str, s: int) -> float:
            return max((v + self._overhead(k) for k, v in stage[name][s].items() if v),
                       default=0.0)

        total = 0.0
        for s in range(n + 2):
            slot = busiest("load", s) if s < n else 0.0
            if 0 <= s - 1 < n:
                c = s - 1
                slot = max(slot, inner / n + busiest("load1", c) + busiest("store1", c))
            if 0 <= s - 2 < n:
                slot = max(slot, busiest("store", s - 2))
            total += slot
        if (x, "r") in loads:
            total += self.levels[x].latency_cycles
        return total

    def _period(self, node: Tile, tensor: str) -> int:
        """The product of the tile's innermost temporal loops (factor above 1) that do not
        index the tensor, up to the first that does; 1 under `no_reuse`."""
        if tensor in node.no_reuse:
            return 1
        dims = set()
        for op in self.o.w.ops:
            if tensor in op.tensors:
                for axis in op.access(tensor).axes:
                    dims |= {d for d, _ in axis.terms}
        period = 1
        for lp in reversed(node.loops):
            if lp.spatial or lp.factor == 1:
                continue
            if lp.dim in dims:
                break
            period *= lp.factor
        return period


def _combine(primitive: str, kids: list[float], steps: int) -> float:
    if primitive == "Para":
        return max(kids, default=0.0)
    if primitive == "Pipe":
        stages = [k / steps for k in kids]
        return sum(stages) + (steps - 1) * max(stages, default=0.0)
    return sum(kids)


def energy(oracle: Oracle, arch: Architecture) -> tuple[float, dict, float]:
    """(total pJ, {level: {tensor: pJ}}, compute pJ) from the oracle's counts; at a level
    with `block_words`, each action's words are charged per instance in use in whole blocks
    (docs/energy.md, whole accesses). Leakage is apart (`leakage`)."""
    by_level: dict = defaultdict(dict)
    for (name, t), counts in oracle.traffic.items():
        index = oracle.index[name]
        lv = arch.levels[index]
        words = [c * oracle.width[t] for c in counts]
        if lv.block_words:
            used = instances_in_use(oracle, arch, index, reached_only=True)
            words = [_whole_blocks(x, used, lv.block_words) for x in words]
        by_level[name][t] = (words[FILL] * lv.write_energy_pj + words[READ] * lv.read_energy_pj
                             + words[UPDATE] * lv.update_energy_pj)
    compute = sum(n * arch.unit(oracle.w.op_by_name[op].unit).energy_pj_per_op
                  for op, n in oracle.ops.items())
    total = sum(v for d in by_level.values() for v in d.values()) + compute
    return total, dict(by_level), compute


def _whole_blocks(words: float, instances: int, block: int) -> float:
    """`words` spread evenly over `instances`, each one's share rounded up to whole blocks
    (a share within 1e-9 of a block boundary counts as on it: sums of float counts)."""
    if words <= 0:
        return 0.0
    per_instance = words / instances / block
    return float(instances * block * math.ceil(per_instance - 1e-9))


def spread_over(oracle: Oracle, op: str, index: int) -> int:
    """Instances of level `index` that `op` spreads over: the product of the spatial factors
    of the tiles on its path above that level."""
    n = 1
    for _, tile in oracle.paths[op]:
        if oracle.index[tile.level] < index:
            n *= math.prod(lp.factor for lp in tile.loops if lp.spatial)
    return n


def instances_in_use(oracle: Oracle, arch: Architecture, index: int, *, reached_only: bool,
                     ops: list[str] | None = None) -> int:
    """The most instances of level `index` any operator (of `ops`) spreads over, at most the
    level's; `reached_only`: only operators whose innermost tile is at that level or below
    (the instances that hold their data)."""
    names = ops if ops is not None else list(oracle.paths)
    counts = [min(arch.levels[index].instances, spread_over(oracle, op, index))
              for op in names
              if not reached_only or oracle.index[oracle.paths[op][-1][1].level] >= index]
    return max(counts, default=0)


def leakage(oracle: Oracle, arch: Architecture, cycles: float) -> dict[str, float]:
    """Static energy per component over `cycles` (docs/energy.md, leakage): a level's pJ per
    cycle on each instance any operator spreads over, kept data or not; a unit's per MAC or
    lane, on every instance of its level its operators spread over."""
    out: dict[str, float] = {}
    for index, lv in enumerate(arch.levels):
        used = instances_in_use(oracle, arch, index, reached_only=False)
        if lv.leakage_pj_per_cycle and used:
            out[lv.name] = lv.leakage_pj_per_cycle * used * cycles
    by_unit: dict[str, list[str]] = defaultdict(list)
    for op in oracle.paths:
        by_unit[arch.unit(oracle.w.op_by_name[op].unit).kind].append(op)
    for kind, ops in by_unit.items():
        unit = arch.unit(kind)
        used = instances_in_use(oracle, arch, oracle.index[unit.level], reached_only=False,
                                ops=ops)
        if unit.leakage_pj_per_cycle and used:
            out[f"{kind} unit"] = unit.leakage_pj_per_cycle * used * unit.parallelism * cycles
    return out
