"""Partial sums across repetitions (epochs): on random trees whose Shar or Seq root loops
over dimensions one operator does not use, in every order (an epoch's steps interleaved
with other loops' steps included), clipped or exact, with and without first-touch fills in
L1, the model's counts equal the enumerating oracle's (docs/counting.md: an element still
resident is not filled again), and the batch equals the model."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from helpers import CHAIN, TWINS, scalar_evaluate, workload
from reference_sim import Oracle
from trees import ARCH

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.structure import structure_of
from tileflow.tree import Dataflow, tile

CASES = [(TWINS, {"m": 3, "n": 2, "k": 3, "j": 2}, {"g1": "mnk", "g2": "mkj"}),
         (CHAIN, {"m": 3, "l": 2, "k": 2, "n": 3}, {"g1": "mlk", "g2": "mnl"})]


def _tree(rng: random.Random, sizes: dict[str, int], dims: dict[str, str]) -> Dataflow:
    """A root with random factors in a random order over L1 tiles that cover the rest."""
    root = {d: rng.choice([1, 2, 3]) for d in sizes}
    order = list(sizes)
    rng.shuffle(order)
    kids = []
    for op, op_dims in dims.items():
        mine = list(op_dims)
        rng.shuffle(mine)
        below = " ".join(f"{d}:{math.ceil(sizes[d] / root[d])}" for d in mine
                         if math.ceil(sizes[d] / root[d]) > 1)
        kids.append(tile("L1", below, op))
    loops = " ".join(f"{d}:{root[d]}" for d in order if root[d] > 1)
    return Dataflow(tile("DRAM", loops, *kids, primitive=rng.choice(["Shar", "Seq"])))


def test_partial_sums_across_epochs_match_the_oracle():
    rng = random.Random(7)
    compared = 0
    for i in range(80):
        text, sizes, dims = CASES[i % 2]
        w = workload(text, **sizes)
        first = i % 3 == 0
        arch = replace(ARCH, levels=tuple(replace(lv, first_touch_fills=first and lv.name == "L1")
                                          for lv in ARCH.levels))
        flow = _tree(rng, sizes, dims)
        try:
            result = evaluate(w, arch, flow)
        except InvalidDataflow:
            continue
        if any(v.kind in ("coverage", "dependency", "window") for v in result.violations):
            continue
        oracle = Oracle(w, [lv.name for lv in arch.levels], flow,
                        first_touch=frozenset({"L1"}) if first else frozenset())
        counts = {(lv, t): (m.fill, m.read, m.update) for lv, d in result.traffic.items()
                  for t, m in d.items() if m.fill or m.read or m.update}
        assert counts == {k: tuple(v) for k, v in oracle.traffic.items() if any(v)}, flow
        structure = structure_of(w, arch, flow)
        batch = evaluate_batch(structure, structure.default_factors[None, :])
        scalar = scalar_evaluate(w, arch, flow)  # the batch against the second copy
        assert batch.dram_words[0] == scalar.dram_words == result.dram_words, flow
        assert math.isclose(batch.energy_pj[0], scalar.energy_pj, rel_tol=1e-9), flow
        compared += 1
    assert compared >= 40, compared
