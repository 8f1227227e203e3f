"""The data-movement bound ("ski-slope"): for a workload and the capacity of one on-chip level,
the least DRAM traffic of any exact divisor tiling of any fused structure of the generated
space whose footprint at that level fits; with the compulsory traffic (every input read
once, every output written once) as its floor.

One enumeration gives the whole curve: the level's capacity is lifted, every tiling is
evaluated with `evaluate_batch` (footprint at the level, DRAM words, validity of everything
else), and only the Pareto front of (footprint, DRAM words) is kept. The bound at capacity C
is the least DRAM words on the front with footprint <= C.

Pruning by dominance: the DRAM words and the level's footprint depend only on the factors of
the loops above the level (the slice a tile at the level holds is the product of every
factor below, which an exact tiling fixes). Tilings that agree on those outer factors are
equal in both, so per dimension one representative is kept per outer assignment: no spatial
factor below the level (which can only add fan-out and array violations), and the rest of
the dimension as far out as possible (which keeps the inner levels' footprints smallest).
The tests check the pruned enumeration against every tiling of small cases."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from tileflow.arith import divisors
from tileflow.evaluator.batch import evaluate_batch
from tileflow.evaluator.structure import Structure
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import ROOT, Op, Tile, child_path, ops_under

CHUNK_ROWS = 32_768


@dataclass(frozen=True)
class FrontPoint:
    """A tiling on the Pareto front: footprint at the level (words per instance), DRAM words,
    and which structure and factors give them."""

    footprint_words: float
    dram_words: float
    structure: int
    factors: tuple[int, ...]


@dataclass(frozen=True)
class Bound:
    """The least DRAM traffic against the capacity of `level` (see `at`)."""

    level: str
    word_bytes: int
    compulsory_words: float
    front: tuple[FrontPoint, ...]  # footprint ascending, DRAM words strictly descending
    names: tuple[str, ...]  # per structure, a label
    tilings: int  # exact divisor tilings of every structure (before pruning)
    evaluated: int  # rows evaluated after pruning
    skipped: tuple[str, ...] = ()  # structures left out, with why
    sampled: tuple[FrontPoint, ...] = ()  # front of random tilings of the left-out ones

    def at(self, capacity_words: float) -> float:
        """Least DRAM words with a footprint of at most `capacity_words` (inf: none fits)."""
        best = math.inf
        for p in self.front:
            if p.footprint_words <= capacity_words:
                best = min(best, p.dram_words)
        return best

    def sampled_at(self, capacity_words: float) -> float:
        """Least DRAM words among the left-out structures' sampled tilings that fit."""
        return min((p.dram_words for p in self.sampled if p.footprint_words <= capacity_words),
                   default=math.inf)

    def point_at(self, capacity_words: float) -> FrontPoint | None:
        fits = [p for p in self.front if p.footprint_words <= capacity_words]
        return min(fits, key=lambda p: p.dram_words) if fits else None

    def curve(self, capacities_words: Iterable[float]) -> np.ndarray:
        return np.array([self.at(c) for c in capacities_words], dtype=float)

    def to_dict(self) -> dict:
        return {"level": self.level, "word_bytes": self.word_bytes,
                "compulsory_words": self.compulsory_words, "tilings": self.tilings,
                "evaluated": self.evaluated, "skipped": list(self.skipped),
                "front": [{"footprint_words": p.footprint_words,
                           "footprint_bytes": p.footprint_words * self.word_bytes,
                           "dram_words": p.dram_words, "structure": self.names[p.structure],
                           "factors": list(p.factors)} for p in self.front],
                "sampled": [{"footprint_words": p.footprint_words, "dram_words": p.dram_words,
                             "structure": self.names[p.structure]} for p in self.sampled]}


def compulsory_words(w: Workload) -> int:
    """Every input read once and every output written once (intermediates never leave)."""
    return sum(w.tensor_words(t) for t in (*w.inputs, *w.outputs))


def lifted(arch: Architecture, level: str) -> Architecture:
    """The accelerator with `level` unbounded: its footprint becomes the curve's axis."""
    levels = tuple(replace(lv, capacity_words=math.inf) if lv.name == level else lv
                   for lv in arch.levels)
    return replace(arch, levels=levels)


def pareto(fp: np.ndarray, dram: np.ndarray) -> np.ndarray:
    """Indices of the points no other point dominates (footprint and DRAM words both no
    larger, one smaller), footprint ascending; one point per distinct pair."""
    if not len(fp):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((dram, fp))
    keep, best = [], math.inf
    for i in order:
        if dram[i] < best:
            keep.append(i)
            best = dram[i]
    return np.array(keep, dtype=np.int64)


# ---- the pruned enumeration ----------------------------------------------------------------

def _slot_limit(structure: Structure, k: int, r: int) -> int:
    limits = getattr(structure, "slot_limits", ()) or ()
    if structure.slots[k].spatial and k < len(limits) and limits[k]:
        return limits[k]
    return r


class TooManyTilings(Exception):
    """A dimension alone has more exact assignments than the bound may enumerate."""


def _dim_assignments(structure: Structure, d: str,
                     limit: int | None = None) -> list[dict[int, int]]:
    """Every exact assignment of dim `d`'s factors (slot -> factor), within spatial limits;
    TooManyTilings past `limit` of them (a size with many divisors over many loops)."""
    w = structure.workload
    slot_at = {(s.path, s.index): k for k, s in enumerate(structure.slots)}

    def go(node, path: str, r: int) -> list[dict[int, int]]:
        if isinstance(node, Op):
            return [{}] if r == 1 else []
        ks = [slot_at[(path, i)] for i, lp in enumerate(node.loops) if lp.dim == d]
        kids = [(child_path(path, i), c) for i, c in enumerate(node.children)
                if d in {x for o in ops_under(c) for x in w.op_by_name[o].dims}]
        out = []
        options = [[x for x in divisors(r) if x <= _slot_limit(structure, k, r)] for k in ks]
        for combo in itertools.product(*options):
            q = math.prod(combo)
            if r % q:
                continue
            below = [go(c, p, r // q) for p, c in kids]
            for parts in itertools.product(*below):
                row = dict(zip(ks, combo, strict=True))
                for part in parts:
                    row.update(part)
                out.append(row)
                if limit is not None and len(out) > limit:
                    raise TooManyTilings(d)
        return out

    return go(structure.template.root, ROOT, w.sizes[d])


def outer_slots(structure: Structure, level: str) -> np.ndarray:
    """Per slot: whether its tile sits above `level` (its factors decide the DRAM words and
    the level's footprint)."""
    index = structure.arch.level_index
    tiles = _tiles(structure)
    return np.array([index[tiles[s.path].level] < index[level] for s in structure.slots],
                    dtype=bool)


def _tiles(structure: Structure) -> dict[str, Tile]:
    out: dict[str, Tile] = {}

    def go(node: Tile, path: str) -> None:
        out[path] = node
        for i, c in enumerate(node.children):
            if isinstance(c, Tile):
                go(c, child_path(path, i))

    go(structure.template.root, ROOT)
    return out


def dim_blocks(structure: Structure, level: str | None = None,
               limit: int | None = None) -> list[np.ndarray]:
    """Per dimension, its exact assignments as rows over all slots (1 in other dims' slots).
    With `level`, pruned by dominance: one representative per assignment of the loops above
    `level` (see the module's notes). TooManyTilings when a dimension has more than `limit`
    assignments before pruning."""
    outer = outer_slots(structure, level) if level else None
    blocks = []
    for d in dict.fromkeys(s.dim for s in structure.slots):
        rows = _dim_assignments(structure, d, limit)
        if outer is not None:
            rows = _representatives(structure, rows, outer)
        block = np.ones((len(rows), len(structure.slots)), dtype=np.int64)
        for i, part in enumerate(rows):
            for k, x in part.items():
                block[i, k] = x
        blocks.append(block)
    return blocks


def tilings(structure: Structure, level: str | None = None) -> np.ndarray:
    """Exact divisor tilings, one row each (pruned by dominance with `level`)."""
    out = np.ones((1, len(structure.slots)), dtype=np.int64)
    for block in dim_blocks(structure, level):
        # every slot belongs to one dimension: the product combines the dimensions' parts
        out = (out[:, None, :] * block[None, :, :]).reshape(-1, len(structure.slots))
    return out


def sample_tilings(blocks: Sequence[np.ndarray], count: int,
                   rng: np.random.Generator) -> np.ndarray:
    """`count` rows of the product of `blocks`, each dimension's part drawn uniformly."""
    out = np.ones((count, blocks[0].shape[1] if blocks else 0), dtype=np.int64)
    for block in blocks:
        out *= block[rng.integers(0, len(block), count)]
    return out


def _representatives(structure: Structure, rows: list[dict[int, int]],
                     outer: np.ndarray) -> list[dict[int, int]]:
    """One assignment per outer assignment: fewest spatial iterations below the level, then
    the deepest slots smallest."""
    best: dict[tuple, tuple[tuple, dict[int, int]]] = {}
    for row in rows:
        key = tuple(sorted((k, x) for k, x in row.items() if outer[k]))
        inner = sorted(k for k in row if not outer[k])
        spread = math.prod(row[k] for k in inner if structure.slots[k].spatial)
        rank = (spread, tuple(row[k] for k in reversed(inner)))
        if key not in best or rank < best[key][0]:
            best[key] = (rank, row)
    return [row for _, row in best.values()]


def front_of(structure: Structure, rows: np.ndarray, level: str,
             progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, np.ndarray,
                                                                      np.ndarray]:
    """(footprint, DRAM words, rows) of the Pareto front of the valid rows of one structure,
    evaluated in chunks."""
    fps, drams, kept = [], [], []
    for start in range(0, len(rows), CHUNK_ROWS):
        part = rows[start:start + CHUNK_ROWS]
        result = evaluate_batch(structure, part)
        fp = np.asarray(result.footprint_words.get(level, np.zeros(len(part))), dtype=float)
        ok = np.asarray(result.valid, dtype=bool)
        fp, dram, part = fp[ok], np.asarray(result.dram_words, dtype=float)[ok], part[ok]
        keep = pareto(fp, dram)
        fps.append(fp[keep])
        drams.append(dram[keep])
        kept.append(part[keep])
        if progress:
            progress(len(rows[start:start + CHUNK_ROWS]))
    if not fps:
        return np.zeros(0), np.zeros(0), rows[:0]
    fp, dram, part = np.concatenate(fps), np.concatenate(drams), np.concatenate(kept)
    keep = pareto(fp, dram)
    return fp[keep], dram[keep], part[keep]


def data_movement_bound(structures: Sequence[tuple[str, Structure]], level: str,
                        max_rows: int = 2_000_000, prune: bool = True, sample_rows: int = 0,
                        progress: Callable[[int], None] | None = None) -> Bound:
    """The bound over `structures` (name, structure built on the accelerator with `level`
    lifted, see `lifted`). A structure whose pruned enumeration exceeds `max_rows` is left
    out and named in `skipped` (the bound then covers the others only); with `sample_rows`,
    that many of its tilings drawn at random are evaluated and their front kept apart
    (`sampled`), to show whether the left-out structures would lower the bound."""
    from tileflow.explore.structures.tilings import Tilings

    if not structures:
        raise ValueError("no structures to bound")
    arch = structures[0][1].arch
    if level not in arch.level_index or arch.level_index[level] == 0:
        raise ValueError(f"'{level}' is not an on-chip level of {arch.name}")
    w = structures[0][1].workload
    points: list[FrontPoint] = []
    sampled: list[FrontPoint] = []
    total = evaluated = 0
    skipped = []
    rng = np.random.default_rng(0)
    for k, (name, s) in enumerate(structures):
        total += Tilings(s, getattr(s, "slot_limits", None) or None).count
        try:
            blocks = dim_blocks(s, level if prune else None, limit=max_rows)
        except TooManyTilings as exc:
            skipped.append(f"{name}: more than {max_rows:,} tilings of '{exc}' alone")
            continue
        size = math.prod(len(b) for b in blocks)
        if size > max_rows:
            skipped.append(f"{name}: {size:,} tilings after pruning (more than {max_rows:,})")
            if sample_rows and size:
                fp, dram, kept = front_of(s, sample_tilings(blocks, sample_rows, rng), level,
                                          progress)
                sampled += [FrontPoint(float(a), float(b), k, tuple(int(x) for x in r))
                            for a, b, r in zip(fp, dram, kept, strict=True)]
            continue
        rows = tilings(s, level if prune else None)
        evaluated += len(rows)
        fp, dram, kept = front_of(s, rows, level, progress)
        points += [FrontPoint(float(a), float(b), k, tuple(int(x) for x in r))
                   for a, b, r in zip(fp, dram, kept, strict=True)]
    return Bound(level, arch.word_bytes, float(compulsory_words(w)), _front(points),
                 tuple(n for n, _ in structures), total, evaluated, tuple(skipped),
                 _front(sampled))


def _front(points: list[FrontPoint]) -> tuple[FrontPoint, ...]:
    fp = np.array([p.footprint_words for p in points])
    dram = np.array([p.dram_words for p in points])
    return tuple(points[i] for i in pareto(fp, dram))
