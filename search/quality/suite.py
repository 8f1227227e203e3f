"""The search-quality suite's definition: its chip x workload pairs (`pairs.yaml`) and their
best-known values (`best-known.json`), read by the runner, the best-known script and the
tests. Paths in both files are relative to this folder."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
PAIRS_FILE = HERE / "pairs.yaml"
BEST_KNOWN_FILE = HERE / "best-known.json"
SWEEPS_DIR = HERE / "sweeps"
BASELINES = ("layerwise", "uni-pipe", "flat-hgran", "flat-rgran", "chimera", "tileflow-pipe",
             "fused-layer", "isos")


@dataclass(frozen=True)
class Pair:
    """One chip x workload pair of the suite, searched for the least latency."""

    name: str
    chip: str  # path relative to this folder
    workload: str  # a shipped workload's name or a path relative to this folder
    sizes: dict[str, int]
    objective: str = "latency"

    @property
    def chip_path(self) -> Path:
        return HERE / self.chip

    @property
    def workload_ref(self) -> str:
        """What `--workload` takes: the shipped name, or the file's absolute path."""
        return str(HERE / self.workload) if self.workload.endswith(".yaml") else self.workload

    def set_flags(self) -> list[str]:
        """The sizes as `tileflow evaluate` flags."""
        return [x for k, v in self.sizes.items() for x in ("--set", f"{k}={v}")]

    def hand_trees(self) -> list[Path]:
        """Expert trees written for this pair: `trees/hand/PAIR*.yaml`."""
        return sorted((HERE / "trees" / "hand").glob(f"{self.name}*.yaml"))

    @property
    def best_tree(self) -> Path:
        """The best-known dataflow, written by best_known.py."""
        return HERE / "trees" / f"{self.name}.yaml"


def fail(message: str) -> None:
    """Bad input: one line on stderr, exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def load_pairs() -> list[Pair]:
    data = yaml.safe_load(PAIRS_FILE.read_text())
    return [Pair(p["name"], p["chip"], p["workload"], dict(p.get("sizes") or {}),
                 p.get("objective", "latency")) for p in data["pairs"]]


def load_best_known() -> dict[str, dict]:
    """Pair name -> {"cycles", "tree", "how", "candidates", ...}."""
    if not BEST_KNOWN_FILE.exists():
        return {}
    return json.loads(BEST_KNOWN_FILE.read_text())["pairs"]


def select(pairs: list[Pair], names: str | None) -> list[Pair]:
    """The pairs named in a comma-separated list (all when None); an unknown name is an error."""
    if not names:
        return pairs
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {p.name for p in pairs}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        fail(f"--pairs: unknown pair(s) {', '.join(unknown)}; pairs.yaml has: "
             f"{', '.join(sorted(known))}")
    return [p for p in pairs if p.name in wanted]


def load_sweeps() -> dict[str, Path]:
    """Sweep configs (`sweeps/NAME.yaml`, one accelerator parameter each) by name."""
    return {p.stem: p for p in sorted(SWEEPS_DIR.glob("*.yaml"))}


def select_sweeps(names: str) -> dict[str, Path]:
    """`all`, `none` or a comma-separated list of sweep names; an unknown name is an error."""
    sweeps = load_sweeps()
    if names == "all":
        return sweeps
    if names == "none":
        return {}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in sweeps]
    if unknown:
        fail(f"--sweeps: unknown sweep(s) {', '.join(unknown)}; sweeps/ has: "
             f"{', '.join(sweeps)} (or all, none)")
    return {n: sweeps[n] for n in wanted}
