"""A timeline of a dataflow that adds up to the model's cycles (docs/latency.md).

Each tile is drawn from its line of the model's latency breakdown: its loads (into the
levels below it), its children and its stores, averaged over its steps. A tile that its
ancestors' steps run V times is drawn V times, each run taking its cycles / V; within a run
its steps follow the overlap convention:

* `perfect`: a step's loads, children and stores start together, a step every
  max(load, inner, store) / n cycles;
* `fill-drain`: a double-buffered pipeline: the load of step j + 1 beside the children of
  step j and the store of step j - 1, the first load (with the level's first-word latency)
  before the first step and the last store after the last. The model pays that fill and
  drain once over all of a tile's runs: each run shows its share of the first load before
  its first step (the rest overlaps the run before) and its last store runs into the next;
* `lockstep`: the same pipeline, its steps lengthened evenly to the model's slot-by-slot
  total.

A run's events are clipped to its share of the cycles (where the model spreads a tile's fill
and drain over its runs), so the timeline spans exactly the model's cycles. The first
`detail_steps` steps of every run are drawn one by one; the rest of a run as one bar per
track (`Event.steps` > 1). A transfer's track names the two levels it moves data between,
read from the model's transfers (a bypass shows as the levels it really links)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from tileflow.cost.result import NodeLatency, Result
from tileflow.evaluator.batch import traced
from tileflow.evaluator.lattice import GridTooLarge
from tileflow.evaluator.structure import structure_of
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import ROOT, Dataflow, Op, Tile, child_path, node_depth, walk

MAX_EVENTS = 20_000  # beyond this, runs are drawn as one bar per track


@dataclass(frozen=True)
class Event:
    """One bar: `kind` is 'load', 'store', 'compute' (an operator on `unit`), 'serial' (a
    single-buffered tensor's transfers, in series with the children) or 'port' (the rest of
    the words through a one-instance level's port); `steps` > 1: that many steps as one
    bar."""

    name: str
    track: str
    start: float  # cycles
    duration: float  # cycles
    kind: str = "compute"
    unit: str = ""
    steps: int = 1
    path: str = ""  # the tile whose transfers, or the leaf whose operator, it draws

    @property
    def end(self) -> float:
        return self.start + self.duration

    @property
    def category(self) -> str:
        """What the bar's colour stands for (the figure's legend)."""
        return f"{self.unit} unit" if self.kind == "compute" else self.kind


@dataclass
class Timeline:
    """The events, the model's cycles they span and, per tree depth, the first step's window
    (the figure zooms into them)."""

    events: list[Event]
    cycles: float
    overlap: str
    frames: list[tuple[float, float]] = field(default_factory=list)


@dataclass(frozen=True)
class _TileTime:
    latency: NodeLatency
    steps: int  # over the whole run (the ancestors' steps included)
    own: int  # per run
    load_tracks: tuple[str, ...]
    store_tracks: tuple[str, ...]

    @property
    def runs(self) -> int:
        return self.steps // self.own


def _tracks(arch: Architecture, links: dict[tuple[int, int], object]) -> tuple[str, ...]:
    """Tracks of a tile's loads (or stores): one per pair of levels they move words
    between, in the order the model first books them."""
    return tuple(f"{arch.levels[upper].name} <-> {arch.levels[lower].name}"
                 for (upper, lower), words in links.items() if np.any(words))


def _links_and_weights(w: Workload, arch: Architecture, flow: Dataflow):
    """Per tile path its load tracks and its store tracks, and per operator its compute
    cycles (temporal steps x cycles per operation), from the model's pass over the tree. A
    tree whose sums enumerate more than the model takes at once (a search never picks one)
    gets one track of loads and one of stores per tile, its operators weighed alike."""
    structure = structure_of(w, arch, flow)
    try:
        trace = traced(structure, structure.default_factors.reshape(1, -1))
    except GridTooLarge:
        tiles = [path for path, node in walk(flow.root) if isinstance(node, Tile)]
        return dict.fromkeys(tiles, ("loads",)), dict.fromkeys(tiles, ("stores",)), {}
    links = trace.tally.links
    loads = {path: _tracks(arch, mine) for path, mine in links[False].items()}
    stores = {path: _tracks(arch, mine) for path, mine in links[True].items()}
    weights = {name: float(leaf.steps[0]) * arch.unit(w.op_by_name[name].unit).cycles(
        w.op_by_name[name].function) for name, leaf in trace.leaves.items()}
    return loads, stores, weights


def events(w: Workload, arch: Architecture, flow: Dataflow, result: Result,
           max_steps: int = 2, overlap: str | None = None) -> list[Event]:
    """The timeline's events (see `layout`)."""
    return layout(w, arch, flow, result, max_steps, overlap).events


def layout(w: Workload, arch: Architecture, flow: Dataflow, result: Result,
           detail_steps: int = 2, overlap: str | None = None) -> Timeline:
    """The timeline of `flow` as `result` (evaluated under `overlap`, by default the
    accelerator's convention) times it."""
    convention = overlap or arch.overlap
    loads, stores, weights = _links_and_weights(w, arch, flow)
    lines = {n.path: n for n in result.latency_breakdown}
    times: dict[str, _TileTime] = {}

    def visit(path: str, tile: Tile, above: int) -> None:
        own = math.prod(lp.factor for lp in tile.loops if not lp.spatial)
        line = lines.get(path) or NodeLatency(path, path, node_depth(path), 0.0, 0.0, 0.0)
        times[path] = _TileTime(line, above * own, own, loads.get(path, ()),
                                stores.get(path, ()))
        for i, child in enumerate(tile.children):
            if isinstance(child, Tile):
                visit(child_path(path, i), child, above * own)

    visit(ROOT, flow.root, 1)
    drawer = _Drawer(w, arch, convention, times, weights, detail_steps)
    total = times[ROOT].latency.cycles
    drawer.run(ROOT, flow.root, 0.0, total, (0.0, total))
    return Timeline(drawer.out, total, convention, drawer.frames)


class _Drawer:
    """Places the runs of the tiles, depth first."""

    def __init__(self, w: Workload, arch: Architecture, convention: str,
                 times: dict[str, _TileTime], weights: dict[str, float], detail_steps: int):
        self.w, self.arch, self.convention = w, arch, convention
        self.times, self.weights = times, weights
        self.detail_steps = max(1, detail_steps)
        self.out: list[Event] = []
        self.frames: list[tuple[float, float]] = []

    def add(self, ev: Event, clip: tuple[float, float]) -> None:
        start, end = max(ev.start, clip[0]), min(ev.end, clip[1])
        if end > start:
            self.out.append(Event(ev.name, ev.track, start, end - start, ev.kind, ev.unit,
                                  ev.steps, ev.path))

    def unit_of(self, op: str) -> str:
        return self.arch.unit(self.w.op_by_name[op].unit).kind

    def child_totals(self, path: str, tile: Tile) -> list[float]:
        """Each child's cycles over the whole run: a tile's from the model; operators that
        share the tile's time split it by their compute cycles (the model times them
        together)."""
        inner = self.times[path].latency.inner_cycles
        totals: list[float | None] = [
            self.times[child_path(path, i)].latency.cycles if isinstance(c, Tile) else None
            for i, c in enumerate(tile.children)]
        ops = [(i, c.op) for i, c in enumerate(tile.children) if isinstance(c, Op)]
        if ops:
            weight = {i: max(self.weights.get(op, 0.0), 0.0) for i, op in ops}
            if not any(weight.values()):
                weight = dict.fromkeys(weight, 1.0)
            if tile.semantics.serial:
                rest = max(inner - sum(t for t in totals if t is not None), 0.0)
                for i, _ in ops:
                    totals[i] = rest * weight[i] / sum(weight.values())
            else:  # Para, Pipe: each operator within the children's time
                for i, _ in ops:
                    totals[i] = inner * weight[i] / max(weight.values())
        return [t or 0.0 for t in totals]

    def children(self, path: str, tile: Tile, start: float, length: float,
                 clip: tuple[float, float], runs: int) -> None:
        """One step's children in [start, start + length] (`runs`: the tile's steps over the
        whole run, so a child's run takes its cycles / runs)."""
        kids = list(enumerate(tile.children))
        shares = [t / runs for t in self.child_totals(path, tile)]
        if tile.semantics.serial:
            offsets = [sum(shares[:k]) for k in range(len(kids))]
        elif tile.semantics.pipelined and len(kids) > 1:  # stages staggered within the step
            offsets = [(length - shares[k]) * k / (len(kids) - 1) for k in range(len(kids))]
        else:
            offsets = [0.0] * len(kids)
        for (i, child), offset, share in zip(kids, offsets, shares, strict=True):
            at = start + max(offset, 0.0)
            if isinstance(child, Op):
                unit = self.unit_of(child.op)
                self.add(Event(child.op, f"{unit} unit: {child.op}", at, share, "compute",
                               unit, path=child_path(path, i)), clip)
            else:
                self.run(child_path(path, i), child, at, share, clip)

    def aggregate(self, path: str, tile: Tile, start: float, end: float,
                  clip: tuple[float, float], steps: int, own: bool = True) -> None:
        """Every track of the subtree (the tile's own transfers too where `own`) as one bar
        over [start, end]: `steps` steps of the tile."""
        t = self.times[path]
        name = tile.name or path
        for kind, tracks, cycles in (("load", t.load_tracks, t.latency.load_cycles),
                                     ("store", t.store_tracks, t.latency.store_cycles)):
            for track in tracks if cycles and own else ():
                self.add(Event(f"{kind} {name}", track, start, end - start, kind,
                               steps=steps, path=path), clip)
        for i, child in enumerate(tile.children):
            if isinstance(child, Op):
                unit = self.unit_of(child.op)
                self.add(Event(child.op, f"{unit} unit: {child.op}", start, end - start,
                               "compute", unit, steps, child_path(path, i)), clip)
            else:
                inner = self.times[child_path(path, i)].own
                self.aggregate(child_path(path, i), child, start, end, clip, steps * inner)

    def run(self, path: str, tile: Tile, t0: float, length: float,
            clip: tuple[float, float]) -> None:
        """One run of a tile in [t0, t0 + length]: its steps by the overlap convention."""
        t = self.times[path]
        line, n, k, runs = t.latency, t.steps, t.own, t.runs
        clip = (max(clip[0], t0), min(clip[1], t0 + length))
        shared = line.shared_port_cycles / runs
        end = t0 + length - shared
        outer, clip = clip, (clip[0], min(clip[1], end))
        load, inner = line.load_cycles / n, line.inner_cycles / n
        serial, store = line.serial_cycles / n, line.store_cycles / n
        busy = inner + serial
        period = max(load, busy, store)
        base = max(line.load_cycles, line.inner_cycles + line.serial_cycles,
                   line.store_cycles)
        if self.convention == "perfect":
            lead, load_at, store_at = 0.0, 0.0, 0.0
        else:
            # the first load (and the first word's latency) is paid once over all the runs:
            # each run's share of it before its first step, the rest of a run's first load
            # beside the previous run (as the model spreads the fill and drain over them)
            latency = 0.0
            if self.convention == "fill-drain" and (line.load_cycles or line.store_cycles):
                latency = max(line.fill_drain_cycles - (
                    line.load_cycles + line.inner_cycles + line.store_cycles - base) / n, 0.0)
            lead, load_at, store_at = (load + latency) / runs, -load, busy
            if self.convention == "fill-drain":  # a load-bound run: its first load waits
                # for what the previous run's last step leaves of the link
                lead = max(lead, end - t0 - (k - 1) * period - busy - store)
            else:  # lockstep: slots lengthened to the model's total
                spare = end - t0 - lead - busy - store
                if k > 1:
                    period = max(period, spare / (k - 1))
                else:
                    lead = max(lead, spare + lead)
        name = tile.name or path
        shown = 0 if len(self.out) > MAX_EVENTS else min(k, self.detail_steps)
        if k - shown == 1:  # one step left: drawn as it is, not as a bar of many
            shown = k
        for j in range(shown):
            step = t0 + lead + j * period
            if len(self.frames) == node_depth(path) and j == 0:
                self.frames.append((step, step + inner))
            self.transfers(t, path, name, step, j, (load_at, store_at), (load, store), lead,
                           clip)
            if serial:
                for track in t.load_tracks + t.store_tracks or ("single-buffered",):
                    self.add(Event(f"single-buffered {name}", track, step + inner, serial,
                                   "serial", path=path), clip)
            self.children(path, tile, step, inner, clip, n)
        if shown < k:
            first, last = t0 + lead + shown * period, t0 + lead + (k - 1) * period
            rest = k - shown
            if load:
                begin = t0 if shown == 0 else first + load_at
                for track in t.load_tracks:
                    self.add(Event(f"load {name}", track, begin, last + load_at + load - begin,
                                   "load", steps=rest, path=path), clip)
            if store:
                for track in t.store_tracks:
                    self.add(Event(f"store {name}", track, first + store_at,
                                   last - first + store, "store", steps=rest, path=path), clip)
            if serial:
                for track in t.load_tracks + t.store_tracks or ("single-buffered",):
                    self.add(Event(f"single-buffered {name}", track, first + inner,
                                   last - first + serial, "serial", steps=rest, path=path),
                             clip)
            self.aggregate(path, tile, first, last + inner, clip, rest, own=False)
        if shared:
            port = self.arch.levels[0].name
            self.add(Event(f"rest of the words through {port}'s port", f"{port} port",
                           end, shared, "port", path=path), outer)

    def transfers(self, t: _TileTime, path: str, name: str, step: float, j: int,
                  at: tuple[float, float], cycles: tuple[float, float], lead: float,
                  clip: tuple[float, float]) -> None:
        """Step j's load (the first one from the run's start, with the first-word latency)
        and its store; `at`: their offsets from the step's children, `cycles`: their
        lengths."""
        (load_at, store_at), (load, store) = at, cycles
        if load:
            start, length = (step - lead, lead) if j == 0 and self.convention != "perfect" \
                else (step + load_at, load)
            for track in t.load_tracks:
                self.add(Event(f"load {name}", track, start, length, "load", path=path),
                         clip)
        if store:
            for track in t.store_tracks:
                self.add(Event(f"store {name}", track, step + store_at, store, "store",
                               path=path), clip)


def chrome_trace(evs: list[Event], clock_ghz: float) -> dict:
    """The Trace Event Format that Perfetto and chrome://tracing open (times in us)."""
    tracks = list(dict.fromkeys(e.track for e in evs))
    scale = 1.0 / (clock_ghz * 1e3)  # cycles -> microseconds
    trace = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": i, "args": {"name": t}}
             for i, t in enumerate(tracks)]
    trace += [{"name": e.name, "cat": e.category, "ph": "X", "pid": 1,
               "tid": tracks.index(e.track), "ts": e.start * scale,
               "dur": max(e.duration * scale, 1e-6),
               "args": {"cycles": e.duration, "steps": e.steps}} for e in evs]
    return {"traceEvents": trace, "displayTimeUnit": "ns"}


LEGEND = {"load": "load (into the level below)", "store": "store (back to the level above)",
          "serial": "single-buffered transfer (in series with the children)",
          "port": "rest of the whole tree's words through a one-instance port"}


def colours(evs: list[Event]) -> dict[str, str]:
    """A colour per category of bar, in a fixed order (loads C0, stores C1, then units)."""
    cats = ["load", "store", *sorted({e.category for e in evs if e.kind == "compute"}),
            "serial", "port"]
    return {c: f"C{i % 10}" for i, c in enumerate(cats)}


def plot(evs: list[Event] | Timeline, title: str, path) -> None:
    """The timeline as a PNG: the whole run, then the first step of each depth enlarged;
    one legend entry per colour drawn (hatched: many steps as one bar)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = figure(evs, title, plt)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def figure(evs: list[Event] | Timeline, title: str, plt=None):
    """The timeline's matplotlib figure (see `plot`)."""
    if plt is None:
        import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    line = evs if isinstance(evs, Timeline) else Timeline(
        evs, max((e.end for e in evs), default=0.0), "")
    tracks = list(dict.fromkeys(e.track for e in line.events))
    windows = [(0.0, line.cycles or 1.0)]
    for lo, hi in line.frames:
        if len(windows) == 3:
            break
        if hi > lo and (hi - lo) < 0.5 * (windows[-1][1] - windows[-1][0]):
            windows.append((lo, hi))
    colour = colours(line.events)
    fig, axes = plt.subplots(len(windows), 1, squeeze=False,
                             figsize=(12, len(windows) * (0.35 * len(tracks) + 1.2) + 1))
    for ax, (lo, hi) in zip(axes[:, 0], windows, strict=True):
        for e in line.events:
            if e.end < lo or e.start > hi:
                continue
            row = tracks.index(e.track)  # a link's loads in its upper half, stores lower
            ax.broken_barh([(e.start, e.duration)], (row - 0.4 if e.kind != "store" else row,
                                                     0.8 if e.kind == "compute" else 0.4),
                           facecolor=colour[e.category], edgecolor="black", linewidth=0.3,
                           hatch="//" if e.steps > 1 else None)
        ax.set_xlim(lo, hi)
        ax.set_yticks(range(len(tracks)), tracks, fontsize=8)
        ax.set_ylim(len(tracks) - 0.5, -0.5)
        ax.set_xlabel("cycles" if lo == 0 and hi == windows[0][1] else
                      f"cycles (the first step, {hi - lo:,.6g} cycles, enlarged)", fontsize=8)
    axes[0, 0].set_title(title, fontsize=10)
    used = list(dict.fromkeys(e.category for e in line.events))
    handles = [Patch(facecolor=colour[c], edgecolor="black",
                     label=LEGEND.get(c, f"operator on the {c}")) for c in colour if c in used]
    if any(e.steps > 1 for e in line.events):
        handles.append(Patch(facecolor=colour[used[0]], edgecolor="black", hatch="//",
                             label="many steps as one bar"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 3), fontsize=8)
    fig.tight_layout(rect=(0, 0.06 + 0.02 * (len(handles) // 3), 1, 1))
    return fig


def trace_json(evs: list[Event], clock_ghz: float) -> str:
    return json.dumps(chrome_trace(evs, clock_ghz))
