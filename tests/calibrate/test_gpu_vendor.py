"""The vendor yardstick of the GPU campaign: vendor.py runs against a stand-in PyTorch
(NumPy underneath, events ticking a fixed time) and writes the CSV read_vendor accepts;
bad files are refused by row and column; kernel_vs_vendor's ratios are hand-computed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tileflow.calibrate.gpu_vendor import SCRIPT, kernel_vs_vendor, read_vendor
from tileflow.errors import InputError

FAKE_TORCH = r'''
import numpy as np

class Tensor(np.ndarray):
    def transpose(self, a, b):
        return np.swapaxes(self, a, b).view(Tensor)
    def contiguous(self):
        return np.ascontiguousarray(self).view(Tensor)

class Generator:
    def __init__(self, device=None):
        self.rng = np.random.default_rng(0)
    def manual_seed(self, seed):
        self.rng = np.random.default_rng(seed)
        return self

def rand(*shape, device=None, generator=None):
    return generator.rng.random(shape).view(Tensor)

def bmm(a, b):
    return np.matmul(a, b).view(Tensor)

def softmax(x, dim):
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return (e / e.sum(axis=dim, keepdims=True)).view(Tensor)

class _Flags:
    allow_tf32 = False

class backends:
    class cuda:
        matmul = _Flags()
    cudnn = _Flags()

class cuda:
    @staticmethod
    def is_available():
        return True
    @staticmethod
    def synchronize():
        pass
    class Event:
        def __init__(self, enable_timing=False):
            self.t = 0.0
        def record(self):
            self.t = 0.0 if not hasattr(cuda, "clock") else cuda.clock
            cuda.clock = self.t + 0.5  # each event half a millisecond after the last
        def synchronize(self):
            pass
        def elapsed_time(self, other):
            return other.t - self.t

class nn:
    class functional:
        @staticmethod
        def scaled_dot_product_attention(q, k, v, scale=None):
            s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
            return np.matmul(softmax(s, -1), v).view(Tensor)
'''


def test_vendor_script_times_every_shape_at_both_precisions(tmp_path):
    (tmp_path / "site" / "torch").mkdir(parents=True)
    (tmp_path / "site" / "torch" / "__init__.py").write_text(FAKE_TORCH)
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    sizes = {"b": 2, "m": 8, "l": 12, "k": 4, "n": 6}
    (prepared / "manifest.json").write_text(json.dumps({"program_shapes": {
        "attention_0": {"workload": "attention", "sizes": sizes},
        "gemm-chain_0": {"workload": "gemm-chain", "sizes": sizes}}}))
    (prepared / "vendor.py").write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(prepared / "vendor.py"), str(prepared),
                           str(tmp_path)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path / "site")})
    assert done.returncode == 0, done.stderr
    frame = read_vendor(tmp_path / "vendor.csv")
    # attention: two libraries, gemm-chain one; each at fp32 and tf32
    assert len(frame) == (2 + 1) * 2
    assert set(frame.precision) == {"fp32", "tf32"}
    assert frame.median_s.tolist() == pytest.approx([0.5e-3] * 6)  # the stand-in's events


def test_vendor_script_without_torch_writes_nothing_and_succeeds(tmp_path):
    (tmp_path / "vendor.py").write_text(SCRIPT)
    (tmp_path / "manifest.json").write_text(json.dumps({"program_shapes": {}}))
    done = subprocess.run([sys.executable, "-I", str(tmp_path / "vendor.py"), str(tmp_path),
                           str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0 and "no PyTorch" in done.stderr
    assert read_vendor(tmp_path / "vendor.csv").empty


@pytest.mark.parametrize(("column", "value"), [("median_s", "-1"), ("median_s", "nan"),
                                               ("median_s", "fast"), ("precision", "fp16")])
def test_bad_vendor_rows_are_refused_by_row_and_column(tmp_path, column, value):
    row = {"program": "p", "workload": "attention", "shape": "b=1", "library": "x",
           "precision": "fp32", "median_s": "0.001", "reps": "5", column: value}
    pd.DataFrame([row]).to_csv(tmp_path / "vendor.csv", index=False)
    with pytest.raises(InputError, match=f"line 2, column '{column}'"):
        read_vendor(tmp_path / "vendor.csv")


def test_kernel_over_vendor_ratios():
    """Best fp32 kernel 2 ms, best kernel overall (tf32) 1 ms; vendor fp32 4 ms (the faster
    of 4 and 5), tf32 0.5 ms: ratios 0.5 and 2."""
    measured = pd.DataFrame({"workload": ["attention"] * 3, "shape": ["b=1"] * 3,
                             "dataflow": ["a", "b", "c"], "latency_s": [2e-3, 1e-3, 3e-3],
                             "precision": ["fp32", "tf32", "fp32"]})
    vendor = pd.DataFrame({"workload": ["attention"] * 3, "shape": ["b=1"] * 3,
                           "library": ["x", "y", "x"], "precision": ["fp32", "fp32", "tf32"],
                           "median_s": [4e-3, 5e-3, 0.5e-3]})
    table = kernel_vs_vendor(measured, vendor)["attention b=1"]
    assert table["ratio_fp32"] == pytest.approx(0.5)
    assert table["ratio_tf32"] == pytest.approx(2.0)
    assert table["best_kernel"] == "b" and table["vendor_fp32_library"] == "x"
    no_precision = measured.drop(columns="precision")  # campaigns before tensor cores
    assert kernel_vs_vendor(no_precision, vendor)["attention b=1"]["ratio_fp32"] == \
        pytest.approx(0.25)
    assert kernel_vs_vendor(measured, vendor.iloc[:0]) == {}


def test_missing_vendor_file_is_empty(tmp_path: Path):
    assert read_vendor(tmp_path / "vendor.csv").empty
