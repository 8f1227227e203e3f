"""A real install: build a wheel, install it into a fresh virtual environment outside the
repository, and run the installed `tileflow` from another folder. It must find the shipped
accelerators, workloads and dataflows inside the package, not in the source tree."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here takes tens of seconds

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "tileflow", "accelerators", "workloads",
           "dataflows", "search")
SHIPPED = ("accelerators", "workloads", "dataflows", "search")


def _can_build_without_isolation() -> bool:
    """setuptools builds wheels itself from 70.1 on; before that it needs `wheel`."""
    import setuptools

    major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _run(*args: str | Path, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, f"{' '.join(map(str, args))}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _dependency_folders() -> list[str]:
    """The folders the running interpreter imports TileFlow's dependencies from (a venv's
    site-packages, the user site, the system site: wherever they were installed), then its
    other site folders for what those dependencies import in turn."""
    folders: list[str] = []
    for requirement in importlib.metadata.requires("tileflow") or []:
        if "extra ==" in requirement:
            continue
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
        folders.append(str(importlib.metadata.distribution(name).locate_file("")))
    folders += [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    return [f for f in dict.fromkeys(folders) if Path(f).is_dir() and
            not Path(f).resolve().is_relative_to(REPO)]


def _reach_the_dependencies(venv: Path) -> None:
    """A .pth file in the new venv's site-packages lists the running interpreter's dependency
    folders, after the venv's own: the wheel installed there (`--no-deps`) imports its
    dependencies from where they are, not from the base interpreter's system site by luck.
    Plain paths in a .pth are added without processing that folder's own .pth files, so an
    editable TileFlow there (a path hook) is not picked up."""
    [site] = venv.glob("lib/python*/site-packages")
    (site / "tileflow-test-dependencies.pth").write_text("\n".join(_dependency_folders()) + "\n")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """Build the wheel from a copy of the sources (no stale build/ folder, nothing written into
    the checkout), install it into a new venv, and return its paths."""
    root = tmp_path_factory.mktemp("packaging")
    src = root / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=ignore)
        else:
            shutil.copy2(REPO / name, src / name)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", ".", "-w", root / "dist"]
    if _can_build_without_isolation():
        build.insert(5, "--no-build-isolation")
    _run(*build, cwd=src)
    wheel = next((root / "dist").glob("tileflow-*.whl"))
    venv = root / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=root)
    _reach_the_dependencies(venv)
    # without the checkout on the path, and over any tileflow the system site already has
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    _run(venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--force-reinstall",
         wheel, cwd=root, env=env)
    work = root / "elsewhere"
    work.mkdir()
    return {"wheel": wheel, "bin": venv / "bin", "env": env, "cwd": work}


def test_wheel_carries_every_shipped_file(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for kind in SHIPPED:
        for path in (REPO / kind).rglob("*"):
            if path.is_relative_to(REPO / "search" / "quality"):  # evidence, not a study
                assert f"tileflow/_data/{kind}/{path.relative_to(REPO / kind)}" not in names
                continue
            if path.suffix in (".yaml", ".yml") or (path.suffix == ".md"
                                                   and path.parent == REPO / kind):
                assert f"tileflow/_data/{kind}/{path.relative_to(REPO / kind)}" in names


def test_the_venv_takes_the_dependencies_from_where_this_interpreter_has_them(installed):
    """Not from the base interpreter's system site (the venv is made without it, so a
    runner inside a venv whose base lacks pandas still passes): each dependency imports
    from the very folder the running interpreter imports it from."""
    cfg = (installed["bin"].parent / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in cfg
    for name in ("numpy", "pandas", "ruamel.yaml"):
        module = importlib.import_module(name)
        where = _run(installed["bin"] / "python", "-c",
                     f"import {name}; print({name}.__file__)",
                     cwd=installed["cwd"], env=installed["env"])
        assert Path(where.stdout.strip()).resolve() == Path(module.__file__).resolve()


def test_installed_tileflow_runs_from_another_folder(installed):
    where = _run(installed["bin"] / "python", "-c",
                 "import tileflow.shipped as r; print(r.folder('accelerators'))",
                 cwd=installed["cwd"], env=installed["env"])
    assert "site-packages" in where.stdout and str(REPO) not in where.stdout
    proc = _run(installed["bin"] / "tileflow", "compare", "--arch", "edge", "--workload",
                "attention", "--json", cwd=installed["cwd"], env=installed["env"])
    rows = json.loads(proc.stdout)
    b, m, l_, k, n = 8, 512, 512, 64, 64  # the shipped attention workload (G1)
    assert rows[0]["dataflow"] == "layerwise"
    assert all(r["macs"] == b * m * l_ * k + b * m * l_ * n for r in rows)
    chart = installed["cwd"] / f"compare-attention-b_{b}-m_{m}-l_{l_}-k_{k}-n_{n}-edge.png"
    assert chart.read_bytes()[:4] == b"\x89PNG"
    shipped_flow = _run(installed["bin"] / "tileflow", "evaluate", "--arch", "edge",
                        "--workload", "G1", "--dataflow", "attention-chimera", "--json",
                        cwd=installed["cwd"], env=installed["env"])
    assert json.loads(shipped_flow.stdout)["valid"]


def test_installed_tileflow_explores_a_shipped_study_from_another_folder(installed):
    """`tileflow explore` with a study shipped in the package, by name, a tiny budget: the
    outputs land in the current folder, and the dataflow found evaluates to what the study
    reported."""
    proc = _run(installed["bin"] / "tileflow", "explore", "quick", "--budget-evals", "50",
                "--json", "--quiet", cwd=installed["cwd"], env=installed["env"])
    summary = json.loads(proc.stdout)
    out = installed["cwd"] / "explore-quick"
    assert summary["workload"] == "attention"
    # the budget covers the structure search and the tile search together
    assert summary["budget"]["evaluations"] == 50 and 0 < summary["evaluations"] <= 50
    for name in ("best.yaml", "points.csv", "summary.json", "convergence.png"):
        assert (out / name).is_file(), name
    found = summary["found"]
    again = _run(installed["bin"] / "tileflow", "evaluate", "--arch", "edge", "--workload",
                 "G1", "--dataflow", str(out / "best.yaml"), "--json", cwd=installed["cwd"],
                 env=installed["env"])
    result = json.loads(again.stdout)
    assert result["valid"] and result["cycles"] == pytest.approx(found["cycles"])
    other = _run(installed["bin"] / "tileflow", "explore", "attention-edge/G1", "--budget-evals",
                 "20", "--out", "g1", "--quiet", cwd=installed["cwd"], env=installed["env"])
    assert (installed["cwd"] / "g1" / "summary.json").is_file(), other.stdout
