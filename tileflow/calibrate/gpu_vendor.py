"""The vendor libraries' time for each prepared GPU shape: the yardstick the best generated
kernel is held against. `SCRIPT` runs on the GPU machine beside run.sh (Python with PyTorch,
which calls cuBLAS for the matrix products); `read_vendor` and `kernel_vs_vendor` read what
it wrote. Without PyTorch there the script writes nothing and the report says so."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tileflow.errors import InputError
from tileflow.tables import Column, line_of, read_table

FILE = "vendor.csv"
COLUMNS = ("program", "workload", "shape", "library", "precision", "median_s", "reps")
PRECISIONS = ("fp32", "tf32")

# Standalone: the GPU machine runs it with its own python3, without tileflow installed.
SCRIPT = r'''"""Vendor-library times of each prepared shape (PyTorch: cuBLAS batched products,
its softmax, scaled_dot_product_attention), float32 with TF32 off and on.
Usage: python3 vendor.py PREPARED_DIR RESULTS_DIR"""
import csv
import json
import sys
from pathlib import Path


def cases(torch, workload, s):
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return torch.rand(*shape, device="cuda", generator=g) * 2 - 1

    b, m, l, k, n = (s[d] for d in "bmlkn")
    if workload == "gemm-chain":
        a, bb, d = rand(b, m, k), rand(b, k, l), rand(b, l, n)
        yield "cublas-bmm", lambda: torch.bmm(torch.bmm(a, bb), d)
    elif workload == "attention":
        q, kk, v = rand(b, m, k), rand(b, k, l), rand(b, l, n)
        yield "cublas-bmm-softmax", lambda: torch.bmm(torch.softmax(torch.bmm(q, kk), -1), v)
        kt = kk.transpose(1, 2).contiguous()[:, None]
        q4, v4 = q[:, None], v[:, None]
        sdpa = torch.nn.functional.scaled_dot_product_attention
        yield "torch-sdpa", lambda: sdpa(q4, kt, v4, scale=1.0)


def median_time(torch, fn, budget_s=0.2):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    while len(times) < 5 or (sum(times) < budget_s and len(times) < 200):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2], len(times)


def main():
    here, out = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        import torch
    except ImportError:
        print("vendor.py: no PyTorch here: no vendor reference", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("vendor.py: PyTorch sees no GPU: no vendor reference", file=sys.stderr)
        return 0
    manifest = json.loads((here / "manifest.json").read_text())
    rows = []
    for program, spec in manifest["program_shapes"].items():
        shape = " ".join(f"{d}={v}" for d, v in spec["sizes"].items())
        for library, fn in cases(torch, spec["workload"], spec["sizes"]):
            for precision in ("fp32", "tf32"):
                torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
                torch.backends.cudnn.allow_tf32 = precision == "tf32"
                try:
                    median_s, reps = median_time(torch, fn)
                except RuntimeError as exc:
                    print(f"vendor.py: {program} {library}: {exc}", file=sys.stderr)
                    continue
                rows.append([program, spec["workload"], shape, library, precision,
                             f"{median_s:.9g}", reps])
                print(f"vendor.py: {program} {library} {precision}: {median_s * 1e3:.4f} ms",
                      file=sys.stderr)
    with open(out / "vendor.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["program", "workload", "shape", "library", "precision",
                         "median_s", "reps"])
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def read_vendor(path: Path) -> pd.DataFrame:
    """vendor.csv, checked by column and range; empty where the GPU machine wrote none."""
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame(columns=list(COLUMNS))
    frame = read_table(path, {**{c: Column("text") for c in COLUMNS},
                              "median_s": Column("number", strict=True, maximum=3600),
                              "reps": Column("integer", minimum=1)}, minimum_rows=0)
    for i, r in frame.iterrows():
        if r.precision not in PRECISIONS:
            raise InputError(f"expected one of {', '.join(PRECISIONS)}, got {r.precision!r}",
                             str(path), f"line {line_of(frame, i)}, column 'precision'")
    frame["median_s"] = frame.median_s.astype(float)
    return frame


def kernel_vs_vendor(measured: pd.DataFrame, vendor: pd.DataFrame) -> dict:
    """Per workload shape: the best generated kernel's median time and the fastest vendor
    time at each precision, and their ratio (kernel over vendor, so below 1 means the
    generated kernel wins). Kernels computing through TF32 (`precision` column, where the
    campaign has it) are held against the TF32 vendor time, float32 kernels against both."""
    out: dict = {}
    if not len(vendor) or not len(measured):
        return out
    precision = measured["precision"] if "precision" in measured else \
        pd.Series("fp32", index=measured.index)
    for (w, shape), g in measured.groupby(["workload", "shape"]):
        v = vendor[(vendor.workload == w) & (vendor["shape"] == shape)]
        if not len(v):
            continue
        fp32 = g[precision[g.index] == "fp32"]
        entry: dict = {"best_kernel_s": float(g.latency_s.min()),
                       "best_kernel": str(g.loc[g.latency_s.idxmin(), "dataflow"])}
        if len(fp32):
            entry["best_fp32_kernel_s"] = float(fp32.latency_s.min())
        for p in PRECISIONS:
            vp = v[v.precision == p]
            if len(vp):
                best = vp.loc[vp.median_s.idxmin()]
                entry[f"vendor_{p}_s"] = float(best.median_s)
                entry[f"vendor_{p}_library"] = str(best.library)
        if "vendor_fp32_s" in entry and "best_fp32_kernel_s" in entry:
            entry["ratio_fp32"] = entry["best_fp32_kernel_s"] / entry["vendor_fp32_s"]
        if "vendor_tf32_s" in entry:
            entry["ratio_tf32"] = entry["best_kernel_s"] / entry["vendor_tf32_s"]
        out[f"{w} {shape}"] = entry
    return out
