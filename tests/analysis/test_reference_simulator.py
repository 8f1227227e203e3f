"""The analytic model agrees exactly with the independent enumerating oracle on random small
trees: fills, reads and updates per level and tensor, operations, and footprints; every
primitive, spatial loops (also over window axes stepped in time), clipping, sliding
windows with halos, partial-sum spills, Seq drops, intermediates at their home level,
loops over dims some operators below do not use, factor-1 loops, the softmax topology."""

from __future__ import annotations

import pytest
from helpers import CHAIN, CONV, GEMM, SOFTMAX, STRIDED, TWINS, workload
from hypothesis import HealthCheck, given, settings
from reference_sim import Oracle
from trees import ARCH, keep_halos, trees

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, Tile, ops_under, render, walk

NAMES = [lv.name for lv in ARCH.levels]


def _features(w: Workload, flow: Dataflow, oracle: Oracle) -> set[str]:
    """What a tree exercises (from the tree and the oracle), so the test can insist every
    feature was covered."""
    found = set()
    if any(oracle.shift.values()):
        found.add("halo")
    if any(oracle.cut.values()):
        found.add("kept halo")
    for _, node in walk(flow.root):
        if not isinstance(node, Tile):
            continue
        if len(node.children) > 1:
            found.add(node.primitive)
        if node.no_reuse:
            found.add("no_reuse")
        below = ops_under(node)
        for lp in node.loops:
            if lp.spatial and lp.factor > 1:
                found.add("spatial")
            if lp.factor == 1:
                found.add("factor-1 loop")
            if len(below) > 1 and any(lp.dim not in w.op_by_name[o].dims for o in below):
                found.add("loop over a dim not every operator uses")
        dims = {lp.dim for lp in node.loops if lp.factor > 1}
        for lp in node.loops:
            window = any(len(axis.terms) > 1 and lp.dim in axis.dims
                         for o in below for a in w.op_by_name[o].inputs for axis in a.axes)
            if lp.spatial and lp.factor > 1 and window and any(
                    not other.spatial and other.factor > 1 and other.dim == lp.dim
                    for other in node.loops) and lp.dim in dims:
                found.add("window axis spatial and temporal")
    for op in w.ops:
        covered = {d: 1 for d in op.dims}
        for _, p, i, lp in oracle.loops(op.name):
            if lp.dim in covered:
                covered[lp.dim] += (lp.factor - 1) * oracle.stride[(p, i)]
        if any(covered[d] > w.sizes[d] for d in op.dims):
            found.add("clipping")
    if any(h > 0 for h in oracle.home.values()):
        found.add("on-chip intermediate")
    return found


def _agree(w: Workload, flow: Dataflow, seen: set[str], bound: bool = False) -> bool:
    """Compare model and oracle on one tree; False if the tree breaks a structural rule.
    `bound`: the model's footprints may exceed the oracle's (they add each tensor's largest
    slice, which a kept halo makes peak at different steps), never fall short."""
    try:
        result = evaluate(w, ARCH, flow)
    except InvalidDataflow:
        return False  # the generator can produce trees the model rightly rejects
    if any(v.kind in ("coverage", "dependency", "window") for v in result.violations):
        return False
    oracle = Oracle(w, NAMES, flow)
    seen |= _features(w, flow, oracle)
    got = {(lv, t): [round(m.fill), round(m.read), round(m.update)]
           for lv, tensors in result.traffic.items() for t, m in tensors.items()}
    expected = {k: v for k, v in oracle.traffic.items() if any(v)}
    got = {k: v for k, v in got.items() if any(v)}
    assert got == expected, (
        "\n".join(f"{k}: model {got.get(k)} oracle {expected.get(k)}"
                  for k in sorted(set(got) | set(expected)) if got.get(k) != expected.get(k))
        + "\n" + render(flow.root))
    assert dict(result.ops) == oracle.ops
    footprints = {f.level: f.words for f in result.footprints}
    if bound:
        assert all(footprints[k] >= v for k, v in oracle.footprints.items()), (
            f"footprints: model {footprints} oracle {oracle.footprints}\n{render(flow.root)}")
        return True
    assert footprints == oracle.footprints, (
        f"footprints: model {footprints} oracle {oracle.footprints}\n{render(flow.root)}")
    return True


SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))

BASE = {"spatial", "clipping", "factor-1 loop", "no_reuse"}
CASES = {
    "gemm": (GEMM, BASE),
    "chain": (CHAIN, BASE | {"Seq", "Shar", "Pipe", "on-chip intermediate",
                             "loop over a dim not every operator uses"}),
    "softmax": (SOFTMAX, BASE | {"Seq", "Shar", "Pipe", "on-chip intermediate",
                                 "loop over a dim not every operator uses"}),
    "conv-halo": (CONV, BASE | {"halo", "Seq", "Shar", "window axis spatial and temporal",
                                "loop over a dim not every operator uses"}),
    "strided": (STRIDED, BASE),
    "independent twins": (TWINS, BASE | {"Seq", "Shar", "Pipe", "Para",
                                         "loop over a dim not every operator uses"}),
}


CASES["conv-halo kept"] = (CONV, CASES["conv-halo"][1] | {"kept halo"})


@pytest.mark.parametrize("case", CASES)
def test_model_matches_the_oracle(case: str) -> None:
    text, required = CASES[case]
    w = workload(text)
    seen: set[str] = set()
    compared = []
    cached = case.endswith("kept")

    @SETTINGS
    @given(trees(w).map(lambda flow: keep_halos(w, flow) if cached else flow))
    def check(flow: Dataflow) -> None:
        compared.append(_agree(w, flow, seen, bound=cached))

    check()
    assert required <= seen, f"the generated trees never exercised {required - seen}"
    assert sum(compared) >= 90, f"only {sum(compared)} of {len(compared)} trees compared"


def test_the_oracle_shares_no_code_with_the_model():
    """It imports the tree and the workload's expressions, nothing of the analysis."""
    import ast

    import reference_sim

    tree = ast.parse(open(reference_sim.__file__).read())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m.startswith(("tileflow.analysis", "tileflow.cost")) for m in imported)
    assert {m for m in imported if m.startswith("tileflow")} <= {"tileflow.tree",
                                                                 "tileflow.specs.workload"}
