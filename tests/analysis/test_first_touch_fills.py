"""Outputs filled on their first touch (`first_touch_fills` of a level): a unit that always
adds to a partial sum it reads, as a systolic array's reduction chain takes its initial value
from its buffer at every pass (zeros the first time). Counts derived by hand."""

from __future__ import annotations

from dataclasses import replace

from helpers import GEMM, small_arch, workload
from hypothesis import HealthCheck, given, settings
from trees import trees

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.specs.arch import Architecture
from tileflow.tree import Dataflow, Op, Tile, tile, walk

BASE = small_arch()


def filling(arch: Architecture, *names: str) -> Architecture:
    return replace(arch, levels=tuple(replace(lv, first_touch_fills=lv.name in names)
                                      for lv in arch.levels))


def test_every_pass_of_a_partial_sum_reads_it_from_the_level_above():
    """C (2 x 3) accumulates over k = 4 in two passes of 2 (the outer k:2 in L1): each
    element enters the register twice. By default the first entry needs no fill: 6 fills
    and 6 reads of L1; when the registers' first touches are filled too, 12 and 12. The
    write-backs (12) are the same."""
    w = workload(GEMM, m=2, n=3, k=4)
    flow = Dataflow(tile("DRAM", "", tile("L1", "k:2 m:2 n:3", tile("Reg", "k:2", "mm"))))
    plain = evaluate(w, BASE, flow).traffic
    first = evaluate(w, filling(BASE, "Reg"), flow).traffic
    assert (plain["Reg"]["C"].fill, plain["L1"]["C"].read) == (6, 6)
    assert (first["Reg"]["C"].fill, first["L1"]["C"].read) == (12, 12)
    assert plain["L1"]["C"].update == first["L1"]["C"].update == 12
    assert plain["DRAM"]["C"] == first["DRAM"]["C"]  # DRAM's first touches are its own


def test_a_spatial_reduction_reads_each_partial_sum_once_per_pass():
    """k split over 2 register files (k:2:Sp) and 2 passes in time: per pass, L1 sends each
    of the 6 partial sums once (to the chain of 2 instances, which both hold it) and is
    updated once after the reduction. First touches filled: 2 x 6 reads of L1 instead of 6,
    2 x 6 x 2 fills of the registers instead of 6 x 2."""
    w = workload(GEMM, m=2, n=3, k=4)
    flow = Dataflow(tile("DRAM", "", tile("L1", "k:2 m:2 n:3 k:2:Sp", tile("Reg", "", "mm"))))
    plain = evaluate(w, BASE, flow).traffic
    first = evaluate(w, filling(BASE, "Reg"), flow).traffic
    assert (plain["L1"]["C"].read, plain["Reg"]["C"].fill) == (6, 12)
    assert (first["L1"]["C"].read, first["Reg"]["C"].fill) == (12, 24)
    assert plain["L1"]["C"].update == first["L1"]["C"].update == 12


SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))
GEMM_W = workload(GEMM)


@SETTINGS
@given(trees(GEMM_W))
def test_with_every_first_touch_filled_each_level_reads_what_it_is_updated_with(flow):
    """A GEMM's output has no epochs: every entry of a partial sum into a level below is one
    read of the level above, every exit one update. With first touches filled at L1 and the
    registers, DRAM, and L1 where the compute is below it, read exactly as many words of C
    as they are updated with; without, fewer (the first touches)."""
    try:
        result = evaluate(GEMM_W, filling(BASE, "L1", "Reg"), flow)
    except InvalidDataflow:
        return
    plain = evaluate(GEMM_W, BASE, flow)
    innermost = next(node.level for _, node in walk(flow.root)
                     if isinstance(node, Tile) and any(isinstance(c, Op) for c in node.children))
    held = {node.level for _, node in walk(flow.root) if isinstance(node, Tile)}
    levels = ["DRAM"] + (["L1"] if innermost == "Reg" and "L1" in held else [])
    for level in levels:
        m, p = result.traffic[level]["C"], plain.traffic[level]["C"]
        assert m.read == m.update == p.update
        assert p.read <= m.read
