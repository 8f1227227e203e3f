"""`tileflow validate gpu --prepare DIR`: a GPU campaign compiled on this machine and run
on another. For each workload shape, named baselines and random valid GPU trees; their
CUDA, one nvcc-built program per shape with a timing harness (`kernels.cuda_harness`), the
NumPy reference outputs as raw files, the model's predictions (campaign.csv) and `run.sh`,
which needs bash, the CUDA driver and python3 with NumPy (inputs.py makes the inputs there),
and optionally ncu and PyTorch (vendor.py times the vendor libraries on the same shapes)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.calibrate import gpu_inputs, gpu_latency, gpu_vendor
from tileflow.calibrate.gpu_inputs import hashed_inputs, recipe
from tileflow.calibrate.gpu_latency import op_threads
from tileflow.calibrate.latency import words_column
from tileflow.cost import evaluate
from tileflow.dataflows import build
from tileflow.dataflows.registry import baselines_for
from tileflow.errors import InputError
from tileflow.kernels.c_source import pitched
from tileflow.kernels.campaign import model_terms, tree_key
from tileflow.kernels.cuda_harness import HarnessFlow, harness_source, reference_file
from tileflow.kernels.cuda_source import generate_cuda
from tileflow.kernels.gpu_trees import random_valid_gpu_trees
from tileflow.kernels.inner_loops import COLUMNS as INNER_COLUMNS
from tileflow.kernels.inner_loops import features as inner_features
from tileflow.kernels.nest import analyse
from tileflow.kernels.reference import run_reference
from tileflow.outputs import write_csv, write_text_atomic
from tileflow.provenance import MODEL_VERSION
from tileflow.specs.arch import Architecture, load_arch
from tileflow.specs.workload import Workload, load_workload
from tileflow.tree import Dataflow, to_dict

ARCH = "gpu-h100"
# cudart is linked statically by default; libstdc++ stays shared: a static one from a newer
# compiler asks for a newer glibc than the GPU machine may have (the programs need 2.34)
NVCC_FLAGS = ("-O3", "-gencode", "arch=compute_90,code=[sm_90,compute_90]")
WORD_BYTES = 4  # the kernels compute in float32
# six shapes per workload, so a shape can be held out and predicted from the other five;
# every size a multiple of 16 (whole tensor-core tiles are possible)
DEFAULT_SHAPES = {
    "attention": [{"b": 8, "m": 512, "l": 512, "k": 64, "n": 64},
                  {"b": 16, "m": 256, "l": 256, "k": 128, "n": 128},
                  {"b": 12, "m": 256, "l": 256, "k": 64, "n": 64},
                  {"b": 16, "m": 256, "l": 256, "k": 80, "n": 80},
                  {"b": 1, "m": 1024, "l": 512, "k": 64, "n": 64},
                  {"b": 4, "m": 256, "l": 1024, "k": 64, "n": 64}],
    "gemm-chain": [{"b": 8, "m": 512, "l": 512, "k": 64, "n": 64},
                   {"b": 4, "m": 1024, "l": 256, "k": 128, "n": 64},
                   {"b": 12, "m": 256, "l": 256, "k": 64, "n": 64},
                   {"b": 16, "m": 256, "l": 256, "k": 80, "n": 80},
                   {"b": 1, "m": 1024, "l": 512, "k": 64, "n": 64},
                   {"b": 4, "m": 256, "l": 1024, "k": 64, "n": 64}],
}


@dataclass(frozen=True)
class GpuCampaign:
    """What --prepare builds: per workload, its shapes; dataflows per shape; timing."""

    shapes: dict[str, list[dict[str, int]]] = field(
        default_factory=lambda: {k: list(v) for k, v in DEFAULT_SHAPES.items()})
    points: int = 50  # dataflows per shape
    seed: int = 0
    arch: str = ARCH
    min_blocks: int = 32  # random trees spread over at least this many thread blocks
    budget_s: float = 120.0  # timing of all programs together on the GPU
    kernel_s: float = 0.1  # timed repetitions per dataflow (3 to 50; 1 for a slow one)
    profile: int = 480  # dataflows measured under ncu (40 per program)
    profile_timeout_s: int = 120  # ncu, all programs together (cut by run.sh's deadline)
    profile_max_s: float = 0.05  # ncu profiles dataflows whose median is below this


def shape_text(sizes: dict[str, int]) -> str:
    return " ".join(f"{d}={s}" for d, s in sizes.items())


def choose(w: Workload, arch: Architecture, points: int, seed: int,
           min_blocks: int) -> list[tuple[str, Dataflow]]:
    """Named baselines the model finds valid, then random valid GPU trees up to `points`."""
    chosen: list[tuple[str, Dataflow]] = []
    for name in baselines_for(w):
        try:
            flow = build(name, w, arch)
            if evaluate(w, arch, flow).valid:
                chosen.append(("baseline", flow))
        except (InputError, InvalidDataflow):
            continue
    randoms = random_valid_gpu_trees(w, arch, max(points - len(chosen), 0), seed,
                                     min_blocks=min_blocks)
    return chosen[:points] + [("random", f) for f in randoms]


def model_row(w: Workload, arch: Architecture, flow: Dataflow) -> dict:
    """The model's latency, bottleneck and counts of one dataflow, and its DRAM and L2
    traffic in the kernels' bytes (float32 words)."""
    row, _ = model_terms(w, arch, flow)
    names = [lv.name for lv in arch.levels]
    row["model_dram_bytes"] = row[words_column(names[0], names[1])] * WORD_BYTES
    row["model_l2_bytes"] = row[words_column(names[1], names[2])] * WORD_BYTES
    return row


WARP = 32


def thread_features(nest) -> dict[str, float]:
    """The CPU path's innermost-loop counts (`kernels.inner_loops.features`) read for a GPU:
    an operator spread over threads runs its work in warps of 32 (the SIMD kind, full warps
    only), one computed by a single thread runs it in scalar or reduction-chain iterations."""
    simd = {op: (n, WARP) for op, n in op_threads(nest).items() if n > 1}
    return inner_features(nest, simd)


def _data(w: Workload, folder: Path, seed: int) -> None:
    """The NumPy reference outputs as raw float32 in the kernels' pitched layouts; the
    inputs they come from are made on the GPU machine (`gpu_inputs`, inputs.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    ref = run_reference(w, hashed_inputs(w, seed))
    for t in w.outputs:
        shape = w.shapes[t]
        array = np.zeros(pitched(shape), dtype=np.float32)
        array[tuple(slice(0, e) for e in shape)] = ref[t]
        array.tofile(folder / reference_file(t))


def nvcc_missing() -> str | None:
    return None if shutil.which("nvcc") else "nvcc is not on PATH (install the CUDA toolkit)"


def compile_program(source: Path, binary: Path) -> None:
    done = subprocess.run(["nvcc", *NVCC_FLAGS, "-o", str(binary), str(source)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise InputError(f"nvcc failed on {source}:\n{done.stderr[-3000:]}")


def prepare_campaign(campaign: GpuCampaign, folder: Path, build_binaries: bool = True,
                     progress: Callable[[str], None] = print) -> pd.DataFrame:
    """Write the campaign into `folder` (see the module docstring); returns campaign.csv."""
    if build_binaries and nvcc_missing():
        raise InputError(f"tileflow validate gpu --prepare: {nvcc_missing()}")
    folder.mkdir(parents=True, exist_ok=True)
    arch = load_arch(campaign.arch)
    rows, programs = [], []
    program_shapes: dict[str, dict] = {}
    inputs: dict[str, list[dict]] = {}
    next_id = 0
    for workload, shapes in campaign.shapes.items():
        for j, sizes in enumerate(shapes):
            w = load_workload(workload, sizes)
            program = f"{workload}_{j}"
            flows: list[HarnessFlow] = []
            for kind, flow in choose(w, arch, campaign.points, campaign.seed + j,
                                     campaign.min_blocks):
                try:
                    nest = analyse(w, arch, flow)
                    source = generate_cuda(nest, prefix=f"k{next_id}")
                    stages = [la for la in source.launches if "_stage" in la.name]
                except (NotImplementedError, InvalidDataflow, InputError) as exc:
                    progress(f"  {program}: {flow.name} skipped ({str(exc).splitlines()[0]})")
                    continue
                features = thread_features(nest)
                kernel = gpu_latency.kernel_features(nest)
                rows.append({"id": next_id, "key": tree_key(w, flow), "workload": workload,
                             "shape": shape_text(w.sizes), "program": program, "kind": kind,
                             "dataflow": flow.name,
                             "launches": len(source.launches),
                             "blocks": max(la.blocks for la in stages),
                             "threads": max(la.threads for la in stages),
                             "scratch_words": sum(source.scratch_words.values()),
                             "mma_ops": len(source.mma_ops),
                             "precision": source.precision,
                             **model_row(w, arch, flow),
                             **{c: features[c] for c in INNER_COLUMNS},
                             **kernel,
                             "tree": json.dumps(to_dict(flow))})
                flows.append(HarnessFlow(next_id, source))
                next_id += 1
            order = np.random.default_rng(campaign.seed + j).permutation(len(flows))
            flows = [flows[i] for i in order]  # a budget cut leaves an unbiased sample
            shapes_of = {t: tuple(w.shapes[t]) for t in w.tensors}
            (folder / f"{program}.cu").write_text(
                harness_source(flows, shapes_of, w.inputs, w.outputs))
            _data(w, folder / "data" / program, campaign.seed)
            programs.append(program)
            program_shapes[program] = {"workload": workload, "sizes": dict(w.sizes)}
            inputs[program] = recipe(w, campaign.seed)
            progress(f"{program}: {len(flows)} dataflows ({shape_text(w.sizes)})")
    frame = pd.DataFrame(rows)
    write_csv(frame, folder / "campaign.csv")
    manifest = {"arch": campaign.arch, "nvcc_flags": list(NVCC_FLAGS),
                "programs": programs, "points": campaign.points, "seed": campaign.seed,
                "shapes": campaign.shapes, "program_shapes": program_shapes,
                "inputs": inputs,
                "word_bytes": WORD_BYTES,
                "budget_s": campaign.budget_s, "kernel_s": campaign.kernel_s,
                "profile": campaign.profile, "nvcc": _nvcc_version(),
                "model_version": MODEL_VERSION}
    write_text_atomic(folder / "manifest.json", json.dumps(manifest, indent=2) + "\n")
    write_text_atomic(folder / "vendor.py", gpu_vendor.SCRIPT)
    write_text_atomic(folder / "inputs.py", gpu_inputs.SCRIPT)
    write_text_atomic(folder / "run.sh", run_script(campaign, programs, frame))
    (folder / "run.sh").chmod(0o755)
    if build_binaries:
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda p: compile_program(folder / f"{p}.cu", folder / p),
                          programs))
        progress(f"built {len(programs)} programs with nvcc {' '.join(NVCC_FLAGS)}")
    return frame


def _nvcc_version() -> str:
    try:
        text = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown"
    return text.strip().splitlines()[-1] if text.strip() else "unknown"


def profile_subset(frame: pd.DataFrame, count_: int) -> dict[str, list[int]]:
    """Dataflows measured under ncu: every k-th of each program's rows, by id, about
    `count_` in all; program -> ids."""
    out: dict[str, list[int]] = {}
    per = max(1, math.ceil(count_ / max(frame.program.nunique(), 1)))
    for program, g in frame.groupby("program", sort=False):
        ids = sorted(int(i) for i in g.id)
        step = max(1, len(ids) // per)
        out[str(program)] = ids[::step][:per]
    return out


def run_script(campaign: GpuCampaign, programs: list[str], frame: pd.DataFrame) -> str:
    """bash: time every program within the budget, then ncu on a subset of the dataflows
    that ran fast (tolerated to fail); results in ${OUT:-results}; stops by the deadline."""
    per_program = campaign.budget_s / max(len(programs), 1)
    per_profile = max(1, campaign.profile // max(len(programs), 1))
    candidates = profile_subset(frame, 3 * campaign.profile)
    timing = "\n".join(f"run_timed {p} {per_program:.0f}" for p in programs)
    profiled = "\n".join(
        f"    run_profiled {p} {per_profile} {','.join(map(str, candidates[p]))}"
        for p in programs if candidates.get(p))
    return RUN_SH.format(timing=timing, profiled=profiled, kernel_s=campaign.kernel_s,
                         programs=" ".join(programs), profile_max_s=campaign.profile_max_s,
                         deadline_s=int(DEADLINE_S), hard_s=int(per_program + 15),
                         profile_each=max(10, campaign.profile_timeout_s // len(programs)))


DEADLINE_S = 300  # run.sh stops starting work after this many seconds
RUN_SH = r"""#!/usr/bin/env bash
# GPU campaign: times every prepared dataflow (CUDA events), the vendor libraries on the
# same shapes (vendor.py, where python3 has PyTorch), then measures DRAM and L2 bytes of a
# subset under ncu where it is available. Needs the programs beside this script, the
# CUDA driver, python3 with NumPy (inputs.py makes the inputs), and optionally ncu and
# PyTorch. Results go to ${{OUT:-results}}.
set -u
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
RESULTS="${{OUT:-$PWD/results}}"
mkdir -p "$RESULTS"
LOG="$RESULTS/run.log"
: > "$LOG"
log() {{ echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG" >&2; }}
cp "$HERE/campaign.csv" "$HERE/manifest.json" "$RESULTS/"
rm -f "$RESULTS/timings.csv" "$RESULTS/ncu.csv"
QUERY=name,driver_version,memory.total,clocks.max.sm
log "device: $(nvidia-smi --query-gpu=$QUERY --format=csv,noheader 2>/dev/null || echo unknown)"
BIN="$(mktemp -d)"  # the programs, executable whatever the copy of this folder kept
trap 'rm -rf "$BIN"' EXIT
for p in {programs}; do cp "$HERE/$p" "$BIN/" && chmod +x "$BIN/$p"; done
log "inputs (inputs.py)"
if ! python3 "$HERE/inputs.py" "$HERE" 2>>"$LOG"; then
    log "inputs.py failed (python3 with NumPy is needed to make the inputs): nothing timed"
    exit 1
fi
START=$(date +%s)
DEADLINE=$(( START + {deadline_s} ))
left() {{ echo $(( DEADLINE - $(date +%s) )); }}
run_timed() {{  # program, budget in seconds
    local limit=$(( $(left) < {hard_s} ? $(left) : {hard_s} ))
    if [ "$limit" -lt 5 ]; then log "skipping $1: past the deadline"; return; fi
    log "timing $1 (budget $2 s, limit $limit s)"
    timeout "$limit" "$BIN/$1" --data "$HERE/data/$1" --csv "$RESULTS/timings.csv" \
        --budget-s "$2" --kernel-s {kernel_s} 2>>"$LOG"
    log "$1 finished with status $? after $(( $(date +%s) - START )) s"
}}
run_profiled() {{  # program, how many, candidate ids: those that ran ok and fast
    local ids
    ids=$(awk -F, -v want="$3" -v n="$2" '
        BEGIN {{ k = split(want, a, ","); for (i = 1; i <= k; ++i) c[a[i]] = 1 }}
        NR > 1 && ($1 in c) && $2 == "ok" && $3 + 0 < {profile_max_s} && taken < n {{
            printf "%s%s", (taken ? "," : ""), $1; ++taken }}' \
        "$RESULTS/timings.csv" 2>/dev/null)
    local limit=$(( $(left) < {profile_each} ? $(left) : {profile_each} ))
    if [ -z "$ids" ] || [ "$limit" -lt 5 ]; then log "ncu: nothing profiled for $1"; return; fi
    timeout "$limit" ncu --csv --print-units base \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum \
        "$BIN/$1" --data "$HERE/data/$1" --once --only "$ids" >>"$RESULTS/ncu.csv" 2>>"$LOG"
    log "ncu on $1 ($ids) finished with status $? after $(( $(date +%s) - START )) s"
}}
{timing}
if command -v python3 >/dev/null 2>&1 && [ "$(left)" -gt 20 ]; then
    log "vendor libraries (vendor.py)"
    timeout 60 python3 "$HERE/vendor.py" "$HERE" "$RESULTS" 2>>"$LOG"
    log "vendor.py finished with status $? after $(( $(date +%s) - START )) s"
fi
if command -v ncu >/dev/null 2>&1; then
    log "ncu: $(ncu --version 2>/dev/null | tail -1)"
{profiled}
else
    log "ncu not found: no traffic measurements"
fi
ROWS=0
[ -f "$RESULTS/timings.csv" ] && ROWS=$(( $(wc -l < "$RESULTS/timings.csv") - 1 ))
log "done in $(( $(date +%s) - START )) s; rows: $ROWS"
"""
