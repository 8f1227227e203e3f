"""The space of fused tile trees of any workload on any accelerator: default, random and
baseline encodings, the gene operators the genetic search uses (mutation, crossover), the
enumeration of every fusion structure, and the size of the space with what the rules prune."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from tileflow.explore.structures.canonical import canonical, canonical_edges, repair
from tileflow.explore.structures.encoding import (
    Encoding,
    Frame,
    InvalidEncoding,
    LoopSpec,
    components,
    decode,
    default_group_loops,
    home_options,
    leaf_chains,
    merge_level,
    ordered,
    shares,
)
from tileflow.explore.structures.feasible import fit_to_levels
from tileflow.explore.structures.tilings import EncodedStructure, Tilings, build_structure
from tileflow.explore.tilesearch.bypass import forced_bypass, with_forced_bypass
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import MATRIX, Workload
from tileflow.tree import PRIMITIVES, Dataflow, Tile, ops_under, walk


@dataclass(frozen=True)
class SpaceOptions:
    """Which genes the search varies (the others keep their defaults)."""

    primitives: tuple[str, ...] = PRIMITIVES
    homes: bool = True  # where intermediates live
    loop_orders: bool = True  # the order of each tile's temporal loops
    spatial: bool = True  # which loops are spatial
    outer_tiles: bool = True  # own tiles at outer levels, and the dims groups tile
    shares: tuple[int, ...] = (1, 2, 4)  # an operator's share of the array under Pipe/Para
    bypass: bool = True  # which levels each input and output skips
    fit_factors: bool = True  # start from factors fitted to the levels' capacities


class StructureSpace:
    """Fused tile trees of `workload` on `arch`, as encodings."""

    def __init__(self, workload: Workload, arch: Architecture,
                 options: SpaceOptions | None = None, seeds: dict[str, Dataflow] | None = None):
        self.frame = Frame(workload, arch)
        self.seeds = dict(seeds or {})  # name -> a user's tree that seeds the search
        self.options = options or SpaceOptions()
        self._structures: dict[Encoding, EncodedStructure] = {}
        self.fixes: Counter = Counter()  # repairs by rule, over every encoding repaired
        self.repaired = 0  # encodings that needed at least one fix

    @property
    def n(self) -> int:
        return len(self.frame.ops)

    # ---- encodings ----------------------------------------------------------------------

    def repair(self, enc: Encoding) -> tuple[Encoding, Counter]:
        """`enc` made valid, with the bypasses a level too small for one element of each
        tensor needs (see `forced_bypass`)."""
        fixed, fixes = repair(self.frame, enc)
        extra = forced_bypass(self.frame.workload, self.frame.arch, fixed.bypass)
        if extra:
            fixed, more = repair(self.frame, fixed.with_bypass({*fixed.bypass, *extra}))
            fixes.update(more)
            fixes["bypass-to-fit"] += len(extra)
        self.fixes.update(fixes)
        self.repaired += bool(fixes)
        return fixed, fixes

    def structure(self, enc: Encoding) -> EncodedStructure:
        """The structure (tree with default factors and per-slot limits) of a valid
        encoding; raises InvalidEncoding for an invalid one (repair it first)."""
        if enc not in self._structures:
            flow = decode(self.frame, enc, name="searched")
            fit = fit_to_levels if self.options.fit_factors else None
            self._structures[enc] = build_structure(self.frame, enc, flow, fit)
        return self._structures[enc]

    def own_loops(self, o: int, level: int) -> LoopSpec:
        """Default loops of an operator's own tile: at the level that holds its innermost
        loops, every dim (outputs first) and its largest outputs spread over the array or
        lanes; at outer levels every dim (streaming)."""
        f = self.frame
        op = f.workload.op_by_name[f.ops[o]]
        spec: list[tuple[str, bool]] = [(d, False) for d in (*op.output.dims,
                                                              *op.reduction_dims)]
        if f.spatial_limit(o, level) > 1:
            size = f.workload.sizes
            outs = sorted(op.output.dims, key=lambda d: -size[d])
            wide = 2 if op.unit == MATRIX and level == f.loop_level[o] < f.feed[o] else 1
            spec += [(d, True) for d in outs[:wide] if size[d] > 1]
        return tuple(spec)

    def defaults(self, into, level, primitive=None, home=None, share=None,
                 root_primitive: str = "Seq") -> Encoding:
        """The repaired encoding of a fusion pattern with default loops and, unless given,
        Seq everywhere, unfused intermediates in the outermost level, the whole array."""
        f, n = self.frame, self.n
        enc = Encoding(tuple(into), tuple(level), tuple(primitive or ("Seq",) * n),
                       tuple(home or (-1,) * n), tuple(share or (1,) * n), root_primitive, ())
        sh = shares(enc)
        loops: dict[str, LoopSpec] = {}
        comps = components(range(n), sh, 0)
        for o in range(n):
            loops[f.own_key(o, f.loop_level[o])] = self.own_loops(o, f.loop_level[o])
        for c in comps:
            if len(c) == 1 and (len(comps) > 1 or self._overflows_first_level(c[0])) and \
                    self.options.outer_tiles:
                loops[f.own_key(c[0], 0)] = self.own_loops(c[0], 0)
            elif len(c) > 1:
                loops[f.group_key(c, 0)] = default_group_loops(f, c)
        if self.options.outer_tiles:
            loops.update(self.level_tiles(sh))
        if home is None:
            genes = list(enc.home)
            for t in f.workload.intermediates:
                p = f.index[f.workload.producer[t]]
                if any(sh[p][f.index[c]] < 0 for c in f.workload.consumers[t]):
                    genes[p] = 0
            enc = replace(enc, home=tuple(genes))
        return self.repair(enc.with_loops(loops))[0]

    def _overflows_first_level(self, o: int) -> bool:
        """Whether operator `o`'s tensors outgrow the level below DRAM, so a lone operator
        needs its own DRAM tile to step through blocks (else that level holds them all)."""
        w, levels = self.frame.workload, self.frame.arch.levels
        if len(levels) < 2 or self.frame.loop_level[o] == 0:
            return False
        words = sum(w.tensor_words(t) for t in w.op_by_name[self.frame.ops[o]].tensors)
        return words > levels[1].capacity_words

    def level_tiles(self, sh: list[list[int]]) -> dict[str, LoopSpec]:
        """Default tiles at the on-chip levels between DRAM and each operator's innermost
        loops (a shared L2 above per-core L1s): every fused group there steps through blocks
        (spread over the instances below, the cores, where there are several), and every
        operator's own chain keeps a block at each middle level below its innermost group."""
        f = self.frame
        loops: dict[str, LoopSpec] = {}
        for members, lam in groups(range(self.n), sh):
            if lam > 0 and f.group_loops_allowed(members, lam):
                loops[f.group_key(members, lam)] = default_group_loops(f, members, lam)
        for o in range(self.n):
            start = max((sh[o][p] for p in range(self.n) if p != o), default=-1)
            for lv in f.middle_levels(o, start):
                loops[f.own_key(o, lv)] = self.own_loops(o, lv)
        return loops

    def level_seeds(self) -> dict[str, Encoding]:
        """Per on-chip level down to the operators' innermost loops (a shared L2, the
        per-core L1 or a global buffer), the structure that fuses every operator there under
        a DRAM tile stepping through blocks: the intermediates stay on chip while DRAM
        streams blocks, the pattern the other seeds (baselines fused at DRAM with a tile
        per operator, or in the L1 without blocks) do not start from. Empty on a chip with
        one level, or without outer tiles."""
        f, n = self.frame, self.n
        if n < 2 or not self.options.outer_tiles:
            return {}
        out = {}
        for lv in range(1, min(f.loop_level) + 1):
            if any(lv > f.max_junction(o, o + 1) for o in range(n - 1)):
                continue
            try:
                out[f"fused-at-{f.levels[lv]}"] = self.defaults(
                    (*range(1, n), -1), (lv,) * (n - 1) + (0,))
            except InvalidEncoding:  # a workload the repair cannot fuse there
                continue
        return out

    def unfused(self) -> Encoding:
        return self.defaults((-1,) * self.n, (0,) * self.n)

    def seed_flow(self, name: str) -> Dataflow:
        """The tree a seed of `baselines()` came from: a user's tree or a built baseline."""
        from tileflow.dataflows import build

        if name in self.seeds:
            return self.seeds[name]
        return with_forced_bypass(build(name, self.frame.workload, self.frame.arch),
                                  self.frame.workload, self.frame.arch)

    def baselines(self) -> dict[str, Encoding]:
        """The encoding of every named baseline that applies to the workload, then of every
        user's tree (`seeds`) the encoding can express (the others are in `skipped`)."""
        from tileflow.dataflows import baselines_for, build
        from tileflow.explore.structures.canonical import encode

        out = {}
        self.skipped: dict[str, str] = {}
        for name in baselines_for(self.frame.workload):
            try:
                flow = with_forced_bypass(build(name, self.frame.workload, self.frame.arch),
                                          self.frame.workload, self.frame.arch)
                out[name] = encode(self.frame, flow)
            except (ValueError, IndexError) as error:  # a builder that cannot size this case
                self.skipped[name] = f"{type(error).__name__}: {error}"
        for name, flow in self.seeds.items():
            try:
                out[name] = encode(self.frame, flow)
            except (ValueError, IndexError) as error:  # a tree the encoding cannot express
                self.skipped[name] = f"{type(error).__name__}: {error}"
        return out

    def random(self, rng: np.random.Generator, fuse: float = 0.7) -> Encoding:
        f, n, opts = self.frame, self.n, self.options
        into, level = [-1] * n, [0] * n
        for o in range(n - 1):
            if rng.random() < fuse:
                into[o] = int(rng.integers(o + 1, n))
                level[o] = int(rng.integers(0, f.max_junction(o, into[o]) + 1))
        primitive = tuple(str(rng.choice(opts.primitives)) for _ in range(n))
        enc = self.defaults(into, level, primitive,
                            share=tuple(int(rng.choice(opts.shares)) for _ in range(n)),
                            root_primitive=str(rng.choice(opts.primitives)))
        for _ in range(int(rng.integers(0, 4))):
            enc = self.mutate(enc, rng)
        return enc

    # ---- gene operators -----------------------------------------------------------------

    def mutate(self, enc: Encoding, rng: np.random.Generator, tries: int = 8) -> Encoding:
        """One random change of one gene, repaired (retried when it changes nothing)."""
        for _ in range(tries):
            child = self._mutate_once(enc, rng)
            if child != enc:
                return child
        return enc

    def _mutate_once(self, enc: Encoding, rng: np.random.Generator) -> Encoding:
        f, n, opts = self.frame, self.n, self.options
        kinds = ["fuse", "level", "primitive"]
        kinds += ["home"] * opts.homes + ["share"] * (len(opts.shares) > 1)
        kinds += ["order"] * opts.loop_orders + ["spatial"] * opts.spatial
        kinds += ["tiles"] * opts.outer_tiles
        kinds += ["bypass"] * (opts.bypass and len(f.levels) > 1 and bool(f.bypassable))
        kind = str(rng.choice(kinds))
        into, level = list(enc.into), list(enc.level)
        o = int(rng.integers(0, n))
        loops = dict(enc.loop_map)
        if kind in ("fuse", "level") and n > 1:
            o = int(rng.integers(0, n - 1))
        if kind == "fuse" and o < n - 1:
            into[o] = -1 if rng.random() < 0.3 else int(rng.integers(o + 1, n))
            if into[o] >= 0:
                level[o] = int(rng.integers(0, f.max_junction(o, into[o]) + 1))
        elif kind == "level" and into[o] >= 0:
            level[o] = int(rng.integers(0, f.max_junction(o, into[o]) + 1))
        elif kind == "primitive":
            p = str(rng.choice(opts.primitives))
            if rng.random() < 0.2:
                enc = replace(enc, root_primitive=p)
            else:
                enc = replace(enc, primitive=_set(enc.primitive, o, p))
        elif kind == "home" and f.workload.intermediates:
            t = str(rng.choice(f.workload.intermediates))
            chains = leaf_chains(decode(f, enc).root)
            allowed = (-1, *home_options(f, chains, t)[0])
            p = f.index[f.workload.producer[t]]
            enc = replace(enc, home=_set(enc.home, p, int(rng.choice(allowed))))
        elif kind == "bypass":
            t = str(rng.choice(f.bypassable))
            gene = (t, int(rng.integers(1, len(f.levels))))
            enc = enc.with_bypass(set(enc.bypass) ^ {gene})
        elif kind == "share":
            enc = replace(enc, share=_set(enc.share, o, int(rng.choice(opts.shares))))
        elif kind in ("order", "spatial", "tiles"):
            loops = self._mutate_loops(kind, loops, o, rng, shares(enc))
        enc = replace(enc, into=tuple(into), level=tuple(level))
        return self.repair(enc.with_loops(loops))[0]

    def _mutate_loops(self, kind: str, loops: dict[str, LoopSpec], o: int,
                      rng: np.random.Generator, sh: list[list[int]]) -> dict[str, LoopSpec]:
        f = self.frame
        keys = sorted(loops)
        key = keys[int(rng.integers(0, len(keys)))]
        spec = list(loops[key])
        temporal = [i for i, (_, sp) in enumerate(spec) if not sp]
        if kind == "order" and len(temporal) > 1:
            i, j = rng.choice(temporal, 2, replace=False)
            spec[i], spec[j] = spec[j], spec[i]
        elif kind == "spatial" and spec:
            d = spec[int(rng.integers(0, len(spec)))][0]
            spec = [x for x in spec if x != (d, True)] if (d, True) in spec else \
                [*spec, (d, True)]
        elif kind == "tiles":
            outer = [(f.own_key(o, lv), self.own_loops(o, lv))
                     for lv in range(f.loop_level[o]) if f.own_key(o, lv) not in keys]
            outer += [(f.group_key(m, lam), default_group_loops(f, m, lam))
                      for m, lam in groups(range(self.n), sh)
                      if lam > 0 and f.group_loops_allowed(m, lam)
                      and f.group_key(m, lam) not in keys]
            if outer and rng.random() < 0.5:
                new_key, spec = outer[int(rng.integers(0, len(outer)))]
                loops[new_key] = spec
                return loops
            if spec:
                spec.pop(int(rng.integers(0, len(spec))))
        loops[key] = tuple(spec)
        return loops

    def crossover(self, a: Encoding, b: Encoding, rng: np.random.Generator) -> Encoding:
        """Uniform crossover per operator (its fusion, primitive, home, share and own
        tiles' loops come from one parent), repaired."""
        n = self.n
        pick = rng.random(n) < 0.5
        genes = {}
        for name in ("into", "level", "primitive", "home", "share"):
            pa, pb = getattr(a, name), getattr(b, name)
            genes[name] = tuple(pa[o] if pick[o] else pb[o] for o in range(n))
        ops = {op: bool(pick[o]) for o, op in enumerate(self.frame.ops)}
        loops = {}
        for key in sorted(set(a.loop_map) | set(b.loop_map)):
            members = key.split("@")[0].split("+")
            if len(members) == 1:
                source = a.loop_map if ops[members[0]] else b.loop_map
            else:  # a group's loops: either parent's, whichever has the group
                first, second = (a, b) if rng.random() < 0.5 else (b, a)
                source = first.loop_map if key in first.loop_map else second.loop_map
            if key in source:
                loops[key] = source[key]
        root = a.root_primitive if rng.random() < 0.5 else b.root_primitive
        bypass: set[tuple[str, int]] = set()
        if a.bypass or b.bypass:  # each tensor's skips from one parent
            skips = {t: (a if rng.random() < 0.5 else b) for t in self.frame.bypassable}
            bypass = {g for g in (*a.bypass, *b.bypass) if g in skips[g[0]].bypass}
        child = replace(a, root_primitive=root, **genes).with_loops(loops).with_bypass(bypass)
        return self.repair(child)[0]


def groups(members, sh: list[list[int]], threshold: int = 0) -> list[tuple[tuple[int, ...], int]]:
    """Every fused group (members, the level of its tile), outermost first."""
    out = []
    for comp in components(members, sh, threshold):
        if len(comp) > 1:
            lam = merge_level(comp, sh)
            out.append((comp, lam))
            out += groups(comp, sh, lam + 1)
    return out


def _set(values: tuple, i: int, value) -> tuple:
    out = list(values)
    out[i] = value
    return tuple(out)


# ---- enumeration and size -------------------------------------------------------------------

@dataclass(frozen=True)
class SpaceSize:
    """How large the space is and what each rule removes (counts, not estimates, except
    `loop_variants`, an upper bound per structure)."""

    workload: str
    arch: str
    ops: int
    fusion_tables: int  # (into, level) tables, into any other operator or none
    into_earlier: int  # rejected: some operator fused into an earlier one
    later_tables: int  # tables with every fusion into a later operator (enumerated)
    cycles: int  # rejected: fused groups that depend on each other in a cycle
    duplicates: int  # tables describing a tree already counted
    fusion_patterns: int  # distinct fusion trees
    primitive_choices: int  # (pattern, primitive per multi-child tile), before the Para rule
    para_rejected: int  # of those, Para over dependent children
    structures: int  # (pattern, primitives, homes): the structures searched
    reduction_loops_pruned: int  # group-loop dims a producer's reduction forbids (all patterns)
    private_loops_pruned: int  # dims not shared by every member (recomputation), all patterns
    loop_variants: tuple[int, int, int]  # loop orders x spatial marks per pattern: min/med/max
    tilings: tuple[int, int, int]  # exact divisor tilings per pattern (default loops)
    tilings_total: int  # over every pattern (default loops, Seq)
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "extra"}
        return {**out, **self.extra}


def _ordered_everywhere(frame: Frame, sh: list[list[int]]) -> bool:
    def go(members, threshold) -> bool:
        subs = ordered(frame, components(members, sh, threshold))
        return all(go(s, merge_level(s, sh) + 1) for s in subs if len(s) > 1)
    try:
        return go(range(len(frame.ops)), 0)
    except InvalidEncoding:
        return False


def fusion_patterns(space: StructureSpace, counts: Counter | None = None) -> Iterator[Encoding]:
    """Every distinct fusion tree (default loops, Seq, default homes), each once."""
    f, n = space.frame, space.n
    counts = counts if counts is not None else Counter()
    choices = []
    for o in range(n):
        opts = [(-1, 0)] + [(h, lv) for h in range(o + 1, n)
                            for lv in range(f.max_junction(o, h) + 1)]
        choices.append(opts)
    seen = set()
    for combo in itertools.product(*choices):
        into = tuple(c[0] for c in combo)
        level = tuple(c[1] for c in combo)
        skeleton = Encoding(into, level, ("Seq",) * n, (-1,) * n, (1,) * n, "Seq", ())
        sh = shares(skeleton)
        key = tuple(map(tuple, sh))
        if key in seen:
            counts["duplicates"] += 1
            continue
        if not _ordered_everywhere(f, sh):
            counts["cycles"] += 1
            continue
        seen.add(key)
        yield space.defaults(*canonical_edges(sh))


def _sites(space: StructureSpace, enc: Encoding) -> list[bool]:
    """Per tile with several children: whether Para is allowed there (no dependence)."""
    f = space.frame
    flow = decode(f, enc)
    out = []
    for _, node in walk(flow.root):
        if isinstance(node, Tile) and len(node.children) > 1:
            groups = [{f.index[o] for o in ops_under(c)} for c in node.children]
            out.append(not any(p in a and c in b for p, c in f.deps
                               for a in groups for b in groups if a is not b))
    return out


def space_size(space: StructureSpace, tiling_limit: int = 400) -> SpaceSize:
    """Enumerate the fusion patterns and count structures, rules and tilings."""
    f, n, opts = space.frame, space.n, space.options
    full = later = 1
    for o in range(n):
        full *= 1 + sum(f.max_junction(o, h) + 1 for h in range(n) if h != o)
        later *= 1 + sum(f.max_junction(o, h) + 1 for h in range(o + 1, n))
    counts: Counter = Counter()
    patterns = list(fusion_patterns(space, counts))
    prims = len(opts.primitives)
    choices = rejected = structures = 0
    reduction = private = 0
    variants, tilings = [], []
    for enc in patterns:
        sites = _sites(space, enc)
        all_prims = prims ** len(sites)
        allowed = math.prod(prims - ("Para" in opts.primitives and not ok) for ok in sites)
        choices += all_prims
        rejected += all_prims - allowed
        homes = 1
        if opts.homes:
            chains = leaf_chains(decode(f, enc).root)
            for t in f.workload.intermediates:
                homes *= len(home_options(f, chains, t)[0])
        structures += allowed * homes
        for key in enc.loop_map:
            members = [f.index[o] for o in key.split("@")[0].split("+")]
            if len(members) > 1:
                common = set.intersection(*(set(f.dims(o)) for o in members))
                union = set().union(*(set(f.dims(o)) for o in members))
                reduction += len(common) - len(f.group_dims(members))
                private += len(union - common)
        variant = 1
        for spec in enc.loop_map.values():
            temporal = sum(not sp for _, sp in spec)
            variant *= math.factorial(temporal) if opts.loop_orders else 1
            variant *= 2 ** len({d for d, _ in spec}) if opts.spatial else 1
        variants.append(variant)
        if len(tilings) < tiling_limit:
            tilings.append(Tilings(space.structure(enc)).count)

    def spread(values):
        v = sorted(values) or [0]
        return (v[0], v[len(v) // 2], v[-1])

    return SpaceSize(f.workload.name, f.arch.name, n, full, full - later, later,
                     counts["cycles"], counts["duplicates"], len(patterns), choices, rejected,
                     structures, reduction, private, spread(variants), spread(tilings),
                     sum(tilings), {"tilings_sampled_patterns": len(tilings)})


def structures(space: StructureSpace) -> Iterator[Encoding]:
    """Every valid structure of the space once: each fusion pattern with every primitive of
    its multi-child tiles and every allowed home of its intermediates (default loops; Para
    over dependent children and other broken rules skipped)."""
    f, opts = space.frame, space.options
    seen = set()
    for pattern in fusion_patterns(space):
        flow = decode(f, pattern)
        genes = []  # per multi-child tile: the operator whose gene sets it, or None (root)
        for _, node in walk(flow.root):
            if isinstance(node, Tile) and len(node.children) > 1:
                if node.name == "root":
                    genes.append(None)
                    continue
                members = sorted(f.index[o] for o in ops_under(node))
                lam = f.arch.level_index[node.level]
                genes.append(next(o for o in members if pattern.into[o] in members
                                  and pattern.level[o] == lam))
        chains = leaf_chains(flow.root)
        producers = [f.index[f.workload.producer[t]] for t in f.workload.intermediates]
        homes = [home_options(f, chains, t)[0] if opts.homes else (-1,)
                 for t in f.workload.intermediates]
        for prims in itertools.product(opts.primitives, repeat=len(genes)):
            primitive, root = list(pattern.primitive), pattern.root_primitive
            for o, p in zip(genes, prims, strict=True):
                if o is None:
                    root = p
                else:
                    primitive[o] = p
            for where in itertools.product(*homes):
                home = list(pattern.home)
                for o, h in zip(producers, where, strict=True):
                    home[o] = h
                for share in itertools.product(opts.shares, repeat=space.n):
                    enc = replace(pattern, primitive=tuple(primitive), root_primitive=root,
                                  home=tuple(home), share=share)
                    try:
                        enc = canonical(f, enc)
                    except InvalidEncoding:
                        continue
                    if enc not in seen:
                        seen.add(enc)
                        yield enc
