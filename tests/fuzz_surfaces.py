"""A seeded corpus of hostile and careless inputs for the search and import surfaces —
`explore` (configs and flags: output folders, storages, workers, resume), `sweep`, `import`
and `validate cpu|rtl` — and its runner, beside tests/fuzz_corpus.py (evaluate and compare).

Every case runs `python -m tileflow.cli ...` in its own subprocess, in a fresh folder, with a
timeout and a memory cap. It passes when it ends in one of two ways:

* exit 2 with one paragraph on stderr naming the file and line, the flag or the path it is
  about (tests.fuzz_corpus.judge);
* exit 0 with finite JSON on stdout (`import`: one `wrote PATH` line per output, each file
  there), where the case may succeed at all.

It fails as: traceback, hang, nonfinite, unlocated (an error that names no place),
bad-exit, wrong, silent (exit 0 for an input known to be bad) or lost (a file the user had
in the output folder is gone, or a file a run reported is missing).

    python -m tests.fuzz_surfaces --cases 1500 [--seed 21] [--jobs 2] [--log FILE]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz_corpus import MEMORY_BYTES, _limits, edit_text, judge
from tests.fuzz_corpus import Case as _Case
from tests.interop.samples import (
    ARCH_V03,
    ARCH_V04,
    CHAIN_PROBLEM,
    CONV_PROBLEM,
    ERT_ONE_PE,
    GEMM_MAPPING,
    GEMM_PROBLEM,
)

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 90
KEEP = "notes.txt"  # a user's file in the output folder: no run may remove it

EXPLORE = """\
accelerator: edge
workload: gemm-chain
sizes: {b: 1, m: 32, l: 32, k: 16, n: 16}
structures: [layerwise, chimera]
objective: latency
budget: {evaluations: 6}
batch: 4
seed: 3
"""
SEARCH = """\
accelerator: edge
workload: gemm-chain
sizes: {b: 1, m: 32, l: 32, k: 16, n: 16}
structures: search
genetic: {population: 3, generations: 1, evaluations: 2, rungs: 1, top: 1}
budget: {evaluations: 4}
batch: 4
"""
SWEEP = """\
accelerator: edge
workload: gemm-chain
sizes: {b: 1, m: 32, l: 32, k: 16, n: 16}
structures: [layerwise]
budget: {evaluations: 4}
sweep:
  parameters:
    L1.capacity_bytes: [512, 4096]
  bound: L1
  bound_max_tilings: 2000
  bound_sample_tilings: 20
"""
GEMM_CSV = ("M,N,K,tile_M,tile_N,tile_K,rtl_cycles\n16,64,16,16,16,16,702\n"
            "16,64,32,16,16,16,1262\n32,32,32,16,16,16,1500\n")
FUSED_CSV = ("M,L,K,N,tile_M,tile_K,tile_L,rtl_cycles,dram_to_buffer_bits,buffer_to_dram_bits,"
             "buffer_to_reg_bits,reg_to_buffer_bits\n"
             "64,64,16,16,16,16,16,54297,3407872,52428,7602176,3774873\n"
             "64,64,16,16,16,16,32,53753,3407872,52428,7602176,3774873\n")
OUT_TARGETS = ["/dev/null", "/proc/tileflow-fuzz", "/proc/self/x", "afile", "a/b/c", ".", "",
               "x" * 300, "/sys/x", "ro", "-", "out\nline", "fifo"]
STORAGES = ["sqlite://", "sqlite:///:memory:", "sqlite:///", "sqlite:////proc/x/s.db",
            "sqlite:///afile/s.db", "sqlite:///dir", "s.db", "postgresql://nobody@127.0.0.1:1/x",
            "mysql://x", "memory", "sqlite:///s.db", "sqlite:////dev/null", "garbage",
            "sqlite:///" + "d" * 300 + "/s.db", "corrupt.db"]


@dataclass
class Case(_Case):
    """A tests.fuzz_corpus Case with what a pass must also show."""

    must_fail: bool = False  # exit 0 would be a silent accept
    out: str = ""  # the output folder a run writes (relative to the case folder)


# ---- the corpus -----------------------------------------------------------------------------

def _explore_config(rng: random.Random, n: int) -> Case:
    base = SEARCH if rng.random() < 0.15 else EXPLORE
    data, what = edit_text(rng, base, "config")
    args = ["explore", "c.yaml", "--out", "out", "--quiet", "--json"]
    if rng.random() < 0.7:
        args += ["--budget-evals", "4"]
    return Case(f"{n:05d}-explore-config-{what}"[:120], "explore", args, {"c.yaml": data},
                ["c.yaml, line ", "c.yaml, top level", "c.yaml: ", "--out", "--budget-evals"],
                out="out")


def _explore_flags(rng: random.Random, n: int) -> Case:
    args = ["explore", "c.yaml", "--quiet", "--json", "--budget-evals", "4"]
    must_fail = False
    setup = ""
    files: dict[str, bytes] = {"c.yaml": EXPLORE.encode(), "afile": b"x"}
    places = ["--out", "--storage", "--workers", "--seed", "--budget-evals",
              "--budget-seconds", "--resume", "c.yaml"]
    choice = rng.random()
    out = "out"
    if choice < 0.35:
        target = rng.choice(OUT_TARGETS)
        out = target
        must_fail = target in ("/dev/null", "/proc/tileflow-fuzz", "/proc/self/x", "afile",
                               "/sys/x", "fifo", "x" * 300)
        setup = "fifo" if target == "fifo" else ""
        args += ["--out", target]
    else:
        args += ["--out", "out"]
    if 0.35 <= choice < 0.7:
        url = rng.choice(STORAGES)
        if url == "corrupt.db":
            files["corrupt.db"] = bytes(rng.randrange(256) for _ in range(2048))
        must_fail = must_fail or url in STORAGES[:6] or url in (
            "sqlite:////dev/null", STORAGES[13], "postgresql://nobody@127.0.0.1:1/x",
            "mysql://x", "garbage")
        args += ["--storage", url]
        places.append(url.removeprefix("sqlite:///"))  # a message may name the storage
        if rng.random() < 0.3:
            args.append("--resume")
    elif choice >= 0.7:
        flag, value = rng.choice([("--workers", v) for v in ("0", "-1", "x", "1", "1e3")] +
                                 [("--seed", v) for v in ("-1", "x", "0", str(2**70))] +
                                 [("--budget-evals", v) for v in ("0", "-5", str(10**12))] +
                                 [("--budget-seconds", v) for v in ("0", "-1", "nan", "inf",
                                                                    "1e400")])
        args += [flag, value]
        if flag == "--budget-seconds":
            del args[4:6]  # the two budget flags are exclusive
        must_fail = value not in ("1", "0") or flag in ("--budget-evals", "--budget-seconds")
        if flag == "--seed" and value in ("0", str(2**70)):
            must_fail = False  # any seed >= 0 is a seed
    if rng.random() < 0.1:
        args.append("--resume")  # nothing to resume without a storage
        must_fail = True
    kind = "study" if any(a in args for a in ("--storage", "--resume", "--workers")) \
        else "explore"
    return Case(f"{n:05d}-explore-flags-{' '.join(args[6:])}"[:120], kind, args, files,
                places, setup=setup, must_fail=must_fail, out=out if out else ".")


def _sweep(rng: random.Random, n: int) -> Case:
    data, what = edit_text(rng, SWEEP, "config")
    args = ["sweep", "s.yaml", "--out", "out", "--quiet", "--json", "--budget-evals", "2"]
    if rng.random() < 0.3:
        args.append("--no-bound")
    if rng.random() < 0.15:
        args.append("--resume")
    return Case(f"{n:05d}-sweep-{what}"[:120], "sweep", args, {"s.yaml": data},
                ["s.yaml, line ", "s.yaml, top level", "s.yaml: ", "--out", "--resume"],
                out="out")


IMPORT_SOURCES = {"arch.yaml": ARCH_V03, "arch4.yaml": ARCH_V04, "prob.yaml": GEMM_PROBLEM,
                  "conv.yaml": CONV_PROBLEM, "chain.yaml": CHAIN_PROBLEM,
                  "map.yaml": GEMM_MAPPING, "ert.yaml": ERT_ONE_PE}


def _import(rng: random.Random, n: int) -> Case:
    names = rng.sample(sorted(IMPORT_SOURCES), rng.choice([1, 1, 2, 3]))
    if "map.yaml" in names:
        names = ["arch.yaml", "prob.yaml", *[x for x in names if x not in ("arch.yaml",
                                                                           "prob.yaml")]]
    files = {name: IMPORT_SOURCES[name].encode() for name in names}
    victim = rng.choice(names)
    data, what = edit_text(rng, IMPORT_SOURCES[victim], "import")
    files[victim] = data
    args = ["import", *names]
    must_fail = False
    out = "out"
    if rng.random() < 0.2:
        out = rng.choice(OUT_TARGETS)
        must_fail = out in ("/dev/null", "/proc/tileflow-fuzz", "/proc/self/x", "afile",
                            "/sys/x", "x" * 300)
        files["afile"] = b"x"
    if rng.random() < 0.1:  # the same name from two folders
        files[f"other/{names[0]}"] = files[names[0]]
        args.append(f"other/{names[0]}")
        must_fail = must_fail or out != ""  # with --out "", each beside its own file
    args += ["--out", out]
    return Case(f"{n:05d}-import-{'+'.join(names)}-{victim}-{what}"[:120], "import", args,
                files, [f"{x}, line " for x in names] + [*names, "--out", "other/"],
                must_fail=must_fail, out=out)


CPU_TIMES = ("min_s", "model_s", "measured_s", "max_s")
CPU_REQUIRED = ("workload", "shape", "tree", "min_s", "model_s", "macs")


def _rule(name: str, cpu: bool) -> tuple[bool, bool, bool]:
    """(checked, required, zero refused) for a column of measurements.csv (cpu) or of the
    RTL dataset: what tileflow.tables is told to check (the tests' own list)."""
    if not cpu:
        return True, True, not name.endswith("_bits")
    numeric = name.endswith(("_s", "_bytes", "_work")) or name.startswith("words_") or \
        name in ("macs", "vector_work", "leaf_steps", "loop_starts", "spread")
    checked = numeric or name == "tree"
    return checked, name in CPU_REQUIRED or name.startswith("words_"), name in CPU_TIMES


def _joined(cells: list[str]) -> str:
    """One CSV line of these cells (quoted where they need it)."""
    handle = io.StringIO()
    csv.writer(handle, lineterminator="").writerow(cells)
    return handle.getvalue()


def _damage(rng: random.Random, text: str, cpu: bool = False) -> tuple[bytes, str, bool]:
    """A damaged CSV: (bytes, what, whether it must be refused)."""
    lines = text.splitlines()
    kind = rng.choice(["empty", "cut", "binary", "latin1", "ragged", "drop-column", "word",
                       "zero", "negative", "inf", "nan", "huge", "blank-lines", "bom", "crlf",
                       "quote", "header-only", "duplicate-header", "swap"])
    row = rng.randrange(1, len(lines))
    cells = next(csv.reader([lines[row]]))
    col = rng.randrange(len(cells))
    header = next(csv.reader([lines[0]]))
    name = header[col] if col < len(header) else ""
    checked, required, no_zero = _rule(name, cpu) if name else (False, False, False)
    bad = True
    if kind == "empty":
        return b"", kind, True
    if kind == "cut":
        raw = text.encode()
        return raw[:rng.randrange(1, len(raw) - 1)], kind, False  # may end at a line break
    if kind == "binary":
        return bytes(rng.randrange(256) for _ in range(512)), kind, True
    if kind == "latin1":
        cells[col] = cells[col] + "\xe9"
        lines[row] = _joined(cells)
        return "\n".join(lines).encode("latin-1") + b"\n", kind, True
    if kind == "ragged":
        lines[row] += ",7"
    elif kind == "drop-column":
        lines = [_joined([c for i, c in enumerate(next(csv.reader([x]))) if i != col])
                 for x in lines]
        bad = required
    elif kind in ("word", "zero", "negative", "inf", "nan", "huge"):
        cells[col] = {"word": "fast", "zero": "0", "negative": "-3", "inf": "inf",
                      "nan": "nan", "huge": "1e400"}[kind]
        lines[row] = _joined(cells)
        bad = not name or (checked and (kind != "zero" or no_zero or name == "tree"))
    elif kind == "blank-lines":
        lines.insert(row, "")
        bad = False
    elif kind == "bom":
        return ("\ufeff" + "\n".join(lines) + "\n").encode(), kind, False
    elif kind == "crlf":
        return ("\r\n".join(lines) + "\r\n").encode(), kind, False
    elif kind == "quote":
        lines[row] = lines[row].replace(",", ',"', 1)
        bad = False  # a field quoted to the end of the file, or to another quote
    elif kind == "header-only":
        lines = lines[:1]
    elif kind == "duplicate-header":
        lines.insert(row, lines[0])
    elif kind == "swap":
        head = lines[0].split(",")
        head[0], head[-1] = head[-1], head[0]
        lines[0] = ",".join(head)
        bad = False  # the same columns in another order
    return ("\n".join(lines) + "\n").encode(), kind, bad


def _validate(rng: random.Random, n: int) -> Case:
    if rng.random() < 0.6:
        victim = rng.choice(["gemm_1152.csv", "gemm_chain_131.csv"])
        text = GEMM_CSV if victim == "gemm_1152.csv" else FUSED_CSV
        data, what, bad = _damage(rng, text)
        files = {"data/gemm_1152.csv": GEMM_CSV.encode(),
                 "data/gemm_chain_131.csv": FUSED_CSV.encode(), f"data/{victim}": data}
        args = ["validate", "rtl", "--data", "data", "--out", "out", "--json"]
        return Case(f"{n:05d}-validate-rtl-{victim}-{what}", "validate", args, files,
                    [victim, "--data", "--out"], must_fail=bad, out="out")
    data, what, bad = _damage(rng, _campaign_csv(n % 4), cpu=True)
    args = ["validate", "cpu", "--report-only", "--out", "cpu", "--json"]
    return Case(f"{n:05d}-validate-cpu-{what}", "validate", args,
                {"cpu/measurements.csv": data}, ["measurements.csv", "--out"],
                must_fail=bad, out="cpu")


@functools.cache
def _campaign_csv(seed: int) -> str:
    """A small measurements.csv as a CPU campaign writes it (tests.calibrate)."""
    from tests.calibrate.test_cpu_report import saved_campaign

    with tempfile.TemporaryDirectory() as folder:
        saved_campaign(Path(folder), n=12, seed=seed)
        return (Path(folder) / "measurements.csv").read_text()


def generate(cases: int = 1500, seed: int = 21) -> list[Case]:
    """The corpus: a deterministic function of (cases, seed)."""
    rng = random.Random(seed)
    makers = [_explore_config] * 30 + [_explore_flags] * 20 + [_sweep] * 10 + \
        [_import] * 20 + [_validate] * 20
    return [rng.choice(makers)(rng, n) for n in range(cases)]


# ---- running and judging one case -----------------------------------------------------------

def _prepare(case: Case, work: Path) -> Path | None:
    """Write the case's files; returns the user's file put in its output folder, if any."""
    for name, data in case.files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    if case.setup == "fifo":
        os.mkfifo(work / "fifo")
    (work / "dir").mkdir(exist_ok=True)  # a folder where a storage file is named
    (work / "ro").mkdir(exist_ok=True)
    (work / "ro").chmod(0o555)
    out = work / case.out if case.out else None
    if out is not None and not case.out.startswith("/") and "\n" not in case.out \
            and len(case.out) < 200 and case.out not in ("afile", "fifo", "-"):
        out.mkdir(parents=True, exist_ok=True)
        (out / KEEP).write_text("the user's own notes\n")
        return out / KEEP
    return None


def run_case(case: Case, timeout_s: float = TIMEOUT_S) -> tuple[str, str]:
    with tempfile.TemporaryDirectory(prefix="tileflow-fuzz-surfaces-") as folder:
        work = Path(folder)
        keep = _prepare(case, work)
        env = {**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
        try:
            proc = subprocess.run([sys.executable, "-m", "tileflow.cli", *case.args],
                                  cwd=work, capture_output=True, timeout=timeout_s,
                                  preexec_fn=_limits, env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return "hang", f"no answer in {timeout_s} s"
        finally:
            (work / "ro").chmod(0o755)
        out = proc.stdout.decode(errors="replace")
        err = proc.stderr.decode(errors="replace")
        return judge_surface(case, proc.returncode, out, err, work, keep)


def judge_surface(case: Case, code: int, out: str, err: str, work: Path,
                  keep: Path | None = None) -> tuple[str, str]:
    """tests.fuzz_corpus.judge (an error must name one of the case's places), then: a
    known-bad input must not succeed, the user's file in the output folder must survive, and
    every file a run reports must exist."""
    if keep is not None and not keep.exists():
        return "lost", f"{keep.relative_to(work)} is gone"
    if case.kind == "import" and code == 0:
        if "Traceback" in err:
            return "traceback", err.strip().splitlines()[-1]
        report, _, notes = out.partition("notes (")  # the wrote lines, then any notes
        lines = report.splitlines()
        written = [line.removeprefix("wrote ") for line in lines]
        notes_ok = not notes or (notes.split("):", 1)[0].isdigit() and all(
            line.startswith("  ") for line in notes.splitlines()[1:]))
        if not written or not all(line.startswith("wrote ") for line in lines) \
                or not notes_ok:
            return "wrong", f"import printed {out[:200]!r}"
        missing = [p for p in written if not (work / p).is_file()]
        if missing:
            return "lost", f"reported but missing: {missing[:3]}"
        outcome, detail = "ok", ""
    else:
        strict = dataclasses.replace(case, kind="dataflow")  # only the case's own places
        outcome, detail = judge(strict, code, out, err)
    if outcome == "ok" and case.must_fail:
        return "silent", "exit 0 for an input known to be bad"
    if outcome == "ok" and case.kind in ("explore", "study", "sweep") and out.strip():
        files = json.loads(out).get("files") or {}
        paths = files.values() if isinstance(files, dict) else files
        missing = [p for p in paths if not (work / p).exists()]
        if missing:
            return "lost", f"summary lists missing files: {missing[:3]}"
    return outcome, detail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--every", type=int, default=1, help="run every n-th case only")
    parser.add_argument("--log", help="write one line per case (JSON) to this file")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at once")
    parser.add_argument("--rerun", metavar="LOG",
                        help="run only the cases that did not pass in this earlier log")
    args = parser.parse_args(argv)
    corpus = generate(args.cases, args.seed)[:: args.every]
    if args.rerun:
        with open(args.rerun) as handle:
            failed_before = {json.loads(line)["case"] for line in handle
                             if json.loads(line)["outcome"] not in ("ok", "error")}
        corpus = [c for c in corpus if c.ident in failed_before]
    outcomes: Counter[str] = Counter()
    kinds: Counter[tuple[str, str]] = Counter()
    start = time.monotonic()
    failed = 0
    with open(args.log, "w") if args.log else open(os.devnull, "w") as log:
        pool = ThreadPoolExecutor(max(args.jobs, 1))
        for i, (case, (outcome, detail)) in enumerate(zip(corpus, pool.map(run_case, corpus),
                                                          strict=True)):
            outcomes[outcome] += 1
            kinds[(case.kind, outcome)] += 1
            if outcome not in ("ok", "error"):
                failed += 1
                print(f"FAIL {outcome}: {case.ident}\n  {' '.join(case.args)[:300]}\n  "
                      f"{detail[:300]}", flush=True)
            log.write(json.dumps({"case": case.ident, "outcome": outcome,
                                  "detail": detail[:300]}) + "\n")
            log.flush()
            if (i + 1) % 50 == 0:
                print(f"{i + 1}/{len(corpus)} cases, {time.monotonic() - start:.0f} s: "
                      f"{dict(outcomes)}", flush=True)
    print(f"\n{len(corpus)} cases (seed {args.seed}) in {time.monotonic() - start:.0f} s: "
          f"{dict(outcomes)}")
    for kind in sorted({k for k, _ in kinds}):
        print(f"  {kind:<9} " + ", ".join(f"{o} {c}" for (k, o), c in sorted(kinds.items())
                                        if k == kind))
    return 1 if failed else 0


if __name__ == "__main__":
    assert MEMORY_BYTES  # the same memory cap as the evaluate/compare corpus
    sys.exit(main())
