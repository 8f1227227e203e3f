"""Exploration configs (`tileflow explore CONFIG.yaml`): validated with file and line, unknown
keys are errors; and the candidate structures a study searches."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from tileflow.errors import InputError
from tileflow.evaluator.structure import Structure, structure_of
from tileflow.explore.factors.space import OBJECTIVES, Limits
from tileflow.explore.structures.genetic import GAConfig
from tileflow.explore.tilesearch.search import METHODS
from tileflow.specs import keys
from tileflow.specs.arch import Architecture, load_arch
from tileflow.specs.workload import Workload, load_workload
from tileflow.specs.yamlfile import Field, load_yaml

# Every key an exploration config accepts (declared with the other files' keys)
CONFIG_KEYS = {k.name: k.meaning for k in keys.EXPLORE.keys}
LIMIT_KEYS = ("footprint_words", "dram_words")
STRUCTURE_MODES = ("search", "baselines")
BUDGET_KEYS = ("evaluations", "seconds", "structure_share")
STRUCTURE_SHARE = 0.5  # of the run's budget, for the structure search (`structures: search`)
TREE_SUFFIXES = (".yaml", ".yml")
# Bounds on the work a config asks for (not on each number): the tile-factor budget, the
# rows one batch evaluates at once (memory: rows x loops), and the genetic search's total
# factor evaluations over every generation and rung (successive halving grows a budget
# eta-fold per rung, so `rungs` is an exponent).
MAX_EVALUATIONS = 100_000_000
MAX_BATCH = 65_536


@dataclass(frozen=True)
class TieBreak:
    """Among the points within `tolerance` (a fraction) of the best objective value, the one
    best by `objective` (None: by the objective alone) is the study's best. `ceiling`: an
    objective value the pick may not exceed where the best reaches it (a sweep point's: the
    best of a neighbour with fewer resources, so the tie-break never makes it worse)."""

    objective: str | None
    tolerance: float = 0.001
    ceiling: float | None = None


@dataclass(frozen=True)
class ExploreConfig:
    source: str
    name: str
    accelerator: str
    workload: str
    preset: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    objective: str = "latency"  # the scalar cost the tile-factor search minimises
    objectives: tuple[str, ...] = ("latency",)  # two: the study returns a Pareto front
    limits: Limits = field(default_factory=Limits)
    structures: tuple[str, ...] | str = "baselines"
    trees: tuple[str, ...] = ()  # dataflow files whose trees are searched (and seed a search)
    tie_break: TieBreak = field(default_factory=lambda: TieBreak("energy"))
    genetic: GAConfig = field(default_factory=GAConfig)
    top: int = 4  # structures the genetic search hands to the tile-factor study
    method: str = "mcts"
    budget_evals: int | None = 2000
    budget_seconds: float | None = None
    structure_share: float = STRUCTURE_SHARE  # the structure search's part of the budget
    batch: int = 64
    seed: int = 0
    out: str = ""
    # key -> "line N (key)" where the config wrote it, for messages about its value
    places: dict[str, str] = field(default_factory=dict, compare=False)

    def load(self) -> tuple[Workload, Architecture]:
        w = self.load_workload()
        try:
            return w, load_arch(self.accelerator)
        except InputError as exc:
            if _is_file(self.accelerator):  # the file's own errors name the file
                raise
            # an unknown name, or one no file can have: the config's line says where
            raise InputError(exc.message, self.source, self.places.get("accelerator")) \
                from None

    def load_workload(self) -> Workload:
        """The workload with the config's preset and sizes; an error about those names the
        config's line, not the workload file or a flag the user never typed."""
        try:
            return load_workload(self.workload, self.sizes, self.preset)
        except InputError as exc:
            failed = exc
        try:
            load_workload(self.workload)  # the workload itself: a file's errors as they are
        except InputError as exc:
            if _is_file(self.workload):
                raise
            raise InputError(exc.message, self.source, self.places.get("workload")) from None
        if not self.sizes and not self.preset:
            raise failed
        key = "preset"
        if self.preset:
            try:
                load_workload(self.workload, None, self.preset)
                key = "sizes"
            except InputError:
                pass
        else:
            key = "sizes"
        message = failed.message.replace("--workload ", "workload: ").replace(
            "--preset ", "preset: ").replace("--set", "sizes")
        raise InputError(f"{message} (workload {self.workload})", self.source,
                         self.places.get(key, key)) from None

    @property
    def genetic_config(self) -> GAConfig:
        """The genetic search's settings with the study's seed and objectives."""
        return replace(self.genetic, seed=self.seed, objectives=self.objectives)

    def with_budget(self, evals: int | None, seconds: float | None) -> ExploreConfig:
        if evals is None and seconds is None:
            return self
        return replace(self, budget_evals=evals, budget_seconds=seconds)


def _is_file(name: str) -> bool:
    try:
        return Path(name).is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def _path_or_name(f: Field, key: str, base: Path) -> str:
    value = f.string(key)
    candidate = base / value
    if value.endswith((".yaml", ".yml")) and candidate.exists():
        return str(candidate)
    return value


def parse_config(data: Field) -> ExploreConfig:
    data.require_mapping()
    keys.EXPLORE.check(data)
    base = Path(data.source).parent
    sizes: dict[str, int] = {}
    if data.has("sizes"):
        block = data.child("sizes").require_mapping()
        for key in block.keys():
            sizes[str(key)] = block.integer(key)
    objectives = _objectives(data)
    method = data.string("method", "mcts")
    if method not in METHODS:
        raise data.error(f"'method' must be one of {', '.join(METHODS)}, got {method!r}",
                         "method")
    limits = _limits(data.child("limits")) if data.has("limits") else Limits()
    evals, seconds, share = 2000, None, STRUCTURE_SHARE
    if data.has("budget"):
        budget = data.child("budget").require_mapping()
        budget.check_keys(BUDGET_KEYS)
        if not budget.keys():
            raise budget.error("'budget' needs evaluations and/or seconds")
        evals = budget.integer("evaluations", maximum=MAX_EVALUATIONS) \
            if budget.has("evaluations") else None
        seconds = budget.number("seconds") if budget.has("seconds") else None
        if seconds is not None and not math.isfinite(seconds):
            raise budget.error("'seconds' must be finite", "seconds")
        share = _share(budget)
    structures, trees = _structures(data, base)
    tie_break = _tie_break(data, objectives)
    seed = data.integer("seed", 0, minimum=0)
    genetic, top = _genetic(data.child("genetic") if data.has("genetic") else None,
                            objectives)
    name = data.string("name", Path(data.source).stem)
    out = data.string("out", "")
    places = {key: data.where(key) for key in ("out", "sizes", "preset", "workload",
                                               "accelerator", "structures") if data.has(key)}
    if trees:
        items = data.child("structures").elements()
        places.update({str(Path(base / str(i.data))): i.where() for i in items
                       if isinstance(i.data, str) and i.data.endswith(TREE_SUFFIXES)})
    return ExploreConfig(
        source=data.source, name=name,
        accelerator=_path_or_name(data, "accelerator", base),
        workload=_path_or_name(data, "workload", base),
        preset=data.string("preset") if data.has("preset") else None, sizes=sizes,
        objective=_scalar(objectives), objectives=objectives, limits=limits,
        structures=structures, trees=trees, tie_break=tie_break, genetic=genetic, top=top,
        method=method,
        budget_evals=evals, budget_seconds=seconds, structure_share=share,
        batch=data.integer("batch", 64, minimum=1, maximum=MAX_BATCH), seed=seed,
        out=out or f"explore-{name}", places=places)


def _share(budget: Field) -> float:
    """`budget.structure_share`: a fraction strictly between 0 and 1."""
    if not budget.has("structure_share"):
        return STRUCTURE_SHARE
    share = budget.number("structure_share")
    if not (math.isfinite(share) and 0 < share < 1):
        raise budget.error(f"'structure_share' must be a number between 0 and 1 (the "
                           f"structure search's part of the budget), got {share}",
                           "structure_share")
    return share


def _objectives(data: Field) -> tuple[str, ...]:
    if not data.has("objective"):
        return ("latency",)
    f = data.child("objective")
    items = [f] if isinstance(f.data, str) else f.elements()
    names = []
    for item in items:
        if not isinstance(item.data, str) or item.data not in OBJECTIVES:
            raise item.error(f"'objective' must be one of {', '.join(OBJECTIVES)} or a list "
                             f"of two of them, got {item.data!r}")
        names.append(item.data)
    if len(names) not in (1, 2) or len(set(names)) != len(names):
        raise f.error(f"'objective' must name one objective or two different ones, got "
                      f"{names}")
    return tuple(names)


def _scalar(objectives: tuple[str, ...]) -> str:
    """The cost the tile-factor search minimises: the objective, or for latency and energy
    together their product (EDP), else the first of the two."""
    if len(objectives) == 1:
        return objectives[0]
    return "edp" if set(objectives) == {"latency", "energy"} else objectives[0]


def _structures(data: Field, base: Path) -> tuple[tuple[str, ...] | str, tuple[str, ...]]:
    """The structures mode or baseline names, and the dataflow files (relative to the
    config's folder) whose trees are searched too; `search` in a list adds the search."""
    if not data.has("structures"):
        return "baselines", ()
    f = data.child("structures")
    if isinstance(f.data, str):
        if f.data not in STRUCTURE_MODES:
            raise data.error("'structures' must be 'search', 'baselines' or a list of "
                             "baseline names and dataflow YAML files, got "
                             f"{f.data!r}", "structures")
        return f.data, ()
    items = f.elements()
    if not items:
        raise f.error("'structures' must name at least one structure")
    names: list[str] = []
    trees: list[str] = []
    search = False
    for item in items:
        if not isinstance(item.data, str):
            raise item.error(f"expected a baseline name or a dataflow YAML file, got "
                             f"{item.data!r}")
        if item.data in names or item.data in trees or (item.data == "search" and search):
            raise item.error(f"'structures' names '{item.data}' twice")
        if item.data.endswith(TREE_SUFFIXES):
            path = base / item.data
            if not path.is_file():
                raise item.error(f"no such dataflow file '{item.data}' (looked for "
                                 f"{path})")
            if any(Path(t).name == path.name for t in trees):  # one name per structure
                raise item.error(f"'structures' has two files named '{path.name}'; rename "
                                 "one")
            trees.append(item.data)
        elif item.data == "search":
            search = True
        else:
            names.append(item.data)
    files = tuple(str(base / t) for t in trees)
    if search:
        if names:
            raise f.error("with 'search' in 'structures', give dataflow files only (the "
                          f"search already starts from every baseline), got {names}")
        return "search", files
    return tuple(names), files


def _tie_break(data: Field, objectives: tuple[str, ...]) -> TieBreak:
    default = "latency" if objectives[0] == "energy" else "energy"
    if not data.has("tie_break"):
        return TieBreak(default)
    f = data.child("tie_break").require_mapping()
    keys.EXPLORE_TIE_BREAK.check(f)
    name = f.string("objective", default)
    if name != "none" and name not in OBJECTIVES:
        raise f.error(f"'objective' must be one of {', '.join(OBJECTIVES)} or none, got "
                      f"{name!r}", "objective")
    tolerance = f.number("tolerance", 0.001, positive=False, maximum=1.0)
    return TieBreak(None if name == "none" else name, tolerance)


def _genetic(f: Field | None, objectives: tuple[str, ...]) -> tuple[GAConfig, int]:
    """The genetic search's settings: small defaults that finish in seconds to a minute."""
    base = GAConfig(population=12, generations=6, budget=32, rungs=3, objectives=objectives)
    if f is None:
        return base, 4
    f.require_mapping()
    keys.GENETIC.check(f)
    population = f.integer("population", base.population, minimum=2)
    ga = replace(base, population=population,
                 generations=f.integer("generations", base.generations, minimum=0),
                 budget=f.integer("evaluations", base.budget, minimum=1),
                 rungs=f.integer("rungs", base.rungs, minimum=1),
                 elite=min(base.elite, population - 1))
    work = genetic_work(ga)
    if work > MAX_EVALUATIONS:
        raise f.error(f"the genetic search asks for more than {MAX_EVALUATIONS:,} factor "
                      f"evaluations (population {ga.population}, generations "
                      f"{ga.generations}, evaluations {ga.budget}, rungs {ga.rungs}: each "
                      f"rung gives the better structures {ga.eta} times the budget); lower "
                      "them")
    return ga, f.integer("top", 4, minimum=1)


def genetic_work(ga: GAConfig, stop: int = MAX_EVALUATIONS) -> int:
    """An upper bound of the factor evaluations the genetic search asks for: per generation
    (and the first), each rung r gives ceil(population / eta^r) structures budget * eta^r
    evaluations, and structures found again get one more first-rung search. Counting stops
    past `stop`."""
    per_generation = ga.population * ga.budget  # revisits
    for rung in range(ga.rungs):
        per_generation += math.ceil(ga.population / ga.eta ** rung) * ga.budget * ga.eta ** rung
        if per_generation > stop:
            return per_generation
    return per_generation * (ga.generations + 1)


def _limits(f: Field) -> Limits:
    f.require_mapping()
    f.check_keys(LIMIT_KEYS)
    footprint = {}
    if f.has("footprint_words"):
        block = f.child("footprint_words").require_mapping()
        for key in block.keys():
            footprint[str(key)] = block.number(key)
    dram = math.inf
    if f.has("dram_words"):
        dram = f.number("dram_words")
        if not math.isfinite(dram):
            raise f.error("'dram_words' must be finite", "dram_words")
    return Limits(footprint, dram)


def load_config(path: str | Path) -> ExploreConfig:
    path = Path(path)
    if not path.exists():
        raise InputError(f"no such exploration config '{path}'")
    try:
        return parse_config(Field(load_yaml(path), str(path)))
    except InputError as exc:
        raise exc.located(str(path)) from None


def check_against(config: ExploreConfig, w: Workload, arch: Architecture) -> None:
    """Names in the config that only the workload and accelerator can check."""
    levels = {lv.name for lv in arch.levels}
    for level in config.limits.footprint_words:
        if level not in levels:
            raise InputError(f"limits.footprint_words names level '{level}'; the accelerator "
                             f"has {', '.join(sorted(levels))}", config.source)


@dataclass(frozen=True)
class NamedStructure:
    """One structure a study searches, with every name it came under: a baseline, a user's
    tree and the structure search can give the same structure (factors aside), which is then
    searched once. `names` puts a user's tree first, then baselines, then found structures;
    `members` holds each name's own structure, whose factors warm-start the one kept."""

    names: tuple[str, ...]
    structure: Structure
    members: tuple[tuple[str, Structure], ...]

    @property
    def name(self) -> str:
        """The study's name for it: the first name, the others in brackets."""
        first, *others = self.names
        return f"{first} (= {', '.join(others)})" if others else first


def candidate_structures(config: ExploreConfig, w: Workload, arch: Architecture,
                         found=()) -> list[NamedStructure]:
    """The structures a study searches: the named baselines' tree shapes, the users' trees
    and, with `structures: search`, before them the structures the genetic search `found`
    (name, structure) pairs; those of one structure (`structure_key`) merged into one."""
    from tileflow.dataflows import baselines_for, build

    names = config.structures if isinstance(config.structures, tuple) else baselines_for(w)
    found = list(found)
    named: list[tuple[str, Structure]] = []
    for name in names:
        try:
            flow = build(name, w, arch)
        except InputError as exc:
            raise InputError(f"structures: {exc.message}", config.source) from None
        except (ValueError, IndexError) as exc:  # a builder that cannot size this case
            if config.structures == "search":
                continue
            raise InputError(f"structures: '{name}' cannot be built for this workload: "
                             f"{exc}", config.source) from None
        named.append((name, structure_of(w, arch, flow)))
    users = [(tree_name(path), structure_of(w, arch, load_tree(config, path, w, arch)))
             for path in config.trees]
    return merge_duplicates(found + named + users, [n for n, _ in users + named + found])


def merge_duplicates(named: list[tuple[str, Structure]],
                     preference: list[str]) -> list[NamedStructure]:
    """`named` structures merged by `structure_key`, in the order each structure first
    appears; within one, the names (and the structure kept) in `preference` order."""
    from tileflow.explore.structures.canonical import structure_key

    rank = {n: k for k, n in enumerate(preference)}
    groups: dict[tuple, list[tuple[str, Structure]]] = {}
    for name, structure in named:
        key = structure_key(structure.template, structure.arch)
        groups.setdefault(key, []).append((name, structure))
    out = []
    for members in groups.values():
        members.sort(key=lambda m: rank.get(m[0], len(rank)))
        out.append(NamedStructure(tuple(n for n, _ in members), members[0][1],
                                  tuple(members)))
    return out


def tree_name(path: str) -> str:
    """A dataflow file's structure name in the study: its file name."""
    return Path(path).name


def load_tree(config: ExploreConfig, path: str, w: Workload, arch: Architecture):
    """A dataflow file of `structures`, checked against the workload and accelerator; an
    error names the config's line and what is wrong with the file."""
    from tileflow.evaluator.violations import check_tree
    from tileflow.interop.files import load_dataflow_any
    from tileflow.specs.dataflow import check_operators

    where = config.places.get(path, "structures")
    try:
        flow = load_dataflow_any(path, w, arch)
        check_operators(flow, [op.name for op in w.ops])
        check_tree(w, arch, flow)
    except InputError as exc:
        raise InputError(f"structures: the tree of '{path}' does not fit workload "
                         f"'{w.name}' on '{arch.name}': {exc.render()}", config.source,
                         where) from None
    return flow
