"""What a result was computed from: the model's version and digests of the contents (not the
names) of the accelerator, workload and settings. A study or sweep records them, and resuming
one with other contents is refused instead of mixing points of two models or two chips."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping

# The cost model's version: raised whenever a change alters what a dataflow costs, so points
# evaluated by an older model are never mixed with new ones. Recorded in every study and in
# explore's and sweep's summary.json; tests/test_model_version.py fails when the model's
# figures move without it.
MODEL_VERSION = "2026.11.2"

# Fields that say where a spec came from, not what it is: two copies of one file agree.
LOCATION_FIELDS = frozenset({"source", "lines"})


def canonical(value):
    """A JSON-ready form of a spec object that two equal objects share in any process:
    dataclasses by field (locations left out), mappings sorted by key, sets sorted, floats
    with their exact repr (inf and nan included)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.name not in LOCATION_FIELDS}
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (set, frozenset)):
        return sorted((canonical(v) for v in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return canonical(value.tolist())
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return repr(value)


def digest(value) -> str:
    """A short hash of a value's canonical form."""
    text = json.dumps(canonical(value), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def marks(arch, workload, settings) -> dict[str, str]:
    """The record a study keeps of what it was started from (see `differences`)."""
    return {"model_version": MODEL_VERSION, "accelerator": digest(arch),
            "workload": digest(workload), "settings": digest(settings)}


WHAT = {"model_version": "the model version", "accelerator": "the accelerator's contents",
        "workload": "the workload's contents", "settings": "the settings"}


def differences(stored: Mapping | None, wanted: Mapping[str, str]) -> list[str]:
    """What differs between a stored record and this run's, in words (empty: the same)."""
    if not isinstance(stored, Mapping):
        return ["its record of what it was started from (an older tileflow, or damaged)"]
    out = []
    for key, value in wanted.items():
        if stored.get(key) != value:
            if key == "model_version":
                out.append(f"the model version ({stored.get(key)} there, {value} here)")
            else:
                out.append(WHAT.get(key, key))
    return out
