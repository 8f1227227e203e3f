"""A timeline of a dataflow from the model's per-tile latencies: the first steps of the root's
loops, with every tile's loads and stores on the link between its level and the one above
and every operator on its compute unit. Durations are the model's averages per step
(a tile's cycles over its steps); overlap follows the primitives (Seq/Shar one after
another, Para at once, Pipe stages staggered by one step)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from tileflow.cost.model import Result
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow, Op, Tile


@dataclass(frozen=True)
class Event:
    name: str
    track: str
    start: float  # cycles
    duration: float  # cycles


def _steps(tile: Tile) -> int:
    return math.prod(lp.factor for lp in tile.loops if not lp.spatial)


def events(w: Workload, arch: Architecture, flow: Dataflow, result: Result,
           max_steps: int = 6) -> list[Event]:
    """Events of the first `max_steps` steps of the root."""
    per_tile = {n.path: n for n in result.latency_breakdown}
    out: list[Event] = []

    def unit_track(op: str) -> str:
        kind = arch.unit(w.op_by_name[op].unit).kind
        return f"{kind} unit: {op}"

    def link(parent_level: str, tile: Tile) -> str:
        return f"{parent_level} <-> {tile.level}"

    def block(path: str, node, start: float, runs: float, parent_level: str) -> float:
        """Place one run of a node (its share of one step of the root); returns its end."""
        if isinstance(node, Op):
            length = _leaf_cycles(path, node, runs)
            out.append(Event(node.op, unit_track(node.op), start, length))
            return start + length
        info = per_tile.get(path)
        total = info.cycles if info else 0.0
        length = total / runs
        load = info.load_cycles / runs if info else 0.0
        store = info.store_cycles / runs if info else 0.0
        if load and node.level != parent_level:
            out.append(Event(f"load {node.name or path}", link(parent_level, node), start,
                             load))
        inner_start = start + (load if load < length else 0.0)
        kids = [(f"{path}.{i}", c) for i, c in enumerate(node.children)]
        if node.primitive == "Para":
            ends = [block(p, c, inner_start, runs, node.level) for p, c in kids]
            end = max(ends, default=inner_start)
        elif node.primitive == "Pipe" and len(kids) > 1:
            end = inner_start
            for k, (p, c) in enumerate(kids):
                end = max(end, block(p, c, inner_start + k * length / (len(kids) + 1), runs,
                                     node.level))
        else:
            end = inner_start
            for p, c in kids:
                end = block(p, c, end, runs, node.level)
        if store and node.level != parent_level:
            out.append(Event(f"store {node.name or path}", link(parent_level, node), end,
                             store))
            end += store
        return max(end, start + length)

    def _leaf_cycles(path: str, node: Op, runs: float) -> float:
        parent = per_tile.get(path.rsplit(".", 1)[0])
        kids = 1
        if parent is not None:
            kids = max(1, len(_node(flow.root, parent.path).children))
        return (parent.inner_cycles / kids / runs) if parent else 0.0

    root = flow.root
    steps = _steps(root)
    shown = min(steps, max_steps)
    info = per_tile.get("root")
    step_length = (info.cycles if info else result.cycles) / steps
    outer = arch.levels[0].name
    for i in range(shown):
        start = i * step_length
        kids = [(f"root.{k}", c) for k, c in enumerate(root.children)]
        if root.primitive == "Para":
            for p, c in kids:
                block(p, c, start, steps, root.level if root.level != outer else outer)
        elif root.primitive == "Pipe" and len(kids) > 1:
            for k, (p, c) in enumerate(kids):
                block(p, c, start + k * step_length, steps, root.level)
        else:
            t = start
            for p, c in kids:
                t = block(p, c, t, steps, root.level)
    return out


def _node(root: Tile, path: str):
    node = root
    for part in path.split(".")[1:]:
        node = node.children[int(part)]
    return node


def chrome_trace(evs: list[Event], clock_ghz: float) -> dict:
    """The Trace Event Format that Perfetto and chrome://tracing open (times in us)."""
    tracks = list(dict.fromkeys(e.track for e in evs))
    scale = 1.0 / (clock_ghz * 1e3)  # cycles -> microseconds
    trace = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": i, "args": {"name": t}}
             for i, t in enumerate(tracks)]
    trace += [{"name": e.name, "ph": "X", "pid": 1, "tid": tracks.index(e.track),
               "ts": e.start * scale, "dur": max(e.duration * scale, 1e-6),
               "args": {"cycles": e.duration}} for e in evs]
    return {"traceEvents": trace, "displayTimeUnit": "ns"}


def plot(evs: list[Event], title: str, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tracks = list(dict.fromkeys(e.track for e in evs))
    fig, ax = plt.subplots(figsize=(12, 0.5 * len(tracks) + 1.5))
    names = list(dict.fromkeys(e.name for e in evs))
    for e in evs:
        ax.broken_barh([(e.start, e.duration)], (tracks.index(e.track) - 0.4, 0.8),
                       color=f"C{names.index(e.name) % 10}", edgecolor="black", linewidth=0.3)
    ax.set_yticks(range(len(tracks)), tracks, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("cycles")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def trace_json(evs: list[Event], clock_ghz: float) -> str:
    return json.dumps(chrome_trace(evs, clock_ghz))
