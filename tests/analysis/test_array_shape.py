"""Spatial loops onto a two-dimensional array of PEs (or a level's declared mesh): the first
unmarked loop takes the rows (x), later ones the columns (y), `:SpX`/`:SpY` choose; each
axis must hold what is mapped onto it, not only the product."""

from __future__ import annotations

import pytest
from helpers import GEMM, workload
from ruamel.yaml import YAML

from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.specs.arch import parse_arch
from tileflow.specs.dataflow import parse_dataflow
from tileflow.specs.yamlfile import Field
from tileflow.tree import Dataflow, parse_loop, tile, to_dict

ARCH = """
name: grid
levels:
  - {name: DRAM, read_words_per_cycle: 8, write_words_per_cycle: 8, energy_pj_per_word: 200}
  - {name: L1, capacity_words: 100000, fanout: 4, read_words_per_cycle: 32,
     write_words_per_cycle: 32, energy_pj_per_word: 1 MESH}
  - {name: Reg, capacity_words: 64, fanout: 64, read_words_per_cycle: 1000,
     write_words_per_cycle: 1000, energy_pj_per_word: 0.1}
compute:
  matrix: {rows: 8, cols: 8, level: Reg}
"""


def arch(mesh: str = ""):
    return parse_arch(Field(YAML(typ="rt").load(ARCH.replace(" MESH", mesh)), "grid.yaml"))


def gemm():
    return workload(GEMM, m=16, n=16, k=4)


def _violations(loops: str, root: str = "m:1 n:1", **kw):
    flow = Dataflow(tile("DRAM", root, tile("L1", loops, tile("Reg", "", "mm"))))
    return evaluate(gemm(), arch(**kw), flow).violations


def test_a_split_that_fits_the_product_but_not_the_rows_is_a_violation():
    """16 x 4 = 64 PEs, but the array has 8 rows: 16 rows are 8 too many."""
    [v] = _violations("k:4 m:16:Sp n:4:Sp n:4")
    assert (v.kind, v.node, v.level, v.needed, v.available, v.unit) == \
        ("array", "root.0", "Reg", 16, 8, "rows (x)")
    [v] = _violations("k:4 m:4:Sp n:16:Sp m:4")
    assert (v.kind, v.needed, v.available, v.unit) == ("array", 16, 8, "columns (y)")
    assert _violations("k:4 m:8:Sp n:8:Sp m:2 n:2") == ()


def test_an_axis_suffix_chooses_the_axis():
    assert _violations("k:4 n:8:SpY m:8:SpX m:2 n:2") == ()
    [v] = _violations("k:4 n:4:SpX m:16:SpY n:4")
    assert (v.unit, v.needed) == ("columns (y)", 16)
    # two loops on the rows multiply
    [v] = _violations("k:4 m:4:SpX n:4:SpX m:4 n:4")
    assert (v.unit, v.needed, v.available) == ("rows (x)", 16, 8)


def test_a_level_mesh_bounds_each_axis_of_its_fan_out():
    """L1 declared as 2 x 2 cores: 4 cores along one axis do not fit, 2 x 2 do."""
    inner = "k:4 m:8:Sp n:8:Sp"
    [v] = _violations(inner, root="m:4:Sp n:2", mesh=", mesh: [2, 2]")
    assert (v.kind, v.node, v.level, v.needed, v.available, v.unit) == \
        ("array", "root", "L1", 4, 2, "rows (x)")
    assert _violations(inner, root="m:2:Sp n:2:Sp", mesh=", mesh: [2, 2]") == ()
    assert _violations(inner, root="m:4:Sp n:2") == ()  # no mesh: only the fan-out counts


@pytest.mark.parametrize("mesh, message", [
    (", mesh: [2, 3]", "must multiply to the fan-out 4"),
    (", mesh: [4]", "two positive integers"),
    (", mesh: [2.0, 2]", "two positive integers"),
    (", mesh: [0, 4]", "two positive integers"),
])
def test_a_mesh_must_be_two_positive_integers_multiplying_to_the_fan_out(mesh, message):
    with pytest.raises(InputError, match=message):
        arch(mesh=mesh)


def test_the_axis_suffix_reads_and_writes_back():
    assert parse_loop("m:8:SpX").axis == "x" and parse_loop("m:8:SpY").spatial
    assert str(parse_loop("m:8:SpY")) == "m:8:SpY" and str(parse_loop("m:8:Sp")) == "m:8:Sp"
    flow = Dataflow(tile("DRAM", "", tile("L1", "n:8:SpY m:8:SpX", "mm")))
    text = to_dict(flow)
    assert parse_dataflow(Field(text, "flow.yaml")).root == flow.root


def test_an_array_inside_one_instance_of_its_level_bounds_the_innermost_tile():
    """A 4 x 4 array fed by one buffer: 8 x 2 is 16 MACs, but 8 rows."""
    text = ARCH.replace(" MESH", "").replace("level: Reg", "level: L1").replace(
        "rows: 8, cols: 8", "rows: 4, cols: 4")
    grid = parse_arch(Field(YAML(typ="rt").load(text), "grid.yaml"))
    w = gemm()

    def violations(loops):
        return evaluate(w, grid, Dataflow(tile("DRAM", "", tile("L1", loops, "mm")))).violations

    [v] = violations("k:4 m:2 n:8 m:8:Sp n:2:Sp")
    assert (v.kind, v.level, v.needed, v.available, v.unit) == ("array", "L1", 8, 4, "rows (x)")
    assert violations("k:4 m:4 n:4 m:4:Sp n:4:Sp") == ()


def test_a_single_row_of_lanes_checks_only_their_number():
    """A 1 x 8 array (a core's SIMD lanes) has no second axis to fill: an unmarked loop of 8
    fits the 8 lanes (it must not land on the one-row axis), and 16 exceed them."""
    one_row = ARCH.replace("fanout: 64,", "fanout: 8,").replace("rows: 8, cols: 8",
                                                               "rows: 1, cols: 8")
    a = parse_arch(Field(YAML(typ="rt").load(one_row.replace(" MESH", "")), "row.yaml"))

    def violations(loops: str):
        flow = Dataflow(tile("DRAM", "m:1 n:1", tile("L1", loops, tile("Reg", "", "mm"))))
        return evaluate(gemm(), a, flow).violations

    assert violations("k:4 n:8:Sp m:16 n:2") == ()
    [v] = violations("k:4 n:16:Sp m:16")
    assert (v.kind, v.needed, v.available) == ("fanout", 16, 8)
