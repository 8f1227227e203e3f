"""Every key the input files accept, with its type, unit, default and meaning.

The validators take their allowed and required keys from these tables (`Section.check`), and
`docs/reference.md` is generated from them (`python -m tileflow.specs.reference`), so the reference
cannot miss a key the validators accept. To add a key: add a `Key` to its section here, read it
in the validator, regenerate the reference."""

from __future__ import annotations

from dataclasses import dataclass

from tileflow.specs.yamlfile import Field


@dataclass(frozen=True)
class Key:
    """One key of a YAML mapping. `default` is None for a required key."""

    name: str
    type: str
    meaning: str
    default: str | None = "-"
    unit: str = "-"

    @property
    def required(self) -> bool:
        return self.default is None


@dataclass(frozen=True)
class Section:
    """The keys of one kind of YAML mapping (`where` says where it sits in its file)."""

    name: str
    where: str
    keys: tuple[Key, ...]
    about: str = ""

    @property
    def allowed(self) -> frozenset[str]:
        return frozenset(k.name for k in self.keys)

    @property
    def required(self) -> frozenset[str]:
        return frozenset(k.name for k in self.keys if k.required)

    def check(self, f: Field) -> None:
        """Reject unknown keys and report missing required ones, naming file and line."""
        f.check_keys(self.allowed, required=self.required)


NOTES = Key("notes", "text", "free text for the reader; ignored by the model")

ACCELERATOR = Section("accelerator", "top level of an accelerator file", (
    Key("name", "text", "the accelerator's name, used in reports and plot titles",
        "`accelerator`"),
    Key("description", "text", "one line saying what the accelerator is", "empty"),
    Key("clock_ghz", "number > 0", "clock frequency; converts GB/s to words per cycle and "
        "cycles to milliseconds", "1.0", "GHz"),
    Key("word_bits", "integer, multiple of 8", "width of one word: every count is in words",
        "16", "bits"),
    Key("levels", "list of levels", "storage levels, outermost (DRAM) first; see `level`",
        None),
    Key("compute", "mapping", "the compute units; see `compute`", None),
    Key("vector_on_matrix", "boolean", "run vector operators on the matrix array (one "
        "operation per PE per cycle at the matrix unit's `cycles_per_op`) instead of a vector "
        "unit", "true when `compute` has no `vector`, else false"),
    Key("technology_nm", "number from 5 to 180", "technology node: levels and units without "
        "explicit energies take them (and their area) from the component model at this node; "
        "see docs/energy.md", "none: per-word defaults, no area", "nm"),
    Key("precision", "int8, int16, fp16, bf16 or fp32 (see docs/energy.md)", "arithmetic "
        "precision of the compute units for the component model (needs `technology_nm`)",
        "from the word width"),
    Key("overlap", "`perfect`, `fill-drain` or `lockstep`", "how a tile's loads, compute "
        "and stores overlap in the latency: `perfect` takes the largest of the three (the "
        "published tools' convention); `fill-drain` also charges the first load and the last "
        "store of a run, which nothing hides, and each level's `latency_cycles`; `lockstep` "
        "puts each tensor's transfers on the steps where its slice changes and sums the steps "
        "slot by slot (loads of one step, compute of the one before, stores of the one before "
        "that), with the ends and `latency_cycles` as `fill-drain`; `--overlap` on the "
        "command line wins (docs/mechanisms.md)", "`fill-drain`"),
    NOTES,
))

LEVEL = Section("level", "each item of `levels`", (
    Key("name", "text", "the level's name; tiles of a dataflow name it in `level`", None),
    Key("capacity_bytes", "number > 0", "capacity of one instance (give this or "
        "`capacity_words`)", "unbounded for the outermost level; required for the others",
        "bytes"),
    Key("capacity_words", "number > 0", "capacity of one instance, in words (instead of "
        "`capacity_bytes`)", "see `capacity_bytes`", "words"),
    Key("fanout", "integer >= 1", "instances of this level per instance of the level above "
        "(cores, sub-cores, PEs); on the outermost level, which has one instance, only 1",
        "1"),
    Key("read_bandwidth_gbps", "number > 0", "read bandwidth of one instance (give this or "
        "`read_words_per_cycle`)", "required, in one of the two forms", "GB/s"),
    Key("write_bandwidth_gbps", "number > 0", "write bandwidth of one instance (give this or "
        "`write_words_per_cycle`)", "required, in one of the two forms", "GB/s"),
    Key("read_words_per_cycle", "number > 0", "read bandwidth of one instance; wins over "
        "`read_bandwidth_gbps` when both are given", "see `read_bandwidth_gbps`",
        "words/cycle"),
    Key("write_words_per_cycle", "number > 0", "write bandwidth of one instance; wins over "
        "`write_bandwidth_gbps` when both are given", "see `write_bandwidth_gbps`",
        "words/cycle"),
    Key("energy_pj_per_word", "number >= 0, or mapping (see `energy_pj_per_word`)",
        "energy of one word read, filled (write) or updated; one number for all three",
        "200 pJ per 16 bits for the outermost level; for the others an SRAM estimate from "
        "the capacity (1 pJ at 0.5 KB, 6 pJ at 100 KB, 100 pJ at 2 MB and above, per 16 bits, "
        "log-log in between)", "pJ/word"),
    Key("step_overhead_cycles", "number >= 0", "cycles added for every step of a tile that "
        "reads from this level (request setup)", "0", "cycles"),
    Key("latency_cycles", "number >= 0", "cycles before the first word arrives: added once "
        "to every tile whose loads read from this level", "0", "cycles"),
    Key("buffering", "1 or 2", "default buffering depth of every tensor held at this level: "
        "1 (single: its transfers wait for the compute that uses the buffer and the compute "
        "waits for them) or 2 (double: footprint twice, transfers overlap the neighbouring "
        "steps' compute); a tile's `buffering` wins (docs/mechanisms.md)", "unset: footprint "
        "once and transfers overlapped (the published tools' convention); `evaluate "
        "--double-buffer` makes it 2"),
    Key("first_touch_fills", "boolean", "outputs accumulated below this level are filled into "
        "it on their first touch too, read from the level above (zeros): the unit adds to a "
        "partial sum it always reads, as a systolic array's reduction chain takes its initial "
        "value from its buffer at every pass (docs/mechanisms.md)", "false: a first touch "
        "needs no fill"),
    Key("ports", "separate or shared", "how reads and writes reach one instance: `separate` "
        "(a read port at the read bandwidth and a write port at the write bandwidth, busy at "
        "once) or `shared` (one port, as an LPDDR part or a single-ported SRAM: the time of "
        "the reads and the time of the writes add; give both bandwidths the port's rate)",
        "separate"),
    Key("writeback_on_read_port", "boolean", "a write-back of outputs to the level above is "
        "read out through this level's read port (and takes its bandwidth); false: only the "
        "level above's write is charged, as Timeloop counts it (its imports set false)",
        "true"),
    Key("first_touch_reads_parent", "boolean", "with `first_touch_fills`: the level above "
        "is read for those fills (true), or they are counted here only (false: Timeloop's "
        "2022 releases, which count a fill of every output's first touch at each level "
        "below the outermost and no read above; imports of v0.3 files set it)", "true"),
    Key("deltas", "exact or timeloop", "how the fills of an input into this level are "
        "counted from step to step: `exact` (every element it still holds is kept; the "
        "level above sends the union of its instances' new elements) or `timeloop` "
        "(Timeloop's rule: a slice that moves by another step than its last move, as a "
        "convolution window jumping back when an outer loop advances, is refilled whole; "
        "each loop's iterations past the second count as the second; instances holding "
        "different, overlapping slices are each sent their own; Timeloop imports and "
        "`--conventions timeloop` set it; docs/interop.md)", "exact"),
    Key("block_words", "integer >= 1", "energy is charged in whole accesses of this many "
        "words (Timeloop's block size): per instance the dataflow uses, each tensor's fills, "
        "reads and updates are rounded up to a multiple of it before the energies per word "
        "apply, so that 3 words in 8-word blocks cost one whole access (8 words' energy); "
        "Timeloop imports set it to the block size and `--conventions timeloop` to the "
        "level's own or 1 (docs/energy.md)", "unset: each word charged on its own", "words"),
    Key("leakage_pj_per_cycle", "number >= 0", "static energy of one instance per cycle "
        "(Accelergy's `leak` action): charged for every cycle of the run on each instance the "
        "dataflow uses (the instances the spatial loops above the level spread over, the "
        "most of any operator, whether or not it keeps data there; the others taken as "
        "power-gated, as Timeloop does); imports with an ERT set it (docs/energy.md)", "0",
        "pJ/cycle"),
    Key("mesh", "two integers [x, y] whose product is `fanout`", "how the instances under "
        "one parent instance are laid out; spatial loops onto this level map to x first, then "
        "y (or as `:SpX` / `:SpY` say), and a split beyond an axis is a violation",
        "none: only the fan-out is checked"),
    Key("memory", "sram, regfile or dram", "kind of memory for the component model (needs "
        "`technology_nm` unless dram)", "dram for the outermost level, regfile up to 1 KB, "
        "else sram"),
    Key("dram_type", "a DRAM type of docs/energy.md (e.g. HBM2, GDDR5, DDR4, LPDDR4)",
        "DRAM energy per bit from the component tables (outermost level only)",
        "none: 200 pJ per 16 bits"),
    Key("access_width_bits", "integer, a multiple of the word", "width of one physical access "
        "of the memory for the component model", "one word", "bits"),
    NOTES,
))

ENERGY = Section("energy_pj_per_word", "`energy_pj_per_word` of a level, written as a mapping", (
    Key("read", "number >= 0", "energy of reading one word out of the level", None, "pJ/word"),
    Key("write", "number >= 0", "energy of filling one word into the level from above", None,
        "pJ/word"),
    Key("update", "number >= 0", "energy of updating one word from below (results, partial "
        "sums)", "`write`", "pJ/word"),
))

COMPUTE = Section("compute", "`compute` of an accelerator file", (
    Key("matrix", "mapping", "the matrix array that runs contractions; see `compute.matrix`",
        None),
    Key("vector", "mapping", "the vector unit that runs every other operator; see "
        "`compute.vector`", "none: vector operators run on the matrix array"),
))

_UNIT_COMMON = (
    Key("level", "level name", "the storage level that feeds the unit: operands are read "
        "from it and results updated in it; the unit's parallelism is per instance of it",
        None),
    Key("energy_pj_per_op", "number >= 0", "energy of one operation (a MAC on the matrix "
        "array)", "1.0", "pJ/op"),
    Key("cycles_per_op", "number > 0, or mapping function -> number > 0", "cycles one "
        "operation takes on one lane or PE; a mapping gives them per function (`default`, "
        "`mul`, `add`, `sub`, `div`, `copy` for plain reads such as `max=` reductions, or a "
        "named function such as `exp`)", "1", "cycles"),
    Key("leakage_pj_per_cycle", "number >= 0", "static energy of one MAC or lane per cycle: "
        "charged for every cycle of the run on each MAC or lane the dataflow uses (the "
        "others taken as power-gated); Timeloop leaves its compute unit's leakage out of "
        "its total, so imports do not set it (docs/energy.md)", "0", "pJ/cycle"),
    Key("precision", "int8, int16, fp16, bf16 or fp32", "precision of this unit's operations "
        "for the component model; wins over the file's `precision`", "the file's `precision`"),
    NOTES,
)

MATRIX = Section("compute.matrix", "`compute.matrix`", (
    Key("rows", "integer >= 1", "rows of the PE array", None, "PEs"),
    Key("cols", "integer >= 1", "columns of the PE array", None, "PEs"),
    *_UNIT_COMMON,
), about="When `level` has a fan-out of rows x cols (a register per PE), each instance of it is "
         "one MAC; otherwise every instance of `level` feeds a whole rows x cols array.")

VECTOR = Section("compute.vector", "`compute.vector`", (
    Key("lanes", "integer >= 1", "operations per cycle of one instance of the unit", None,
        "lanes"),
    *_UNIT_COMMON,
), about="There is one vector unit per instance of `level` (for example one per core).")

WORKLOAD = Section("workload", "top level of a workload file", (
    Key("name", "text", "the workload's name, used in reports and plot titles", "`workload`"),
    Key("description", "text", "one line saying what the workload is", "empty"),
    Key("dims", "mapping name -> size", "loop dimensions and their sizes: an integer or an "
        "integer expression over `params` and earlier dims (`h // st1`); the same name in two "
        "operators is the same axis", None),
    Key("params", "mapping name -> size", "named integers used in `dims`, indices and "
        "`shapes` (strides, padding, kernel sizes); `--set` overrides them like dims", "none"),
    Key("ops", "list of 1 to 64 operators", "the operators in dependency order; see "
        "`operator`", None),
    Key("shapes", "mapping tensor -> list of extents", "a tensor's extent per axis (integer "
        "expressions); elements outside it are padding and never move", "the hull of the "
        "indices the operators use"),
    Key("precision_bits", "mapping tensor or role (inputs, intermediates, outputs) -> "
        "integer bits", "the width of a tensor's elements (8-bit operands with 32-bit "
        "accumulators): its footprint, its transfers' time at each level's bandwidth and "
        "its access energy scale by its bits over the accelerator's `word_bits`; counts stay "
        "in elements; a tensor's own entry wins over its role's", "the accelerator's word",
        "bits"),
    Key("presets", "mapping name -> mapping of sizes", "named sets of sizes for dims and "
        "params (`--preset NAME`, or the preset name as `--workload`)", "none"),
))

OPERATOR = Section("operator", "each item of `ops`", (
    Key("name", "text", "the operator's name; a dataflow's leaves name it", None),
    Key("expr", "text", "`OUT[i,..] += A[..] * B[..]` (a contraction: matrix array), or "
        "`OUT[..] = f(A[..])`, `OUT[..] = A[..] - B[..]`, `OUT[..] max= A[..]`, ... (vector "
        "unit); indices are dims or affine expressions such as `st1*p+r-pad1`", None),
    Key("carried", "dimension name", "a reduction dim of this operator (`max=` or `+=`) "
        "whose running value its consumers may read at every step of a loop over it in "
        "their common ancestor (online softmax: the running maximum); the state stays "
        "resident and the accumulators downstream that reduce over the same dim are "
        "rescaled at every step after the first (see docs/mechanisms.md)", "none: a loop "
        "over a reduction dim in a common ancestor of producer and consumers is a "
        "`dependency` violation"),
))

DATAFLOW = Section("dataflow", "top level of a dataflow file", (
    Key("name", "text", "the dataflow's name in reports", "the file name without `.yaml`"),
    Key("description", "text", "one line saying what the dataflow is", "empty"),
    Key("found_for", "mapping", "the run a dataflow was found for (`tileflow explore` writes "
        "it into best.yaml): `evaluate` takes any of `--arch`, `--workload`, `--preset`, "
        "`--set` not given from it (see `found_for`)", "none"),
    Key("homes", "mapping tensor -> level name", "the level where an intermediate tensor "
        "lives within one step of the lowest common ancestor of its producer and consumers; "
        "it never moves above it", "the ancestor's level when it is on chip, else the "
        "outermost on-chip level below it that every path of the tensor passes through"),
    Key("root", "tile", "the root tile (usually at the outermost level); see `tile`", None),
))

TILE = Section("tile", "`root` and every tile among `children`", (
    Key("level", "level name", "the storage level that holds the tile's working set", None),
    Key("name", "text", "a label for reports and error messages", "empty"),
    Key("loops", "list of loops", "the tile's loops, outermost first: `DIM:FACTOR` "
        "(temporal), `DIM:FACTOR:Sp` (spatial, across instances of the children's level; "
        "`:SpX` / `:SpY` pick the array or mesh axis) or "
        "a mapping (see `loop`)", "none"),
    Key("primitive", "`Seq`, `Shar`, `Para` or `Pipe`", "how the children share the tile's "
        "steps: one after another dropping data (`Seq`), one after another keeping data "
        "(`Shar`), at once on disjoint units (`Para`), pipelined over the tile's steps "
        "(`Pipe`)", "`Seq`"),
    Key("children", "list of tiles or leaves", "the sub-tiles and operators, in order", None),
    Key("no_reuse", "list of tensor names", "tensors whose slices this tile fetches anew at "
        "every step of its loops, even when the slice did not change (programs that do not "
        "exploit a reuse the loop order allows)", "none"),
    Key("buffering", "mapping tensor -> 1 or 2", "buffering depth of tensors in this tile's "
        "buffer, over the level's `buffering`: 1 serialises the tensor's transfers with the "
        "compute, 2 doubles its footprint and overlaps them (docs/mechanisms.md)",
        "the level's `buffering`"),
    Key("bypass", "list of tensor names", "tensors this tile's level does not hold (Timeloop's "
        "bypass): they move between the levels above and below it, and the compute reads "
        "them from the nearest level that holds them (docs/mechanisms.md)", "none"),
    Key("halo", "mapping intermediate -> `cache` or `recompute`", "on the common ancestor of "
        "an intermediate's producer and consumers: `cache` keeps the rows a windowed consumer "
        "reads in two consecutive steps (the halo) and has the producer compute only the new "
        "ones; `recompute` has it compute every row a step needs (docs/mechanisms.md)",
        "`recompute`"),
))

LEAF = Section("leaf", "an operator among `children`: `{op: NAME}` or just `NAME`", (
    Key("op", "operator name", "the workload operator whose innermost iterations run here",
        None),
))

LOOP = Section("loop", "an item of `loops` written as a mapping", (
    Key("dim", "dimension name", "the workload dimension the loop iterates over", None),
    Key("factor", "integer >= 1", "trip count of the loop", None),
    Key("spatial", "boolean", "iterations go to different instances at once (`Sp`) instead "
        "of one after another", "false"),
    Key("axis", "x or y", "for a spatial loop onto the PE array or a level with a `mesh`: the "
        "axis it spreads over (`:SpX` / `:SpY` in the compact form); implies `spatial`",
        "the next free axis, x (rows) first, in the order the loops are written"),
))

EXPLORE = Section("explore", "top level of an exploration config (`tileflow explore`)", (
    Key("accelerator", "shipped name or YAML file", "the accelerator (a file relative to the "
        "config's folder)", None),
    Key("workload", "shipped name, preset or YAML file", "the workload (`G1`..`G12`, "
        "`C1`..`C8` or a file relative to the config's folder)", None),
    Key("preset", "text", "size preset of the workload, e.g. `G3`", "none"),
    Key("sizes", "mapping dimension -> integer", "sizes overriding the workload's", "none"),
    Key("objective", "`latency`, `energy`, `edp`, `dram`, or a list of two of them",
        "what the search minimises; two objectives give a Pareto front (`front.csv`, "
        "`front.png`), the tile-factor search then minimising their product for latency "
        "and energy (EDP), else the first", "`latency`"),
    Key("limits", "mapping", "extra constraints beyond the accelerator's (see `limits`)",
        "none"),
    Key("structures", "`search`, `baselines` or a list of baseline names, dataflow YAML files "
        "and `search`", "`search`: a "
        "genetic search over tree structures (fusion, levels, primitives, homes, loop "
        "orders, spatial loops, array shares), seeded with every applicable baseline's "
        "structure, then the tile-factor search over its best structures (`searched-1`, ...) "
        "and the baselines' structures; `baselines`: every applicable baseline's structure; "
        "a list: those baselines' structures and each dataflow file's tree (a file relative "
        "to the config's folder), searched as it is with its factors as a warm start; "
        "`search` in the list adds the structure search, seeded with the files' trees too",
        "`baselines`"),
    Key("tie_break", "mapping", "which point `best.yaml` picks among those within a "
        "tolerance of the best (see `tie_break`)", "`objective: energy, tolerance: 0.001` "
        "(latency for an energy objective)"),
    Key("genetic", "mapping", "settings of the structure search (see `genetic`)", "see "
        "`genetic`"),
    Key("method", "`mcts`, `random` or `tpe`", "the tile-factor search (also the structure "
        "search's fitness)", "`mcts`"),
    Key("budget", "mapping", "when the whole run stops, structure search included (see "
        "`budget`); `--budget-evals` and `--budget-seconds` override it",
        "`evaluations: 2000`"),
    Key("batch", "integer from 1 to 65,536", "evaluations per trial", "64"),
    Key("seed", "integer >= 0", "random seed of both searches", "0"),
    Key("out", "folder", "output folder, relative to the current folder", "`explore-NAME`"),
    Key("name", "text", "the study's name in reports", "the config file's name"),
))

GENETIC = Section("genetic", "`genetic` of an exploration config", (
    Key("population", "integer >= 2", "structures per generation", "12"),
    Key("generations", "integer >= 0", "generations after the first", "6"),
    Key("evaluations", "integer >= 1", "tile-factor evaluations a new structure gets; the "
        "better half of a generation gets twice as many, and so on (successive halving)",
        "32"),
    Key("rungs", "integer >= 1", "budget doublings of successive halving; population, "
        "generations, evaluations and rungs together may ask for at most 100,000,000 "
        "evaluations", "3"),
    Key("top", "integer >= 1", "best structures handed to the tile-factor study (and each "
        "level seed: the structure fusing every operator at a shared on-chip level)", "4"),
))

EXPLORE_LIMITS = Section("limits", "`limits` of an exploration config", (
    Key("footprint_words", "mapping level -> number >= 0", "the most words each named level "
        "may hold (a point above it is invalid)", "none", "words"),
    Key("dram_words", "number >= 0", "the most DRAM traffic a point may have", "none",
        "words"),
))

EXPLORE_BUDGET = Section("budget", "`budget` of an exploration config", (
    Key("evaluations", "integer from 1 to 100,000,000", "stop after this many evaluated "
        "points, structure search included (the structure search counts every tile-factor "
        "evaluation it asks for; the baselines' own factors are always evaluated, even past "
        "it)", "2000"),
    Key("seconds", "number > 0", "the whole command ends within this many seconds, counted "
        "from its start (loading included); the search stops 3 s + 8 % earlier to leave "
        "time for writing the outputs (the figures only where time is left: `tileflow "
        "figures OUT` draws the others); each search sizes its batches to the time left at "
        "the cost per point it has seen (a few points first), so a structure slow to "
        "evaluate cannot overrun its share", "none", "s"),
    Key("structure_share", "number between 0 and 1", "with `structures: search`, the "
        "structure search's part of both budgets; it stops at its share and the tile-factor "
        "study gets the rest (what the structure search left unused included)", "0.5"),
))

EXPLORE_TIE_BREAK = Section("tie_break", "`tie_break` of an exploration config", (
    Key("objective", "`latency`, `energy`, `edp`, `dram` or `none`", "the secondary objective "
        "that picks the best point among those within `tolerance` of the best (`none`: the "
        "best by the objective alone); a study with two objectives keeps its front",
        "`energy` (`latency` for an energy objective)"),
    Key("tolerance", "number from 0 to 1", "how far above the best objective value, as a "
        "fraction of it, a point may be and still be picked", "0.001"),
))

FOUND_FOR = Section("found_for", "`found_for` of a dataflow file", (
    Key("accelerator", "shipped name or YAML file", "the accelerator (`--arch`)", None),
    Key("workload", "shipped name, preset or YAML file", "the workload (`--workload`)", None),
    Key("preset", "text", "the workload's size preset (`--preset`)", "none"),
    Key("sizes", "mapping dimension -> integer", "every size of the workload; `--set` "
        "overrides single ones", "none"),
    Key("objective", "text", "what the search minimised (information)", "none"),
))

ACCELERATOR_SECTIONS = (ACCELERATOR, LEVEL, ENERGY, COMPUTE, MATRIX, VECTOR)
WORKLOAD_SECTIONS = (WORKLOAD, OPERATOR)
DATAFLOW_SECTIONS = (DATAFLOW, FOUND_FOR, TILE, LEAF, LOOP)
EXPLORE_SECTIONS = (EXPLORE, GENETIC, EXPLORE_LIMITS, EXPLORE_BUDGET, EXPLORE_TIE_BREAK)

SWEEP = Section("sweep", "`sweep` of a sweep config (`tileflow sweep`): an exploration config "
                "(the keys of `tileflow explore`) with this section added", (
    Key("parameters", "mapping parameter -> list of values", "the accelerator parameters "
        "swept and their values; see `sweep.parameters`", None),
    Key("mode", "`grid` or `zip`", "`grid`: every combination of the parameters' values; "
        "`zip`: the i-th values of every parameter together (the lists must be as long)",
        "`grid`"),
    Key("bound", "level name or `none`", "the on-chip level whose capacity the data-movement "
        "bound is drawn against (docs in README, `tileflow sweep`)", "the level of the first "
        "capacity parameter, else `none`"),
    Key("bound_max_tilings", "integer >= 1", "structures with more tilings than this after "
        "pruning are left out of the bound (and named in its report)", "300000"),
    Key("bound_sample_tilings", "integer >= 0", "random tilings of each left-out structure "
        "evaluated to show whether it would lower the bound (reported apart, never part of "
        "the bound)", "5000"),
    Key("max_area_mm2", "number > 0", "points whose on-chip area (the component model's, "
        "which needs `technology_nm` in the accelerator file) exceeds this are not run; "
        "every point's area is reported", "no limit", "mm2"),
), about="A point's accelerator is the config's accelerator with the point's values written "
         "into it and validated like any accelerator file; it is saved beside the results.")

SWEEP_PARAMETERS = Section("sweep.parameters", "each key of `sweep.parameters`: "
                           "`LEVEL.NAME`, `matrix.NAME` or `vector.NAME`", (
    Key("LEVEL.capacity_bytes", "list of numbers > 0", "capacity of one instance of LEVEL "
        "(replaces its `capacity_words`)", None, "bytes"),
    Key("LEVEL.capacity_words", "list of numbers > 0", "capacity of one instance of LEVEL "
        "(replaces its `capacity_bytes`)", None, "words"),
    Key("LEVEL.read_bandwidth_gbps", "list of numbers > 0", "read bandwidth of one instance",
        None, "GB/s"),
    Key("LEVEL.write_bandwidth_gbps", "list of numbers > 0", "write bandwidth of one instance",
        None, "GB/s"),
    Key("LEVEL.bandwidth_gbps", "list of numbers > 0", "read and write bandwidth together",
        None, "GB/s"),
    Key("LEVEL.fanout", "list of integers >= 1", "instances per instance of the level above "
        "(the number of cores for the level under DRAM); drops the level's `mesh`", None,
        "instances"),
    Key("matrix.size", "list of integers >= 1", "rows and columns of the PE array (a "
        "per-PE level feeding it keeps one instance per PE)", None, "PEs"),
    Key("matrix.rows", "list of integers >= 1", "rows of the PE array", None, "PEs"),
    Key("matrix.cols", "list of integers >= 1", "columns of the PE array", None, "PEs"),
    Key("vector.lanes", "list of integers >= 1", "lanes of the vector unit", None, "lanes"),
))

SWEEP_SECTIONS = (SWEEP, SWEEP_PARAMETERS)
