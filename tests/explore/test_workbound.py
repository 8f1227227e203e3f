"""The bound on enumerated steps (`tileflow.evaluator.workbound`): what the command line
refuses names the axis whose loops pass it, and a check at one tree refuses what one
evaluation cannot take with the model's error, not the grid's."""

from __future__ import annotations

import pytest
from helpers import CLIPPED_WINDOW, small_arch, workload

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.errors import InputError
from tileflow.evaluator import lattice
from tileflow.evaluator.structure import structure_of
from tileflow.evaluator.violations import check_tree
from tileflow.evaluator.workbound import check_enumeration
from tileflow.tree import Dataflow, tile

SHIFTED = """
name: shifted
dims: {p: 10000}
params: {h: 10001}
ops:
  - {name: s, expr: "Y[p] = exp(X[p+1])"}
shapes:
  X: [h]
"""


def test_the_refusal_names_the_axis_that_is_not_tiled_exactly() -> None:
    """p:10000 over p:1: Y[p] is tiled exactly (a closed form), X[p+1] is shifted (a sum over
    10,000 steps): the error names X's axis, not Y's."""
    w = workload(SHIFTED)
    flow = Dataflow(tile("DRAM", "p:10000", tile("L1", "p:1", "s")))
    with pytest.raises(InputError, match=r"axis 'p \+ 1' of X|axis 'p\+1' of X"):
        check_enumeration(structure_of(w, small_arch(), flow))


def test_a_tree_past_one_evaluation_s_grid_is_an_invalid_dataflow(monkeypatch) -> None:
    """A window slid over 100 clipped steps, with the grid of one evaluation shrunk to 16
    cells: `check_tree` (imports, study files, kernels) raises the model's InvalidDataflow
    naming the tree, as `evaluate()` does, not the grid's own exception."""
    w = workload(CLIPPED_WINDOW)
    flow = Dataflow(tile("DRAM", "p:100", tile("L1", "r:3", "c")), "window-tree")
    check_tree(w, small_arch(), flow)  # within the grid: nothing to refuse
    monkeypatch.setattr(lattice, "MAX_GRID_CELLS", 16)
    with pytest.raises(InvalidDataflow, match="window-tree: its sums"):
        check_tree(w, small_arch(), flow)
