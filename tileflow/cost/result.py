"""What `evaluate(workload, arch, dataflow)` returns: the `Result` with its per-level,
per-tensor movement and per-tile latency, what bounds the cycles (`Bound`, made a
`Bottleneck` record), and the overlap convention in force."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from tileflow.analysis.records import Bottleneck, Violation
from tileflow.analysis.resources import Footprint
from tileflow.cost.components import ComponentCost
from tileflow.provenance import MODEL_VERSION
from tileflow.specs.arch import OVERLAPS, Architecture
from tileflow.tree import Tile, label


@dataclass(frozen=True)
class Movement:
    """Words moved at one level for one tensor: filled from above, read out, updated from below."""

    fill: float = 0.0
    read: float = 0.0
    update: float = 0.0

    @property
    def writes(self) -> float:
        return self.fill + self.update


@dataclass(frozen=True)
class NodeLatency:
    """Cycles of one tile: the time its loads, its children and its stores would take alone;
    the tile takes the largest (overlapped, double-buffered) plus what its first load and
    last store add (`fill_drain_cycles`, with a level's first-word latency); the children's
    time includes the transfers of single-buffered tensors (`serial_cycles`), which do not
    overlap them."""

    path: str
    label: str
    depth: int
    load_cycles: float
    inner_cycles: float
    store_cycles: float
    fill_drain_cycles: float = 0.0  # the first load and last store, not hidden by overlap
    shared_port_cycles: float = 0.0  # root only: children at once share a one-instance port
    serial_cycles: float = 0.0  # single-buffered tensors' transfers, in series with children

    @property
    def cycles(self) -> float:
        return max(self.load_cycles, self.inner_cycles + self.serial_cycles,
                   self.store_cycles) + self.fill_drain_cycles + self.shared_port_cycles


@dataclass(frozen=True)
class Result:
    """Everything the model says about one dataflow. Cycles are the primary unit."""

    dataflow: str
    valid: bool
    violations: tuple[Violation, ...]
    cycles: float
    clock_ghz: float
    energy_pj: float
    macs: int
    vector_ops: int
    ops: Mapping[str, int]
    traffic: Mapping[str, Mapping[str, Movement]]  # level -> tensor -> movement
    footprints: tuple[Footprint, ...]
    energy_by_level_pj: Mapping[str, Mapping[str, float]]
    compute_energy_pj: float
    bottleneck: Bottleneck
    utilization: float  # MACs / (cycles x matrix units on the chip)
    levels: tuple[str, ...] = field(default=())
    latency_breakdown: tuple[NodeLatency, ...] = field(default=())
    components: tuple[ComponentCost, ...] = field(default=())  # energy and area per component
    leakage_pj: Mapping[str, float] = field(default_factory=dict)  # by component, in energy_pj

    @property
    def latency_ms(self) -> float:
        return self.cycles / (self.clock_ghz * 1e6)

    def level_reads(self, level: str) -> float:
        return sum(m.read for m in self.traffic.get(level, {}).values())

    def level_writes(self, level: str) -> float:
        return sum(m.writes for m in self.traffic.get(level, {}).values())

    @property
    def dram_words(self) -> float:
        """Words crossing the outermost level's port: its reads plus its writes."""
        outer = self.levels[0]
        return self.level_reads(outer) + self.level_writes(outer)

    def peak_footprint(self, level: str) -> float:
        return next((f.words for f in self.footprints if f.level == level), 0.0)

    def to_dict(self) -> dict:
        return {
            "dataflow": self.dataflow,
            "valid": self.valid,
            "violations": [v.to_dict() for v in self.violations],
            "cycles": self.cycles,
            "latency_ms": self.latency_ms,
            "energy_pj": self.energy_pj,
            "macs": self.macs,
            "vector_ops": self.vector_ops,
            "ops": dict(self.ops),
            "utilization": self.utilization,
            "bottleneck": self.bottleneck.to_dict(),
            "dram_words": self.dram_words,
            "levels": {
                lv: {
                    "reads": self.level_reads(lv),
                    "writes": self.level_writes(lv),
                    "fills": sum(m.fill for m in self.traffic.get(lv, {}).values()),
                    "updates": sum(m.update for m in self.traffic.get(lv, {}).values()),
                    "per_tensor": {
                        t: {"reads": m.read, "writes": m.writes, "fills": m.fill,
                            "updates": m.update}
                        for t, m in self.traffic.get(lv, {}).items()
                    },
                    "energy_pj": sum(self.energy_by_level_pj.get(lv, {}).values())
                    + self.leakage_pj.get(lv, 0.0),
                    "leakage_pj": self.leakage_pj.get(lv, 0.0),
                }
                for lv in self.levels
            },
            "footprint_words": {f.level: f.words for f in self.footprints},
            "capacity_words": {f.level: f.capacity_words for f in self.footprints},
            "compute_energy_pj": self.compute_energy_pj,
            "leakage_pj": sum(self.leakage_pj.values()),
            "components": [c.to_dict() for c in self.components],
            "model_version": MODEL_VERSION,
        }

    def latency_frame(self):
        """Per-tile latency (loads, children, stores, fill and drain) as a pandas DataFrame:
        the root's `cycles` is the result's; a Seq or Shar tile's `inner_cycles` is the sum
        of its child tiles' `cycles`."""
        import pandas as pd

        return pd.DataFrame([
            {"path": n.path, "tile": n.label, "depth": n.depth, "load_cycles": n.load_cycles,
             "inner_cycles": n.inner_cycles, "store_cycles": n.store_cycles,
             "fill_drain_cycles": n.fill_drain_cycles,
             "shared_port_cycles": n.shared_port_cycles, "cycles": n.cycles}
            for n in self.latency_breakdown])

    def frame(self):
        """Per-level, per-tensor breakdown as a pandas DataFrame."""
        import pandas as pd

        rows = [
            {"level": lv, "tensor": t, "fill": m.fill, "read": m.read, "update": m.update,
             "energy_pj": self.energy_by_level_pj[lv][t]}
            for lv in self.levels for t, m in self.traffic.get(lv, {}).items()
        ]
        return pd.DataFrame(rows, columns=["level", "tensor", "fill", "read", "update",
                                           "energy_pj"])


class Bound(NamedTuple):
    """What bounds a tile's (or a leaf's) cycles, made a `Bottleneck` record once, at the
    end (`bottleneck_record`)."""

    kind: str  # 'compute', 'read', 'write'; the whole tree: 'tree-read', 'tree-write', ...
    level: int | None  # the level index whose port it is
    unit: str | None  # the compute unit's kind
    node: str  # the path of the tile or leaf
    where: Tile | str  # the tile, or the leaf's operator
    note: str = ""  # what the message adds (transfers in series, a bypass)


def overlap_convention(arch: Architecture, overlap: str | None = None,
                fill_drain: bool | None = None) -> str:
    """The overlap convention in force: an explicit `overlap`, else `fill_drain` (True:
    'fill-drain', False: 'perfect'), else the accelerator's."""
    if overlap is not None:
        if overlap not in OVERLAPS:
            raise ValueError(f"overlap must be one of {', '.join(OVERLAPS)}, not {overlap!r}")
        return overlap
    if fill_drain is not None:
        return "fill-drain" if fill_drain else "perfect"
    return arch.overlap


def bottleneck_record(arch: Architecture, kind: str, level: int | None, unit: str | None,
                node: str, where: Tile | str, note: str = "") -> Bottleneck:
    """`note`: what the message adds (transfers in series, a bypass). `kind` 'tree-read',
    'tree-write' or 'tree-shared': a one-instance level's port bound by all that the whole
    tree moves through it (the record's kind: 'read' for a shared port)."""
    if kind == "compute":
        return Bottleneck(kind, None, unit, node, f"{unit} unit ('{where}'){note}")
    name = arch.levels[level].name
    if kind.startswith("tree-"):
        port = kind.removeprefix("tree-")
        words = {"read": "reads", "write": "writes"}.get(port, "reads and writes")
        return Bottleneck("write" if port == "write" else "read", name, None, node,
                          f"{name} {'shared read/write' if port == 'shared' else port} port "
                          f"({words} of the whole tree through it){note}")
    if isinstance(where, str):  # a leaf's operands or results at its innermost level
        what = "feeding" if kind == "read" else "from"
        return Bottleneck(kind, name, None, node,
                          f"{name} {kind} bandwidth {what} '{where}'{note}")
    side = "loads" if kind == "read" else "stores"
    return Bottleneck(kind, name, None, node,
                      f"{name} {kind} bandwidth ({side} of {label(node, where)}){note}")
