"""`tileflow bench-kernels`: the best generated C kernel of a shape against NumPy with BLAS
matrix products, side by side in one run, on one thread and on two.

The candidates are the fastest trees a saved campaign measured for the same shape (when its
CSV is given and holds the shape) and seeded random valid trees; each is generated in the
`registers` style, checked against the reference and timed single-threaded; the fastest is
the workload's best kernel. Then, per thread count, a fresh Python process (OpenMP and BLAS
threads set in its environment before NumPy loads; OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE
removed there, so that OpenBLAS picks its own kernel; OpenMP threads wait passively) times
the best kernel (its outermost unreduced loop split over the threads) and the NumPy
computation in alternation, call after call, so that both see the same load. Reported:
medians and fastest calls, their ratio, the load average before and after, the BLAS library
and kernel threadpoolctl reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tileflow.errors import InputError
from tileflow.kernels.blas import WORKLOADS, numpy_computation

SHAPE = {"b": 1, "m": 256, "l": 256, "k": 64, "n": 64}  # the committed campaign's shape
SCRUBBED = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def candidates(name: str, sizes: dict[str, int], campaign: Path | None, top: int,
               randoms: int, seed: int) -> list:
    """Trees to try: the `top` fastest a campaign measured for this shape, then `randoms`
    seeded random valid trees for one core of the host."""
    import pandas as pd

    from tileflow.kernels.trees import random_valid_trees, single_core
    from tileflow.specs.arch import load_arch
    from tileflow.specs.dataflow import parse_dataflow
    from tileflow.specs.workload import load_workload
    from tileflow.specs.yamlfile import Field

    w = load_workload(name, sizes)
    flows = []
    if campaign is not None and campaign.exists() and top > 0:
        frame = pd.read_csv(campaign)
        shape = " ".join(f"{d}={s}" for d, s in w.sizes.items())
        rows = frame[(frame.workload == name) & (frame["shape"] == shape)]
        for r in rows.nsmallest(top, "min_s").itertuples():
            flows.append(parse_dataflow(Field(json.loads(r.tree), str(campaign))))
    flows += random_valid_trees(w, single_core(load_arch("host")), randoms, seed)
    return flows


@dataclass(frozen=True)
class Screened:
    flow: object
    min_s: float
    tried: int


def best_kernel(name: str, sizes: dict[str, int], flows: list, repetitions: int = 5
                ) -> Screened:
    """The fastest of `flows` as single-threaded kernels (fastest call of `repetitions`)."""
    from tileflow.kernels.cpu import build_checked
    from tileflow.kernels.timing import time_kernel
    from tileflow.kernels.trees import single_core
    from tileflow.specs.arch import load_arch
    from tileflow.specs.workload import load_workload

    if not flows:
        raise InputError(f"no candidate dataflows for '{name}'")
    w = load_workload(name, sizes)
    arch = single_core(load_arch("host"))
    best: Screened | None = None
    for flow in flows:
        kernel = build_checked(w, arch, flow).kernel
        t = time_kernel(kernel, 1, 1, repetitions).min_s
        if best is None or t < best.min_s:
            best = Screened(flow, t, len(flows))
    assert best is not None
    return best


def side_by_side(name: str, sizes: dict[str, int], tree: dict, threads: int,
                 seconds: float, arch_name: str = "host", style: str = "registers") -> dict:
    """In this process: the kernel of `tree` on `threads` threads and the NumPy form,
    called in alternation for about `seconds`; medians, fastest calls, numerics."""
    from tileflow.kernels.cpu import build_checked
    from tileflow.kernels.reference import random_inputs
    from tileflow.kernels.trees import parallel_rows, single_core
    from tileflow.specs.arch import load_arch
    from tileflow.specs.dataflow import parse_dataflow
    from tileflow.specs.workload import load_workload
    from tileflow.specs.yamlfile import Field

    w = load_workload(name, sizes)
    flow = parse_dataflow(Field(tree, "best tree"))
    arch = load_arch(arch_name)
    if threads == 1:
        arch = single_core(arch)
    flow = parallel_rows(w, flow, threads)
    checked = build_checked(w, arch, flow, threads=threads, style=style)
    blas = numpy_computation(name, random_inputs(w))
    out_tensor = w.outputs[0]
    reference = checked.kernel.arrays[out_tensor]
    blas_error = float(np.abs(blas() - reference).max() / (np.abs(reference).max() or 1.0))
    kernel_times, blas_times = [], []
    for _ in range(3):  # warm-up
        checked.kernel(threads)
        blas()
    start = time.perf_counter()
    while len(kernel_times) < 20 or (time.perf_counter() - start < seconds
                                     and len(kernel_times) < 5000):
        t0 = time.perf_counter()
        checked.kernel(threads)
        t1 = time.perf_counter()
        blas()
        t2 = time.perf_counter()
        kernel_times.append(t1 - t0)
        blas_times.append(t2 - t1)
    k, b = np.array(kernel_times), np.array(blas_times)
    return {"workload": name, "threads": threads, "calls": len(k),
            "kernel_median_s": float(np.median(k)), "kernel_min_s": float(k.min()),
            "blas_median_s": float(np.median(b)), "blas_min_s": float(b.min()),
            "ratio_median": float(np.median(k) / np.median(b)),
            "ratio_min": float(k.min() / b.min()),
            "kernel_vs_blas_max_error": blas_error, "blas": _blas_info()}


def _blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    parts = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture', '')} "
             f"{i.get('num_threads')} thread(s)"
             for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(parts) or "no BLAS reported"


def thread_environment(threads: int) -> dict[str, str]:
    """This process's environment with `threads` OpenMP and BLAS threads and OpenBLAS left
    to choose its own kernel (for the benchmark's child process only). The kernel's OpenMP
    threads sleep at the end of a parallel loop instead of spinning (OMP_WAIT_POLICY
    passive): on a shared machine a spinning thread holds the core its partner waits for,
    and a call takes scheduler time slices (tens of ms) instead of its work."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[key] = str(threads)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


def run_worker(job: dict, threads: int) -> dict:
    """`side_by_side` in a fresh process whose environment sets the thread counts."""
    done = subprocess.run([sys.executable, "-m", "tileflow.commands.blas_bench", "--worker"],
                          input=json.dumps(job), capture_output=True, text=True,
                          env=thread_environment(threads))
    if done.returncode:
        raise RuntimeError(f"benchmark worker ({threads} threads) failed:\n"
                           f"{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench(workloads: tuple[str, ...] = WORKLOADS, sizes: dict[str, int] | None = None,
          campaign: Path | None = Path("validate/cpu/measurements.csv"), top: int = 8,
          randoms: int = 8, seed: int = 0, threads: tuple[int, ...] = (1, 2),
          seconds: float = 3.0) -> dict:
    """The whole benchmark: per workload the best kernel, then each thread count."""
    from tileflow.tree import to_dict

    sizes = dict(sizes or SHAPE)
    load_before = os.getloadavg()
    rows, chosen = [], {}
    for name in workloads:
        best = best_kernel(name, sizes, candidates(name, sizes, campaign, top, randoms, seed))
        chosen[name] = {"dataflow": best.flow.name, "screened_min_s": best.min_s,
                        "candidates": best.tried, "tree": to_dict(best.flow)}
        for t in threads:
            rows.append(run_worker({"workload": name, "sizes": sizes,
                                    "tree": to_dict(best.flow), "threads": t,
                                    "seconds": seconds}, t))
    return {"sizes": sizes, "best": chosen, "rows": rows, "cpus": os.cpu_count(),
            "load_average_before": list(load_before),
            "load_average_after": list(os.getloadavg())}


def table(result: dict) -> str:
    lines = [f"shape {' '.join(f'{k}={v}' for k, v in result['sizes'].items())}; load "
             f"average (1, 5, 15 min) before {_load(result['load_average_before'])}, after "
             f"{_load(result['load_average_after'])} on {result['cpus']} CPUs",
             f"{'workload':<11} {'threads':>7} {'kernel ms':>10} {'numpy ms':>9} "
             f"{'ratio':>6} {'(fastest)':>9}  best tree"]
    for r in result["rows"]:
        best = result["best"][r["workload"]]
        lines.append(f"{r['workload']:<11} {r['threads']:>7} {r['kernel_median_s'] * 1e3:>10.3f}"
                     f" {r['blas_median_s'] * 1e3:>9.3f} {r['ratio_median']:>6.2f} "
                     f"{r['ratio_min']:>9.2f}  {best['dataflow']} (of {best['candidates']})")
    blas = {r["blas"] for r in result["rows"]}
    lines.append("ratio: kernel median / NumPy median (fastest calls in brackets); "
                 "BLAS: " + " | ".join(sorted(blas)))
    return "\n".join(lines)


def _load(values) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def main(argv: list[str] | None = None) -> int:
    """The child process of one thread count (`--worker`, its job on standard input); the
    benchmark itself is `tileflow bench-kernels`."""
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--worker"]:
        job = json.loads(sys.stdin.read())
        print(json.dumps(side_by_side(job["workload"], job["sizes"], job["tree"],
                                      job["threads"], job["seconds"], job.get("arch", "host"),
                                      job.get("style", "registers"))))
        return 0
    print("this module is the benchmark's child process; run `tileflow bench-kernels`",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
