"""The lane restriction of the exhaustive target loses nothing: on a small attention shape on
Edge, the optimum over the divisor points with the vector stages at full lanes equals the
optimum over every divisor point."""

from __future__ import annotations

from tileflow.dataflows import build
from tileflow.explore.exhaustive import divisor_optimum, lane_restriction, space_size
from tileflow.explore.space import Space
from tileflow.explore.structure import structure_of
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload


def test_restricted_optimum_equals_the_full_optimum_on_a_small_shape():
    w = load_workload("attention", {"b": 1, "m": 4, "l": 64, "k": 2, "n": 2})
    arch = load_arch("edge")
    structure = structure_of(w, arch, build("tileflow-pipe", w, arch))
    fixed = lane_restriction(structure)
    assert fixed and set(fixed.values()) == {arch.vector.parallelism}
    full = Space(structure, non_divisors=False)
    restricted = Space(structure, non_divisors=False, fixed=fixed)
    assert space_size(restricted) < space_size(full) // 100
    best_full, row_full, valid_full, points = divisor_optimum(full)
    best_restricted, row, _, restricted_points = divisor_optimum(restricted)
    assert points == space_size(full) and restricted_points == space_size(restricted)
    assert valid_full > 0
    assert best_restricted == best_full
    assert all(row[i] == v for i, v in fixed.items())
