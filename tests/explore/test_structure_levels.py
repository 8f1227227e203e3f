"""The generated structures span the chip: on a chip with a shared L2 between DRAM and
per-core L1s (search/quality/chips/soc-l2.yaml) they place tiles at every level, spread over
the two cores from the L2, decide per input and output which levels it skips (bypass), and
start from factors the levels can hold; on a chip without a middle level nothing of that
appears. Counts are derived by hand from the chip and the workload."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers import CHAIN, small_arch, workload
from scalar_prepare import prepare

from tileflow.cost import evaluate
from tileflow.explore.structures.canonical import encode
from tileflow.explore.structures.encoding import decode, leaf_chains
from tileflow.explore.structures.fitness import measure
from tileflow.explore.structures.structure_space import SpaceOptions, StructureSpace
from tileflow.specs.arch import load_arch
from tileflow.specs.dataflow import load_dataflow_file
from tileflow.specs.workload import load_workload
from tileflow.tree import Tile, walk

QUALITY = Path(__file__).resolve().parents[2] / "search" / "quality"
SOC_L2 = QUALITY / "chips" / "soc-l2.yaml"  # DRAM > L2 (1 MB) > L1 (128 KB, 2 cores) > Reg
ISSUE_MHA = {"b": 8, "m": 256, "l": 256, "k": 64, "n": 64}  # the suite's soc-l2.mha sizes


@pytest.fixture(scope="module")
def soc():
    return load_arch(str(SOC_L2))


def _levels_of(flow, op: str) -> list[str]:
    return [t.level for _, t in leaf_chains(flow.root)[op]]


def test_every_operator_has_a_tile_at_every_level_of_the_chip(soc):
    """The unfused chain of two GEMMs on soc-l2: each GEMM under the root has tiles at DRAM,
    L2, L1 and Reg (4 levels); its L2 tile spreads over the 2 cores below the L2 (L1 fan-out
    2); its L1 tile over the 64 PEs of a core."""
    space = StructureSpace(workload(CHAIN, m=64, l=64, k=16, n=16), soc)
    structure = space.structure(space.unfused())
    for op in ("g1", "g2"):
        assert _levels_of(structure.template, op) == ["DRAM", "DRAM", "L2", "L1", "Reg"]
    tiles = {p: t for p, t in walk(structure.template.root) if isinstance(t, Tile)}
    limits = {(tiles[s.path].level, s.dim): lim for s, lim
              in zip(structure.slots, structure.slot_limits, strict=True) if s.spatial}
    assert {lim for (lv, _), lim in limits.items() if lv == "L2"} == {2}
    assert {lim for (lv, _), lim in limits.items() if lv == "L1"} == {64}


def test_a_chip_without_a_middle_level_gets_no_middle_tiles():
    """DRAM > L1 > Reg: the same chain has no tile between DRAM and L1."""
    space = StructureSpace(workload(CHAIN, m=8, l=8, k=4, n=4), small_arch(cores=2, pes=4))
    flow = space.structure(space.unfused()).template
    for op in ("g1", "g2"):
        assert _levels_of(flow, op) == ["DRAM", "DRAM", "L1", "Reg"]


@pytest.mark.parametrize("name,sizes", [
    ("attention", {"b": 2, "m": 32, "l": 32, "k": 8, "n": 8}),
    ("swiglu", {"m": 16, "d": 16, "f": 32, "e": 16}),
])
def test_generated_structures_on_the_l2_chip_pass_the_checks_and_use_the_l2(soc, name, sizes):
    """Random structures and their mutations: every one passes the tree checks and runs
    every operation once; some have an L2 tile with loops, some skip a level."""
    ref = str(QUALITY / "workloads" / "swiglu.yaml") if name == "swiglu" else name
    w = load_workload(ref, sizes)
    space = StructureSpace(w, soc)
    rng = np.random.default_rng(5)
    with_l2 = with_bypass = 0
    for _ in range(15):
        enc = space.random(rng)
        for _ in range(4):
            enc = space.mutate(enc, rng)
        flow = space.structure(enc).template
        prepare(w, soc, flow)
        result = evaluate(w, soc, flow)
        assert result.ops == {o.name: w.op_count(o) for o in w.ops}
        tiles = [t for _, t in walk(flow.root) if isinstance(t, Tile)]
        with_l2 += any(t.level == "L2" and t.loops for t in tiles)
        with_bypass += any(t.bypass for t in tiles)
        assert bool(enc.bypass) == any(t.bypass for t in tiles)
    assert with_l2 > 0 and with_bypass > 0


def test_bypass_genes_of_a_chain_by_hand(soc):
    """Inputs A, B, D and output E may skip L2, L1 or Reg: 4 x 3 = 12 genes (C, the
    intermediate, lives where its home says). In the unfused chain each gene marks exactly one
    tile (each tensor has one user, with one tile per level) and reads back to itself."""
    space = StructureSpace(workload(CHAIN, m=64, l=64, k=16, n=16), soc)
    f = space.frame
    assert sorted(f.bypassable) == ["A", "B", "D", "E"]
    base = space.unfused()
    genes = [(t, lv) for t in f.bypassable for lv in range(1, len(f.levels))]
    assert len(genes) == 12
    for t, lv in genes:
        enc = base.with_bypass({(t, lv)})
        flow = decode(f, enc)
        marked = [tile for _, tile in walk(flow.root) if isinstance(tile, Tile) and tile.bypass]
        assert len(marked) == 1 and marked[0].bypass == (t,)
        assert marked[0].level == f.levels[lv]
        assert encode(f, flow) == enc


def test_a_skipped_level_holds_and_moves_none_of_the_tensor(soc):
    """A skipping the L1: the L1 moves no word of A (it went through the L1 before)."""
    space = StructureSpace(workload(CHAIN, m=64, l=64, k=16, n=16), soc)
    w, base = space.frame.workload, space.unfused()
    plain = evaluate(w, soc, space.structure(base).template)
    skipped = evaluate(w, soc, space.structure(base.with_bypass({("A", 2)})).template)
    moved = plain.traffic["L1"]["A"]
    assert moved.fill + moved.read > 0
    gone = skipped.traffic.get("L1", {}).get("A")
    assert gone is None or gone.fill + gone.read + gone.update == 0
    assert skipped.ops == plain.ops


def test_a_bypass_gene_at_a_level_no_user_visits_is_repaired_away(soc):
    """Without middle tiles the chain's GEMMs have no L2 tile: A cannot skip the L2."""
    options = SpaceOptions(outer_tiles=False)
    space = StructureSpace(workload(CHAIN, m=64, l=64, k=16, n=16), soc, options)
    base = space.unfused()
    assert "L2" not in _levels_of(decode(space.frame, base), "g1")
    fixed, fixes = space.repair(base.with_bypass({("A", 1)}))
    assert fixes["bypass"] == 1 and fixed.bypass == ()


def _covers(structure) -> bool:
    """Every operator's factors of each of its dims multiply to the dim's size."""
    w = structure.workload
    for op, chain in leaf_chains(structure.template.root).items():
        for d in w.op_by_name[op].dims:
            got = math.prod(lp.factor for _, t in chain for lp in t.loops if lp.dim == d)
            if got != w.sizes[d]:
                return False
    return True


def test_default_factors_fit_the_levels(soc):
    """Attention at the suite's soc-l2.mha sizes, unfused: the plain defaults keep every
    iteration in the L1 tiles (S alone is 8 x 256 x 256 = 524,288 words; the L1 holds
    131,072), so they overflow; the fitted ones pass every check and still cover every
    dimension exactly."""
    w = load_workload("attention", ISSUE_MHA)
    plain = StructureSpace(w, soc, SpaceOptions(fit_factors=False))
    fitted = StructureSpace(w, soc)
    before = plain.structure(plain.unfused())
    after = fitted.structure(fitted.unfused())
    assert not measure(before, before.default_factors[None]).valid[0]
    m = measure(after, after.default_factors[None])
    assert m.valid[0] and math.isfinite(m.cycles[0])
    assert _covers(before) and _covers(after)


@pytest.mark.parametrize("pair", ["soc-l2.mha", "soc-l2.gqa", "soc-l2.swiglu"])
def test_the_l2_hand_trees_and_every_baseline_are_in_the_space(soc, pair):
    """The suite's trees that keep K and V (or X and Y) in the shared L2 have loops at an
    L2 group tile: the space expresses them, and every named baseline."""
    import yaml

    spec = next(p for p in yaml.safe_load((QUALITY / "pairs.yaml").read_text())["pairs"]
                if p["name"] == pair)
    ref = spec["workload"]
    w = load_workload(str(QUALITY / ref) if ref.endswith(".yaml") else ref, spec["sizes"])
    hand = {p.name: load_dataflow_file(p)
            for p in sorted((QUALITY / "trees" / "hand").glob(f"{pair}.*l2.yaml"))}
    assert hand
    space = StructureSpace(w, soc, seeds=hand)
    encoded = space.baselines()
    assert space.skipped == {}
    for name in hand:
        assert name in encoded
        flow = decode(space.frame, encoded[name])
        assert any(t.level == "L2" and t.loops for _, t in walk(flow.root)
                   if isinstance(t, Tile) and len(t.children) > 1)
        assert encode(space.frame, flow, encoded[name].share) == encoded[name]


def test_the_level_seed_fuses_every_operator_at_the_shared_l2(soc):
    """soc-l2 has one level above the L1s (the L2) and the L1s: a seed per level, the one
    at the L2 with every operator of the chain under one L2 tile that steps through blocks
    of the dims the GEMMs share (m, l) and spreads over the 2 cores; a chip without a
    middle level has one, fused in its L1 under a DRAM tile."""
    space = StructureSpace(workload(CHAIN, m=64, l=64, k=16, n=16), soc)
    seeds = space.level_seeds()
    assert list(seeds) == ["fused-at-L2", "fused-at-L1"]
    flow = decode(space.frame, seeds["fused-at-L2"])
    groups = [t for _, t in walk(flow.root) if isinstance(t, Tile) and len(t.children) > 1]
    assert len(groups) == 1 and groups[0].level == "L2"
    assert {lp.dim for lp in groups[0].loops} == {"m", "l"}
    assert [lp.dim for lp in groups[0].loops if lp.spatial] == ["m"]
    flat = StructureSpace(workload(CHAIN, m=8, l=8, k=4, n=4), small_arch(cores=2, pes=4))
    assert list(flat.level_seeds()) == ["fused-at-L1"]


def test_a_seed_fused_at_the_operators_own_level_is_the_hand_trees_structure():
    """The imported weight-stationary chip (DRAM, GlobalBuffer, RegisterFile): its best
    known GEMM chain (65,536 cycles, the MAC floor) fuses both GEMMs in the GlobalBuffer
    under a DRAM tile stepping through blocks; the seed fused at the GlobalBuffer has that
    structure, so the structure search starts from it (seed 0 of the suite ended 12.5 %
    above it on the Chimera structure without it)."""
    from tileflow.interop.files import load_arch_any

    quality = Path(__file__).resolve().parents[2] / "search" / "quality"
    arch = load_arch_any(str(quality / "chips" / "ws-array.arch.yaml"))
    w = load_workload("gemm-chain", {"b": 1, "m": 256, "l": 256, "k": 64, "n": 64})
    space = StructureSpace(w, arch)
    seeds = space.level_seeds()
    assert list(seeds) == ["fused-at-GlobalBuffer"]
    seed = decode(space.frame, seeds["fused-at-GlobalBuffer"])
    hand = load_dataflow_file(str(quality / "trees" / "ws-array.gemm-chain.yaml"))

    def shape(flow) -> list[tuple]:
        """Each tile: level, children, primitive where it has several, and which dims of
        more than one element it spreads."""
        return [(t.level, len(t.children), t.primitive if len(t.children) > 1 else None,
                 sorted({lp.dim for lp in t.loops if lp.spatial and w.sizes[lp.dim] > 1}))
                for _, t in walk(flow.root) if isinstance(t, Tile)]

    assert shape(seed) == shape(hand)


THREE_LEVEL = """\
name: 3level
clock_ghz: 1.0
word_bits: 8
levels:
- {name: MainMemory, read_words_per_cycle: 1.0e9, write_words_per_cycle: 1.0e9,
   energy_pj_per_word: 64.0}
- {name: GlobalBuffer, fanout: 1, capacity_words: 262144, read_words_per_cycle: 1.0e9,
   write_words_per_cycle: 1.0e9, energy_pj_per_word: {read: 5.42, write: 3.86, update: 3.86}}
- {name: RegisterFile, fanout: 1, capacity_words: 64, read_words_per_cycle: 1.0e9,
   write_words_per_cycle: 1.0e9, energy_pj_per_word: 0.43}
compute:
  matrix: {rows: 1, cols: 1, level: RegisterFile, energy_pj_per_op: 0.845}
"""
CONV1D_OC = """\
name: conv1d-oc
dims: {K: 32, R: 3, P: 16}
ops:
- {name: conv, expr: 'Outputs[K,P] += Weights[K,R] * Inputs[R+P]'}
"""


def test_the_search_finds_the_cheaper_mapping_that_bypasses_the_buffer(tmp_path):
    """Timeloop's three-level exercise (conv1d with output channels; unlimited bandwidth,
    so every mapping takes the same cycles): a buffer read costs 5.42 pJ on top of the
    register file's, so keeping no tensor in the buffer saves energy. With bypass genes the
    genetic search finds a mapping at least 5 % cheaper than without them, and it skips the
    buffer."""
    from tileflow.explore.structures.fitness import random_fit
    from tileflow.explore.structures.genetic import GAConfig, search

    (tmp_path / "arch.yaml").write_text(THREE_LEVEL)
    arch = load_arch(str(tmp_path / "arch.yaml"))
    w = workload(CONV1D_OC)
    config = GAConfig(population=8, generations=6, budget=64, objectives=("energy",), seed=0)
    best = {}
    for bypass in (False, True):
        space = StructureSpace(w, arch, SpaceOptions(bypass=bypass))
        best[bypass] = search(space, config, random_fit).best
    assert best[True].energy_pj < 0.95 * best[False].energy_pj
    assert best[True].cycles == pytest.approx(best[False].cycles)
    assert any(lv == 1 for _, lv in best[True].encoding.bypass)


def test_a_fused_group_spreads_over_a_dim_every_member_keeps():
    """SwiGLU fused at the five-level chip's L3: gate, up, silu and mul keep `m` and `f` in
    their outputs, `down` keeps `m` and `e` and sums over `f`. Spread over `f` (the largest
    shared dim), each core would hold a partial `down` output; the default spreads `m`,
    which every member's output keeps, across the clusters and the cores."""
    quality = Path(__file__).resolve().parents[2] / "search" / "quality"
    w = load_workload(str(quality / "workloads" / "swiglu.yaml"),
                      {"m": 256, "d": 512, "f": 1536, "e": 512})
    space = StructureSpace(w, load_arch(str(quality / "chips" / "wide-5level.yaml")))
    flow = decode(space.frame, space.level_seeds()["fused-at-L3"])
    spread = {lp.dim for _, node in walk(flow.root) if isinstance(node, Tile)
              and len(node.children) > 1 for lp in node.loops if lp.spatial}
    assert spread == {"m"}
