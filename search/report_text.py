"""search/report.md from search/summary.json (see structure_report.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _n(x, fmt: str = "{:,.0f}") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def gmean(values) -> float:
    values = [v for v in values if v]
    return float(np.exp(np.mean(np.log(values)))) if values else math.nan


def compute_bound(r: dict) -> float:
    """Cycles no dataflow can beat: each unit's operations (x cycles per operation) over its
    lanes or MACs on every instance; the larger of the matrix and vector units' (they run at
    once), their sum where the softmax runs on the PE array (one unit)."""
    from tileflow.specs.arch import load_arch
    from tileflow.specs.workload import load_workload

    w = load_workload("conv-chain" if r["group"].startswith("conv") else "attention",
                      r["sizes"])
    arch = load_arch(r["accelerator"])
    work = {}
    for kind in ("matrix", "vector"):
        unit = arch.unit(kind)
        instances = arch.fanout_between(arch.levels[0].name, unit.level)
        work[kind] = sum(math.prod(w.sizes[d] for d in op.dims) * unit.cycles(op.function)
                         for op in w.ops if op.unit == kind) / (unit.parallelism * instances)
    on_array = "softmax-on-array" in r["group"]
    return work["matrix"] + work["vector"] if on_array else max(work.values())


def sizes(rows: list[dict]) -> list[str]:
    out = ["## The space, per study", "",
           "Counted by `tileflow.explore.structures.structure_space.space_size`: "
           "fusion tables (each "
           "operator fused into another or none, at a level), those the rules reject (fused "
           "into an earlier operator, cycles between fused groups, duplicates of a tree already "
           "counted), the distinct fusion trees, primitives per multi-child tile (`Para` over "
           "dependent children rejected), homes of intermediates; the structures are fusion "
           "tree x primitives x homes. Loop orders, spatial marks and outer tiles multiply "
           "each further (`loop variants`, an upper bound); tilings are the exact divisor "
           "tilings of a pattern's default loops (sampled patterns).", "",
           "| study | fusion tables | rejected: into earlier | rejected: cycles | duplicates "
           "| fusion trees | primitive choices | Para rejected | structures | reduction loops "
           "pruned | loop variants (min / median / max) | tilings per pattern (min / median "
           "/ max) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lv, tl = r["loop_variants"], r["tilings"]
        out.append(f"| {r['study']} | {r['fusion_tables']:,} | {r['into_earlier']:,} | "
                   f"{r['cycles']:,} | {r['duplicates']:,} | {r['fusion_patterns']:,} | "
                   f"{r['primitive_choices']:,} | {r['para_rejected']:,} | "
                   f"{r['structures']:,} | {r['reduction_loops_pruned']:,} | "
                   f"{lv[0]:.2g} / {lv[1]:.2g} / {lv[2]:.2g} | "
                   f"{tl[0]:.2g} / {tl[1]:.2g} / {tl[2]:.2g} |")
    return out + [""]


def exhaustive(ex: dict, conv: dict | None = None) -> list[str]:
    big = ex["attention_space"]
    out = ["## Against exhaustive search", "",
           f"Attention with b = 1, m = l = 128, n = k = 32 on Edge has {big['structures']:,} "
           f"structures before loop orders and spatial marks (fusion trees "
           f"{big['fusion_patterns']:,}), and {big['tilings'][0]:.2g} to "
           f"{big['tilings'][2]:.2g} divisor tilings per fusion tree with the default loops: "
           "far beyond enumeration on this machine. The check therefore runs on the "
           "two-operator chain with the same sizes, and on a small two-layer conv chain.", ""]
    for case in (ex, conv):
        if case and case["runs"]:
            out += _case(case)
    if conv and conv["runs"]:
        out += ["Per evaluation the search costs more than the enumeration on the conv chain: "
                "it evaluates in small batches (an MCTS expansion's smallest completions, a "
                "step's rollouts), and the batched evaluator's work on windowed axes is per "
                "group of rows that leave the same spatial loops unspread (a tree per group), "
                "about 0.1-0.25 s a group here whatever its size, where the enumeration "
                "evaluates blocks of up to 65,536 rows. Half of that work was the search's "
                "pruning bounds evaluating whole points to read their footprints; they now "
                "compute footprints alone (`tileflow.evaluator.batch.footprint_words`), which "
                "halved the time of the seed's tile-factor fits in a profile (six fits of 64 "
                "evaluations: 43 s before, 23 s after, the same results). A whole seed "
                "took 164 s before (one seed, the previous report) and "
                f"{np.mean([r['seconds'] for r in conv['runs']]):.0f} s now (mean of "
                f"{len(conv['runs'])}, wall-clock on the shared machine): the rest is the "
                "small batches.", ""]
    return out


def _case(ex: dict) -> list[str]:
    runs = ex["runs"]
    gaps = [r["gap"] * 100 for r in runs]
    return [
        f"**{ex['case']}**: {ex['structures']} structures and {ex['points']:,} (structure, "
        f"tiling) points, enumerated in {ex['exhaustive_seconds']:,.0f} s; optimum "
        f"{ex['optimum_cycles']:,.0f} cycles.", "",
        f"The genetic search (population {ex['config']['population']}, "
        f"{ex['config']['generations']} generations, {ex['config']['budget']} tilings for a "
        f"new structure, doubled over {ex['config']['rungs']} rungs; fitness: MCTS over the "
        "same divisor tilings; no baseline seeds, whose loops lie outside this space), then "
        f"MCTS with {ex['config'].get('refine', 1000):,} evaluations on each of its "
        f"{ex['config'].get('top', 8)} best structures (as `tileflow explore` hands its best "
        "structures to the tile-factor study) reached "
        f"the optimum within 1 % in **{ex['seeds_within_1pct']} of {ex['seeds']} seeds**; "
        f"gap per seed {', '.join(f'{g:.2f} %' for g in gaps)} (the structure search "
        f"alone: {sum(r['genetic_gap'] <= 0.01 for r in runs)} of {len(runs)} within 1 %); "
        f"{np.mean([r['evaluations'] for r in runs]):,.0f} evaluations "
        f"({100 * np.mean([r['evaluations'] for r in runs]) / ex['points']:.1f} % of the "
        f"space) and {np.mean([r['seconds'] for r in runs]):.1f} s per seed on average, "
        f"against {ex['points']:,} evaluations and {ex['exhaustive_seconds']:,.0f} s for "
        "exhaustive search.", ""]


def methods(m: dict) -> list[str]:
    fitted = m.get("best_fitted_baseline", [])
    out = ["## Against other methods at equal budgets", "",
           f"{m['shape']} on {m['group']}, {m['seeds']} seeds. *genetic + MCTS* is "
           "`structures: search` (genetic settings "
           f"{m['genetic']}, then {m.get('study_evaluations', 600)} MCTS evaluations); "
           "*random* draws random structures and gives each 32 uniformly sampled divisor "
           "tilings; *TPE* is Optuna's TPE over the tile factors of every baseline's "
           "structure, from the builders' default factors. Each gets the evaluations the "
           "genetic run used. No method is given the baselines' factors as fitted by their "
           "own rules (neither as points nor as warm starts): the curves are what each search "
           "finds by itself. The dashed line is the best baseline with its fitted factors "
           "(median over the seeds; the fits themselves cost up to 300 evaluations per "
           "baseline, not counted here).", "", f"![methods]({m['plot']})", "",
           "| method | best cycles per seed | median | evaluations | seconds (median) |",
           "|---|---|---|---|---|"]
    for name, finals in m["final_best"].items():
        evals = float(np.median(m["evaluations"][name]))
        out.append(f"| {name} | {', '.join(_n(v) for v in finals)} | "
                   f"{_n(float(np.median(finals)))} | {_n(evals)} | "
                   f"{_n(float(np.median(m['seconds'][name])), '{:.1f}')} |")
    if fitted:
        names = sorted(set(m.get("best_fitted_baseline_name", [])))
        out.append(f"| best fitted baseline ({', '.join(names)}) | "
                   f"{', '.join(_n(v) for v in fitted)} | {_n(float(np.median(fitted)))} "
                   "| - | - |")
    return out + [""]


def studies(rows: list[dict], plan, published) -> list[str]:
    out = ["## Against the published results", "",
           "Each shape: `tileflow explore` on the shipped study (`search/GROUP/SHAPE.yaml`, "
           "`structures: search`) with the study budget cut to the figure in the table "
           "(CPU time), the baselines with their own rules. Evaluations count the structure "
           "search's and the study's. The "
           f"{len(rows)} studies took {sum(r['seconds'] for r in rows) / 60:.0f} minutes in "
           "all, one after another (wall-clock; each saved as it completed, in "
           "`structure-runs/`).", ""]
    for group, shapes, evaluations, _ in plan:
        got = [r for r in rows if r["group"] == group]
        if not got:
            continue
        pub = published[group]
        out += [f"### {group} ({len(got)} of {len(shapes)} planned shapes run; study budget "
                f"{evaluations} evaluations)", "",
                "| shape | found (structure) | cycles | best baseline | its cycles | Layerwise "
                "| x Layerwise | x best baseline | x best published fixed dataflow "
                "| compute bound | found / bound | Layerwise / bound "
                "| evaluations | s | to within 1 %: evals / s |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        fixed, ceiling = [], []
        for r in got:
            c = r["to_within_1pct"]
            fixed.append(_best_fixed(r) / r["best_cycles"])
            bound = compute_bound(r)
            ceiling.append(r["layerwise_cycles"] / bound)
            out.append(f"| {r['shape']} | {r['found_structure']} | {_n(r['best_cycles'])} | "
                       f"{r['best_baseline']} | {_n(r['best_baseline_cycles'])} | "
                       f"{_n(r['layerwise_cycles'])} | {r['speedup_over_layerwise']:.2f}x | "
                       f"{r['speedup_over_best_baseline']:.3f}x | {fixed[-1]:.2f}x | "
                       f"{_n(bound)} | {r['best_cycles'] / bound:.3f} | {ceiling[-1]:.2f}x | "
                       f"{r['evaluations']:,} | "
                       f"{r['seconds']:.0f} | {c['evaluations']:,} / {c['seconds']:.0f} |")
        lw = gmean([r["speedup_over_layerwise"] for r in got])
        bb = gmean([r["speedup_over_best_baseline"] for r in got])
        out += ["", f"Geometric mean: **{lw:.2f}x** over Layerwise (published {pub[0]}x), "
                f"**{bb:.3f}x** over the best baseline"
                + (f" (published {pub[1]}x)" if pub[1] else "")
                + f"; **{gmean(fixed):.2f}x** over the best of the published fixed dataflows "
                "(every baseline but `tileflow-pipe`, which is the shape the published search "
                "found). No dataflow can be faster than the compute bound, so no speed-up over "
                f"Layerwise can exceed Layerwise / bound: **{gmean(ceiling):.2f}x** "
                "(geometric mean) here.", ""]
    return out


def _best_fixed(r: dict) -> float:
    return min(v for k, v in r["baseline_cycles"].items() if k != "tileflow-pipe")


def converge(rows: list[dict], group: str = "attention-edge", shape: str = "G1") -> list[str]:
    r = next((x for x in rows if (x["group"], x["shape"]) == (group, shape)), None)
    if r is None:
        return []
    c = r["to_within_1pct"]
    return ["## Time to converge", "",
            f"{shape} on {group}: the whole run (structure search over "
            f"{r['structures_evaluated']} structures with {r['structure_search_evaluations']:,} "
            f"evaluations in {r['structure_search_seconds']:.0f} s, then the tile-factor study) "
            f"took {r['evaluations']:,} evaluations and {r['seconds']:.0f} s; it was within 1 % "
            f"of its final best after {c['evaluations']:,} evaluations and {c['seconds']:.0f} s "
            "(wall-clock on the shared 2-core machine). Published: tile-only search converging "
            "in 3.2-6.4 minutes (50 rounds x 200 samples a dataflow) and the full search in "
            "under 50 rounds of 20 dataflows (1,000 dataflows, each with its own tile search).",
            ""]


PICKS = (("attention-edge", "G1"), ("attention-cloud", "G11"), ("conv-cloud", "C5"),
         ("attention-edge-softmax-on-array", "G10"))


def _flow_of(r: dict):
    """The found dataflow of a study row, its workload and accelerator."""
    from tileflow.specs.arch import load_arch
    from tileflow.specs.dataflow import parse_dataflow
    from tileflow.specs.workload import load_workload
    from tileflow.specs.yamlfile import Field

    w = load_workload("conv-chain" if r["group"].startswith("conv") else "attention",
                      r["sizes"])
    return w, load_arch(r["accelerator"]), parse_dataflow(Field(r["tree"], "structure-runs"))


def placement(r: dict) -> list[str]:
    """In words: what runs as a pipeline (or at once), and where each intermediate stays
    (its home: the level of the lowest tile holding its producer and consumers)."""
    from tileflow.evaluator.compiled import compiled_for
    from tileflow.tree import Op, Tile, walk

    w, arch, flow = _flow_of(r)
    c = compiled_for(w, arch, flow)
    nodes = dict(walk(flow.root))

    def ops(node) -> str:
        return "+".join(n.op for _, n in walk(node) if isinstance(n, Op))

    def tile(path: str) -> str:
        node = nodes[path]
        return f"'{node.name}'" if node.name else f"the tile at {node.level} ({path})"

    out = []
    for path, node in nodes.items():
        if isinstance(node, Tile) and node.primitive in ("Pipe", "Para") and \
                len(node.children) > 1:
            how = "as a pipeline (stages on separate units, staggered by one step of " \
                f"{tile(path)})" if node.primitive == "Pipe" else "at once (Para)"
            out.append(f"- Run {how}: " + " | ".join(ops(k) for k in node.children) + ".")
    for t in w.intermediates:
        producer, users = w.producer[t], ", ".join(w.consumers[t])
        if t in c.lca:
            out.append(f"- `{t}` ({producer} -> {users}) stays in "
                       f"{arch.levels[c.homes[t]].name}: a slice per step of "
                       f"{tile(c.lca[t])}, the lowest tile over its producer and consumers.")
        else:
            out.append(f"- `{t}` ({producer} -> {users}) goes through DRAM.")
    return out


def timeline_figure(r: dict) -> str:
    """search/timeline-GROUP-SHAPE.png: the found dataflow over its whole run (its first steps
    enlarged), each tile's loads and stores and each operator on its unit
    (`tileflow.explore.studies.timeline`)."""
    from tileflow.cost import evaluate
    from tileflow.explore.studies import timeline
    from tileflow.outputs import write_atomic

    w, arch, flow = _flow_of(r)
    line = timeline.layout(w, arch, flow, evaluate(w, arch, flow))
    name = f"timeline-{r['group']}-{r['shape']}.png"
    write_atomic(HERE / name, lambda p: timeline.plot(
        line, f"{r['shape']} on {r['accelerator']}: {r['found_structure']}", p), binary=True)
    return name


def found(rows: list[dict], picks=PICKS) -> list[str]:
    out = ["## What the search found", "",
           "For a few shapes: the found dataflow's tree in words, what runs as a pipeline and "
           "where each intermediate stays, and its timeline (the model's per-tile averages "
           "over the whole run, spanning its cycles, the first steps enlarged: each tile's "
           "loads and stores on the link to its children's level, each operator on its "
           "unit).", ""]
    for group, shape in picks:
        r = next((x for x in rows if (x["group"], x["shape"]) == (group, shape)), None)
        if r is None:
            continue
        out += [f"**{shape} on {group}** ({r['found_structure']}, {_n(r['best_cycles'])} "
                f"cycles, bottleneck: {r['bottleneck']}; homes {r['homes'] or 'default'}):", "",
                *r["description"], ""]
        if "tree" in r:
            out += [*placement(r), "", f"![timeline of {shape} on {group}]"
                    f"({timeline_figure(r)})", ""]
    return out


def report(summary: dict, plan, published) -> str:
    lines = ["# Structure search: evidence", "",
             "Generated by `PYTHONPATH=. python search/structure_report.py` (figures in "
             "`summary.json`, each unit of work in `structure-runs/`), run once on a 2-core "
             "machine shared with other jobs: seconds are wall-clock under load.", ""]
    if "sizes" in summary:
        lines += sizes(summary["sizes"])
    if "exhaustive" in summary:
        lines += exhaustive(summary["exhaustive"], summary.get("exhaustive_conv"))
    if "methods" in summary:
        lines += methods(summary["methods"])
    if summary.get("studies"):
        lines += studies(summary["studies"], plan, published)
        lines += converge(summary["studies"])
        lines += found(summary["studies"])
    notes = HERE / "structure-notes.md"
    if notes.exists():
        lines += [notes.read_text().rstrip(), ""]
    return "\n".join(lines) + "\n"
