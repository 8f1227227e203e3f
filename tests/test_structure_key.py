"""The structure key (`analysis.shape.node_key`, and `scan`, which computes it while walking)
keys every cache of factor-independent work: the shape analysis (`shape_of`) and the
evaluator's compiled structures (`compiled_for`). A field of `Tile` or `Loop` that the key
leaves out would let two different trees share one cache entry. Each field here gets a second
value; a new field fails the first test until it is added to the key and below."""

from __future__ import annotations

import dataclasses

import pytest

from tileflow.analysis.shape import node_key, scan
from tileflow.tree import Loop, Op, Tile

BASE_LOOP = Loop("m", 4, spatial=False, axis="")
BASE = Tile("L1", (BASE_LOOP,), (Op("qk"), Op("av")), "Seq")

# Per field of Tile: another value (each a different structure).
TILE_CHANGES = {
    "level": "DRAM",
    "loops": (BASE_LOOP, Loop("n", 2)),
    "children": (Op("av"), Op("qk")),
    "primitive": "Pipe",
    "name": "outer",
    "no_reuse": ("Q",),
    "buffering": (("Q", 1),),
    "bypass": ("Q",),
    "halo": (("S", "cache"),),
}
# Per field of Loop: another value; `factor` is what a structure leaves open, so it is the
# one field the key must ignore.
LOOP_CHANGES = {"dim": "n", "spatial": True, "axis": "x"}
LOOP_FACTOR_FREE = {"factor": 8}


def test_every_tile_and_loop_field_is_accounted_for():
    assert {f.name for f in dataclasses.fields(Tile)} == set(TILE_CHANGES), \
        "a Tile field is new or gone: add it to node_key and scan (analysis/shape.py) and here"
    assert {f.name for f in dataclasses.fields(Loop)} == set(LOOP_CHANGES) | \
        set(LOOP_FACTOR_FREE), \
        "a Loop field is new or gone: add it to node_key and scan (analysis/shape.py) and here"


def keys(tile: Tile) -> tuple[tuple, tuple]:
    return node_key(tile), scan(tile)[0]


@pytest.mark.parametrize("name", sorted(TILE_CHANGES))
def test_each_tile_field_changes_the_key(name):
    changed = dataclasses.replace(BASE, **{name: TILE_CHANGES[name]})
    assert changed != BASE
    assert node_key(changed) != node_key(BASE)
    assert scan(changed)[0] != scan(BASE)[0]


@pytest.mark.parametrize("name", sorted(LOOP_CHANGES))
def test_each_structural_loop_field_changes_the_key(name):
    changed = dataclasses.replace(BASE, loops=(dataclasses.replace(BASE_LOOP,
                                                                   **{name: LOOP_CHANGES[name]}),))
    assert node_key(changed) != node_key(BASE)
    assert scan(changed)[0] != scan(BASE)[0]


def test_a_loop_factor_leaves_the_key_alone():
    changed = dataclasses.replace(BASE, loops=(dataclasses.replace(BASE_LOOP,
                                                                   **LOOP_FACTOR_FREE),))
    assert keys(changed) == keys(BASE)


@pytest.mark.parametrize("name", sorted(TILE_CHANGES))
def test_a_change_deep_in_the_tree_reaches_the_root_key(name):
    inner = dataclasses.replace(BASE, **{name: TILE_CHANGES[name]})
    root, other = (Tile("DRAM", (), (t,), "Seq") for t in (BASE, inner))
    assert node_key(root) != node_key(other)
    assert scan(root)[0] != scan(other)[0]


def test_scan_and_node_key_agree():
    root = Tile("DRAM", (Loop("m", 2),), (BASE, Tile("L1", (Loop("n", 2, True, "y"),),
                                                      (Op("pv"),), "Pipe", "b", ("Q",),
                                                      (("K", 2),), ("V",), (("S", "cache"),))))
    assert scan(root)[0] == node_key(root)
