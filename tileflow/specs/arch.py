"""Accelerators: a linear memory hierarchy (outermost first) feeding matrix and vector units."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from tileflow import shipped as resources
from tileflow.errors import InputError
from tileflow.specs import keys
from tileflow.specs.arch_components import (
    choice,
    technology,
    unit_component,
    with_component,
)
from tileflow.specs.components import ARITHMETIC
from tileflow.specs.hashing import spec_hash, spec_state
from tileflow.specs.yamlfile import MIN_POSITIVE, Field, given, load_mapping, shown


@dataclass(frozen=True)
class Level:
    """One storage level. Bandwidths are per instance, in words per cycle."""

    name: str
    capacity_words: float  # math.inf for unbounded (DRAM)
    fanout: int  # instances per instance of the parent level
    instances: int  # total instances on the chip
    read_words_per_cycle: float
    write_words_per_cycle: float
    read_energy_pj: float  # per word
    write_energy_pj: float
    update_energy_pj: float
    step_overhead_cycles: float = 0.0  # per step that reads from this level (request setup)
    latency_cycles: float = 0.0  # before the first word of a run of transfers arrives
    area_mm2: float | None = None  # per instance, from the component model (technology_nm)
    component: str = ""  # what the component model took it for, e.g. "SRAM 64 KB, ..."
    mesh: tuple[int, ...] = ()  # the instances under one parent instance as x by y
    buffering: int | None = None  # default depth of every tensor held here (BUFFERINGS)
    first_touch_fills: bool = False  # outputs are filled here on their first touch too
    first_touch_reads_parent: bool = True  # those fills are read from the level above
    ports: str = "separate"  # PORTS: a read port and a write port, or one port for both
    writeback_on_read_port: bool = True  # a write-back to the level above reads this level
    deltas: str = "exact"  # DELTAS: how an input's fills between steps are counted
    block_words: int | None = None  # energy in whole accesses of this many words per instance
    leakage_pj_per_cycle: float = 0.0  # static energy of one instance in use per cycle

    def port(self, kind: str) -> str:
        """The port a 'read' or 'write' transfer takes: its own, or the one shared port."""
        return "shared" if self.ports == "shared" else kind


@dataclass(frozen=True)
class ComputeUnit:
    """A matrix array or vector unit fed from `level` (per instance of that level)."""

    __hash__ = spec_hash
    __getstate__ = spec_state

    kind: str  # "matrix" or "vector"
    level: str
    parallelism: int  # MACs (matrix) or lanes (vector) per instance of `level`
    energy_pj_per_op: float
    cycles_per_op: Mapping[str, float] = field(default_factory=dict)  # by function; "default"
    rows: int = 1  # array shape (a vector unit is lanes x 1)
    cols: int = 1
    lane_area_mm2: float | None = None  # per MAC or lane, from the component model
    component: str = ""
    leakage_pj_per_cycle: float = 0.0  # static energy of one MAC or lane in use per cycle

    def cycles(self, function: str) -> float:
        return self.cycles_per_op.get(function, self.cycles_per_op.get("default", 1.0))


@dataclass(frozen=True)
class Architecture:
    name: str
    levels: tuple[Level, ...]
    matrix: ComputeUnit
    vector: ComputeUnit
    clock_ghz: float
    word_bytes: int
    vector_on_matrix: bool = False
    description: str = ""
    technology_nm: float | None = None
    overlap: str = "fill-drain"  # OVERLAPS: how a tile's loads, compute and stores overlap

    __hash__ = spec_hash
    __getstate__ = spec_state

    @cached_property
    def level_index(self) -> dict[str, int]:
        return {lv.name: i for i, lv in enumerate(self.levels)}

    def level(self, name: str) -> Level:
        return self.levels[self.level_index[name]]

    def unit(self, kind: str) -> ComputeUnit:
        if kind == "vector" and not self.vector_on_matrix:
            return self.vector
        return self.matrix

    def fanout_between(self, outer: str, inner: str) -> int:
        """Instances of `inner` per instance of `outer` (product of the fan-outs in between)."""
        i, j = self.level_index[outer], self.level_index[inner]
        return math.prod(lv.fanout for lv in self.levels[i + 1 : j + 1])

    @property
    def total_macs_per_cycle(self) -> int:
        return self.level(self.matrix.level).instances * self.matrix.parallelism


def sram_energy_pj(capacity_bytes: float) -> float:
    """Assumed SRAM energy per 16-bit access: log-log through 1 pJ @ 0.5 KB, 6 pJ @ 100 KB,
    100 pJ @ 2 MB; larger memories are built from 2 MB banks and cost the same per access."""
    points = [(512.0, 1.0), (100 * 1024.0, 6.0), (2 * 1024 * 1024.0, 100.0)]
    if capacity_bytes <= points[0][0]:
        return points[0][1]
    for (c0, e0), (c1, e1) in zip(points, points[1:], strict=False):
        if capacity_bytes <= c1:
            t = math.log(capacity_bytes / c0) / math.log(c1 / c0)
            return math.exp(math.log(e0) + t * math.log(e1 / e0))
    return points[-1][1]


# the published tools' convention, ours (default), and steps in lock step (step_pipeline)
OVERLAPS = ("perfect", "fill-drain", "lockstep")
BUFFERINGS = (1, 2)  # buffering depths: single, double
PORTS = ("separate", "shared")  # a level's read and write ports: two, or one for both
DELTAS = ("exact", "timeloop")  # an input's fills: every element held is kept, or
# Timeloop's rule (a slice that changes its step is refilled whole; docs/interop.md)

DRAM_ENERGY_PJ_PER_16BIT = 200.0
MAX_FANOUT = 2**20  # instances of a level per parent instance; rows, columns, lanes
MAX_INSTANCES = 2**32  # instances of a level on the whole chip
MAX_CYCLES_PER_OP = 1e6


def parse_arch(data: Field) -> Architecture:
    keys.ACCELERATOR.check(data)
    clock_ghz = data.number("clock_ghz", 1.0, maximum=1e4)
    word_bits = data.integer("word_bits", 16, maximum=1024)
    if word_bits % 8:
        raise data.error(f"'word_bits' must be a multiple of 8, got {word_bits}", "word_bits")
    word_bytes = word_bits // 8
    tech = technology(data)
    precision = choice(data, "precision", ARITHMETIC, None)
    if precision and tech is None:
        raise data.error("'precision' needs 'technology_nm' beside it", "precision")
    levels: list[Level] = []
    for i, item in enumerate(data.child("levels").elements()):
        level = _level(item, i == 0, levels[-1].instances if levels else 1,
                       clock_ghz, word_bytes)
        levels.append(with_component(level, item, i == 0, word_bits, tech))
    if not levels:
        raise data.error("an accelerator needs at least one storage level", "levels")
    names = [lv.name for lv in levels]
    if len(set(names)) != len(names):
        raise data.error("level names must be unique", "levels")
    compute = data.child("compute")
    keys.COMPUTE.check(compute)
    matrix = unit_component(_unit(compute.child("matrix"), "matrix", levels),
                            compute.child("matrix"), tech, precision)
    vector = matrix
    if compute.has("vector"):
        vector = unit_component(_unit(compute.child("vector"), "vector", levels),
                                compute.child("vector"), tech, precision)
    vector_on_matrix = data.boolean("vector_on_matrix", not compute.has("vector"))
    return Architecture(data.string("name", "accelerator"), tuple(levels), matrix, vector,
                        clock_ghz, word_bytes, vector_on_matrix, data.string("description", ""),
                        tech, choice(data, "overlap", OVERLAPS, "fill-drain"))


def _level(f: Field, outermost: bool, parent_instances: int, clock_ghz: float,
           word_bytes: int) -> Level:
    keys.LEVEL.check(f)
    name = f.string("name")
    if f.has("capacity_bytes") and f.has("capacity_words"):
        raise f.error("give either 'capacity_bytes' or 'capacity_words', not both")
    if f.get("capacity_bytes") is None and f.get("capacity_words") is None:
        if not outermost:
            raise f.error(f"level '{name}' needs 'capacity_bytes' (only the outermost level "
                          "may be unbounded)")
        capacity_words = math.inf
    elif f.has("capacity_words"):
        capacity_words = f.number("capacity_words")
    else:
        capacity_words = f.number("capacity_bytes") / word_bytes
    fanout = f.integer("fanout", 1, maximum=MAX_FANOUT)
    if outermost and fanout != 1:  # one instance: a larger fan-out would be ignored
        raise f.error(f"the outermost level '{name}' has one instance: its 'fanout' must be "
                      f"1 (or left out), got {fanout}", "fanout")
    if parent_instances * fanout > MAX_INSTANCES:
        raise f.error(f"level '{name}' would have {parent_instances * fanout:,} instances; "
                      f"at most {MAX_INSTANCES:,} are supported", "fanout")
    bytes_per_cycle = clock_ghz  # 1 GB/s = 1/clock_ghz bytes per cycle
    rates = []
    for kind in ("read", "write"):
        gbps, wpc = f"{kind}_bandwidth_gbps", f"{kind}_words_per_cycle"
        if f.has(wpc):
            rates.append(f.number(wpc))
        elif f.has(gbps):
            rates.append(f.number(gbps) / bytes_per_cycle / word_bytes)
            if rates[-1] < MIN_POSITIVE:
                raise f.error(f"'{gbps}' is below {MIN_POSITIVE:g} words per cycle at "
                              f"{clock_ghz:g} GHz", gbps)
        else:
            raise f.error(f"level '{name}' needs '{gbps}' (or '{wpc}')")
    energy = _energies(f, outermost, capacity_words * word_bytes, word_bytes)
    buffering = f.integer("buffering", 0, minimum=1, maximum=2) if f.has("buffering") else None
    return Level(name, capacity_words, fanout, parent_instances * fanout, rates[0], rates[1],
                 *energy, f.number("step_overhead_cycles", 0.0, positive=False),
                 f.number("latency_cycles", 0.0, positive=False), mesh=_mesh(f, fanout),
                 buffering=buffering,
                 first_touch_fills=f.boolean("first_touch_fills", False),
                 first_touch_reads_parent=f.boolean("first_touch_reads_parent", True),
                 ports=choice(f, "ports", PORTS, "separate"),
                 writeback_on_read_port=f.boolean("writeback_on_read_port", True),
                 deltas=choice(f, "deltas", DELTAS, "exact"),
                 block_words=f.integer("block_words", 0) or None,
                 leakage_pj_per_cycle=f.number("leakage_pj_per_cycle", 0.0, positive=False))


def _mesh(f: Field, fanout: int) -> tuple[int, ...]:
    """`mesh: [x, y]`: how the fan-out is laid out (its spatial loops map onto the axes)."""
    if not f.has("mesh"):
        return ()
    m = f.child("mesh")
    values = m.data
    if not isinstance(values, list) or len(values) != 2 or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
        raise f.error(f"'mesh' must be two positive integers [x, y], got {values!r}", "mesh")
    if values[0] * values[1] != fanout:
        raise f.error(f"'mesh' {values[0]} x {values[1]} must multiply to the fan-out "
                      f"{fanout}", "mesh")
    return (values[0], values[1])


def _energies(f: Field, outermost: bool, capacity_bytes: float,
              word_bytes: int) -> tuple[float, float, float]:
    if not f.has("energy_pj_per_word"):
        scale = word_bytes / 2
        base = DRAM_ENERGY_PJ_PER_16BIT if outermost else sram_energy_pj(capacity_bytes)
        return base * scale, base * scale, base * scale
    e = f.child("energy_pj_per_word")
    if not isinstance(e.data, dict):
        value = f.number("energy_pj_per_word", positive=False)
        return value, value, value
    keys.ENERGY.check(e)
    read, write = e.number("read", positive=False), e.number("write", positive=False)
    return read, write, e.number("update", write, positive=False)


def _unit(f: Field, kind: str, levels: list[Level]) -> ComputeUnit:
    """`parallelism` is per instance of the feeding level: a matrix array fed from a per-PE
    register level (fan-out = rows x cols) has one MAC per register instance."""
    (keys.MATRIX if kind == "matrix" else keys.VECTOR).check(f)
    level = f.string("level")
    by_name = {lv.name: lv for lv in levels}
    if level not in by_name:
        raise f.error(f"unknown level '{level}'; levels are {', '.join(by_name)}", "level")
    if kind == "matrix":
        rows, cols = f.integer("rows", maximum=MAX_FANOUT), f.integer("cols", maximum=MAX_FANOUT)
        parallelism = rows * cols
        if by_name[level].fanout == parallelism:
            parallelism = 1
    else:
        rows, cols = f.integer("lanes", maximum=MAX_FANOUT), 1
        parallelism = rows
    if not f.has("cycles_per_op"):
        cycles_map = {"default": 1.0}
    elif not isinstance(f.data["cycles_per_op"], dict):
        cycles_map = {"default": f.number("cycles_per_op", maximum=MAX_CYCLES_PER_OP)}
    else:
        c = f.child("cycles_per_op")
        cycles_map = {str(k): c.number(k, maximum=MAX_CYCLES_PER_OP) for k in c.keys()}
    return ComputeUnit(kind, level, parallelism, f.number("energy_pj_per_op", 1.0, False),
                       cycles_map, rows, cols, leakage_pj_per_cycle=f.number(
                           "leakage_pj_per_cycle", 0.0, positive=False))


def load_arch(name_or_path: str) -> Architecture:
    """Load an accelerator by shipped name (edge, cloud, tpu-like, cpu, ...), YAML path, or
    `host`: this machine, its caches read from the OS (cpu.yaml where the OS does not say)."""
    if name_or_path == "host":
        from tileflow.specs.host import host_description

        try:
            return parse_arch(Field(host_description(), "host"))
        except OSError:
            name_or_path = "cpu"
    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") or given(path)):
        found = resources.find("accelerators", name_or_path)
        if found is None:
            names = list(resources.shipped("accelerators"))
            raise InputError(f"unknown accelerator '{shown(name_or_path)}': give a YAML file "
                             f"or one of {', '.join(names)}")
        path = found
    elif not given(path):
        raise InputError(f"no such accelerator file '{shown(name_or_path)}'")
    try:
        return parse_arch(load_mapping(path))
    except InputError as exc:
        raise exc.located(shown(path)) from None
