"""Chimera's least-traffic rule on a chip with a shared L2: the fit also tries the shape
that holds what the stages reuse (K and V across row blocks) in the L2, so its DRAM
traffic can reach the compulsory floor instead of exceeding Layerwise's."""

from __future__ import annotations

from pathlib import Path

from tileflow.cost import evaluate
from tileflow.dataflows import build
from tileflow.dataflows.common import held_at_middle
from tileflow.explore.tilesearch.fit import fit_baseline
from tileflow.interop.files import load_arch_any
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import Tile, walk

REPO = Path(__file__).resolve().parents[2]
SOC = load_arch_any(str(REPO / "search" / "quality" / "chips" / "soc-l2.yaml"))
SEQ_2048 = {"b": 8, "m": 2048, "l": 2048, "k": 64, "n": 64}


def test_the_root_keeps_its_first_temporal_loop_and_the_rest_moves_to_the_l2():
    w = load_workload("attention", SEQ_2048)
    flow = build("chimera", w, SOC)
    held = held_at_middle(flow, SOC, w.intermediates)
    root = held.root
    first = next(i for i, lp in enumerate(flow.root.loops) if not lp.spatial)
    assert root.level == "DRAM" and root.loops == flow.root.loops[:first + 1]
    (l2,) = root.children
    assert l2.level == "L2" and l2.loops == flow.root.loops[first + 1:]
    assert l2.primitive == flow.root.primitive
    # nothing below the L2 tile stays at DRAM, and every intermediate lives in the L1
    assert all(n.level != "DRAM" for _, n in walk(l2) if isinstance(n, Tile))
    assert set(held.homes) == set(w.intermediates)
    assert set(held.homes.values()) == {"L1"}


def test_no_middle_level_no_variant():
    w = load_workload("attention", SEQ_2048)
    edge = load_arch("edge")  # DRAM, L1, Reg: nothing between DRAM and the buffer
    assert held_at_middle(build("chimera", w, edge), edge, w.intermediates) is None


def test_chimera_at_sequence_2048_reads_each_operand_once():
    """Q, K and V read once and O written once: 4 x 8 x 2048 x 64 = 4,194,304 words, the
    least any dataflow can move (K and V of a head, 262,144 words, fit the 1 MB L2). It
    moved 538,970,112 words, more than Layerwise's 409,010,176, while its rule is the least
    traffic."""
    w = load_workload("attention", SEQ_2048)
    fitted = evaluate(w, SOC, fit_baseline("chimera", w, SOC))
    layerwise = evaluate(w, SOC, fit_baseline("layerwise", w, SOC))
    assert fitted.valid
    assert fitted.dram_words == 4 * 8 * 2048 * 64
    assert fitted.dram_words < layerwise.dram_words
