"""A seeded corpus of malformed and hostile inputs for the command line, and its runner.

Every case is a `tileflow` command line plus the files it reads, built from the shipped
accelerators, workloads and dataflows by edits of values, structure and bytes, from hostile
flags, and from awkward places in the file system. Each runs in its own subprocess with a
timeout and a memory cap. A case passes when it ends in exactly one of two ways:

* exit 2 with one paragraph on stderr that names the file and the line (or the flag, or
  the path) it is about, and nothing on stdout;
* exit 0 with a `--json` document whose every number is finite, whose counts are not
  negative, and whose operation count equals the one derived from the sizes (where the
  case knows them).

Anything else — a traceback, another exit status, a hang, NaN or Infinity — fails.

    python -m tests.fuzz_corpus --cases 1500 [--seed 6] [--jobs 1]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 60
MEMORY_BYTES = 3 * 1024**3
FLAGS = ("--set", "--tile", "--preset", "--plot", "--save-dataflow", "--out", "--workload",
         "--arch", "--dataflow")


@dataclass
class Case:
    """One command line; `files` are written into a fresh folder that is its working folder."""

    ident: str
    kind: str  # accelerator, workload, dataflow, flags, filesystem
    args: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    places: list[str] = field(default_factory=list)  # an error must name one of these
    macs: int | None = None  # the matrix-unit MACs a successful run must report
    setup: str = ""  # a file-system fixture: fifo, symlink-loop


# ---- values that have broken parsers and models before -------------------------------------

HOSTILE = [
    ".nan", ".NaN", ".inf", "-.inf", "-1", "0", "-0.0", "1e-320", "1.0e+400", "2.5", "1e-9",
    "'no'", "'false'", "yes", "no", "true", "false", "null", "~", "[]", "{}", "[1, 2]",
    "{a: 1}", "99999999999999999999999999999999999999", "-99999999999999999999", "2147483649",
    "2147483648", "1099511627776", "4294967296", "'x'", "''", "AB", "'1e3'", "0x10", "0o17",
    "1_000", "!!binary aGVsbG8=", "!!timestamp 2001-12-14", "!!python/object:os.system x",
    "'m:4'", "\"h // 0\"", "\"st1 * 0\"", "\"m*m*m*m*m*m*m*m*m*m*m*m\"", "\"-m\"", "\"2**10\"",
    "\"__import__('os')\"", "1048577", "3", "7", "1", "64", "0.001", "1e15", "1e16",
]
LOOP_TOKENS = [
    "[m:0]", "[m:2147483648]", "[m:2147483647]", "[z:4]", "[k:1:Sp]", "[n:3:Sp]", "[b:8:Sp]",
    "[b:1, b:1:Sp]", "[m:1099511627776:Sp]", "[m:4:Tp]", "[m:-4]", "[m]", "['m:4:Sp:x']",
    "[{dim: m, factor: 4, spatial: 'no'}]", "[{dim: m, factor: 2.0}]", "[m:4, m:4, m:4]",
    "[l:3]", "[b:3]", "[m:7, m:75]",
]
OPS = ["{op: summ}", "{op: gemm1}", "{op: gemm2}", "{op: qk}", "{op: ''}", "{op: 5}", "summ",
       "{op: conv1}", "{op: [gemm1]}"]
BYTES = [b"\x00", b"\x07", b"\x1b", b"\x7f", b"\xff", b"\xfe", b"\xc3", b"\xc2\x85",
         b"\xef\xbb\xbf", b"\t", b"\r", b"\xe2\x80\xa8"]


@functools.cache
def _read(rel: str) -> str:
    return (REPO / rel).read_text()


ACCELERATORS = ["accelerators/edge.yaml", "accelerators/cloud.yaml",
                "accelerators/tpu-like.yaml", "accelerators/rtl-systolic-chain.yaml"]
WORKLOADS = ["workloads/attention.yaml", "workloads/gemm-chain.yaml", "workloads/mlp.yaml",
             "workloads/conv-chain.yaml", "workloads/gemm.yaml"]
DATAFLOWS = {  # dataflow file -> the command line it was written for
    "dataflows/gemm-chain-chimera.yaml": ["--arch", "edge", "--workload", "gemm-chain"],
    "dataflows/attention-flat-rgran.yaml": ["--arch", "edge", "--workload", "attention"],
    "dataflows/attention-tileflow-pipe.yaml": ["--arch", "edge", "--workload", "attention"],
    "dataflows/conv-chain-fused-layer.yaml": ["--arch", "cloud", "--workload", "C3"],
    "dataflows/attention-layerwise.yaml": ["--arch", "edge", "--workload", "attention"],
}
BASELINES = {"attention": ["layerwise", "flat-rgran", "chimera", "tileflow-pipe", "uni-pipe",
                           "flat-hgran"],
             "gemm-chain": ["layerwise", "chimera", "tileflow-pipe", "flat-rgran"],
             "mlp": ["layerwise", "chimera", "flat-hgran"],
             "conv-chain": ["layerwise", "fused-layer", "isos"],
             "gemm": ["layerwise"]}


# ---- the operation count, derived from the sizes without TileFlow ---------------------------

@functools.cache
def _yaml(rel: str):
    return YAML(typ="safe").load(_read(rel))


MAC_DIMS = {  # the dimensions of each matrix operator of a shipped workload
    "attention": [("b", "m", "l", "k"), ("b", "m", "l", "n")],
    "gemm-chain": [("b", "m", "l", "k"), ("b", "m", "l", "n")],
    "mlp": [("m", "d", "f"), ("m", "f", "e")],
}


def expected_macs(workload: str, preset: str | None, sets: dict[str, int]) -> int | None:
    if workload not in MAC_DIMS:
        return None
    data = _yaml(f"workloads/{workload}.yaml")
    sizes = dict(data["dims"])
    if preset:
        sizes.update(data["presets"][preset])
    sizes.update(sets)
    return sum(math.prod(sizes[d] for d in dims) for dims in MAC_DIMS[workload])


# ---- edits of a YAML text -------------------------------------------------------------------

def _value_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every scalar value after 'key: ' (block or flow style)."""
    spans = []
    i = 0
    while True:
        i = text.find(": ", i)
        if i < 0:
            return spans
        start = i + 2
        end = start
        while end < len(text) and text[end] not in ",}\n]#":
            end += 1
        if end > start and text[start] not in "{[":
            spans.append((start, end))
        i = start


def edit_text(rng: random.Random, text: str, kind: str) -> tuple[bytes, str]:
    """One or two random edits; returns the bytes and a short name of what was done."""
    names = []
    for _ in range(rng.choice([1, 1, 1, 2])):
        choice = rng.random()
        spans = _value_spans(text)
        if choice < 0.45 and spans:
            start, end = rng.choice(spans)
            pool = HOSTILE
            if kind == "dataflow" and rng.random() < 0.5:
                pool = LOOP_TOKENS + OPS
            token = rng.choice(pool)
            text = text[:start] + token + text[end:]
            names.append(f"value={token}")
        elif choice < 0.55:
            lines = text.splitlines() or [""]
            del lines[rng.randrange(len(lines))]
            text = "\n".join(lines) + "\n"
            names.append("delete-line")
        elif choice < 0.62:
            lines = text.splitlines() or [""]
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            text = "\n".join(lines) + "\n"
            names.append("duplicate-line")
        elif choice < 0.68:
            lines = text.splitlines() or [""]
            i = rng.randrange(len(lines))
            indent = len(lines[i]) - len(lines[i].lstrip())
            lines.insert(i, " " * indent + f"{rng.choice(['zz', 'fanout', 'spatial', 'op'])}: 1")
            text = "\n".join(lines) + "\n"
            names.append("insert-key")
        elif choice < 0.75:
            brackets = [i for i, c in enumerate(text) if c in "[]{}"]
            if brackets:
                i = rng.choice(brackets)
                text = text[:i] + text[i + 1:]
            names.append("drop-bracket")
        elif choice < 0.82:
            raw = text.encode()
            i = rng.randrange(len(raw) + 1)
            raw = raw[:i] + rng.choice(BYTES) + raw[i:]
            return raw, "+".join(names + ["bytes"])
        elif choice < 0.86:
            depth = rng.choice([5, 63, 70, 500, 5000])
            if spans:
                start, end = rng.choice(spans)
                text = text[:start] + "[" * depth + "1" + "]" * depth + text[end:]
            names.append(f"nest{depth}")
        elif choice < 0.90:
            width, depth = rng.choice([(10, 6), (9, 9), (2, 3)])
            defs = ["l0: &l0 [" + ", ".join(["x"] * width) + "]"]
            for d in range(1, depth):
                defs.append(f"l{d}: &l{d} [" + ", ".join([f"*l{d - 1}"] * width) + "]")
            text = "\n".join(defs) + "\n" + text + (f"l0: {depth}\n" if rng.random() < 0.5
                                                    else "")
            names.append(f"aliases{width}^{depth}")
        elif choice < 0.93:
            cut = rng.randrange(len(text) + 1)
            text = text[:cut]
            names.append("truncate")
        elif choice < 0.96:
            text = rng.choice(["", "# nothing\n", "- a\n- b\n", "just text\n", "42\n", "null\n",
                               "{}\n", "[]\n", "---\n---\n", "a: 1\n---\nb: 2\n"])
            names.append("replace-file")
        else:
            if rng.random() < 0.3:
                text = text + "#" + "x" * (1024 * 1024) + "\n"
                names.append("huge")
            else:
                lines = text.splitlines() or [""]
                i = rng.randrange(len(lines))
                lines[i] = lines[i] + " " + "x" * rng.choice([200, 5000])
                text = "\n".join(lines) + "\n"
                names.append("long-line")
    return text.encode("utf-8", errors="surrogateescape"), "+".join(names)


# ---- the corpus -----------------------------------------------------------------------------

def _file_case(rng: random.Random, n: int, kind: str) -> Case:
    if kind == "accelerator":
        rel = rng.choice(ACCELERATORS)
        workload = rng.choice(["G4", "gemm-chain", "mlp", "C3"])
        base = workload if workload in ("gemm-chain", "mlp") else \
            ("attention" if workload == "G4" else "conv-chain")
        flow = rng.choice(BASELINES[base])
        args = ["evaluate", "--arch", "arch.yaml", "--workload", workload, "--dataflow", flow]
        if rng.random() < 0.2:
            args = ["compare", "--arch", "arch.yaml", "--workload", workload, "--no-plot"]
        name = "arch.yaml"
        macs = expected_macs(base, "G4" if workload == "G4" else None, {})
    elif kind == "workload":
        rel = rng.choice(WORKLOADS)
        base = Path(rel).stem
        flow = rng.choice(BASELINES[base])
        args = ["evaluate", "--arch", rng.choice(["edge", "cloud", "tpu-like"]), "--workload",
                "w.yaml", "--dataflow", flow]
        name, macs = "w.yaml", None
    else:
        rel = rng.choice(list(DATAFLOWS))
        args = ["evaluate", *DATAFLOWS[rel], "--dataflow", "flow.yaml"]
        name, macs = "flow.yaml", None
    data, what = edit_text(rng, _read(rel), kind)
    args.append("--json")
    if data == _read(rel).encode():
        what += "(no change)"
    return Case(f"{n:05d}-{kind}-{Path(rel).stem}-{what}"[:120], kind, args, {name: data},
                [f"{name}, line ", f"{name}: the file is"], macs)


SET_VALUES = ["0", "-1", "1", "2", "3", "7", "64", "100", "4093", "65536", "2147483647",
              "2147483648", "9223372036854775808", "1" + "0" * 100, "abc", "", "1.5", "+8",
              "-0", " 8", "１２", "1e3", "0x10"]


def _flag_case(rng: random.Random, n: int) -> Case:
    base = rng.choice(["attention", "gemm-chain", "mlp", "conv-chain"])
    workload_arg = base
    preset = None
    if rng.random() < 0.3 and base in ("attention", "gemm-chain"):
        preset = rng.choice(["G1", "G4", "G12"])
        workload_arg = preset if base == "attention" and rng.random() < 0.5 else base
    data = _yaml(f"workloads/{base}.yaml")
    names = list(data["dims"]) + list(data.get("params") or {})
    args = ["evaluate", "--arch", rng.choice(["edge", "cloud", "tpu-like", "edge-artifact"]),
            "--workload", workload_arg, "--dataflow", rng.choice(BASELINES[base])]
    if preset and workload_arg == base:
        args += ["--preset", preset]
    sets: dict[str, int] = {}
    places = [*FLAGS, ".yaml, line "]
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        name = rng.choice(names + ["zz", "M", ""])
        value = rng.choice(SET_VALUES)
        args += ["--set", f"{name}={value}"]
        places.append(f"'{name}'")
        try:
            sets[name] = int(value)
        except ValueError:
            pass
    if rng.random() < 0.35:
        for _ in range(rng.choice([1, 2])):
            dim = rng.choice(list(data["dims"]) + ["z"])
            args += ["--tile", f"{dim}={rng.choice(['0', '1', '2', '32', '7', '100000', 'x'])}"]
    if rng.random() < 0.1:
        args += ["--preset", rng.choice(["G99", "C1", "G3", "g1", ""])]
        preset = "other"
    if rng.random() < 0.1:
        args += ["--double-buffer"]
    if rng.random() < 0.15:
        args[0] = "compare"
        del args[5:7]  # --dataflow NAME
        args = [a for i, a in enumerate(args) if a != "--tile" and
                (i == 0 or args[i - 1] != "--tile")]
        args.append("--no-plot")
    args.append("--json")
    if rng.random() < 0.05:
        name = rng.choice(["flat-xgran", "LAYERWISE", "missing.yaml", "fused-layer"])
        if "--dataflow" in args:
            args[args.index("--dataflow") + 1] = name
        else:
            args[0] = name  # a command that does not exist
    workload_data = data["dims"]
    known = set(workload_data) | set(data.get("params") or {})
    macs = None
    if preset != "other" and all(k in known for k in sets) and "--tile" not in args:
        macs = expected_macs(base, preset, sets)
    return Case(f"{n:05d}-flags-{' '.join(args[1:])}"[:120], "flags", args, {}, places, macs)


def _fs_case(rng: random.Random, n: int) -> Case:
    role = rng.choice(["--arch", "--workload", "--dataflow", "--plot", "--save-dataflow",
                       "--out"])
    target = rng.choice(["/dev/zero", "/dev/null", "/dev/full", "/dev/urandom", ".", "/",
                         "missing.yaml", "fifo.yaml", "loop.yaml", "empty.yaml", "binary.yaml",
                         "/tmp/" + "d" * 300 + "/x.yaml", "x" * 5000 + ".yaml", "dir.yaml",
                         "missing/x.yaml", "x", "x.png", "x.PNG", "x.jpg", "x.yaml",
                         "/proc/x.png", "/sys/x.yaml", "-", "~"])
    files: dict[str, bytes] = {"empty.yaml": b"", "binary.yaml": bytes(range(256)) * 4}
    setup = "fifo" if target == "fifo.yaml" else "loop" if target == "loop.yaml" else ""
    if target == "dir.yaml":
        setup = "dir"
    args = {"--arch": "edge", "--workload": "G4", "--dataflow": "layerwise"}
    command = "evaluate"
    extra: list[str] = []
    if role in args:
        args[role] = target
    elif role == "--plot":
        command = "compare"
        del args["--dataflow"]
        extra = ["--plot", target]
    elif role == "--save-dataflow":
        extra = ["--save-dataflow", target]
    else:
        return Case(f"{n:05d}-fs-reproduce-{target[:40]}", "filesystem",
                    ["validate", "rtl", "--out", target, "--data", "missing-data"], files,
                    [target[:40], "--out", "--data", "missing-data"], None, setup)
    argv = [command, *[x for kv in args.items() for x in kv], *extra, "--json"]
    macs = expected_macs("attention", "G4", {}) if role in ("--plot", "--save-dataflow") \
        else None
    short = target if len(target) < 100 else target[:40]
    return Case(f"{n:05d}-fs-{role}-{short[:40]}", "filesystem", argv, files,
                [short, role, Path(target).name[:40]], macs, setup)


def generate(cases: int = 1500, seed: int = 6) -> list[Case]:
    """The corpus: a deterministic function of (cases, seed)."""
    rng = random.Random(seed)
    out = []
    mix = ["accelerator"] * 25 + ["workload"] * 25 + ["dataflow"] * 25 + ["flags"] * 17 + \
        ["filesystem"] * 8
    for n in range(cases):
        kind = rng.choice(mix)
        if kind == "flags":
            out.append(_flag_case(rng, n))
        elif kind == "filesystem":
            out.append(_fs_case(rng, n))
        else:
            out.append(_file_case(rng, n, kind))
    return out


# ---- running and judging one case -----------------------------------------------------------

def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_case(case: Case, timeout_s: float = TIMEOUT_S) -> tuple[str, str]:
    """(outcome, detail): outcome is 'error' or 'ok' when the case passes, otherwise
    'traceback', 'hang', 'nonfinite', 'wrong', 'unlocated' or 'bad-exit'."""
    with tempfile.TemporaryDirectory(prefix="tileflow-fuzz-") as folder:
        work = Path(folder)
        for name, data in case.files.items():
            (work / name).write_bytes(data)
        if case.setup == "fifo":
            os.mkfifo(work / "fifo.yaml")
        elif case.setup == "loop":
            os.symlink("loop.yaml", work / "loop.yaml")
        elif case.setup == "dir":
            (work / "dir.yaml").mkdir()
        env = {**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
        try:
            proc = subprocess.run([sys.executable, "-m", "tileflow.cli", *case.args],
                                  cwd=work, capture_output=True, timeout=timeout_s,
                                  preexec_fn=_limits, env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return "hang", f"no answer in {timeout_s} s"
    out = proc.stdout.decode(errors="replace")
    err = proc.stderr.decode(errors="replace")
    return judge(case, proc.returncode, out, err)


def judge(case: Case, code: int, out: str, err: str) -> tuple[str, str]:
    if "Traceback" in err or "Traceback" in out:
        return "traceback", err.strip().splitlines()[-1] if err.strip() else out[-200:]
    if code == 2:
        if not err.startswith("tileflow: error: ") or err.count("\n") != 1 or out:
            return "bad-exit", f"not one paragraph: {err[:300]!r}"
        places = case.places
        if case.kind not in ("accelerator", "workload", "dataflow"):
            # a flag case may name the flag or the value it is about (argparse names both)
            named = [a for a in case.args if a.startswith("--")] + case.args[:1] + \
                [v for f, v in zip(case.args, case.args[1:], strict=False) if f in FLAGS]
            places = places + list(FLAGS) + [a for a in named if len(a) > 1]
        if not any(p and p in err for p in places):
            return "unlocated", err.strip()[:300]
        return "error", err.strip()
    if code != 0:
        return "bad-exit", f"exit {code}: {err.strip()[-300:]}"
    try:
        document = json.loads(out, parse_constant=_non_finite)
    except ValueError as exc:
        return "nonfinite" if "non-finite" in str(exc) else "wrong", f"bad JSON: {exc}"
    results = document if isinstance(document, list) else [document]
    for result in results:
        problem = _check_result(result, case.macs)
        if problem:
            return ("nonfinite" if "finite" in problem else "wrong"), problem
    return "ok", ""


def _non_finite(token: str):
    raise ValueError(f"non-finite number {token}")


def _numbers(value, path=""):
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{path}[{i}]")


def _check_result(result: dict, macs: int | None) -> str | None:
    for path, number in _numbers(result):
        if not math.isfinite(number):
            return f"non-finite {path} = {number}"
    for key in ("cycles", "energy_pj", "dram_words", "macs", "vector_ops"):
        if key in result and result[key] < 0:
            return f"negative {key} = {result[key]}"
    if not result.get("cycles", 1) > 0:
        return f"cycles {result.get('cycles')} not positive"
    for level, counts in (result.get("levels") or {}).items():
        for key in ("reads", "writes", "fills", "updates"):
            if counts.get(key, 0) < 0:
                return f"negative {level}.{key}"
    if macs is not None and result.get("macs") != macs:
        return f"macs {result.get('macs')} != {macs} derived from the sizes"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--every", type=int, default=1, help="run every n-th case only")
    parser.add_argument("--log", help="write one line per case (JSON) to this file")
    parser.add_argument("--rerun", metavar="LOG",
                        help="run only the cases that did not pass in this earlier log")
    args = parser.parse_args(argv)
    corpus = generate(args.cases, args.seed)[:: args.every]
    if args.rerun:
        with open(args.rerun) as handle:
            failed = {json.loads(line)["case"] for line in handle
                      if json.loads(line)["outcome"] not in ("ok", "error")}
        corpus = [c for c in corpus if c.ident in failed]
    outcomes: Counter[str] = Counter()
    kinds: Counter[tuple[str, str]] = Counter()
    failures = []
    start = time.monotonic()
    log = open(args.log, "w") if args.log else None  # noqa: SIM115
    for i, case in enumerate(corpus):
        outcome, detail = run_case(case)
        outcomes[outcome] += 1
        kinds[(case.kind, outcome)] += 1
        if outcome not in ("ok", "error"):
            failures.append((case, outcome, detail))
            print(f"FAIL {outcome}: {case.ident}\n  {' '.join(case.args)[:300]}\n  {detail}",
                  flush=True)
        if log:
            log.write(json.dumps({"case": case.ident, "outcome": outcome,
                                  "detail": detail[:300]}) + "\n")
            log.flush()
        if (i + 1) % 100 == 0:
            print(f"{i + 1}/{len(corpus)} cases, {time.monotonic() - start:.0f} s: "
                  f"{dict(outcomes)}", flush=True)
    print(f"\n{len(corpus)} cases (seed {args.seed}) in {time.monotonic() - start:.0f} s: "
          f"{dict(outcomes)}")
    for kind in sorted({k for k, _ in kinds}):
        print(f"  {kind:<12} " + ", ".join(f"{o} {c}" for (k, o), c in sorted(kinds.items())
                                           if k == kind))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
