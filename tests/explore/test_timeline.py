"""The timeline adds up to the model (docs/latency.md): under every overlap convention its
events span exactly the model's cycles, on the documented example, the search-quality
suite's trees, the shipped example dataflows and random trees; a transfer's track names the
tile's level and its children's; the figure's legend names every colour it draws."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import matplotlib
import pytest
from helpers import CHAIN, GEMM, SOFTMAX, TWINS, workload
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML
from trees import ARCH, trees

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.cost import evaluate
from tileflow.explore.studies import timeline
from tileflow.specs.arch import Architecture, load_arch
from tileflow.specs.dataflow import load_dataflow_file
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, Tile, map_tiles, walk

matplotlib.use("Agg")

CONVENTIONS = ("perfect", "fill-drain", "lockstep")
SUITE = Path("search/quality")
EXAMPLES = Path("docs/examples")


def _suite_pairs() -> list[tuple[str, Path, str, dict]]:
    pairs = YAML(typ="safe").load((SUITE / "pairs.yaml").read_text())["pairs"]
    out = []
    for p in pairs:
        tree = SUITE / "trees" / f"{p['name']}.yaml"
        if tree.is_file():
            wl = p["workload"]
            wl = str(SUITE / wl) if wl.endswith(".yaml") else wl
            out.append((p["name"], SUITE / p["chip"], wl, p.get("sizes") or {}))
    return out


def _spans_the_cycles(w, arch, flow: Dataflow, overlap: str) -> list[timeline.Event]:
    result = evaluate(w, arch, flow, overlap=overlap)
    line = timeline.layout(w, arch, flow, result, overlap=overlap)
    evs = line.events
    assert line.cycles == result.cycles
    if result.cycles == 0:
        return evs
    tol = 1e-9 * result.cycles
    assert min(e.start for e in evs) == pytest.approx(0.0, abs=tol)
    assert max(e.end for e in evs) == pytest.approx(result.cycles, rel=1e-9)
    assert all(e.duration > 0 and e.start >= -tol and e.end <= result.cycles + tol
               for e in evs)
    return evs


def _tiles(flow: Dataflow) -> dict[str, Tile]:
    return {p: n for p, n in walk(flow.root) if isinstance(n, Tile)}


def _links_are_parent_and_child(flow: Dataflow, evs: list[timeline.Event]) -> None:
    """Each transfer is on the link between its tile's level and a child tile's level."""
    tiles = _tiles(flow)
    for e in evs:
        if e.kind not in ("load", "store"):
            continue
        tile = tiles[e.path]
        links = {f"{tile.level} <-> {c.level}" for c in tile.children if isinstance(c, Tile)}
        assert e.track in links, (e, links)


def _counting_example():
    """latency.md's worked example: gemm-spatial on tiny-npu (workload, chip, dataflow)."""
    return (load_workload(str(EXAMPLES / "gemm.yaml")), load_arch(str(EXAMPLES / "tiny-npu.yaml")),
            load_dataflow_file(EXAMPLES / "gemm-spatial.yaml"))


def test_the_documented_example_is_drawn_as_the_docs_time_it():
    """latency.md's worked example, gemm-spatial on tiny-npu (fill-drain, 63.125 cycles): the
    root takes one step, so nothing overlaps: its load of 32 cycles from DRAM into L1, then
    its children (23.125), then its store (8); the L1 tile's loads fill the registers."""
    evs = _spans_the_cycles(*_counting_example(), "fill-drain")
    root = [(e.kind, e.track, e.start, e.end) for e in evs if e.path == "root"]
    assert root == [("load", "DRAM <-> L1", 0.0, 32.0), ("store", "DRAM <-> L1", 55.125, 63.125)]
    assert {e.track for e in evs if e.path == "root.0" and e.kind == "load"} == {"L1 <-> Reg"}
    # the L1 tile's 16 steps (23.125 cycles) lie between the root's load and store
    inner = [e for e in evs if e.path.startswith("root.0")]
    assert min(e.start for e in inner) == 32.0 and max(e.end for e in inner) == 55.125


def test_a_tree_the_model_cannot_enumerate_at_once_is_drawn_without_link_names(monkeypatch):
    """Where the model's pass refuses a tree (a grid of more combinations than it takes at
    once), the timeline still spans the cycles, each tile's transfers on one track of its
    loads and one of its stores."""
    import numpy as np

    from tileflow.evaluator.lattice import GridTooLarge

    def refuse(*_args, **_kwargs):
        raise GridTooLarge(np.array([1 << 30]))

    monkeypatch.setattr(timeline, "traced", refuse)
    evs = _spans_the_cycles(*_counting_example(), "fill-drain")
    root = [(e.kind, e.track, e.start, e.end) for e in evs if e.path == "root"]
    assert root == [("load", "loads", 0.0, 32.0), ("store", "stores", 55.125, 63.125)]
    assert {e.track for e in evs if e.kind == "compute"}  # the operators still drawn


@pytest.mark.parametrize("overlap", CONVENTIONS)
def test_swiglu_loads_registers_beside_the_compute_and_adds_up(overlap):
    """The issue's SwiGLU tree on soc-l2: the gate tile's loads fill the registers from L1
    ("L1 <-> Reg", not "DRAM <-> L1") while the array computes, and the whole spans the
    model's cycles."""
    w = load_workload(str(SUITE / "workloads/swiglu.yaml"), {"m": 256, "d": 512, "f": 1408,
                                                             "e": 512})
    arch = load_arch(str(SUITE / "chips/soc-l2.yaml"))
    flow = load_dataflow_file(SUITE / "trees/soc-l2.swiglu.yaml")
    evs = _spans_the_cycles(w, arch, flow, overlap)
    _links_are_parent_and_child(flow, evs)
    gate = next(p for p, t in _tiles(flow).items() if t.name == "gate")
    loads = [e for e in evs if e.path == gate and e.kind == "load"]
    computes = [e for e in evs if e.path == f"{gate}.0.0"]
    assert loads and {e.track for e in loads} == {"L1 <-> Reg"}
    assert any(min(a.end, b.end) > max(a.start, b.start) for a in loads for b in computes)
    # every step drawn on its own shows the operator's whole step: none is cut short
    steps = [e.duration for e in computes if e.steps == 1]
    assert steps and max(steps) == pytest.approx(min(steps), rel=1e-9)


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize("pair", _suite_pairs(), ids=lambda p: p[0])
def test_suite_trees_span_the_cycles(pair, overlap):
    _name, chip, wl, sizes = pair
    w = load_workload(wl, sizes)
    arch = load_arch(str(chip))
    flow = load_dataflow_file(SUITE / "trees" / f"{pair[0]}.yaml")
    evs = _spans_the_cycles(w, arch, flow, overlap)
    if not flow.homes:
        _links_are_parent_and_child(flow, evs)


EXAMPLE_FLOWS = [("gemm", "gemm-spatial"), ("gemm", "gemm-no-reuse"), ("chain", "chain-seq"),
                 ("chain", "chain-pipe"), ("chain", "chain-shar"),
                 ("chain", "chain-home-dram"),
                 ("attention-online", "flash-online")]


@pytest.mark.parametrize("overlap", CONVENTIONS)
@pytest.mark.parametrize(("wl", "name"), EXAMPLE_FLOWS)
def test_example_dataflows_span_the_cycles(wl, name, overlap):
    if wl == "attention-online":
        w = load_workload(wl, {"b": 2, "m": 8, "l": 8, "k": 4, "n": 4})
    else:
        w = load_workload(str(EXAMPLES / f"{wl}.yaml"))
    arch = load_arch(str(EXAMPLES / "tiny-npu.yaml"))
    _spans_the_cycles(w, arch, load_dataflow_file(EXAMPLES / f"{name}.yaml"), overlap)


SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    phases=[Phase.generate], suppress_health_check=list(HealthCheck))


@st.composite
def arches(draw) -> Architecture:
    """The random trees' chip with random bandwidths, per-step overheads and first-word
    latencies (the parts of the model's timing the timeline lays out)."""
    levels = tuple(replace(
        lv, read_words_per_cycle=draw(st.sampled_from([0.5, 1.0, 3.0, 8.0])),
        write_words_per_cycle=draw(st.sampled_from([0.25, 1.0, 2.0, 16.0])),
        step_overhead_cycles=draw(st.sampled_from([0.0, 0.0, 3.0])),
        latency_cycles=draw(st.sampled_from([0.0, 0.0, 7.0]))) for lv in ARCH.levels)
    return replace(ARCH, levels=levels)


@pytest.mark.parametrize("case", ["gemm", "chain", "softmax", "twins"])
def test_random_trees_span_the_cycles_under_every_convention(case):
    w = workload({"gemm": GEMM, "chain": CHAIN, "softmax": SOFTMAX, "twins": TWINS}[case])
    seen = []

    @SETTINGS
    @given(trees(w), arches())
    def check(flow: Dataflow, arch: Architecture) -> None:
        try:
            evaluate(w, arch, flow)
        except InvalidDataflow:
            return
        for overlap in CONVENTIONS:
            evs = _spans_the_cycles(w, arch, flow, overlap)
            _links_are_parent_and_child(flow, evs)
            if overlap != "lockstep":  # each step drawn alone shows its operators whole
                for leaf in {e.path for e in evs if e.kind == "compute"}:
                    steps = [e.duration for e in evs if e.path == leaf and e.steps == 1]
                    assert not steps or max(steps) == pytest.approx(min(steps), rel=1e-9), (
                        overlap, leaf, steps)
        seen.append(flow)

    check()
    assert len(seen) >= 20


@pytest.mark.parametrize("case", ["gemm", "chain"])
def test_bypass_and_single_buffering_span_the_cycles(case):
    """With tensors bypassing tiles and single-buffered ones (their transfers in series with
    the children) at random: the span still equals the cycles, and each transfer links the
    tile's level or one above it to a level below it."""
    w = workload({"gemm": GEMM, "chain": CHAIN}[case])
    tensors = sorted(w.tensors)
    ends = sorted(set(tensors) - set(w.intermediates))
    seen = []

    @SETTINGS
    @given(trees(w), st.randoms(use_true_random=False))
    def check(flow: Dataflow, rng) -> None:
        def mechanisms(path: str, t: Tile) -> Tile:
            if path == "root" or rng.random() < 0.4:
                return t
            if t.level != "DRAM" and rng.random() < 0.5:
                t = replace(t, bypass=(rng.choice(ends),))
            return replace(t, buffering=((rng.choice(tensors), 1),))

        flow = replace(flow, root=map_tiles(flow.root, mechanisms))
        try:
            result = evaluate(w, ARCH, flow)
        except InvalidDataflow:
            return
        if not result.latency_breakdown:
            return
        names = [lv.name for lv in ARCH.levels]
        tiles = _tiles(flow)
        for overlap in CONVENTIONS:
            for e in _spans_the_cycles(w, ARCH, flow, overlap):
                if e.kind in ("load", "store"):
                    upper, lower = e.track.split(" <-> ")
                    assert names.index(upper) <= names.index(tiles[e.path].level) \
                        < names.index(lower), e
        seen.append(any(n.serial_cycles for n in result.latency_breakdown))

    check()
    assert len(seen) >= 20 and any(seen), "some trees have single-buffered transfers"


def _bar_colours(fig) -> set[str]:
    from matplotlib.colors import to_hex

    return {to_hex(c, keep_alpha=False) for ax in fig.axes for coll in ax.collections
            for c in coll.get_facecolors()}


def test_the_legend_names_every_colour_drawn(tmp_path):
    from matplotlib.colors import to_hex

    w = load_workload(str(SUITE / "workloads/swiglu.yaml"), {"m": 64, "d": 128, "f": 256,
                                                             "e": 128})
    arch = load_arch(str(SUITE / "chips/soc-l2.yaml"))
    flow = load_dataflow_file(SUITE / "trees/soc-l2.swiglu.yaml")
    result = evaluate(w, arch, flow)
    line = timeline.layout(w, arch, flow, result)
    fig = timeline.figure(line, "swiglu")
    (legend,) = fig.legends
    handles = getattr(legend, "legend_handles", None) or legend.legendHandles
    named = {to_hex(h.get_facecolor(), keep_alpha=False) for h in handles}
    drawn = _bar_colours(fig)
    assert drawn and drawn <= named
    labels = [t.get_text() for t in legend.get_texts()]
    assert len(labels) == len(set(labels))
    # loads, stores, the matrix and the vector unit: four colours, each named
    assert len(drawn) == 4 and {"load (into the level below)",
                                "store (back to the level above)"} <= set(labels)
    timeline.plot(line, "swiglu", tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0


def test_trace_counts_steps_drawn_as_one_bar():
    w = load_workload(str(EXAMPLES / "gemm.yaml"))
    arch = load_arch(str(EXAMPLES / "tiny-npu.yaml"))
    flow = load_dataflow_file(EXAMPLES / "gemm-spatial.yaml")
    line = timeline.layout(w, arch, flow, evaluate(w, arch, flow), detail_steps=2)
    trace = timeline.chrome_trace(line.events, arch.clock_ghz)
    bars = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    # the L1 tile's 16 steps: 2 drawn one by one, 14 as one bar per track
    assert {e["args"]["steps"] for e in bars if e["name"] == "load root.0"} == {1, 14}
    assert math.isclose(sum(e["args"]["cycles"] for e in bars if e["name"] == "load root"),
                        32.0)
