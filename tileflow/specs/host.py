"""The machine TileFlow runs on, as an accelerator: its caches as levels, read from the OS.

Sizes and sharing come from /sys/devices/system/cpu/cpu0/cache (Linux); bandwidths and
energies are nominal per-level figures (the same as accelerators/cpu.yaml) meant to be
calibrated against measured kernels. Elsewhere, accelerators/cpu.yaml stands in."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
# nominal bytes per cycle (read, write) and pJ per 32-bit word, by cache level
NOMINAL = {1: (128, 64, 10.0), 2: (64, 32, 40.0), 3: (32, 32, 100.0)}


def _size_bytes(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def _shared_by(text: str) -> int:
    count = 0
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        count += int(hi or lo) - int(lo) + 1
    return count


def read_caches(root: Path = CACHE_DIR) -> list[dict]:
    """Data and unified caches of cpu0: level, size in bytes, how many CPUs share it."""
    caches = []
    for index in sorted(root.glob("index*")):
        kind = (index / "type").read_text().strip()
        if kind not in ("Data", "Unified"):
            continue
        caches.append({
            "level": int((index / "level").read_text()),
            "size_bytes": _size_bytes((index / "size").read_text()),
            "shared_by": _shared_by((index / "shared_cpu_list").read_text())
            if (index / "shared_cpu_list").exists() else 1,
        })
    return sorted(caches, key=lambda c: c["level"])


def host_description(root: Path = CACHE_DIR, cpus: int | None = None) -> dict:
    """An accelerator description (the YAML form) of this machine; raises OSError when the
    OS does not say."""
    caches = read_caches(root)
    if not caches:
        raise OSError(f"no cache information under {root}")
    cpus = cpus or os.cpu_count() or 1
    clock_ghz = 2.5
    levels = [{"name": "DRAM", "read_bandwidth_gbps": 20, "write_bandwidth_gbps": 20,
               "energy_pj_per_word": 640}]
    above = cpus  # CPUs under the previous (outer) level
    for cache in reversed(caches):
        read_bpc, write_bpc, energy = NOMINAL.get(cache["level"], NOMINAL[3])
        instances = max(cpus // max(cache["shared_by"], 1), 1)
        parent = max(cpus // above, 1)
        levels.append({
            "name": f"L{cache['level']}", "capacity_bytes": cache["size_bytes"],
            "fanout": max(instances // parent, 1),
            "read_bandwidth_gbps": read_bpc * clock_ghz,
            "write_bandwidth_gbps": write_bpc * clock_ghz, "energy_pj_per_word": energy,
        })
        above = max(cache["shared_by"], 1)
    levels.append({"name": "Reg", "capacity_words": 512, "fanout": 1,
                   "read_words_per_cycle": 48, "write_words_per_cycle": 16,
                   "energy_pj_per_word": 1})
    return {
        "name": "host", "description": f"this machine: {cpus} CPUs, caches from {root}",
        "clock_ghz": clock_ghz, "word_bits": 32, "levels": levels,
        "compute": {"matrix": {"rows": 1, "cols": 32, "level": "Reg", "energy_pj_per_op": 5.0},
                    "vector": {"lanes": 16, "level": "Reg", "energy_pj_per_op": 5.0,
                               "cycles_per_op": {"default": 1, "exp": 8, "div": 4}}},
    }
