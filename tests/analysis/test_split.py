"""Para and Pipe children run at once on disjoint compute units. When the Para/Pipe tile
itself spreads over instances (its own spatial loops), each instance holds only its share
of the units: the children's units times the tile's own spread must fit what the tile has."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import TWINS, workload
from ruamel.yaml import YAML

from tileflow.cost import evaluate
from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.structure import structure_of
from tileflow.specs.arch import parse_arch
from tileflow.specs.yamlfile import Field
from tileflow.tree import Dataflow, Tile, tile, walk

# 4 cores (L1 instances), each with an 8 x 8 array: 256 MACs under DRAM.
ARCH = """
name: four-cores
levels:
  - {name: DRAM, read_words_per_cycle: 8, write_words_per_cycle: 8, energy_pj_per_word: 200}
  - {name: L1, capacity_words: 100000, fanout: 4, read_words_per_cycle: 32,
     write_words_per_cycle: 32, energy_pj_per_word: 1}
  - {name: Reg, capacity_words: 64, fanout: 64, read_words_per_cycle: 1000,
     write_words_per_cycle: 1000, energy_pj_per_word: 0.1}
compute:
  matrix: {rows: 8, cols: 8, level: Reg}
"""


def twins_on_full_arrays(spread: int, primitive: str = "Pipe") -> Dataflow:
    """Each child spreads m x n (or m x j) over a whole core's 8 x 8 array; the root
    spreads the pair over `spread` cores (m = 32 in all)."""
    return Dataflow(tile(
        "DRAM", f"m:{spread}:Sp m:{4 // spread}",
        tile("L1", "k:8 m:8:Sp n:8:Sp", tile("Reg", "", "g1")),
        tile("L1", "k:8 m:8:Sp j:8:Sp", tile("Reg", "", "g2")),
        primitive=primitive))


def _run(spread: int, primitive: str = "Pipe"):
    w = workload(TWINS, m=32, n=8, k=8, j=8)
    arch = parse_arch(Field(YAML(typ="rt").load(ARCH), "four-cores.yaml"))
    return w, arch, evaluate(w, arch, twins_on_full_arrays(spread, primitive))


@pytest.mark.parametrize("primitive", ["Pipe", "Para"])
def test_the_tiles_own_spread_takes_its_share_of_the_units(primitive):
    """Two children of 64 MACs each need 128 per instance: 1 or 2 instances fit the 256
    MACs; 4 instances need 512."""
    for spread in (1, 2):
        assert [v for v in _run(spread, primitive)[2].violations if v.kind == "fanout"] == []
    [v] = [v for v in _run(4, primitive)[2].violations if v.kind == "fanout"]
    assert (v.node, v.level, v.needed, v.available, v.unit) == \
        ("root", "Reg", 4 * (64 + 64), 256, "matrix units")


def test_the_batched_evaluator_applies_the_same_share():
    """Rows differing only in the root's spread: the batch marks the same rows invalid."""
    w, arch, _ = _run(4)
    structure = structure_of(w, arch, twins_on_full_arrays(4))
    rows = []
    for spread in (1, 2, 4):
        flow = twins_on_full_arrays(spread)
        rows.append([lp.factor for _, t in walk(flow.root) if isinstance(t, Tile)
                     for lp in t.loops])
    out = evaluate_batch(structure, np.array(rows))
    assert [bool(v) for v in out.valid] == [True, True, False]


def test_an_instance_owns_whole_cores_when_the_spread_does_not_divide_them():
    """Children of 64 + 16 = 80 MACs per instance. Spread over 2 of the 4 cores, each instance
    owns 2 cores (128 MACs): valid. Spread over 3, each owns one core (64 MACs; the fourth
    core cannot serve two instances): invalid, needing 3 x 80 = 240 of the 3 x 64 = 192 the
    three instances own, although 240 is below the 256 MACs of all four cores."""
    w = workload(TWINS, m=24, n=8, k=8, j=8)
    arch = parse_arch(Field(YAML(typ="rt").load(ARCH), "four-cores.yaml"))

    def flow(spread: int) -> Dataflow:
        return Dataflow(tile(
            "DRAM", f"m:{spread}:Sp m:{3 // spread if spread == 3 else 2}",
            tile("L1", "k:8 m:8:Sp n:8:Sp", tile("Reg", "", "g1")),
            tile("L1", "k:8 j:4 m:8:Sp j:2:Sp", tile("Reg", "", "g2")),
            primitive="Pipe"))

    assert [v for v in evaluate(w, arch, flow(2)).violations if v.kind == "fanout"] == []
    [v] = [v for v in evaluate(w, arch, flow(3)).violations if v.kind == "fanout"]
    assert (v.node, v.needed, v.available) == ("root", 240, 192)
    structure = structure_of(w, arch, flow(3))
    rows = [[lp.factor for _, t in walk(flow(s).root) if isinstance(t, Tile) for lp in t.loops]
            for s in (2, 3)]
    assert [bool(v) for v in evaluate_batch(structure, np.array(rows)).valid] == [True, False]


# soc-l2's cores without its L2: 2 cores (L1 instances), each an 8 x 8 array and 16 lanes.
TWO_CORES = ARCH.replace("four-cores", "two-cores").replace("fanout: 4", "fanout: 2") \
    + "  vector: {lanes: 16, level: L1}\n"

SWIGLU = """
name: swiglu
dims: {m: 16, d: 8, f: 16, e: 8}
ops:
  - {name: gate, expr: "H[m,f] += X[m,d] * W1[d,f]"}
  - {name: up,   expr: "U[m,f] += X[m,d] * W3[d,f]"}
  - {name: silu, expr: "A[m,f] = silu(H[m,f])"}
  - {name: mul,  expr: "G[m,f] = A[m,f] * U[m,f]"}
  - {name: down, expr: "Y[m,e] += G[m,f] * W2[f,e]"}
"""


def swiglu_pipe(inner: str | None) -> Dataflow:
    """A DRAM `Pipe` over the five operators, two rows of `m` per step; each matmul's L1 tile
    spreads over a whole core's 8 x 8 array (64 MACs). With `inner`, gate and up sit in one
    DRAM tile of that primitive (a stage of two operators)."""
    gate = tile("L1", "d:8 f:2 m:8:Sp f:8:Sp", tile("Reg", "", "gate"))
    up = tile("L1", "d:8 f:2 m:8:Sp f:8:Sp", tile("Reg", "", "up"))
    stages = [tile("DRAM", "", gate, up, primitive=inner)] if inner else [gate, up]
    return Dataflow(tile(
        "DRAM", "m:2", *stages,
        tile("L1", "m:8 f:16", "silu"), tile("L1", "m:8 f:16", "mul"),
        tile("L1", "e:1 f:16 m:8:Sp e:8:Sp", tile("Reg", "", "down")),
        primitive="Pipe"))


@pytest.mark.parametrize(("inner", "needed"), [
    (None, 64 + 64 + 64), ("Para", (64 + 64) + 64), ("Pipe", (64 + 64) + 64),
    ("Seq", max(64, 64) + 64)])
def test_a_stage_that_runs_operators_at_once_uses_their_units_together(inner, needed):
    """The two cores have 2 x 64 = 128 MACs under the root. Gate and up in one `Para` or
    `Pipe` stage run at once (64 + 64), down beside them (64): 192 > 128, as with every
    operator its own stage. One after another (`Seq`), the stage needs 64: 128 fits. (silu
    and mul take one vector lane each, of 32.)"""
    w = workload(SWIGLU)
    arch = parse_arch(Field(YAML(typ="rt").load(TWO_CORES), "two-cores.yaml"))
    flow = swiglu_pipe(inner)
    found = [v for v in evaluate(w, arch, flow).violations if v.kind == "fanout"]
    batch = evaluate_batch(structure_of(w, arch, flow), structure_of(
        w, arch, flow).default_factors[None, :])
    if needed <= 128:
        assert found == []
        assert batch.violations["fanout"][0] == 0
        return
    [v] = found
    assert (v.node, v.level, v.needed, v.available, v.unit) == \
        ("root", "Reg", needed, 128, "matrix units")
    assert batch.violations["fanout"][0] == needed - 128


def test_the_soc_l2_swiglu_pipe_is_invalid_where_it_would_beat_the_compute_floor():
    """The search-quality pair (search/quality: soc-l2, SwiGLU m=256 d=512 f=1408 e=512): a
    `Pipe` over 32 row blocks whose stages are gate and up at once, silu, mul and down, each
    matmul on a whole core's 8 x 8 array. Its latency is below the chip's compute floor,
    3 x 256 x 512 x 1408 MACs / 128 per cycle = 4,325,376 cycles; the stages need 3 x 64 = 192
    matrix units of the 2 x 64 = 128, so the result is invalid."""
    from pathlib import Path

    from tileflow.interop.files import load_arch_any, load_workload_any

    quality = Path(__file__).parents[2] / "search" / "quality"
    arch = load_arch_any(str(quality / "chips" / "soc-l2.yaml"))
    w = load_workload_any(str(quality / "workloads" / "swiglu.yaml"))
    gate = tile("L1", "f:2 d:512 m:8:SpX f:8:SpY", tile("Reg", "", "gate"))
    up = tile("L1", "f:2 d:512 m:8:SpX f:8:SpY", tile("Reg", "", "up"))
    flow = Dataflow(tile("DRAM", "f:88", tile(
        "L2", "m:32", tile("L2", "", gate, up, primitive="Para"),
        tile("L1", "m:8 f:16:Sp", "silu"), tile("L1", "m:8 f:16:Sp", "mul"),
        tile("L1", "e:64 f:16 m:8:SpX e:8:SpY", tile("Reg", "", "down")),
        primitive="Pipe")))
    floor_cycles = 3 * 256 * 512 * 1408 / 128
    assert floor_cycles == 4_325_376
    r = evaluate(w, arch, flow)
    assert r.cycles < floor_cycles and r.utilization > 1
    [v] = r.violations
    assert (v.kind, v.node, v.level, v.needed, v.available, v.unit) == \
        ("fanout", "root.0", "Reg", 192, 128, "matrix units")
    structure = structure_of(w, arch, flow)
    batch = evaluate_batch(structure, structure.default_factors[None, :])
    assert not batch.valid[0] and batch.violations["fanout"][0] == 192 - 128
