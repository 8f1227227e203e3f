"""Encodings: trees -> genes -> trees is the identity on every named baseline and on random
encodings; every rule the decoder enforces is a rule the model enforces; broken encodings
are rejected by `decode` and made valid by `repair`, which counts what it changed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from explore.spaces import DIAMOND
from helpers import small_arch, workload
from scalar_prepare import prepare

from tileflow.cost import evaluate
from tileflow.dataflows import baselines_for, build
from tileflow.evaluator.structure import structure_of
from tileflow.explore.structures.canonical import canonical, encode, repair, shape
from tileflow.explore.structures.encoding import Encoding, Frame, InvalidEncoding, decode
from tileflow.explore.structures.structure_space import StructureSpace
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import Loop, Tile, map_tiles

SMALL = {"attention": {"b": 2, "m": 64, "l": 64, "k": 16, "n": 16},
         "gemm-chain": {"b": 2, "m": 64, "l": 64, "k": 16, "n": 16},
         "mlp": {"m": 64, "d": 32, "f": 64, "e": 32},
         "conv-chain": {"h": 16, "w": 16, "c0": 8, "c1": 16, "c2": 8}}


@pytest.mark.parametrize("arch_name", ["edge", "cloud"])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_baseline_round_trips_with_the_same_numbers(name, arch_name):
    w, arch = load_workload(name, SMALL[name]), load_arch(arch_name)
    frame = Frame(w, arch)
    for baseline in baselines_for(w):
        flow = build(baseline, w, arch)
        enc = encode(frame, flow)
        back = decode(frame, enc)
        assert shape(back.root) == shape(flow.root), baseline
        assert canonical(frame, enc) == enc
        # the decoded tree carries the baseline's factors slot for slot: same numbers
        factors = structure_of(w, arch, flow).default_factors
        again = structure_of(w, arch, back).dataflow(factors)
        a, b = evaluate(w, arch, flow), evaluate(w, arch, again)
        assert (a.cycles, a.energy_pj, a.dram_words, a.valid) == \
            (b.cycles, b.energy_pj, b.dram_words, b.valid), baseline
        assert prepare(w, arch, again).homes == prepare(w, arch, flow).homes


@pytest.mark.parametrize("name", ["attention", "conv-chain", "diamond"])
def test_random_encodings_round_trip(name):
    w = workload(DIAMOND) if name == "diamond" else load_workload(name, SMALL[name])
    space = StructureSpace(w, load_arch("edge"))
    rng = np.random.default_rng(7)
    for _ in range(40):
        enc = space.random(rng)
        flow = decode(space.frame, enc)
        assert encode(space.frame, flow, enc.share) == enc
        assert shape(decode(space.frame, encode(space.frame, flow, enc.share)).root) == \
            shape(flow.root)


def test_any_fusion_forest_decodes_to_the_tree_of_its_canonical_form():
    """Different forests with the same sharing are one tree; canonical() picks one."""
    space = StructureSpace(load_workload("attention", SMALL["attention"]), load_arch("edge"))
    rng = np.random.default_rng(3)
    n = space.n
    for _ in range(60):
        into = tuple(int(rng.integers(o + 1, n)) if o < n - 1 and rng.random() < 0.8 else -1
                     for o in range(n))
        level = tuple(int(rng.integers(0, 2)) for _ in range(n))
        enc = space.defaults(into, level)  # repaired, canonical
        raw = replace(enc, into=into, level=level)
        try:
            tree = decode(space.frame, raw)
        except InvalidEncoding as error:
            assert error.rule in ("cycle", "loops", "coverage")
            continue
        assert shape(decode(space.frame, canonical(space.frame, raw)).root) == shape(tree.root)


def _chain():
    w = load_workload("gemm-chain", SMALL["gemm-chain"])
    return w, StructureSpace(w, load_arch("edge"))


def test_fusion_into_an_earlier_operator_is_rejected_and_reversed():
    w, space = _chain()
    fused = space.defaults((1, -1), (0, 0))
    backwards = replace(fused, into=(-1, 0), level=(0, 0))
    with pytest.raises(InvalidEncoding) as error:
        decode(space.frame, backwards)
    assert error.value.rule == "order"
    fixed, fixes = repair(space.frame, backwards)
    assert fixes["order"] == 1
    assert fixed.into == (1, -1) and fixed.level == (0, 0)


def test_para_between_producer_and_consumer_is_rejected_by_both_and_repaired_to_pipe():
    w, space = _chain()
    enc = space.defaults((1, -1), (0, 0), primitive=("Para", "Seq"))
    assert enc.primitive[0] == "Pipe"
    bad = replace(enc, primitive=("Para", "Seq"))
    with pytest.raises(InvalidEncoding) as error:
        decode(space.frame, bad)
    assert error.value.rule == "para"
    flow = decode(space.frame, enc)
    as_para = replace(flow, root=replace(flow.root, primitive="Para"))
    result = evaluate(w, space.frame.arch, structure_of(w, space.frame.arch, as_para).template)
    assert not result.valid and "dependency" in {v.kind for v in result.violations}
    assert repair(space.frame, bad)[1]["para"] == 1


def test_a_cycle_between_fused_groups_is_rejected_and_dissolved():
    """q x k fused with x v, the softmax outside: the group needs the softmax before and
    after it."""
    space = StructureSpace(load_workload("attention", SMALL["attention"]), load_arch("edge"))
    n = space.n
    into = (n - 1,) + (-1,) * (n - 1)
    enc = Encoding(into, (1,) + (0,) * (n - 1), ("Seq",) * n, (-1,) * n, (1,) * n, "Seq", ())
    with pytest.raises(InvalidEncoding) as error:
        decode(space.frame, enc)
    assert error.value.rule == "cycle"
    fixed, fixes = repair(space.frame, enc)
    assert fixes["cycle"] >= 1
    assert fixed.into == (-1,) * n  # dissolved: nothing fused
    prepare(space.frame.workload, space.frame.arch, space.structure(fixed).template)


def test_a_loop_over_a_producer_reduction_in_the_group_is_pruned_as_the_model_rejects_it():
    """l is the reduction of max, whose result sub reads: no loop over l above both."""
    w = load_workload("attention", SMALL["attention"])
    space = StructureSpace(w, load_arch("edge"))
    fused = space.defaults((1, 2, 3, 4, 5, 6, -1), (0,) * 7)
    key = next(k for k in fused.loop_map if "+" in k)
    assert {d for d, _ in fused.loop_map[key]} == {"b", "m"}
    bad = fused.with_loops({**fused.loop_map, key: (*fused.loop_map[key], ("l", False))})
    with pytest.raises(InvalidEncoding) as error:
        decode(space.frame, bad)
    assert error.value.rule == "loops"
    fixed, fixes = repair(space.frame, bad)
    assert fixes["loops"] == 1 and fixed == fused
    # the model agrees: the same loop with two steps makes the tree invalid
    template = space.structure(fused).template

    def add_l(path, tile: Tile) -> Tile:
        return replace(tile, loops=(*tile.loops, Loop("l", 2))) if path == "root" else tile
    result = evaluate(w, space.frame.arch,
                      replace(template, root=map_tiles(template.root, add_l)))
    assert not result.valid
    assert any(v.kind == "dependency" and "reduction" in v.message for v in result.violations)


def test_a_home_no_path_passes_through_is_rejected_and_reset():
    w = workload(DIAMOND)
    space = StructureSpace(w, small_arch())
    enc = space.defaults((1, 2, 3, -1), (1, 1, 1, 0))
    reg = space.frame.arch.level_index["Reg"]  # b, c, d are vector ops: no Reg tiles
    bad = replace(enc, home=(reg, -1, -1, -1))
    with pytest.raises(InvalidEncoding) as error:
        decode(space.frame, bad)
    assert error.value.rule == "home"
    fixed, fixes = repair(space.frame, bad)
    assert fixes["home"] == 1 and fixed.home[0] == -1
