"""Energy and area per hardware component: every storage level and compute unit of the
accelerator, so that the energies add up to the evaluation's total."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from tileflow.specs.arch import Architecture


class ComponentCost(NamedTuple):
    """One component: all instances of a storage level, or all lanes of a compute unit.
    `area_mm2` is None when the accelerator names no technology node."""

    component: str
    level: str
    kind: str  # "memory", "matrix" or "vector"
    instances: int
    energy_pj: float
    area_mm2: float | None
    model: str  # what the component model took it for ("" when numbers were given)

    def to_dict(self) -> dict:
        return self._asdict()


def component_costs(arch: Architecture, energy_by_level_pj: Mapping[str, Mapping[str, float]],
                    compute_pj_by_unit: Mapping[str, float],
                    leakage_pj: Mapping[str, float] | None = None) -> tuple[ComponentCost, ...]:
    """Storage levels outermost first, then the matrix unit and the vector unit (when it is
    a unit of its own); energies from the evaluation (leakage included, by component name),
    areas from the component model."""
    leakage_pj = leakage_pj or {}
    rows = []
    for lv in arch.levels:
        area = None if lv.area_mm2 is None else lv.area_mm2 * lv.instances
        rows.append(ComponentCost(lv.name, lv.name, "memory", lv.instances,
                                  sum(energy_by_level_pj.get(lv.name, {}).values())
                                  + leakage_pj.get(lv.name, 0.0), area,
                                  lv.component))
    units = [arch.matrix] + ([] if arch.vector_on_matrix else [arch.vector])
    for unit in units:
        lanes = arch.level(unit.level).instances * unit.parallelism
        area = None if unit.lane_area_mm2 is None else unit.lane_area_mm2 * lanes
        name = f"{unit.kind} unit"
        rows.append(ComponentCost(name, unit.level, unit.kind, lanes,
                                  compute_pj_by_unit.get(unit.kind, 0.0)
                                  + leakage_pj.get(name, 0.0), area, unit.component))
    return tuple(rows)


def components_table(rows: tuple[ComponentCost, ...]) -> str:
    """A readable table: component, instances, energy (uJ), area (mm2), what it was taken for."""
    lines = [f"  {'component':<14} {'instances':>9} {'energy uJ':>11} {'area mm2':>10}  model"]
    for c in rows:
        area = "-" if c.area_mm2 is None else f"{c.area_mm2:.4f}"
        lines.append(f"  {c.component:<14} {c.instances:>9,} {c.energy_pj / 1e6:>11.4f} "
                     f"{area:>10}  {c.model or 'numbers given in the file'}")
    total_area = [c.area_mm2 for c in rows if c.area_mm2 is not None]
    lines.append(f"  {'total':<14} {'':>9} {sum(c.energy_pj for c in rows) / 1e6:>11.4f} "
                 f"{(f'{sum(total_area):.4f}' if total_area else '-'):>10}")
    return "\n".join(lines)


class ChipArea(NamedTuple):
    """The accelerator's area from the component model: on-chip storage levels (all
    instances) and compute lanes. `total_mm2` adds what has an area (None when nothing has:
    the file names no `technology_nm`); `missing` names the components without one (a
    compute unit without `precision`, a level whose numbers were all given)."""

    total_mm2: float | None
    by_component_mm2: dict[str, float]
    missing: tuple[str, ...]


def chip_area(arch: Architecture) -> ChipArea:
    """The on-chip area of `arch` (DRAM is off chip and left out), as `component_costs`
    counts it per component."""
    areas: dict[str, float] = {}
    missing: list[str] = []
    for lv in arch.levels[1:]:
        if lv.area_mm2 is None:
            missing.append(lv.name)
        else:
            areas[lv.name] = lv.area_mm2 * lv.instances
    for unit in [arch.matrix] + ([] if arch.vector_on_matrix else [arch.vector]):
        name = f"{unit.kind} unit"
        if unit.lane_area_mm2 is None:
            missing.append(name)
        else:
            areas[name] = unit.lane_area_mm2 * arch.level(unit.level).instances * unit.parallelism
    return ChipArea(sum(areas.values()) if areas else None, areas, tuple(missing))
