"""Energy and area of hardware components from a few published tables: SRAM and register
files by capacity, access width and technology node; DRAM per word by type; multiply-
accumulate and vector lanes by precision. `docs/energy.md` gives every source and assumption.

All energies are in pJ, areas in mm2; the tables are at 45 nm and scale with the node."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

REFERENCE_NM = 45.0
TECHNOLOGY_NM_RANGE = (5.0, 180.0)


class Arithmetic(NamedTuple):
    """One precision at 45 nm: multiply and add energy (pJ) and area (um2)."""

    mult_pj: float
    add_pj: float
    mult_um2: float
    add_um2: float


# Horowitz, "Computing's energy problem", ISSCC 2014 (45 nm): 8b add 0.03 pJ / 36 um2,
# 32b add 0.1 / 137, 8b mult 0.2 / 282, 32b mult 3.1 / 3495, fp16 add 0.4 / 1360,
# fp16 mult 1.1 / 1640, fp32 add 0.9 / 4184, fp32 mult 3.7 / 7700. Integers accumulate in
# 32 bits. int16 and bf16 multipliers are scaled from the table by the square of the
# mantissa (significand) width: int16 = 4 x int8, bf16 = (8/11)^2 x fp16.
ARITHMETIC: dict[str, Arithmetic] = {
    "int8": Arithmetic(0.2, 0.1, 282.0, 137.0),
    "int16": Arithmetic(0.8, 0.1, 1128.0, 137.0),
    "fp16": Arithmetic(1.1, 0.4, 1640.0, 1360.0),
    "bf16": Arithmetic(1.1 * (8 / 11) ** 2, 0.4, 1640.0 * (8 / 11) ** 2, 1360.0),
    "fp32": Arithmetic(3.7, 0.9, 7700.0, 4184.0),
}

# DRAM interface and core energy per bit transferred: HBM2 and GDDR5 from O'Connor et al.,
# "Fine-grained DRAM", MICRO 2017; DDR4 and LPDDR4 representative values (see docs/energy.md).
DRAM_PJ_PER_BIT: dict[str, float] = {"DDR4": 15.0, "LPDDR4": 8.0, "GDDR5": 14.0, "HBM2": 3.9}

# SRAM read energy of a 64-bit access at 45 nm (Horowitz, ISSCC 2014): 8 KB 10 pJ,
# 32 KB 20 pJ, 1 MB 100 pJ. Log-log interpolation between the points; below 8 KB the first
# segment's slope (0.5), above 1 MB a slope of 0.25 (banked arrays: only wires grow).
SRAM_POINTS_64BIT = ((8 * 1024.0, 10.0), (32 * 1024.0, 20.0), (1024 * 1024.0, 100.0))
SLOPE_BELOW, SLOPE_ABOVE = 0.5, 0.25
FIXED_SHARE = 0.25  # share of a 64-bit access's energy that does not scale with its width

# Area per bit at 45 nm: a 6T SRAM cell of 0.346 um2 (Mistry et al., IEDM 2007) at 70 % array
# efficiency; a register-file bit as a flip-flop (about 4.5 um2, NanGate 45 nm DFF_X1) plus
# 50 % for its read multiplexers.
SRAM_UM2_PER_BIT = 0.346 / 0.7
REGFILE_UM2_PER_BIT = 4.5 * 1.5

MEMORY_KINDS = ("sram", "regfile", "dram")


@dataclass(frozen=True)
class MemoryCost:
    """Per-word access energies and the area of one instance of a storage level."""

    read_pj: float
    write_pj: float
    area_mm2: float
    component: str  # a readable description, e.g. "SRAM 64 KB, 64-bit access, 22 nm"


def node_energy_scale(technology_nm: float) -> float:
    """Dynamic energy scales with capacitance, about linearly in the feature size."""
    return technology_nm / REFERENCE_NM


def node_area_scale(technology_nm: float) -> float:
    return (technology_nm / REFERENCE_NM) ** 2


def sram_access_pj(capacity_bytes: float, width_bits: float, technology_nm: float) -> float:
    """Energy of one access of `width_bits` to an SRAM array of `capacity_bytes`."""
    (c0, e0), (c_last, e_last) = SRAM_POINTS_64BIT[0], SRAM_POINTS_64BIT[-1]
    if capacity_bytes <= c0:
        e64 = e0 * (capacity_bytes / c0) ** SLOPE_BELOW
    elif capacity_bytes >= c_last:
        e64 = e_last * (capacity_bytes / c_last) ** SLOPE_ABOVE
    else:
        for (ca, ea), (cb, eb) in zip(SRAM_POINTS_64BIT, SRAM_POINTS_64BIT[1:], strict=False):
            if capacity_bytes <= cb:
                t = math.log(capacity_bytes / ca) / math.log(cb / ca)
                e64 = math.exp(math.log(ea) + t * math.log(eb / ea))
                break
    width_scale = FIXED_SHARE + (1 - FIXED_SHARE) * width_bits / 64
    return e64 * width_scale * node_energy_scale(technology_nm)


def memory_cost(kind: str, capacity_bytes: float, word_bits: int, technology_nm: float,
                width_bits: int | None = None, dram_type: str | None = None) -> MemoryCost:
    """Per-word energies and per-instance area of a storage level. An access of
    `width_bits` (default: one word) delivers width_bits / word_bits words."""
    width = width_bits or word_bits
    if kind == "dram":
        per_word = DRAM_PJ_PER_BIT[dram_type or "DDR4"] * word_bits
        return MemoryCost(per_word, per_word, 0.0, f"{dram_type or 'DDR4'} DRAM")
    access = sram_access_pj(capacity_bytes, width, technology_nm)
    per_word = access * word_bits / width
    um2_per_bit = SRAM_UM2_PER_BIT if kind == "sram" else REGFILE_UM2_PER_BIT
    area = capacity_bytes * 8 * um2_per_bit * node_area_scale(technology_nm) / 1e6
    label = "SRAM" if kind == "sram" else "register file"
    return MemoryCost(per_word, per_word, area,
                      f"{label} {_bytes(capacity_bytes)}, {width}-bit access, "
                      f"{technology_nm:g} nm")


def lane_cost(precision: str, technology_nm: float) -> tuple[float, float]:
    """(energy pJ, area mm2) of one multiply-accumulate (a MAC, or a vector lane's fused
    multiply-add) at the given precision and node."""
    a = ARITHMETIC[precision]
    energy = (a.mult_pj + a.add_pj) * node_energy_scale(technology_nm)
    area = (a.mult_um2 + a.add_um2) * node_area_scale(technology_nm) / 1e6
    return energy, area


def _bytes(n: float) -> str:
    for unit, scale in (("MB", 1024.0 ** 2), ("KB", 1024.0)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"
