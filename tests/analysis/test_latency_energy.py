"""Latency and energy, derived by hand on small trees (one instance per level, so every
figure is a plain sum), and invariants that hold on random trees."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from helpers import GEMM, TWINS, small_arch, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_sim import Oracle
from ruamel.yaml import YAML
from trees import ARCH as RANDOM_ARCH
from trees import trees

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.specs.arch import Architecture, ComputeUnit, Level, parse_arch
from tileflow.specs.yamlfile import Field
from tileflow.tree import Dataflow, Tile, tile, walk

INF = math.inf


def arch(dram_bw: float = INF, reg_read: float = INF, overhead: float = 0.0,
         latency: float = 0.0) -> Architecture:
    """DRAM -> L1 -> Reg, one instance each; per-word energies read/write/update differ."""
    levels = (
        Level("DRAM", INF, 1, 1, dram_bw, dram_bw, 2.0, 3.0, 5.0, overhead, latency),
        Level("L1", INF, 1, 1, INF, INF, 0.2, 0.3, 0.5),
        Level("Reg", INF, 1, 1, reg_read, INF, 0.01, 0.02, 0.03),
    )
    matrix = ComputeUnit("matrix", "Reg", 1, 1.5, {"default": 1.0}, 1, 1)
    vector = ComputeUnit("vector", "L1", 1, 0.7, {"default": 1.0, "exp": 4.0}, 1, 1)
    return Architecture("hand", levels, matrix, vector, 1.0, 2)


def twins(primitive: str) -> Dataflow:
    """g1: 4 x 3 x 3 = 36 steps on one MAC, g2: 4 x 2 x 3 = 24."""
    return Dataflow(tile("DRAM", "", tile("L1", "m:4 n:3 k:3", tile("Reg", "", "g1")),
                         tile("L1", "m:4 j:2 k:3", tile("Reg", "", "g2")),
                         primitive=primitive))


@pytest.mark.parametrize("primitive, cycles", [("Seq", 36 + 24), ("Shar", 36 + 24),
                                               ("Para", max(36, 24))])
def test_seq_and_shar_add_their_children_para_takes_the_longest(primitive, cycles):
    r = evaluate(workload(TWINS), arch(), twins(primitive), fill_drain=False)
    assert r.cycles == cycles
    b = r.bottleneck
    assert (b.kind, b.unit, b.level, b.node) == ("compute", "matrix", None, "root.0.0.0")


def test_pipe_overlaps_its_stages_with_fill_and_drain():
    """4 steps of m; per step g1 takes 3 x 3 = 9 cycles and g2 2 x 3 = 6: the pipeline takes
    9 + 6 to fill and drain and 3 more steps of its slowest stage, 9 each."""
    flow = Dataflow(tile("DRAM", "m:4", tile("L1", "n:3 k:3", tile("Reg", "", "g1")),
                         tile("L1", "j:2 k:3", tile("Reg", "", "g2")), primitive="Pipe"))
    r = evaluate(workload(TWINS), arch(), flow, fill_drain=False)
    assert r.cycles == (9 + 6) + (4 - 1) * 9


def test_a_vector_operation_takes_its_cycles_per_operation():
    w = workload("""
        name: act
        dims: {m: 3, l: 4}
        ops:
          - {name: ex, expr: "E[m,l] = exp(D[m,l])"}
        """)
    r = evaluate(w, arch(), Dataflow(tile("DRAM", "", tile("L1", "m:3 l:4", "ex"))))
    assert r.cycles == 3 * 4 * 4.0
    assert (r.bottleneck.kind, r.bottleneck.unit, r.bottleneck.node) == \
        ("compute", "vector", "root.0.0")
    assert r.energy_pj == pytest.approx(12 * 0.7 + _traffic_energy(r, arch()))


def test_a_leaf_limited_by_operand_bandwidth():
    """36 MACs read A and B once each and C on all but its 12 first touches: 96 words from a
    register level that delivers half a word per cycle: the leaf takes 192 cycles, not 36.
    The register level has one instance, so one read port for the whole tree: C's 12 words
    written back to L1 read it too, (96 + 12) / 0.5 = 216 cycles."""
    w = workload(GEMM, m=4, n=3, k=3)
    flow = Dataflow(tile("DRAM", "", tile("L1", "m:4 n:3 k:3", tile("Reg", "", "mm"))))
    r = evaluate(w, arch(reg_read=0.5), flow, fill_drain=False)
    assert r.cycles == (36 + 36 + 24 + 12) / 0.5
    leaf_tile = r.latency_frame().set_index("path").loc["root.0.0"]
    assert leaf_tile.inner_cycles == (36 + 36 + 24) / 0.5
    b = r.bottleneck
    assert (b.kind, b.level, b.unit, b.node) == ("read", "Reg", None, "root")


def test_per_step_overhead_and_first_word_latency_of_a_level():
    """Two steps of n at DRAM, 4 words per cycle, 10 cycles of overhead per step read and
    50 before the first word. Loads: A and B once (32 words: 8 cycles) + 2 x 10 = 28;
    compute 4 x 2 x 4 x 2 = 64; C written once (16 words: 4). Overlapped: 64; the first load
    and the last store are not hidden: (28 + 64 + 4 - 64) / 2 = 16 more, and the latency 50."""
    w = workload(GEMM, m=4, n=4, k=4)
    flow = Dataflow(tile("DRAM", "n:2", tile("L1", "m:4 n:2 k:4", tile("Reg", "", "mm"))))
    r = evaluate(w, arch(dram_bw=4.0, overhead=10.0, latency=50.0), flow)
    assert r.cycles == 64 + 16 + 50
    root = r.latency_frame().set_index("path").loc["root"]
    assert (root.load_cycles, root.inner_cycles, root.store_cycles) == (28, 64, 4)
    assert root.fill_drain_cycles == 16 + 50 and root.cycles == r.cycles
    assert evaluate(w, arch(dram_bw=4.0, overhead=10.0, latency=50.0), flow,
                    fill_drain=False).cycles == 64


def test_the_bottleneck_names_the_binding_bandwidth():
    """The same tree with DRAM at a quarter word per cycle: loads take 32 / 0.25 = 128."""
    w = workload(GEMM, m=4, n=4, k=4)
    flow = Dataflow(tile("DRAM", "n:2", tile("L1", "m:4 n:2 k:4", tile("Reg", "", "mm"))))
    r = evaluate(w, arch(dram_bw=0.25), flow, fill_drain=False)
    assert r.cycles == 32 / 0.25
    b = r.bottleneck
    assert (b.kind, b.level, b.unit, b.node) == ("read", "DRAM", None, "root")


def test_energy_per_level_and_tensor():
    """Everything in L1 and in the register: DRAM reads A and B (16 words each, 2 pJ) and is
    updated with C (16, 5 pJ); L1 is filled with A, B (0.3), read for them (0.2) and updated
    with C (0.5); the register is filled with A, B (0.02), read 64 + 64 + 48 times (0.01,
    no read of C on its 16 first touches) and updated 64 times (0.03); 64 MACs at 1.5 pJ."""
    w = workload(GEMM, m=4, n=4, k=4)
    flow = Dataflow(tile("DRAM", "", tile("L1", "", tile("Reg", "m:4 n:4 k:4", "mm"))))
    r = evaluate(w, arch(), flow)
    e = r.energy_by_level_pj
    assert e["DRAM"] == {"A": 32, "B": 32, "C": 80}
    assert e["L1"]["A"] == pytest.approx(16 * 0.3 + 16 * 0.2)
    assert e["L1"]["C"] == pytest.approx(16 * 0.5)
    assert e["Reg"]["C"] == pytest.approx(48 * 0.01 + 64 * 0.03)
    assert e["Reg"]["A"] == pytest.approx(16 * 0.02 + 64 * 0.01)
    assert r.compute_energy_pj == 64 * 1.5
    assert r.energy_pj == pytest.approx(144 + 24 + 4.32 + 96)


SRAM = """
name: sizes
word_bits: {bits}
levels:
  - {{name: DRAM, read_words_per_cycle: 8, write_words_per_cycle: 8}}
  - {{name: Small, capacity_bytes: 256, fanout: 1, read_words_per_cycle: 8,
     write_words_per_cycle: 8}}
  - {{name: Mid, capacity_bytes: 10240, fanout: 1, read_words_per_cycle: 8,
     write_words_per_cycle: 8}}
  - {{name: Big, capacity_bytes: 8388608, fanout: 1, read_words_per_cycle: 8,
     write_words_per_cycle: 8}}
compute:
  matrix: {{rows: 1, cols: 1, level: Big}}
"""


@pytest.mark.parametrize("bits, scale", [(16, 1), (32, 2)])
def test_the_default_energy_per_word_grows_with_the_sram_size(bits, scale):
    """200 pJ for DRAM; SRAM log-log through 1 pJ at 0.5 KB, 6 pJ at 100 KB, 100 pJ at 2 MB
    (flat below and above); per 16 bits."""
    a = parse_arch(Field(YAML(typ="rt").load(SRAM.format(bits=bits)), "sizes.yaml"))
    energy = {lv.name: lv.read_energy_pj for lv in a.levels}
    assert energy["DRAM"] == 200 * scale
    assert energy["Small"] == 1 * scale
    assert energy["Mid"] == pytest.approx(6 ** (math.log(20) / math.log(200)) * scale)
    assert energy["Big"] == 100 * scale
    assert all(lv.write_energy_pj == lv.update_energy_pj == lv.read_energy_pj
               for lv in a.levels)


def _traffic_energy(r, a: Architecture) -> float:
    total = 0.0
    for lv in a.levels:
        for m in r.traffic.get(lv.name, {}).values():
            total += (m.fill * lv.write_energy_pj + m.read * lv.read_energy_pj
                      + m.update * lv.update_energy_pj)
    return total


SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))
TEXTS = {"gemm": GEMM, "twins": TWINS}
NAMES = [lv.name for lv in RANDOM_ARCH.levels]
ENERGETIC = replace(RANDOM_ARCH, levels=tuple(
    replace(lv, read_energy_pj=1.0 + i, write_energy_pj=10.0 + i, update_energy_pj=100.0 + i)
    for i, lv in enumerate(RANDOM_ARCH.levels)))


@pytest.mark.parametrize("name", TEXTS)
def test_energy_utilisation_and_dram_bound_on_random_trees(name):
    w = workload(TEXTS[name])

    @SETTINGS
    @given(trees(w))
    def check(flow):
        try:
            r = evaluate(w, ENERGETIC, flow)
        except InvalidDataflow:
            return
        compute = sum(n * ENERGETIC.unit(w.op_by_name[o].unit).energy_pj_per_op
                      for o, n in r.ops.items())
        assert r.energy_pj == pytest.approx(_traffic_energy(r, ENERGETIC) + compute)
        if not any(v.kind in ("fanout", "array") for v in r.violations):
            assert 0 <= r.utilization <= 1 + 1e-9
        dram = ENERGETIC.levels[0]
        assert r.cycles >= r.level_reads("DRAM") / dram.read_words_per_cycle - 1e-9
        assert r.cycles >= r.level_writes("DRAM") / dram.write_words_per_cycle - 1e-9
        frame = r.latency_frame().set_index("path")
        assert frame.loc["root", "cycles"] == pytest.approx(r.cycles)
        for path, node in walk(flow.root):
            if isinstance(node, Tile) and node.primitive in ("Seq", "Shar") and \
                    all(isinstance(c, Tile) for c in node.children):
                kids = [frame.loc[f"{path}.{i}", "cycles"] for i in range(len(node.children))]
                assert frame.loc[path, "inner_cycles"] == pytest.approx(sum(kids))

    check()


@pytest.mark.parametrize("name", TEXTS)
def test_a_footprint_is_flagged_exactly_when_the_oracle_holds_more_than_the_capacity(name):
    w = workload(TEXTS[name])

    @SETTINGS
    @given(trees(w), st.integers(1, 40), st.integers(1, 6))
    def check(flow, l1_words, reg_words):
        a = small_arch(l1_words=l1_words, reg_words=reg_words, pes=64)
        try:
            r = evaluate(w, a, flow)
        except InvalidDataflow:
            return
        if any(v.kind in ("coverage", "dependency", "window") for v in r.violations):
            return
        held = Oracle(w, NAMES, flow).footprints
        over = {lv.name for lv in a.levels[1:] if held[lv.name] > lv.capacity_words}
        assert {v.level for v in r.violations if v.kind == "capacity"} == over
        for v in r.violations:
            if v.kind == "capacity":
                assert (v.needed, v.available) == (held[v.level], a.level(v.level).capacity_words)

    check()


def test_children_at_once_share_the_one_dram_port():
    """Para of the twin GEMMs, each with a DRAM tile of its own, DRAM at 1 word per cycle:
    g1 reads A and B (12 + 9 words) while computing 36 cycles, g2 reads A and D (12 + 6)
    while computing 24; each alone fits in 36, but together they read 39 words through the
    one DRAM port: 39 cycles."""
    flow = Dataflow(tile("DRAM", "",
                         tile("DRAM", "", tile("L1", "m:4 n:3 k:3", tile("Reg", "", "g1"))),
                         tile("DRAM", "", tile("L1", "m:4 j:2 k:3", tile("Reg", "", "g2"))),
                         primitive="Para"))
    r = evaluate(workload(TWINS), arch(dram_bw=1.0), flow, fill_drain=False)
    assert r.cycles == (12 + 9) + (12 + 6)
    assert (r.bottleneck.kind, r.bottleneck.level, r.bottleneck.node) == ("read", "DRAM", "root")
    root = r.latency_frame().set_index("path").loc["root"]
    assert root.inner_cycles == 36 and root.shared_port_cycles == 3 and root.cycles == r.cycles
