"""The learned GPU cost model: on synthetic timings whose error against the GPU form is a
step in a feature the form lacks (3x slower under 64 blocks), the trees, validated on
held-out shapes, rank and predict what the form cannot; stored per GPU, refused on
another."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tileflow.calibrate import gpu_latency, gpu_learned
from tileflow.errors import InputError
from tileflow.specs.arch import load_arch

pytest.importorskip("sklearn")


def synthetic(seed: int = 0, shapes: int = 6, rows: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = shapes * rows
    frame = pd.DataFrame({c: rng.uniform(1, 1000, n) for c in gpu_latency.COLUMNS})
    frame["launches"] = rng.integers(1, 8, n).astype(float)
    frame["blocks"] = rng.choice([16, 32, 64, 128, 132], n).astype(float)
    frame["workload"] = "gemm-chain"
    frame["shape"] = [f"b={i // rows}" for i in range(n)]
    frame["dataflow"] = [f"random-{i}" for i in range(n)]
    arch = load_arch("gpu-h100")
    features = {c: frame[c].to_numpy(float) for c in gpu_latency.COLUMNS}
    base = gpu_latency.cycles(features, 2 * gpu_latency.parameter_set().defaults) / (
        arch.clock_ghz * 1e9)
    frame["latency_s"] = base * np.where(frame.blocks < 64, 3.0, 1.0)
    return frame


def test_trees_learn_what_the_form_lacks_on_held_out_shapes():
    frame = synthetic()
    rows, figures = gpu_learned.validate(frame, load_arch("gpu-h100"))
    assert rows.learned_s.notna().all() and rows.calibrated_s.notna().all()
    cal, lrn = figures["calibrated"], figures["learned"]
    assert lrn["mape"] < 0.1 < cal["mape"]
    assert lrn["spearman_within_mean"] > cal["spearman_within_mean"]
    assert lrn["spearman_within_mean"] > 0.95
    assert len(lrn["groups"]) == 6 and all(g["rows"] == 60 for g in lrn["groups"].values())


def test_one_shape_is_refused():
    frame = synthetic(shapes=1)
    with pytest.raises(InputError, match="at least two"):
        gpu_learned.validate(frame, load_arch("gpu-h100"))


def test_stored_model_is_refused_on_another_gpu(tmp_path):
    machine = {"device": "NVIDIA H100 80GB HBM3", "cc": "9.0", "driver_version": "13000",
               "runtime_version": "13000", "nvcc": "cuda_13.0"}
    meta = gpu_learned.run(synthetic(), load_arch("gpu-h100"), tmp_path, machine)
    assert meta["fingerprint"] == machine
    assert gpu_learned.load(tmp_path / gpu_learned.MODEL_FILE, machine)["features"]
    with pytest.raises(InputError, match="device: trained on 'NVIDIA H100 80GB HBM3', here"):
        gpu_learned.load(tmp_path / gpu_learned.MODEL_FILE, {**machine, "device": "H200"})
