"""Start-up cost of the command line: a command imports what it needs when it needs it, so
`tileflow evaluate` (one dataflow: the evaluator at one row, which needs NumPy) never loads
the libraries of the searches, studies and plots, and building the parser loads neither
NumPy nor the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "matplotlib", "optuna", "scipy", "sqlalchemy", "tqdm")

PROBE = """
import contextlib, io, json, sys
from tileflow.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "loaded": sorted({m.split('.')[0] for m in sys.modules})}))
"""


def loaded_by(*args: str) -> set[str]:
    """Top-level packages in sys.modules after one command ran in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["code"] == 0
    return set(report["loaded"])


@pytest.mark.parametrize("args", [
    ("evaluate", "--arch", "edge", "--workload", "attention", "--dataflow", "chimera", "--json"),
    ("evaluate", "--arch", "cloud", "--workload", "C1", "--dataflow", "fused-layer"),
])
def test_evaluate_loads_no_search_or_plot_library(args):
    assert not loaded_by(*args) & set(HEAVY)


def test_building_the_parser_loads_neither_numpy_nor_the_model():
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    code = ("import sys; from tileflow.cli import build_parser; build_parser(); "
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{HEAVY + ('numpy',)!r} or m.startswith('tileflow.analysis'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
