"""Run the Timeloop importer over the public Timeloop/Accelergy exercises and example designs
(github.com/Accelergy-Project/timeloop-accelergy-exercises) and write two tables into
docs/interop.md: which files are accepted unchanged, and, for every run with a reference
output, how TileFlow's cycles, per-level, per-tensor counts and energy (with the ERT Timeloop
wrote beside the reference) compare with Timeloop's.

    git clone https://github.com/Accelergy-Project/timeloop-accelergy-exercises CORPUS
    python tools/timeloop_corpus.py CORPUS [--write docs/interop.md]

Not part of the package: the corpus is not shipped, only the tables it gives."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.evaluator.static_energy import whole_block_words
from tileflow.interop.files import load_arch_any, load_dataflow_any, load_workload_any
from tileflow.interop.report import collecting

ISPASS = "workspace/tutorial_exercises/01_accelergy_timeloop_2020_ispass/timeloop"
ISPASS_2022 = "workspace/exercises/2020.ispass/timeloop"
DESIGNS_2022 = "workspace/baseline_designs/example_designs"
DESIGNS = "workspace/example_designs/example_designs"
TUTORIAL_2024 = "workspace/tutorial_exercises/02_interface_and_design_space_exploration_2024"
V03_COMMIT = "778460fb63ce6c3724b6fd6b5a0482bc5d8c2a25"  # 2022-09-19, before the v0.4 move
BEGIN, END = "<!-- corpus tables: begin -->", "<!-- corpus tables: end -->"

# v0.3 tutorial runs: (exercise, architecture, problem, mapping, reference output folder)
V03_RUNS = [
    ("00-model-conv1d-1level", "1level.arch", "conv1d.prob", "conv1d-1level.map", ""),
    ("01-model-conv1d-2level", "2level.arch", "conv1d.prob", "conv1d-2level-os.map", "os"),
    ("01-model-conv1d-2level", "2level.arch", "conv1d.prob", "conv1d-2level-ws.map", "ws"),
    ("02-model-conv1d+oc-2level", "2level.arch", "conv1d+oc.prob", "conv1d+oc-2level-os.map",
     "no-tiling"),
    ("02-model-conv1d+oc-2level", "2level.arch", "conv1d+oc.prob",
     "conv1d+oc-2level-os-tiled.map", "tiling"),
    ("03-model-conv1d+oc-3level", "3level.arch", "conv1d+oc.prob", "conv1d+oc-3level.map",
     "no-bypass"),
    ("03-model-conv1d+oc-3level", "3level.arch", "conv1d+oc.prob",
     "conv1d+oc-3level-bypass.map", "bypass"),
    ("04-model-conv1d+oc-3levelspatial", "3levelspatial.arch", "conv1d+oc+ic.prob",
     "conv1d+oc+ic-3levelspatial-cp-ws.map", "cp"),
    ("04-model-conv1d+oc-3levelspatial", "3levelspatial.arch", "conv1d+oc+ic.prob",
     "conv1d+oc+ic-3levelspatial-kp-ws.map", "kp"),
]


@dataclass
class Run:
    name: str
    version: str
    arch: Path
    problem: Path | None
    mapping: Path | None
    stats: Path | None
    outcome: str = ""
    refused: Path | None = None  # the file a refusal names
    notes: list[str] = field(default_factory=list)
    ert_notes: list[str] = field(default_factory=list)
    compare: dict = field(default_factory=dict)


def runs_2022(root: Path) -> list[Run]:
    """The 2022 snapshot (v0.3 files): the 2020 tutorial and the example designs' archs."""
    out = _tutorial_2020(root, ISPASS_2022, "2022 ")
    base = root / ISPASS_2022.replace("/timeloop", "/timeloop+accelergy")
    for arch in sorted((base / "arch").glob("*.yaml")):
        out.append(Run(f"2022 timeloop+accelergy {arch.stem}", "", arch,
                       base / "prob" / "prob.yaml", None, None))
    for arch in sorted((root / DESIGNS_2022).glob("*/arch/*.yaml")):
        out.append(Run(f"2022 {arch.parents[1].name}", "", arch, None, None, None))
    return out


def _tutorial_2020(root: Path, folder: str, prefix: str) -> list[Run]:
    out = []
    for ex, arch, prob, mapping, ref in V03_RUNS:
        base = root / folder / ex
        ref = {"no-tiling": "untiled", "tiling": "tiled"}.get(ref, ref) if prefix else ref
        stats = base / "ref-output" / ref / "timeloop-model.stats.txt"
        out.append(Run(f"{prefix}{ex[:2]} {mapping.removesuffix('.map')}", "",
                       base / "arch" / f"{arch}.yaml", base / "prob" / f"{prob}.yaml",
                       base / "map" / f"{mapping}.yaml", stats))
    for ex, arch, prob in (("05-mapper-conv1d+oc-3level", "3level.arch", "conv1d+oc.prob"),
                           ("06-mapper-convlayer-eyeriss", "eyeriss_like", "VGG02_layer5")):
        base = root / folder / ex
        out.append(Run(f"{prefix}{ex[:2]} (mapper)", "", base / "arch" / f"{arch}.yaml",
                       base / "prob" / f"{prob}.yaml", None, None))
        # the mappings the mapper found, where its reference output keeps them (v0.4)
        for found in sorted((base / "ref-output").glob("**/timeloop-mapper.map.yaml")):
            ref = found.parent.relative_to(base / "ref-output")
            name = f"{prefix}{ex[:2]} mapper's mapping{f' ({ref})' if str(ref) != '.' else ''}"
            out.append(Run(name, "", base / "arch" / f"{arch}.yaml",
                           base / "prob" / f"{prob}.yaml", found,
                           found.with_name("timeloop-mapper.stats.txt")))
    return out


def runs(root: Path) -> list[Run]:
    out = _tutorial_2020(root, ISPASS, "")
    designs = root / DESIGNS
    for ref in sorted(designs.glob("**/ref_outputs/default_problem/timeloop-mapper.map.yaml")):
        design = ref.parents[2]
        problem = design / "problem.yaml"
        if not problem.exists():
            problem = designs / "_include" / "default_problem.yaml"
        name = str(design.relative_to(designs))
        out.append(Run(name, "v0.4", design / "arch.yaml", problem, ref,
                       ref.parent / "timeloop-mapper.stats.txt"))
        if (design / "mapping.yaml").exists():
            out.append(Run(f"{name} (mapping.yaml)", "v0.4", design / "arch.yaml", problem,
                           design / "mapping.yaml", None))
    for design in sorted(p.parent for p in designs.glob("**/arch.yaml")):
        if not any(r.arch == design / "arch.yaml" for r in out):
            problem = design / "problem.yaml"
            out.append(Run(str(design.relative_to(designs)), "v0.4", design / "arch.yaml",
                           problem if problem.exists() else designs / "_include" /
                           "default_problem.yaml", None, None))
    tut = root / TUTORIAL_2024
    out.append(Run("2024 tutorial", "v0.4", tut / "inputs" / "arch.yaml",
                   tut / "inputs" / "problem.yaml", tut / "outputs" / "timeloop-mapper.map.yaml",
                   tut / "outputs" / "timeloop-mapper.stats.txt"))
    return out


def _version(arch: Path) -> str:
    """v0.4 for an architecture with `nodes` (or a template), v0.3 for `subtree`/`local`."""
    text = arch.read_text() if arch.exists() else ""
    return "v0.3" if re.search(r"^\s*subtree:", text, re.M) else "v0.4"


def reference(stats: Path) -> dict:
    """Cycles and, per level and tensor, (reads, fills, updates) summed over the utilised
    instances, from a Timeloop stats.txt."""
    text = stats.read_text()
    cycles = re.search(r"^Cycles: (\d+)", text, re.M)
    counts: dict[tuple[str, str], list[int]] = {}
    used: dict[tuple[str, str], int] = {}  # (level, tensor) -> utilised instances
    machine: dict[str, int] = {}  # level -> its instances in the reference's architecture
    level = tensor = None
    instances = 1
    for line in text.splitlines():
        if m := re.match(r"^=== (\S+) ===$", line):
            level = m.group(1)
        elif m := re.match(r"^\s+Instances\s+: (\d+)", line):
            machine.setdefault(level, int(m.group(1)))
        elif m := re.match(r"^    (\w+):$", line):
            tensor = m.group(1)
        elif m := re.match(r"^\s+Utilized instances \(max\)\s+: (\d+)", line):
            instances = int(m.group(1))
        elif m := re.match(r"^\s+Scalar (reads|fills|updates) \(per-instance\)\s+: (\d+)",
                           line):
            key = (level, tensor)
            slot = ("reads", "fills", "updates").index(m.group(1))
            counts.setdefault(key, [0, 0, 0])[slot] = int(m.group(2)) * instances
            used[key] = instances
    return {"cycles": int(cycles.group(1)) if cycles else None, "counts": counts,
            "instances": machine, "used": used}


def reference_energy(stats: Path) -> dict:
    """Timeloop's energy in pJ: per level (its tensors' energies, plus its leakage, as
    Timeloop's per-level summary adds them; the compute unit's by its name), the leakage per
    level, the total, and the computes."""
    text = stats.read_text().split("\nNetworks\n", 1)[0]
    level = None
    by_level: dict[str, float] = {}
    leak: dict[str, float] = {}
    for line in text.splitlines():
        if m := re.match(r"^=== (\S+) ===$", line):
            level = m.group(1)
            by_level[level] = 0.0
        elif m := re.match(r"^\s+Leakage energy \(total\)\s+: ([\d.]+) pJ", line):
            leak[level] = float(m.group(1))
            by_level[level] += float(m.group(1))
        elif m := re.match(r"^\s+Energy \(total\)\s+: ([\d.]+) pJ", line):
            by_level[level] += float(m.group(1))
    full = stats.read_text()
    computes = re.search(r"^(?:Computes|MACCs) = (\d+)", full, re.M)
    total = re.search(r"^Total topology energy: ([\d.]+) pJ", full, re.M)
    if total:
        total_pj = float(total.group(1))
    else:  # fJ per compute, over the computes
        per = re.search(r"^fJ/Compute\n(?:.*\n)*?\s+Total\s+= ([\d.]+)", full, re.M)
        total_pj = float(per.group(1)) * int(computes.group(1)) / 1000 if per else None
    return {"levels": by_level, "leak": leak, "total": total_pj,
            "computes": int(computes.group(1)) if computes else 0}


def ert_beside(stats: Path) -> Path | None:
    """The ERT Timeloop wrote beside its stats (timeloop-model.ERT.yaml, ...)."""
    ert = stats.with_name(stats.name.replace("stats.txt", "ERT.yaml"))
    return ert if ert.exists() else None


def attempt(run: Run) -> None:
    """Import the run's files as a user would (unchanged); record the outcome. Where the run
    has a reference output, its ERT gives the architecture its energies."""
    ert = ert_beside(run.stats) if run.stats and run.stats.exists() else None
    with collecting() as found:
        try:
            arch = load_arch_any(str(run.arch), ert)
            if run.problem is None:
                run.outcome = "accepted"
                return
            workload = load_workload_any(str(run.problem))
            if run.mapping is None:
                run.outcome = "accepted"
                return
            flow = load_dataflow_any(run.mapping, workload, arch)
            result = evaluate(workload, arch, flow)
        except InputError as exc:
            run.outcome = f"refused: {exc.message.splitlines()[0]}"
            run.refused = Path(exc.source) if exc.source else None
            return
        finally:
            run.notes = [n for n in found.notes if not (ert and n.startswith(str(ert)))]
            run.ert_notes = [n for n in found.notes if ert and n.startswith(str(ert))]
    run.outcome = "accepted"
    if any("dense" in n for n in run.notes):
        run.compare = {"sparse": True}
        return
    if run.stats and run.stats.exists():
        ref = reference(run.stats)
        same = total = 0
        differ = [f"the reference's {lv.name} has {ref['instances'][lv.name]} instances, "
                  f"the file's {lv.instances}" for lv in arch.levels
                  if ref["instances"].get(lv.name, lv.instances) != lv.instances]
        for (level, tensor), (reads, fills, updates) in ref["counts"].items():
            if level not in result.traffic:
                continue
            m = result.traffic[level].get(tensor)
            mine = (m.read, m.fill, m.update) if m else (0, 0, 0)
            total += 1
            if tuple(round(x) for x in mine) == (reads, fills, updates):
                same += 1
            else:
                differ.append(f"{level}.{tensor} {tuple(round(x) for x in mine)} vs "
                              f"{(reads, fills, updates)}")
        run.compare = {"cycles": result.cycles, "ref_cycles": ref["cycles"], "same": same,
                       "total": total, "differ": differ}
        if ert is not None:
            run.compare["energy"] = _energy(result, reference_energy(run.stats), differ,
                                            arch, ref)


def _at_their_counts(arch, ref: dict, computes: int) -> float:
    """Timeloop's counts priced as TileFlow prices its own (the imported energies per word,
    whole blocks per utilised instance where the level sets `block_words`), without
    leakage: what TileFlow would give with every count equal to Timeloop's."""
    total = computes * arch.matrix.energy_pj_per_op
    for (level, tensor), (reads, fills, updates) in ref["counts"].items():
        if level in arch.level_index:
            lv = arch.level(level)
            words = (reads, fills, updates)
            if lv.block_words:
                used = ref["used"][(level, tensor)]
                words = tuple(whole_block_words(x, used, lv.block_words) for x in words)
            total += (words[0] * lv.read_energy_pj + words[1] * lv.write_energy_pj
                      + words[2] * lv.update_energy_pj)
    return total


def _energy(result, ref_energy: dict, differ: list[str], arch, ref: dict) -> dict:
    """TileFlow's energy against Timeloop's: the total, and per level (the compute unit
    under the name Timeloop gives it; leakage included) with whether that level's counts
    are all equal; and the parts of the difference: counts (TileFlow's counts against
    Timeloop's, both priced by TileFlow's rules), leakage (TileFlow's against Timeloop's)
    and the rest (what neither explains: Timeloop splits a cluster's access among the
    instances it serves)."""
    mine = {lv: sum(parts.values()) + result.leakage_pj.get(lv, 0.0)
            for lv, parts in result.energy_by_level_pj.items()}
    storage = set(arch.level_index)
    compute = [name for name in ref_energy["levels"] if name not in storage]
    for name in compute:
        mine[name] = result.compute_energy_pj
    levels = {}
    for name, theirs in ref_energy["levels"].items():
        counts_equal = not any(d.startswith(f"{name}.") for d in differ)
        levels[name] = (mine.get(name, 0.0), theirs, counts_equal)
    my_leak = sum(result.leakage_pj.values())
    leak = sum(ref_energy["leak"].values())
    dynamic = result.energy_pj - my_leak
    at_theirs = _at_their_counts(arch, ref, ref_energy["computes"])
    return {"total": (result.energy_pj, ref_energy["total"]), "levels": levels, "leak": leak,
            "parts": {"counts": dynamic - at_theirs,
                      "leakage": my_leak - leak,
                      "rest": at_theirs - (ref_energy["total"] - leak)}}


def tables(corpus: list[Run], commit: str) -> str:
    files: dict[Path, str] = {}
    for run in corpus:
        for p in (run.arch, run.problem, run.mapping):
            if p is not None:
                files.setdefault(p, run.version)
    refused = {run.refused for run in corpus if run.refused is not None}
    tried = set()
    for run in corpus:
        for p in (run.arch, run.problem, run.mapping):
            if p is None:
                continue
            tried.add(p)
            if p == run.refused:
                break
    lines = [f"Corpus: timeloop-accelergy-exercises at commit `{commit}` (v0.4 files) and at "
             f"`{V03_COMMIT}` (v0.3 files, runs named 2022); `python tools/timeloop_corpus.py "
             "CORPUS --v03 CORPUS_2022 --write docs/interop.md` regenerates these tables.",
             "", "| runs | version | accepted unchanged |", "|---|---|---|"]
    for version in ("v0.3", "v0.4"):
        mine = [r for r in corpus if r.version == version]
        ok = sum(r.outcome == "accepted" for r in mine)
        lines.append(f"| {len(mine)} | {version} | {ok} ({ok / len(mine):.0%}) |")
    every = len(corpus)
    ok = sum(r.outcome == "accepted" for r in corpus)
    lines.append(f"| {every} | all | {ok} ({ok / every:.0%}) |")
    untried = set(files) - tried
    lines += ["", f"{len(files)} distinct files (architectures, problems, mappings) in these "
              f"runs: {len(tried) - len(refused)} accepted as written, {len(refused)} "
              f"refused, {len(untried)} not tried (a file before them in their run was "
              "refused).", "",
              "| run | version | outcome | notes |", "|---|---|---|---|"]
    for r in corpus:
        notes = "; ".join(sorted(set(n.split(": ", 1)[-1] for n in r.notes)))
        lines.append(f"| {r.name} | {r.version} | {r.outcome} | {_cell(notes)} |")
    lines += ["", "Exactness (runs with a reference output; counts are reads, fills and updates "
              "of each tensor at each level, summed over the utilised instances):", "",
              "| run | cycles (TileFlow / Timeloop) | counts equal | energy pJ (TileFlow / "
              "Timeloop) | energy error | of which counts / leakage / rest | "
              "error on the levels whose counts are equal | first differences |",
              "|---|---|---|---|---|---|---|---|"]
    for r in corpus:
        if not r.compare:
            continue
        c = r.compare
        if "sparse" in c:
            continue
        cyc = f"{c['cycles']:.12g} / {c['ref_cycles']}"
        energy, error, parts, equal = _energy_cells(c.get("energy"))
        lines.append(f"| {r.name} | {cyc} | {c['same']} of {c['total']} | {energy} | {error} "
                     f"| {parts} | {equal} | {_cell('; '.join(c['differ'][:2]))} |")
    return "\n".join(lines + [""] + _energy_summary(corpus))


def _energy_summary(corpus: list[Run]) -> list[str]:
    """How many runs are within 1 %, and the ERT actions that were read without use."""
    compared = [r.compare["energy"] for r in corpus if r.compare.get("energy")]
    close = sum(abs(_error(e)) <= 0.01 for e in compared)
    same = [r.compare["energy"] for r in corpus
            if r.compare.get("energy") and not r.compare["differ"]]
    close_same = sum(abs(_error(e)) <= 0.01 for e in same)
    unused = sorted({re.sub(r".*ERT action '([^']+)'.*", r"\1", n)
                     for r in corpus for n in r.ert_notes if "ERT action '" in n})
    theirs = [e["total"][1] for e in compared]
    energies = [e["parts"] for e in compared]
    at_counts = sum(abs(p["leakage"] + p["rest"]) <= 0.01 * t
                    for p, t in zip(energies, theirs, strict=True))
    worst = max((abs(p["leakage"] + p["rest"]) / t
                 for p, t in zip(energies, theirs, strict=True)), default=0.0)
    return [f"Energy, with each run's ERT (the one Timeloop wrote beside its stats): "
            f"{close} of {len(compared)} runs within 1 % of Timeloop's total; of the "
            f"{len(same)} runs whose counts are all equal, {close_same}. At Timeloop's "
            f"counts (the counts part set aside) {at_counts} of {len(compared)} are within "
            f"1 % (the largest difference {worst:.2%}). "
            f"ERT actions read and not used (noted by the import): "
            f"{', '.join(unused) or 'none'}."]


def _error(e: dict) -> float:
    mine, theirs = e["total"]
    return (mine - theirs) / theirs


def _energy_cells(e: dict | None) -> tuple[str, str, str, str]:
    if not e:
        return "no ERT", "", "", ""
    mine, theirs = e["total"]
    parts = " / ".join(f"{v / theirs:+.2%}" for v in e["parts"].values())
    levels = [(m, t) for m, t, equal in e["levels"].values() if equal]
    m_sum, t_sum = sum(m for m, _ in levels), sum(t for _, t in levels)
    equal = (f"{(m_sum - t_sum) / t_sum:+.2%} ({len(levels)} of {len(e['levels'])})"
             if t_sum else "")
    return f"{mine:,.0f} / {theirs:,.0f}", f"{(mine - theirs) / theirs:+.2%}", parts, equal


def _cell(text: str, limit: int = 160) -> str:
    text = text.replace("|", "/")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="a checkout of timeloop-accelergy-exercises")
    parser.add_argument("--commit", help="the corpus commit (default: git rev-parse HEAD)")
    parser.add_argument("--v03", type=Path, metavar="DIR", help="a checkout of the same "
                        f"repository at {V03_COMMIT[:7]} (2022: the v0.3 files)")
    parser.add_argument("--write", type=Path, help="replace the tables in this Markdown file")
    args = parser.parse_args(argv)
    commit = args.commit or subprocess.run(
        ["git", "-C", str(args.corpus), "rev-parse", "HEAD"], capture_output=True,
        text=True).stdout.strip() or "unknown"
    corpus = runs(args.corpus) + (runs_2022(args.v03) if args.v03 else [])
    for run in corpus:
        run.version = _version(run.arch)
        attempt(run)
    text = tables(corpus, commit)
    if args.write:
        doc = args.write.read_text()
        if BEGIN not in doc or END not in doc:
            print(f"{args.write}: no '{BEGIN}' ... '{END}' markers", file=sys.stderr)
            return 2
        head, rest = doc.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        new = f"{head}{BEGIN}\n{text}\n{END}{tail}"
        tmp = args.write.with_suffix(".tmp")
        tmp.write_text(new)
        tmp.replace(args.write)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
