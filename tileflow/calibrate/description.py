"""The calibrated accelerator description: the original YAML form with the fitted rates in
place, and the fit's provenance in its notes. The uncalibrated description is untouched."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from tileflow.outputs import write_yaml


def calibrated_description(original: dict, parameters: dict[str, float], provenance: dict) -> dict:
    """Replace each level's read and write rate by the fitted rate of the boundary below it
    (words per cycle), the units' throughput by the fitted ones; keep everything else."""
    out = {**original, "name": f"{original.get('name', 'accelerator')}-calibrated",
           "levels": [dict(lv) for lv in original["levels"]],
           "compute": {k: dict(v) for k, v in original["compute"].items()}}
    names = [lv["name"] for lv in out["levels"]]
    for outer, inner in zip(names[:-1], names[1:], strict=True):
        rate = parameters.get(f"rate_{outer}_{inner}")
        if rate is None:
            continue
        level = out["levels"][names.index(outer)]
        for kind in ("read", "write"):
            level.pop(f"{kind}_bandwidth_gbps", None)
            level[f"{kind}_words_per_cycle"] = round(float(rate), 4)
    # operations per cycle: a fitted rate, or the inverse of the fitted cycles per SIMD
    # operation (the same SIMD units run the matrix and the vector operators on a CPU)
    simd = 1 / parameters["simd_cycles"] if "simd_cycles" in parameters else 1.0
    matrix = out["compute"]["matrix"]
    matrix["rows"], matrix["cols"] = 1, max(1, round(parameters.get("mac_rate", simd)))
    if "vector" in out["compute"]:
        out["compute"]["vector"]["lanes"] = max(1, round(parameters.get("vector_rate", simd)))
    out["notes"] = "; ".join(f"{k}: {v}" for k, v in {
        "calibrated": dt.date.today().isoformat(), **provenance,
        "fitted": ", ".join(f"{k}={v:.4g}" for k, v in parameters.items())}.items())
    return out


def write_description(description: dict, path: str | Path) -> Path:
    path = Path(path)
    return write_yaml(path, description)
