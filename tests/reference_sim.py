"""An enumerating reference simulator for the tile-tree rules of DESIGN.md section 2.

It executes every operator's loop nest step by step on small sizes, holds explicit sets of
tensor elements per buffer instance, and counts fills, reads and updates. It shares only the
tree's structure (paths, strides, homes) with the analytic model, never its counting."""

from __future__ import annotations

import itertools
from collections import defaultdict

from tileflow.analysis.prepare import Plan
from tileflow.tree import Op, ops_under


def _slice(access, shape, sizes, shift, pos, extent):
    """The set of elements of a tensor that a box of iterations touches."""
    ranges = []
    for axis, size in zip(access.axes, shape, strict=True):
        lo = hi = axis.offset
        for d, c in axis.terms:
            x = shift.get(d, 0) + pos.get(d, 0)
            dlo, dhi = max(x, 0), min(x + extent[d], sizes[d])
            if dhi <= dlo:
                return frozenset()
            lo += c * dlo
            hi += c * (dhi - 1)
        lo, hi = max(lo, 0), min(hi + 1, size)
        if hi <= lo:
            return frozenset()
        ranges.append(range(lo, hi))
    return frozenset(itertools.product(*ranges))


def _drop_nodes(plan: Plan, path, tensor):
    """Path positions of Seq tiles whose next child (wrapping) does not use the tensor."""
    w = plan.workload
    out = []
    for k, (_node_path, tile) in enumerate(path.tiles):
        if tile.primitive != "Seq" or len(tile.children) < 2:
            continue
        if k + 1 < len(path.tiles):
            index = int(path.tiles[k + 1][0].rsplit(".", 1)[1])
        else:
            index = next(i for i, c in enumerate(tile.children)
                         if isinstance(c, Op) and c.op == path.op.name)
        nxt = tile.children[(index + 1) % len(tile.children)]
        if not any(tensor in w.op_by_name[o].tensors for o in ops_under(nxt)):
            out.append(k)
    return out


def simulate(plan: Plan):
    """Return ({(level name, tensor): [fill, read, update]}, {op: operations})."""
    traffic = defaultdict(lambda: [0, 0, 0])
    ops_done = {}
    records = {}
    for name, path in plan.paths.items():
        records[name] = {}
        _simulate_path(plan, path, traffic, ops_done, records[name])
    for name, j, t in _served(plan, records):
        rec = records[name][(j, t)]
        levels = plan.paths[name].levels
        traffic[(levels[j + 1], t)][0] -= rec["y"]
        traffic[(levels[j], t)][1] -= rec["x"]
    names = [lv.name for lv in plan.arch.levels]
    return {(names[x], t): v for (x, t), v in traffic.items()}, ops_done


def _served(plan: Plan, records):
    """Inputs that a later child of a Shar, Para or Pipe tile loads over the link below it
    into the same level with exactly the slices (element sets, step by step) an earlier
    child loaded: those loads are not made, the copy is resident."""
    out = []
    for node_path, node in plan.tiles.items():
        if node.primitive not in ("Shar", "Para", "Pipe") or len(node.children) < 2:
            continue
        j = node_path.count(".")
        earlier = []  # (child index, tensor, slices by step)
        for index, child in enumerate(node.children):
            for o in ops_under(child):
                for (jj, t), rec in records[o].items():
                    if jj != j or t in plan.lca:
                        continue
                    mine = (t, rec["level"], rec["slices"])
                    if any(i < index and other == mine for i, other in earlier):
                        out.append((o, j, t))
                    earlier.append((index, mine))
    return out


def _simulate_path(plan, path, traffic, ops_done, record):
    w = plan.workload
    op = path.op
    sizes = w.sizes
    loops = path.loops
    temporal = [i for i, lp in enumerate(loops) if not lp.spatial]
    spatial = [i for i, lp in enumerate(loops) if lp.spatial]
    levels = path.levels
    n_nodes = len(path.tiles)
    boundaries = [j for j in range(n_nodes - 1) if levels[j] != levels[j + 1]]
    accesses = [(a, False) for a in op.inputs] + [(op.output, True)]

    info = {}
    for access, _ in accesses:
        t = access.tensor
        no_reuse = {k for k, (_, tile) in enumerate(path.tiles) if t in tile.no_reuse}
        if t in plan.lca:
            depth = plan.lca[t].count(".")
            epoch = {i for i, lp in enumerate(loops) if lp.node <= depth}
        else:
            epoch = {i for i, lp in enumerate(loops) if lp.dim not in op.dims}
        info[t] = (_drop_nodes(plan, path, t), no_reuse, epoch)

    def extent_below(j):
        return {d: 1 + sum((lp.n - 1) * lp.stride for lp in loops
                           if lp.node > j and lp.dim == d) for d in op.dims}

    # per boundary, per tensor: buffers keyed by instance
    state = {}
    for j in boundaries:
        run_start = j
        while run_start > 0 and levels[run_start - 1] == levels[j]:
            run_start -= 1
        inst_y = [i for i in spatial if loops[i].node <= j]
        inst_x = [i for i in spatial if loops[i].node < run_start]
        state[j] = dict(inst_y=inst_y, inst_x=inst_x, ext_y=extent_below(j),
                        held_y=defaultdict(frozenset), held_x=defaultdict(frozenset),
                        seen_y=defaultdict(set), seen_x=defaultdict(set))

    compute_seen = defaultdict(set)
    ops = 0
    x_last = levels[-1]
    prev = None
    for tvals in itertools.product(*(range(loops[i].n) for i in temporal)):
        values = dict(zip(temporal, tvals, strict=True))
        changed = set() if prev is None else {i for i in temporal if values[i] != prev[i]}
        for j in boundaries:
            st = state[j]
            x, y = levels[j], levels[j + 1]
            for access, is_out in accesses:
                t = access.tensor
                if t in plan.homes and x < plan.homes[t]:
                    continue
                drops, no_reuse, epoch = info[t]
                dropping = any(
                    loops[i].node in no_reuse or any(loops[i].node <= k <= j for k in drops)
                    for i in changed if loops[i].node <= j)
                new_epoch = any(i in epoch for i in changed)
                for side in ("y", "x"):
                    inst_idx = st[f"inst_{side}"]
                    held, seen = st[f"held_{side}"], st[f"seen_{side}"]
                    # every instance of y below the boundary gets its slice; x sees, per
                    # instance of x, the union of the slices of the y instances under it
                    groups = defaultdict(frozenset)
                    sp_all = [i for i in spatial if loops[i].node <= j]
                    for svals in itertools.product(*(range(loops[i].n) for i in sp_all)):
                        sv = dict(zip(sp_all, svals, strict=True))
                        pos = defaultdict(int)
                        for i, lp in enumerate(loops):
                            if lp.node <= j:
                                pos[lp.dim] += (sv[i] if lp.spatial else values[i]) * lp.stride
                        key = tuple(sv[i] for i in inst_idx)
                        groups[key] = groups[key] | _slice(access, w.shapes[t], sizes,
                                                           path.shift, pos, st["ext_y"])
                    for key, now in groups.items():
                        key = (t, key)
                        if dropping:
                            _leave(traffic, x, y, t, side, is_out, held[key])
                            held[key] = frozenset()
                        if new_epoch:
                            seen[key] = set()
                        old = held[key]
                        _leave(traffic, x, y, t, side, is_out, old - now)
                        entering = now - old
                        if is_out:
                            # a partial sum comes back only if touched before in this epoch
                            moved = len(entering & seen[key])
                            seen[key] |= now
                        else:
                            moved = len(entering)
                        if side == "y":
                            traffic[(y, t)][0] += moved
                        else:
                            traffic[(x, t)][1] += moved
                        held[key] = now
                        if not is_out:  # what the link carried, for sibling sharing
                            rec = record.setdefault((j, t), {"x": 0, "y": 0, "slices": {},
                                                             "level": y})
                            rec[side] += moved
                            steps = tuple(values[i] for i in temporal if loops[i].node <= j)
                            rec["slices"][(steps, side, key)] = now
        # compute: operands read from the innermost level, accumulators not read on first touch
        if any(i in info[op.output.tensor][2] for i in changed):
            compute_seen.clear()
        for svals in itertools.product(*(range(loops[i].n) for i in spatial)):
            sv = dict(zip(spatial, svals, strict=True))
            pos = defaultdict(int)
            for i, lp in enumerate(loops):
                v = values[i] if not lp.spatial else sv[i]
                pos[lp.dim] += v * lp.stride
            point = {d: path.shift.get(d, 0) + pos[d] for d in op.dims}
            if any(not 0 <= point[d] < sizes[d] for d in op.dims):
                continue
            ops += 1
            for access in op.inputs:
                traffic[(x_last, access.tensor)][1] += 1
            out = op.output.tensor
            traffic[(x_last, out)][2] += 1
            if op.accumulates:
                key = tuple(svals)
                element = tuple(sum(c * point[d] for d, c in axis.terms) + axis.offset
                                for axis in op.output.axes)
                if element in compute_seen[key]:
                    traffic[(x_last, out)][1] += 1
                else:
                    compute_seen[key].add(element)
        prev = values
    # drain what is still held
    for j in boundaries:
        st = state[j]
        for access, is_out in accesses:
            t = access.tensor
            for key, held in st["held_x"].items():
                if key[0] == t:
                    _leave(traffic, levels[j], levels[j + 1], t, "x", is_out, held)
    ops_done[op.name] = ops


def _leave(traffic, x, y, t, side, is_out, elements):
    """Output elements leaving a buffer are written back: counted once per element at the
    parent (the union side), after spatial reduction."""
    if is_out and side == "x" and elements:
        traffic[(x, t)][2] += len(elements)


