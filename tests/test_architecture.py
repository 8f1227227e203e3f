"""The package's import graph, read from the source (no import is run): every module imports
only its own layer or lower ones, no two modules or subpackages import each other (directly
or around a circle), and no module uses another module's private names. The layers and where
a new mechanism goes: docs/adding-a-mechanism.md."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tileflow"

# Lowest first. A module belongs to the longest prefix that names it; it may import modules of
# its own layer or of a layer listed before it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("tileflow", "tileflow.errors", "tileflow.arith"),  # errors, divisors and primes
    ("tileflow.outputs", "tileflow.shipped", "tileflow.tables",
     "tileflow.provenance"),  # atomic writes, shipped files, checked tables, model version
    ("tileflow.output_checks",),  # output folders and storage URLs checked before work
    ("tileflow.tree",),  # the tile tree
    ("tileflow.specs",),  # input files: workloads, accelerators, dataflows
    ("tileflow.analysis",),  # the shape of one tree, its checks, records and per-axis rules
    ("tileflow.evaluator",),  # the model: many factor rows of one structure at once
    ("tileflow.cost",),  # one dataflow's Result, read from the evaluator's pass
    ("tileflow.dataflows",),  # the named baselines
    ("tileflow.interop",),  # other tools' files
    ("tileflow.explore", "tileflow.explore.factors"),  # the factor space of one structure
    ("tileflow.explore.tilesearch",),  # the tile-factor search
    ("tileflow.explore.structures",),  # the structure search
    ("tileflow.explore.studies",),  # `tileflow explore`
    ("tileflow.explore.sweeps",),  # `tileflow sweep`
    ("tileflow.kernels",),  # real kernels and their measurement
    ("tileflow.calibrate",),  # calibration campaigns
    ("tileflow.rtl",),  # accuracy against the RTL-measured accelerator
    ("tileflow.commands",),  # what the command line runs
    ("tileflow.cli",),  # the command line's parser and dispatch
)
RANK = {prefix: rank for rank, group in enumerate(LAYERS) for prefix in group}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> str:
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in RANK:
            return ".".join(parts[:k])
    raise AssertionError(f"{module} is in no layer: add its subpackage to LAYERS "
                         "(tests/test_architecture.py) and to docs/adding-a-mechanism.md")


def type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:` (annotations only, never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def imports_of(module: str) -> list[tuple[str, str, int]]:
    """(imported module, imported name or '', line) of every tileflow import that runs, at
    the top or inside a function. `from P import m` of a module m counts as importing P.m."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = type_checking_only(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, "", node.lineno) for a in node.names
                      if a.name.split(".")[0] == "tileflow"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] != "tileflow":
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                found.append((sub, "", node.lineno) if sub in MODULES else
                             (target, a.name, node.lineno))
    return found


GRAPH: dict[str, set[str]] = {m: {t for t, _, _ in imports_of(m) if t in MODULES} - {m}
                              for m in MODULES}


def test_every_module_is_in_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_module_imports_a_higher_layer():
    upward = []
    for module in MODULES:
        mine = RANK[layer_of(module)]
        for target, _, line in imports_of(module):
            if target in MODULES and RANK[layer_of(target)] > mine:
                upward.append(f"{module}:{line} imports {target} "
                              f"({layer_of(module)} may not import {layer_of(target)})")
    assert not upward, "\n".join(upward)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_between_modules():
    assert cycles(GRAPH) == []


def test_no_import_cycle_between_subpackages():
    def package(module: str) -> str:
        path = MODULES[module]
        return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]

    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in GRAPH.items():
        graph[package(module)] |= {package(t) for t in targets} - {package(module)}
    # a package's __init__ may re-export its own modules: that is no circle
    for name in list(graph):
        graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}
    assert cycles(dict(graph)) == []


TESTS = Path(__file__).parent


def test_the_package_imports_nothing_from_the_tests():
    """The tests' second copy of the model and the oracle (`tests/scalar_*.py`,
    `tests/reference_*.py`, the helpers) stay out of the package: no module of `tileflow`
    imports a module that lives under `tests/`."""
    ours = {p.stem for p in TESTS.rglob("*.py")} | {"tests"}
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module
                     and not node.level else [])
            found += [f"{module}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] in ours]
    assert found == []


def test_no_private_name_crosses_modules():
    crossing = []
    for module in MODULES:
        tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
        aliases: dict[str, str] = {}  # local name -> tileflow module it binds
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.startswith("tileflow"):
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    if sub in MODULES:
                        aliases[a.asname or a.name] = sub
                    elif a.name.startswith("_") and not a.name.startswith("__") and \
                            node.module != module:
                        crossing.append(f"{module}:{node.lineno} imports {node.module}.{a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname and a.name in MODULES:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in aliases and node.attr.startswith("_") and \
                    not node.attr.startswith("__") and aliases[node.value.id] != module:
                crossing.append(f"{module}:{node.lineno} uses "
                                f"{aliases[node.value.id]}.{node.attr}")
    assert not crossing, "\n".join(crossing)


@pytest.mark.parametrize("source, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set(), "c": {"c"}}, []),  # a self-import is no circle of modules
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
])
def test_the_cycle_finder_on_hand_made_graphs(source, expected):
    assert sorted(cycles(source)) == expected


def test_the_scan_sees_a_planted_upward_import_and_private_name(monkeypatch):
    """The checks themselves: a module of `analysis` importing the evaluator and a private
    helper of another module is reported by both tests."""
    planted = PACKAGE / "analysis" / "_planted_for_test.py"
    monkeypatch.setitem(MODULES, "tileflow.analysis._planted_for_test", planted)
    text = ("from tileflow.evaluator.batch import evaluate_batch\n"
            "from tileflow.analysis.shape import _analyse\n")
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None, _orig=Path.read_text:
                        text if self == planted else _orig(self, encoding=encoding))
    with pytest.raises(AssertionError, match="may not import tileflow.evaluator"):
        test_no_module_imports_a_higher_layer()
    with pytest.raises(AssertionError, match="_analyse"):
        test_no_private_name_crosses_modules()
