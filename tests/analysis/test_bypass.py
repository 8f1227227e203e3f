"""Bypass: a tensor listed in a tile's `bypass` is not held at that tile's level; it moves
between the nearest levels above and below that hold it. GEMM m = n = k = 4 on DRAM -> L1
-> Reg, one MAC per Reg; every count is derived by hand in the test."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import GEMM, small_arch, workload
from ruamel.yaml import YAML

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.specs.dataflow import parse_dataflow
from tileflow.specs.yamlfile import Field
from tileflow.tree import Dataflow, tile, to_dict

W = workload(GEMM, m=4, n=4, k=4)


def flow(l1_spec="n:4 m:4", l1_bypass=(), reg_bypass=(), dram_spec="") -> Dataflow:
    reg = tile("Reg", "k:4", "mm", bypass=reg_bypass)
    return Dataflow(tile("DRAM", dram_spec, tile("L1", l1_spec, reg, bypass=l1_bypass)))


def moves(result, level, tensor):
    m = result.traffic.get(level, {}).get(tensor)
    return (m.fill, m.read, m.update) if m else (0, 0, 0)


def test_an_input_that_bypasses_the_buffer_comes_straight_from_dram():
    """L1 loops n outer, m inner: A's row changes at all 16 steps, 4 words each: 64 words
    into Reg. Held in L1: DRAM sends A once (16), L1 serves the 64. Bypassing L1: DRAM
    sends the 64 itself, L1 holds no A (footprint 48 - 16)."""
    kept = evaluate(W, small_arch(), flow())
    assert moves(kept, "DRAM", "A") == (0, 16, 0)
    assert moves(kept, "L1", "A") == (16, 64, 0)
    assert moves(kept, "Reg", "A")[0] == 64
    assert kept.peak_footprint("L1") == 16 + 16 + 16
    skip = evaluate(W, small_arch(), flow(l1_bypass=("A",)))
    assert moves(skip, "DRAM", "A") == (0, 64, 0)
    assert moves(skip, "L1", "A") == (0, 0, 0)
    assert moves(skip, "Reg", "A")[0] == 64
    assert skip.peak_footprint("L1") == 16 + 16
    for t in ("B", "C"):  # the other tensors are untouched
        assert moves(skip, "L1", t) == moves(kept, "L1", t)


def test_an_operand_that_bypasses_the_registers_is_read_by_the_unit_from_the_buffer():
    """B skips Reg: nothing of B enters Reg; the 64 MACs read B from L1 (64 reads)."""
    r = evaluate(W, small_arch(), flow(reg_bypass=("B",)))
    assert moves(r, "Reg", "B") == (0, 0, 0)
    assert moves(r, "L1", "B") == (16, 64, 0)
    assert moves(r, "Reg", "A")[1] == 64


def test_the_unit_fed_from_a_slow_level_is_bound_by_it():
    """B bypasses L1 and Reg, read from DRAM at 0.5 words/cycle: 64 reads take 128 cycles,
    more than the 64 MACs, and bind the leaf (the bypass named). A is loaded by the root
    (16 words: 32 cycles) through the same DRAM read port, one for the whole tree: the
    run takes (64 + 16) / 0.5 = 160 cycles."""
    arch = small_arch()
    arch = replace(arch, levels=(replace(arch.levels[0], read_words_per_cycle=0.5),
                                 *arch.levels[1:]))
    r = evaluate(W, arch, flow(l1_bypass=("B",), reg_bypass=("B",)), overlap="perfect")
    assert moves(r, "DRAM", "B") == (0, 64, 0)
    leaf_bound = next(n for n in r.latency_breakdown if n.path == "root.0")
    assert leaf_bound.inner_cycles == 128
    assert r.cycles == 160 and r.bottleneck.level == "DRAM"


def test_the_level_above_sends_one_union_to_the_instances_below_the_skipped_level():
    """n over the 2 cores: both need the same rows of A. Bypassing L1, DRAM multicasts each
    row once (4 rows of 4 words) and both cores' registers take it (2 x 16)."""
    r = evaluate(W, small_arch(), flow("m:4 n:2", ("A",), dram_spec="n:2:Sp"))
    assert moves(r, "DRAM", "A") == (0, 16, 0)
    assert moves(r, "Reg", "A")[0] == 2 * 16


def test_an_output_that_bypasses_the_registers_accumulates_in_the_buffer():
    """C skips Reg: the 64 MACs update C in L1 and read it back except on first touch."""
    r = evaluate(W, small_arch(), flow(reg_bypass=("C",)))
    assert moves(r, "Reg", "C") == (0, 0, 0)
    assert moves(r, "L1", "C") == (0, 64 - 16, 64)
    assert moves(r, "DRAM", "C") == (0, 0, 16)


def test_bad_bypass_is_reported_and_the_key_round_trips():
    with pytest.raises(InvalidDataflow, match="outermost"):
        evaluate(W, small_arch(), Dataflow(tile("DRAM", "", tile("L1", "m:4 n:4 k:4", "mm"),
                                                bypass=("A",))))
    with pytest.raises(InvalidDataflow, match="unknown tensor 'Z'"):
        evaluate(W, small_arch(), flow(l1_bypass=("Z",)))
    text = ("root: {level: DRAM, children: [{level: L1, loops: [m:4, n:4], bypass: [A], "
            "children: [{level: Reg, loops: [k:4], children: [mm]}]}]}\n")
    parsed = parse_dataflow(Field(YAML(typ="rt").load(text), "f.yaml"))
    assert parsed.root.children[0].bypass == ("A",)
    assert to_dict(parsed)["root"]["children"][0]["bypass"] == ["A"]


def test_operands_read_through_the_skipped_registers_are_multicast():
    """A and B skip Reg; L1 runs m:2 n:2 k:4 in time and m:2 x n:2 over the 4 PEs of a
    core. At each of the 16 steps the PEs need 2 distinct A words (A[m, k] is the same
    for both n) and 2 distinct B words: L1 reads 16 x 2 of each, not one per MAC (64)."""
    tree = Dataflow(tile("DRAM", "", tile("L1", "m:2 n:2 k:4 m:2:Sp n:2:Sp",
                                          tile("Reg", "", "mm", bypass=("A", "B")))))
    r = evaluate(W, small_arch(cores=1), tree)
    assert r.ops["mm"] == 64
    assert moves(r, "L1", "A")[1] == 16 * 2 and moves(r, "L1", "B")[1] == 16 * 2
    assert moves(r, "Reg", "A") == moves(r, "Reg", "B") == (0, 0, 0)


def test_a_multicast_element_is_sent_while_any_instance_needing_it_is_real():
    """n = 3 over n:2 in time x n:2 PEs (the last n clipped), A and B skip Reg; L1 steps
    m:4 n:2 k:4 in time: 32 steps. A[m, k] is the same for both PEs, and the first PE is
    real at every step: one A word a step, 32 (one per real MAC's share would be 24).
    B[k, n]: 2 real PEs at the first n step, 1 at the second: 4 x (2 + 1) x 4 = 48. The
    MACs: 4 x 3 x 4 = 48."""
    w = workload(GEMM, m=4, n=3, k=4)
    tree = Dataflow(tile("DRAM", "", tile("L1", "m:4 n:2 k:4 n:2:Sp",
                                          tile("Reg", "", "mm", bypass=("A", "B")))))
    r = evaluate(w, small_arch(cores=1, pes=2), tree)
    assert r.ops["mm"] == 48
    assert moves(r, "L1", "A")[1] == 4 * 2 * 4  # per (m, n-step, k): one word
    assert moves(r, "L1", "B")[1] == 4 * (2 + 1) * 4


CONV_1D = """
name: conv
dims: {p: 4, r: 3}
ops:
  - {name: conv, expr: "Y[p] += X[p+r] * F[r]"}
"""


def test_a_window_read_through_the_skipped_registers_sends_the_union_of_the_taps():
    """X[p + r] and F[r] skip Reg; L1 steps p:2 in time, p:2 x r:3 over 6 PEs. At each step
    the PEs need X at p0 + {0, 1} + {0, 1, 2}: 4 distinct words of their 6, and the 3 taps
    of F (the same for both p): L1 reads 2 x 4 of X and 2 x 3 of F for the 12 MACs."""
    w = workload(CONV_1D)
    tree = Dataflow(tile("DRAM", "", tile("L1", "p:2 p:2:Sp r:3:Sp",
                                          tile("Reg", "", "conv", bypass=("X", "F")))))
    r = evaluate(w, small_arch(cores=1, pes=6), tree)
    assert r.ops["conv"] == 12
    assert moves(r, "L1", "X")[1] == 2 * 4 and moves(r, "L1", "F")[1] == 2 * 3


CHAIN_2 = """
name: chain
dims: {m: 4, l: 2, k: 1, n: 1}
ops:
  - {name: g1, expr: "C[m,l] += A[m,k] * B[k,l]"}
  - {name: g2, expr: "E[m,n] += C[m,l] * D[l,n]"}
"""


def test_an_intermediate_bypassed_at_its_home_stays_there():
    """C (4 x 2) lives in L1, its home under the DRAM root. g2's L1 tile lists it in
    `bypass`: the homes rule wins, so g1 updates its 8 elements in L1 once each (k = 1),
    g2's 8 MACs read them there (n = 1), and C never reaches DRAM (it was never written
    there). Everything, footprints included, is as without the bypass."""
    w = workload(CHAIN_2)

    def chain(bypass: tuple[str, ...]) -> Dataflow:
        return Dataflow(tile("DRAM", "", tile("L1", "m:4 l:2", "g1"),
                             tile("L1", "m:4 l:2", "g2", bypass=bypass)))
    skip = evaluate(w, small_arch(), chain(("C",)))
    assert moves(skip, "L1", "C") == (0, 8, 8)
    assert "C" not in skip.traffic.get("DRAM", {})
    kept = evaluate(w, small_arch(), chain(()))
    assert skip.traffic == kept.traffic
    assert skip.peak_footprint("L1") == kept.peak_footprint("L1")


TWO_GEMMS = """
name: two-gemms
dims: {m: 4, n: 4, k: 4}
ops:
  - {name: mm1, expr: "C[m,n] += A[m,k] * B[k,n]"}
  - {name: mm2, expr: "F[m,n] += D[m,k] * E[k,n]"}
"""


@pytest.mark.parametrize("overlap", ["perfect", "fill-drain", "lockstep"])
def test_units_fed_from_dram_at_once_share_its_read_port(overlap: str):
    """Two independent GEMMs side by side (Para at DRAM, one core each), B and E bypassing
    L1 and Reg: each unit reads its 64 operands straight from DRAM at 0.5 words/cycle, 128
    cycles alone. DRAM has one read port for the whole tree: B 64 + E 64, plus A and D
    loaded once into L1 (16 each), are 160 words, 320 cycles, a bound on the whole run
    (without it the two units would each take the port whole: 128)."""
    w = workload(TWO_GEMMS)
    arch = small_arch()
    arch = replace(arch, levels=(replace(arch.levels[0], read_words_per_cycle=0.5),
                                 *arch.levels[1:]))

    def side(op: str, operand: str):
        return tile("L1", "n:4 m:4", tile("Reg", "k:4", op, bypass=(operand,)),
                    bypass=(operand,))

    tree = Dataflow(tile("DRAM", "", side("mm1", "B"), side("mm2", "E"), primitive="Para"))
    r = evaluate(w, arch, tree, overlap=overlap)
    assert r.valid, r.violations
    assert [moves(r, "DRAM", t)[1] for t in "ABDE"] == [16, 64, 16, 64]
    assert r.cycles == 320
    root = next(n for n in r.latency_breakdown if n.path == "root")
    assert root.shared_port_cycles > 0 and root.cycles == 320  # the port, added at the root
    assert r.bottleneck.level == "DRAM"


def one_register_file_for_two_units():
    """small_arch on one core with one register file (one instance, read at 0.5 words per
    cycle) feeding two MAC units, and two GEMMs side by side under L1 (Para), their
    results bypassing the registers (accumulated in L1): the register file's read port
    carries only what the units read there."""
    arch = small_arch(cores=1)
    dram, l1, reg = arch.levels
    arch = replace(arch, levels=(dram, l1, replace(reg, fanout=1, instances=1,
                                                   read_words_per_cycle=0.5)),
                   matrix=replace(arch.matrix, parallelism=2, rows=2, cols=1))
    tree = Dataflow(tile("DRAM", "", tile(
        "L1", "n:4 m:4", tile("Reg", "k:4", "mm1", bypass=("C",)),
        tile("Reg", "k:4", "mm2", bypass=("F",)), primitive="Para")))
    return workload(TWO_GEMMS), arch, tree


@pytest.mark.parametrize("overlap", ["perfect", "fill-drain", "lockstep"])
def test_units_reading_one_register_file_at_once_share_its_read_port(overlap: str):
    """Each unit reads A and B once per MAC, 64 + 64 words, 256 cycles alone at 0.5 words
    per cycle; the two at once read 256 words through the one read port: 512 cycles, the
    whole tree's bound, named as that port."""
    w, arch, tree = one_register_file_for_two_units()
    r = evaluate(w, arch, tree, overlap=overlap)
    assert r.valid, r.violations
    assert r.cycles == 512
    b = r.bottleneck
    assert (b.kind, b.level, b.node) == ("read", "Reg", "root")
    assert b.message == "Reg read port (reads of the whole tree through it)"
