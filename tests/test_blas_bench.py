"""The kernel-against-BLAS benchmark: its NumPy forms compute the workloads, the thread
split keeps the result, and one tiny run prints every row."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tileflow.cli import main
from tileflow.commands.blas_bench import numpy_computation, thread_environment
from tileflow.errors import InputError
from tileflow.kernels.cpu import build_checked
from tileflow.kernels.reference import random_inputs, run_reference
from tileflow.kernels.trees import parallel_rows, random_valid_trees, single_core
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, Loop, tile

TINY = {"b": 1, "m": 16, "l": 16, "k": 8, "n": 8}


@pytest.mark.parametrize("name, out", [("gemm-chain", "E"), ("attention", "O")])
def test_numpy_forms_compute_the_workload(name, out):
    w = load_workload(name, TINY)
    x = random_inputs(w, 2)
    assert np.allclose(numpy_computation(name, x)(), run_reference(w, x)[out], rtol=1e-4,
                       atol=1e-5)


def test_numpy_form_of_another_workload_is_refused():
    with pytest.raises(InputError, match="no NumPy form"):
        numpy_computation("mlp", {})


def test_thread_split_is_an_outer_spatial_loop_and_keeps_the_result():
    w = load_workload("gemm-chain", TINY)
    flow = random_valid_trees(w, single_core(load_arch("host")), 1, seed=5)[0]
    split = parallel_rows(w, flow, 2)
    loops = [lp for lp in _loops(split.root) if lp.spatial and lp.factor == 2]
    assert loops and loops[0].dim in ("b", "m")
    checked = build_checked(w, load_arch("host"), split, threads=2)
    assert "omp parallel for" in checked.source.text
    assert checked.max_error < 1e-5
    assert parallel_rows(w, flow, 1) is flow


def test_thread_split_needs_a_loop_that_divides():
    w = load_workload("gemm", {"m": 3, "n": 5, "k": 4})  # k divides, but it is reduced
    flow = Dataflow(tile("DRAM", "m:3", tile("L1", "n:5 k:4", tile("Reg", "", "gemm"))))
    with pytest.raises(InputError, match="divides into 2 threads"):
        parallel_rows(w, flow, 2)


def test_thread_environment_sets_threads_and_drops_openblas_core_overrides(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("OPENBLAS_L2_SIZE", "1048576")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    env = thread_environment(2)
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "2"
    assert "OPENBLAS_CORETYPE" not in env and "OPENBLAS_L2_SIZE" not in env
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"


def test_tiny_benchmark_prints_a_row_per_workload_and_thread_count(capsys):
    code = main(["bench-kernels", "--campaign", "none", "--random", "1", "--seconds", "0.05",
                 "--threads", "1,2", "--json", *(f"--set={d}={v}" for d, v in TINY.items())])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert [(r["workload"], r["threads"]) for r in result["rows"]] == [
        ("gemm-chain", 1), ("gemm-chain", 2), ("attention", 1), ("attention", 2)]
    for r in result["rows"]:
        assert r["ratio_median"] == pytest.approx(r["kernel_median_s"] / r["blas_median_s"])
        assert r["kernel_vs_blas_max_error"] < 1e-4


def test_bad_thread_list_exits_2(capsys):
    assert main(["bench-kernels", "--threads", "0,x"]) == 2
    assert "--threads" in capsys.readouterr().err


def _loops(node) -> list[Loop]:
    out = list(getattr(node, "loops", ()))
    for c in getattr(node, "children", ()):
        out += _loops(c)
    return out
