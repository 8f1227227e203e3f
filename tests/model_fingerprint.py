"""A fingerprint of what the cost model says: every named baseline of the shipped workloads
on every shipped accelerator it builds for, the docs' example dataflows and the
search-quality suite's trees (best known, hand-written and searched), under each
overlap convention, each reduced to a SHA-256 of its cycles, energy, traffic, footprints
and violations (numbers to 10 significant digits). It is not evidence that the model is right
(the hand-derived and oracle tests are); it detects that the model's numbers moved, which
must raise `tileflow.provenance.MODEL_VERSION` so that a resumed study never mixes points of
two models. After raising it: `python tests/model_fingerprint.py --record`."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from ruamel.yaml import YAML

from tileflow.cost import evaluate
from tileflow.dataflows import baselines_for, build
from tileflow.errors import InputError
from tileflow.provenance import MODEL_VERSION
from tileflow.specs.arch import OVERLAPS, load_arch
from tileflow.specs.dataflow import load_dataflow_file, parse_dataflow
from tileflow.specs.workload import load_workload
from tileflow.specs.yamlfile import Field

ROOT = Path(__file__).resolve().parents[1]
RECORD = Path(__file__).with_name("model_fingerprint.json")
WORKLOADS = ("G1", "gemm-chain", "C1", "attention-online", "mlp")
ACCELERATORS = ("edge", "cloud", "tpu-like", "accelerators/rtl-systolic-chain.yaml")
EXAMPLES = (("gemm", "gemm-spatial"), ("gemm", "gemm-no-reuse"), ("chain", "chain-seq"),
            ("chain", "chain-pipe"), ("chain", "chain-shar"), ("chain", "chain-home-dram"),
            ("rowexp", "rowexp-lanes"))


def _round(x):
    if isinstance(x, float):
        return float(f"{x:.10g}")
    if isinstance(x, dict):
        return {str(k): _round(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, (list, tuple)):
        return [_round(v) for v in x]
    return x


def _summary(result) -> dict:
    return _round({
        "cycles": result.cycles, "energy_pj": result.energy_pj, "valid": result.valid,
        "traffic": {lv: {t: [m.fill, m.read, m.update] for t, m in d.items()}
                    for lv, d in result.traffic.items()},
        "footprints": {f.level: f.words for f in result.footprints},
        "violations": sorted(json.dumps(_round([v.kind, v.node, v.level, v.tensor, v.needed,
                                                v.available])) for v in result.violations)})


def cases():
    """(label, workload, accelerator, dataflow) of every case fingerprinted."""
    for wname in WORKLOADS:
        w = load_workload(wname)
        for aname in ACCELERATORS:
            arch = load_arch(str(ROOT / aname) if aname.endswith(".yaml") else aname)
            for name in baselines_for(w):
                try:
                    flow = build(name, w, arch)
                except InputError:  # a baseline that does not build for this chip
                    continue
                yield f"{wname}/{aname}/{name}", w, arch, flow
    arch = load_arch(str(ROOT / "docs/examples/tiny-npu.yaml"))
    for wname, fname in EXAMPLES:
        w = load_workload(str(ROOT / f"docs/examples/{wname}.yaml"))
        flow = load_dataflow_file(str(ROOT / f"docs/examples/{fname}.yaml"))
        yield f"examples/{fname}", w, arch, flow


def quality_cases():
    """The search-quality suite's trees on their chips: the best known and the hand-written
    ones, and every tree its runs found (searched trees: bypass, deep and mixed primitives)."""
    import yaml

    suite = ROOT / "search" / "quality"
    pairs = {p["name"]: p for p in yaml.safe_load((suite / "pairs.yaml").read_text())["pairs"]}

    def specs(pair):
        ref = pair["workload"]
        w = load_workload(str(suite / ref) if ref.endswith(".yaml") else ref,
                          dict(pair.get("sizes") or {}))
        return w, load_arch(str(suite / pair["chip"]))

    for name, pair in sorted(pairs.items()):
        w, arch = specs(pair)
        for path in [suite / "trees" / f"{name}.yaml",
                     *sorted((suite / "trees" / "hand").glob(f"{name}.*.yaml"))]:
            if path.is_file():
                yield f"quality/{path.name}", w, arch, load_dataflow_file(path)
    for unit in sorted(suite.glob("run-*/units/*.json")):  # archived runs (units/ is rerun)
        found = json.loads(unit.read_text())
        if not found.get("found_tree"):
            continue
        w, arch = specs(pairs[found["pair"]])
        flow = parse_dataflow(Field(YAML(typ="rt").load(found["found_tree"]), unit.name))
        yield f"quality/{unit.parent.parent.name}/{unit.stem}", w, arch, flow


def fingerprint() -> dict[str, str]:
    """Per case and overlap convention: a SHA-256 (its first 16 hex digits) of the summary."""
    table = {}
    for label, w, arch, flow in (*cases(), *quality_cases()):
        for overlap in OVERLAPS:
            text = json.dumps(_summary(evaluate(w, arch, flow, overlap=overlap)),
                              sort_keys=True)
            table[f"{label}/{overlap}"] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return table


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(__doc__)
    table = fingerprint()
    partial = RECORD.with_suffix(".json.partial")  # written whole, then moved into place
    partial.write_text(json.dumps({"model_version": MODEL_VERSION, "cases": table},
                                  indent=0, sort_keys=True) + "\n")
    os.replace(partial, RECORD)
    print(f"recorded {len(table)} cases under model version {MODEL_VERSION}")
