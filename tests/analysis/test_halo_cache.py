"""Halo caching (`halo: {A: cache}` on the common ancestor): the producer of an intermediate
that a consumer reads through a window keeps the rows two consecutive steps share and
computes only the new ones. Counts derived by hand on small conv chains."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import CONV, small_arch, workload
from hypothesis import HealthCheck, given, settings
from trees import keep_halos, trees

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.specs.dataflow import parse_dataflow
from tileflow.specs.yamlfile import load_mapping
from tileflow.tree import Dataflow, tile, to_dict

ARCH = small_arch()

SPLIT = """
name: conv-chain
dims: {c0: 2, c1: 2, c2: 2, p: 5, r: 3, t: 3}
ops:
  - {name: conv1, expr: "A[c1,p] += X[c0,p+r-1] * W1[c1,c0,r]"}
  - {name: conv2, expr: "B[c2,p] += A[c1,p+t-1] * W2[c2,c1,t]"}
shapes:
  X: [c0, p]
  A: [c1, p]
"""


def split_flow(mode: str) -> Dataflow:
    """Rows of A in steps of 2 at DRAM; conv1 grown by the halo to 4 rows per step, split
    over two register files of 2 rows each; conv2 reads A through a 3-row window."""
    return Dataflow(tile("DRAM", "p:3",
                         tile("L1", "p:2:Sp", tile("Reg", "c1:2 p:2 c0:2 r:3", "conv1")),
                         tile("L1", "", tile("Reg", "c2:2 p:2 c1:2 t:3", "conv2")),
                         halo={"A": mode}))


def test_a_kept_halo_computes_and_writes_back_every_row_of_the_intermediate_once():
    """Step s of the DRAM loop needs rows [2s - 1, 2s + 3) of A (clipped to [0, 5)).
    Recomputing: conv1 computes 3 + 4 + 2 = 9 rows, and the rows the other instance
    computed again are written to A's home (L1) again: 9 rows. Keeping the halo: the
    regions of two steps overlap by 4 - 2 = 2 rows, so every step after the first starts
    at 2s + 1: rows {0, 1, 2}, then {3, 4}, then nothing (5 and 6 are past the end): 5
    rows, each computed and written back once. Per row conv1 does c1 2 x c0 2 x r 3 = 12
    operations, and each row of A is 2 words (c1)."""
    w = workload(SPLIT)
    recompute = evaluate(w, ARCH, split_flow("recompute"))
    cache = evaluate(w, ARCH, split_flow("cache"))
    assert recompute.valid and cache.valid
    assert recompute.ops["conv1"] == 9 * 12
    assert cache.ops["conv1"] == 5 * 12
    assert recompute.traffic["L1"]["A"].update == 9 * 2
    assert cache.traffic["L1"]["A"].update == 5 * 2
    # the consumer is unchanged: the same operations, the same reads of A from its home
    assert cache.ops["conv2"] == recompute.ops["conv2"] == 5 * 2 * 2 * 3
    assert cache.traffic["L1"]["A"].read == recompute.traffic["L1"]["A"].read == 5 * 2
    # and fills its registers with A's rows once each (its window slides, in one register
    # file): 5 rows x 2 channels
    assert cache.traffic["Reg"]["A"].fill == recompute.traffic["Reg"]["A"].fill == 5 * 2
    # X (dropped between steps by the Seq root) follows conv1's rows: rows [2s - 2, 2s + 4)
    # for the 4 rows recomputed, clipped: 4 + 5 + 3; kept: rows [-1, 4) then [2, 6),
    # clipped: 4 + 3, and none for the last step; 2 channels each
    assert recompute.traffic["DRAM"]["X"].read == (4 + 5 + 3) * 2
    assert cache.traffic["DRAM"]["X"].read == (4 + 3) * 2
    # A's footprint at L1 is one step's region either way: 4 rows x 2 channels
    assert cache.footprints[0].by_tensor["A"] == recompute.footprints[0].by_tensor["A"] == 8
    assert cache.cycles < recompute.cycles


HALO = """
name: conv-chain
dims: {c0: 2, c1: 3, c2: 2, p: 8, r: 1, t: 3}
ops:
  - {name: conv1, expr: "A[c1,p] += X[c0,p+r] * W1[c1,c0,r]"}
  - {name: conv2, expr: "B[c2,p] += A[c1,p+t-1] * W2[c2,c1,t]"}
shapes:
  X: [c0, p]
  A: [c1, p]
"""


def line_flow(mode: str) -> Dataflow:
    """Rows of A in steps of 4 and, inside, its channels one at a time (c1:3), both at
    the common ancestor; conv1 computes the 4 + 2 rows a step of conv2's window needs."""
    return Dataflow(tile("DRAM", "p:2 c1:3", tile("L1", "c1:1 p:6 c0:2", "conv1"),
                         tile("L1", "c2:2 p:4 c1:1 t:3", "conv2"), primitive="Shar",
                         halo={"A": mode}))


def test_kept_rows_of_every_channel_stay_resident_until_the_slide_returns():
    """One step holds rows [4s - 1, 4s + 5) of one channel of A: 5 rows once clipped. The
    two rows kept for the next p step must stay for each of the other 2 channels of the
    sweep meanwhile: 5 + 2 x 2 = 9 words instead of 5. conv1 computes 5 + 5 rows per
    channel when recomputing, 5 + 3 when keeping the halo, over c0 = 2."""
    w = workload(HALO)
    recompute = evaluate(w, ARCH, line_flow("recompute"))
    cache = evaluate(w, ARCH, line_flow("cache"))
    assert recompute.footprints[0].by_tensor["A"] == 5
    assert cache.footprints[0].by_tensor["A"] == 5 + 2 * 2
    assert recompute.ops["conv1"] == (5 + 5) * 3 * 2
    assert cache.ops["conv1"] == (5 + 3) * 3 * 2 == w.tensor_words("A") * 2
    # conv1 accumulates over c0 in L1: one update per operation, and a read for each but
    # the first touch of an element; conv2 reads A once per operation (8 x 2 x 3 x 3)
    assert cache.traffic["L1"]["A"].update == 48
    assert cache.traffic["L1"]["A"].read == 144 + 48 - 24
    assert recompute.traffic["L1"]["A"].read == 144 + 60 - 30


SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


@SETTINGS
@given(trees(workload(CONV, k2=1)))
def test_without_a_halo_keeping_it_changes_nothing(flow: Dataflow) -> None:
    """A window of one row (k2 = 1) leaves no rows shared between steps: caching and
    recomputing give the same result in every field."""
    w = workload(CONV, k2=1)
    try:
        plain = evaluate(w, ARCH, flow)
    except InvalidDataflow:
        return
    kept = evaluate(w, ARCH, keep_halos(w, flow))
    assert kept.to_dict() == plain.to_dict()


def test_the_halo_key_names_an_intermediate_on_its_common_ancestor():
    w = workload(SPLIT)
    flow = split_flow("cache")
    moved = Dataflow(replace(flow.root, halo=(), children=(
        replace(flow.root.children[0], halo=(("A", "cache"),)), flow.root.children[1])))
    with pytest.raises(InvalidDataflow, match="common ancestor"):
        evaluate(w, ARCH, moved)
    with pytest.raises(InvalidDataflow, match="not an intermediate"):
        evaluate(w, ARCH, Dataflow(replace(flow.root, halo=(("X", "cache"),))))


def test_the_halo_key_reads_and_writes_back(tmp_path):
    path = tmp_path / "flow.yaml"
    path.write_text("root:\n  level: DRAM\n  loops: [p:3]\n  halo: {A: keep}\n"
                    "  children: [conv1, conv2]\n")
    with pytest.raises(InputError, match=r"line 4.*cache or recompute"):
        parse_dataflow(load_mapping(path))
    assert to_dict(split_flow("cache"))["root"]["halo"] == {"A": "cache"}


def test_the_home_holds_the_kept_rows_beside_the_new_ones_on_every_core():
    """conv2's three taps are spread over the two cores (t:2 in each, t:2:Sp: taps 0, 1 on
    one core, 2 on the other); conv1, which has no t, computes on each core the rows
    p - 1 .. p + 1 a step's window needs, past the first step only the new row p + 1. The
    two kept rows stay in L1 beside it: A holds 3 rows x 2 channels = 6 words per core,
    though one core's conv2 reads only 2 of them (the model counted that: 4). With conv1's
    input (the new row's 3 taps x 2 channels) and W1 (2 x 2 x 3): 6 + 12 + 6 = 24, as the
    enumerating simulator finds."""
    w = workload(CONV)
    flow = Dataflow(tile("DRAM", "p:5 t:2:Sp", tile("L1", "p:3 c1:2 c0:2 r:3", "conv1"),
                         tile("L1", "t:2 c1:2 c2:2", "conv2"), halo={"A": "cache"}))
    fp = evaluate(w, ARCH, flow).footprints[0]
    assert fp.level == "L1"
    assert fp.by_tensor == {"X": 6, "W1": 12, "A": 6}
    assert fp.words == 24
