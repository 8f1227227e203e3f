"""Accelerator keys that name components instead of per-word numbers: `technology_nm` and
`precision` at the top, `memory`, `dram_type` and `access_width_bits` on a level,
`precision` on a compute unit. Explicit `energy_pj_per_word` / `energy_pj_per_op` win."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Any, TypeVar

from tileflow.specs.components import (
    ARITHMETIC,
    DRAM_PJ_PER_BIT,
    MEMORY_KINDS,
    TECHNOLOGY_NM_RANGE,
    lane_cost,
    memory_cost,
)
from tileflow.specs.yamlfile import Field

COMPONENT_LEVEL_KEYS = ("memory", "dram_type", "access_width_bits")
REGFILE_MAX_BYTES = 1024  # a level this small defaults to a register file

T = TypeVar("T")


def technology(f: Field) -> float | None:
    """The technology node in nm, validated against the range the tables scale to."""
    if not f.has("technology_nm"):
        return None
    value = f.number("technology_nm")
    low, high = TECHNOLOGY_NM_RANGE
    if not low <= value <= high:
        raise f.error(f"'technology_nm' must be between {low:g} and {high:g}, got {value:g}",
                      "technology_nm")
    return value


def choice(f: Field, key: str, options: Collection[str], default: str | None) -> str | None:
    if not f.has(key):
        return default
    value = f.get(key)
    if not isinstance(value, str) or value not in options:
        raise f.error(f"'{key}' must be one of {', '.join(options)}, got {value!r}", key)
    return value


def with_component(level: T, f: Field, outermost: bool, word_bits: int,
                   tech: float | None) -> T:
    """The level with energies (unless given explicitly) and area from the component model."""
    capacity_bytes = level.capacity_words * word_bits / 8
    default_kind = "dram" if outermost else (
        "regfile" if capacity_bytes <= REGFILE_MAX_BYTES else "sram")
    kind = choice(f, "memory", MEMORY_KINDS, default_kind)
    dram_type = choice(f, "dram_type", DRAM_PJ_PER_BIT, None)
    if dram_type and kind != "dram":
        raise f.error(f"'dram_type' is for a DRAM level; this level is '{kind}'", "dram_type")
    if kind == "dram" and not outermost:
        raise f.error("only the outermost level may be DRAM", "memory")
    width = None
    if f.has("access_width_bits"):
        width = f.integer("access_width_bits", minimum=word_bits)
        if width % word_bits:
            raise f.error(f"'access_width_bits' must be a multiple of the word ({word_bits} "
                          f"bits), got {width}", "access_width_bits")
    if kind == "dram" and dram_type is None:
        if f.has("memory") or tech is not None:
            explicit = f.has("energy_pj_per_word")
            return level if explicit else replace(level, component="DRAM (default energy)")
        return level
    if kind != "dram" and tech is None:
        for key in ("memory", "access_width_bits"):
            if f.has(key):
                raise f.error(f"'{key}' needs 'technology_nm' at the top of the file "
                              "(the component tables scale with it)", key)
        return level
    cost = memory_cost(kind, capacity_bytes, word_bits, tech or 45.0, width, dram_type)
    changes: dict[str, Any] = {"area_mm2": cost.area_mm2, "component": cost.component}
    if f.has("energy_pj_per_word"):
        changes["component"] += " (energy given)"
    else:
        changes.update(read_energy_pj=cost.read_pj, write_energy_pj=cost.write_pj,
                       update_energy_pj=cost.write_pj)
    return replace(level, **changes)


def unit_component(unit: T, f: Field, tech: float | None, precision: str | None) -> T:
    """The compute unit with energy per operation (unless given) and area per lane."""
    precision = choice(f, "precision", ARITHMETIC, precision)
    if precision is None:
        return unit
    if tech is None:
        raise f.error("'precision' needs 'technology_nm' at the top of the file",
                      "precision" if f.has("precision") else None)
    energy, area = lane_cost(precision, tech)
    changes: dict[str, Any] = {"lane_area_mm2": area,
                               "component": f"{precision} {unit.kind} lanes, {tech:g} nm"}
    if f.has("energy_pj_per_op"):
        changes["component"] += " (energy given)"
    else:
        changes["energy_pj_per_op"] = energy
    return replace(unit, **changes)
