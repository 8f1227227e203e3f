"""The GPU campaign without a GPU: random GPU trees are valid and compute the workload
(emulated), the prepared programs compile with nvcc where it exists, run.sh runs the
programs built for the CPU (`cuda_harness.build_emulated`) and writes the CSV the report
reads; the report recovers known parameters from synthetic timings and refuses bad files.
No figure here is a GPU measurement."""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tileflow.calibrate import gpu_latency
from tileflow.calibrate.gpu_campaign import GpuCampaign, op_threads, prepare_campaign
from tileflow.calibrate.gpu_inputs import hashed_inputs, hashed_uniform
from tileflow.calibrate.gpu_results import read_ncu, shape_folds
from tileflow.calibrate.metrics import top_k_regret
from tileflow.cli import main
from tileflow.kernels.c_source import pitched
from tileflow.kernels.cuda_emulate import run_emulated
from tileflow.kernels.cuda_harness import COLUMNS, build_emulated
from tileflow.kernels.cuda_source import MAX_THREADS, generate_cuda
from tileflow.kernels.gpu_trees import blocks_of, random_valid_gpu_trees
from tileflow.kernels.nest import analyse
from tileflow.kernels.reference import random_inputs, run_reference
from tileflow.provenance import MODEL_VERSION
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload

TINY = {"b": 2, "m": 8, "l": 12, "k": 4, "n": 6}
SHAPES = {"attention": [TINY, {"b": 1, "m": 12, "l": 8, "k": 6, "n": 4}],
          "gemm-chain": [TINY, {"b": 1, "m": 12, "l": 8, "k": 6, "n": 4}]}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gpu-campaign")
    prepare_campaign(GpuCampaign(shapes=SHAPES, points=4, min_blocks=1, profile=4,
                                 profile_max_s=100.0), folder,
                     build_binaries=False, progress=lambda m: None)
    return folder


@pytest.mark.parametrize("workload", ["attention", "gemm-chain"])
def test_random_gpu_trees_spread_blocks_and_threads_and_compute_the_workload(workload):
    w = load_workload(workload, {"b": 2, "m": 16, "l": 24, "k": 8, "n": 12})
    arch = load_arch("gpu-h100")
    x = random_inputs(w, 3)
    ref = run_reference(w, x)
    flows = random_valid_gpu_trees(w, arch, 4, seed=5, min_blocks=4)
    assert len(flows) == 4
    for flow in flows:
        assert 4 <= blocks_of(flow) <= 132  # at least min_blocks, at most one per SM
        nest = analyse(w, arch, flow)
        assert all(1 <= n <= MAX_THREADS for n in op_threads(nest).values())
        source = generate_cuda(nest)
        out = run_emulated(source, w.shapes, x)
        for t in w.outputs:
            assert np.abs(out[t] - ref[t]).max() <= 1e-5 * np.abs(ref[t]).max(), flow.name


def test_prepared_folder_holds_programs_data_predictions_and_run_script(prepared):
    campaign = pd.read_csv(prepared / "campaign.csv")
    manifest = json.loads((prepared / "manifest.json").read_text())
    assert manifest["programs"] == ["attention_0", "attention_1", "gemm-chain_0",
                                    "gemm-chain_1"]
    assert sorted(campaign.program.unique()) == manifest["programs"]
    assert campaign.id.tolist() == list(range(len(campaign)))  # ids unique, in order
    assert (campaign.model_s > 0).all() and (campaign.blocks >= 1).all()
    for program in manifest["programs"]:
        text = (prepared / f"{program}.cu").read_text()
        for i in campaign[campaign.program == program].id:
            assert f"run_{i}(" in text  # every dataflow of the shape has its launcher
        w = load_workload(program.rsplit("_", 1)[0],
                          SHAPES[program.rsplit("_", 1)[0]][int(program[-1])])
        for t in w.outputs:  # pitched float32: rows of a multiple of 64 get 16 more words
            shape = w.shapes[t]
            words = math.prod(shape[:-1]) * (shape[-1] + (16 if shape[-1] % 64 == 0 else 0))
            assert (prepared / "data" / program / f"{t}.ref.f32").stat().st_size == 4 * words
        assert not any((prepared / "data" / program / f"{t}.f32").exists() for t in w.inputs)
    done = subprocess.run(["bash", "-n", str(prepared / "run.sh")], capture_output=True)
    assert done.returncode == 0, done.stderr


def test_inputs_script_makes_the_inputs_the_references_came_from(prepared, tmp_path):
    """inputs.py, run as on the GPU machine (its own python3, no tileflow), writes each
    input bit for bit as gpu_inputs.hashed_inputs makes it, zero-padded to the pitch."""
    folder = tmp_path / "copy"
    shutil.copytree(prepared, folder)
    done = subprocess.run([sys.executable, "-I", str(folder / "inputs.py"), str(folder)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for program, sizes in [(f"{w}_{j}", s) for w, shapes in SHAPES.items()
                           for j, s in enumerate(shapes)]:
        w = load_workload(program.rsplit("_", 1)[0], sizes)
        expected = hashed_inputs(w, 0)
        for t in w.inputs:
            shape = w.shapes[t]
            raw = np.fromfile(folder / "data" / program / f"{t}.f32", dtype=np.float32)
            array = raw.reshape(pitched(shape))
            inside = tuple(slice(0, e) for e in shape)
            assert np.array_equal(array[inside], expected[t])
            assert array.sum() == pytest.approx(expected[t].sum(), abs=1e-3)  # pad is zero
            assert -1 <= expected[t].min() and expected[t].max() < 1
        reference = run_reference(w, expected)
        out = w.outputs[0]
        ref_file = np.fromfile(folder / "data" / program / f"{out}.ref.f32", dtype=np.float32)
        got = ref_file.reshape(pitched(w.shapes[out]))[tuple(slice(0, e) for e in w.shapes[out])]
        assert np.allclose(got, reference[out], rtol=1e-6, atol=1e-6)


def test_hashed_inputs_are_uniform_on_minus_one_to_one():
    """Mean 0 and variance 1/3 of the uniform on [-1, 1), within sampling error of 10^6
    values; two streams differ."""
    x = hashed_uniform(10**6, 7).astype(np.float64)
    assert abs(x.mean()) < 5 * math.sqrt(1 / 3 / 10**6)
    assert abs(x.var() - 1 / 3) < 0.002
    assert not np.array_equal(hashed_uniform(100, 1), hashed_uniform(100, 2))


def test_run_script_with_cpu_built_programs_then_report(prepared, tmp_path):
    """run.sh as on the GPU, with the programs built for the CPU in their place: every
    dataflow gets a row, every result matches the reference; --results reports them."""
    for program in json.loads((prepared / "manifest.json").read_text())["programs"]:
        binary = build_emulated((prepared / f"{program}.cu").read_text(),
                                tmp_path / "build" / program)
        shutil.copy(binary, prepared / program)
    results = tmp_path / "results"
    tools = tmp_path / "tools"  # an ncu that reports (id + 1) x 1000 DRAM bytes read
    tools.mkdir()
    (tools / "ncu").write_text(FAKE_NCU)
    (tools / "ncu").chmod(0o755)
    env = {"PATH": f"{tools}:{Path(sys.executable).parent}:/usr/bin:/bin", "OUT": str(results),
           "OMP_WAIT_POLICY": "passive"}
    done = subprocess.run(["bash", str(prepared / "run.sh")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    timings = pd.read_csv(results / "timings.csv")
    campaign = pd.read_csv(prepared / "campaign.csv")
    assert list(timings.columns) == list(COLUMNS)
    assert sorted(timings.id) == sorted(campaign.id)
    assert (timings.status == "ok").all()
    assert (timings.max_rel_err < 1e-5).all()
    assert (timings.min_s <= timings.median_s).all() and (timings.reps >= 1).all()
    profiled = {int(i) for ln in (results / "run.log").read_text().splitlines()
                if "ncu on " in ln for i in ln.split("(")[1].split(")")[0].split(",")}
    assert len(profiled) == 4  # one per program (4 in all)
    out = tmp_path / "report"
    assert main(["validate", "gpu", "--results", str(results), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    measured = pd.read_csv(out / "measurements.csv").set_index("id")
    for i in profiled:
        assert measured.loc[i, "measured_dram_bytes"] == (i + 1) * 1000
    assert summary["traffic_points"]["dram"] == 4
    assert summary["counts"]["correct"] == len(campaign)
    assert summary["machine"]["device"] == "CPU emulation"
    assert summary["heldout"] == "by shape"
    assert (out / "report.md").read_text().startswith("# GPU campaign")


FAKE_NCU = r"""#!/usr/bin/env bash
[ "${1:-}" = "--version" ] && { echo "fake ncu"; exit 0; }
prev=""; ids=""
for a in "$@"; do [ "$prev" = "--only" ] && ids="$a"; prev="$a"; done
printf '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
printf '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
printf '"Metric Value"\n'
for i in ${ids//,/ }; do
    printf '"0","1","p","h","k%s_stage0","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0",' "$i"
    printf '"s","dram__bytes_read.sum","byte","%s"\n' $(( (i + 1) * 1000 ))
done
"""


def test_results_recover_the_parameters_that_made_synthetic_timings(prepared, tmp_path):
    """Timings computed from the GPU latency form with known parameters: the fit with each
    shape held out predicts them (MAPE near 0, Spearman 1); the CPU path's form is reported
    beside it."""
    campaign = pd.read_csv(prepared / "campaign.csv")
    arch = load_arch("gpu-h100")
    params = gpu_latency.parameter_set()
    values = 2 * params.defaults
    features = {c: campaign[c].to_numpy(float) for c in gpu_latency.COLUMNS}
    seconds = gpu_latency.cycles(features, values) / (arch.clock_ghz * 1e9)
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(prepared / "campaign.csv", results)
    shutil.copy(prepared / "manifest.json", results)
    pd.DataFrame({"id": campaign.id, "status": "ok", "median_s": seconds, "min_s": seconds,
                  "max_s": seconds, "first_s": seconds, "reps": 5, "max_rel_err": 1e-7,
                  "device": "synthetic", "sm_count": 132, "l2_bytes": 52428800,
                  "cc": "9.0", "driver_version": 13000, "runtime_version": 13000}
                 ).to_csv(results / "timings.csv", index=False)
    out = tmp_path / "report"
    assert main(["validate", "gpu", "--results", str(results), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["latency_mape_heldout"] < 0.02
    assert summary["latency_spearman_heldout"] > 0.99
    assert "latency_mape_heldout" in summary["cpu_form"]


def test_learn_on_timings_the_form_explains_keeps_them(prepared, tmp_path):
    """--learn (the 'learn' extra): on timings the GPU form explains exactly, the trees on
    top of it stay near them; the model and its report section are written."""
    pytest.importorskip("sklearn")
    _synthetic_run(prepared, tmp_path / "results", 1.0)
    out = tmp_path / "report"
    assert main(["validate", "gpu", "--results", str(tmp_path / "results"), "--out",
                 str(out), "--learn"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["learned_model"]["learned"]["mape"] < 0.05
    assert (out / "learned-model.pkl").exists()
    assert "## Learned cost model (held out by shape)" in (out / "report.md").read_text()


@pytest.mark.parametrize("column,value,expected", [
    ("median_s", -1.0, "column 'median_s'"),
    ("id", 1.5, "column 'id'"),
    ("reps", 0, "column 'reps'"),
])
def test_bad_timings_are_refused_naming_file_row_and_column(prepared, tmp_path, capsys,
                                                           column, value, expected):
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(prepared / "campaign.csv", results)
    shutil.copy(prepared / "manifest.json", results)
    rows = pd.DataFrame({"id": [0, 1], "status": "ok", "median_s": 1e-3, "min_s": 1e-3,
                         "max_s": 1e-3, "first_s": 1e-3, "reps": 5, "max_rel_err": 0.0,
                         "device": "x", "sm_count": 1, "l2_bytes": 1, "cc": "9.0",
                         "driver_version": 1, "runtime_version": 1})
    rows[column] = rows[column].astype(float)
    rows.loc[1, column] = value
    rows.to_csv(results / "timings.csv", index=False)
    assert main(["validate", "gpu", "--results", str(results), "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "timings.csv, line 3" in err and expected in err and "Traceback" not in err


def test_ncu_bytes_are_summed_per_dataflow_in_base_units(tmp_path):
    header = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
              '"Block Size","Grid Size","Device","CC","Section Name","Metric Name",'
              '"Metric Unit","Metric Value"')

    def line(i, kernel, metric, unit, value):
        return (f'"{i}","1","p","h","{kernel}","1","7","(128, 1, 1)","(16, 1, 1)","0","9.0",'
                f'"Command line profiler metrics","{metric}","{unit}","{value}"')

    text = "\n".join(["==PROF== Connected to process 1", header,
                      line(0, "k3_init_E", "dram__bytes_write.sum", "byte", "1,024"),
                      line(1, "k3_stage0", "dram__bytes_read.sum", "Kbyte", "2.5"),
                      line(1, "k3_stage0", "dram__bytes_write.sum", "byte", "100"),
                      line(1, "k3_stage0", "lts__t_bytes.sum", "Mbyte", "1"),
                      line(2, "k4_stage0", "dram__bytes_read.sum", "byte", "n/a")])
    path = tmp_path / "ncu.csv"
    path.write_text(text + "\n")
    frame, notes = read_ncu(path)
    row = frame.set_index("id").loc[3]
    assert row.measured_dram_read_bytes == 2500
    assert row.measured_dram_write_bytes == 1124
    assert row.measured_dram_bytes == 3624
    assert row.measured_l2_bytes == 1e6
    assert 4 not in set(frame.id) and "1 line(s)" in notes[0]


def test_shape_folds_hold_out_one_shape_of_every_workload():
    frame = pd.DataFrame({"workload": ["a", "a", "a", "g", "g", "g"],
                          "shape": ["s1", "s2", "s1", "t1", "t1", "t2"]})
    folds = shape_folds(frame)
    assert [sorted(test.tolist()) for _, test in folds] == [[0, 2, 3, 4], [1, 5]]
    for train, test in folds:
        assert sorted([*train, *test]) == list(range(6))


def test_top_k_regret():
    predicted = [3.0, 1.0, 2.0, 4.0]
    measured = [1.0, 1.5, 1.2, 2.0]
    assert top_k_regret(predicted, measured, 1) == pytest.approx(0.5)
    assert top_k_regret(predicted, measured, 2) == pytest.approx(0.2)
    assert top_k_regret(predicted, measured, 3) == 0.0


def test_prepared_programs_compile_with_nvcc(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed: the GPU programs are not built here")
    prepare_campaign(GpuCampaign(shapes={"gemm-chain": [TINY]}, points=2, min_blocks=1),
                     tmp_path, progress=lambda m: None)
    binary = tmp_path / "gemm-chain_0"
    assert binary.exists()
    assert binary.read_bytes()[:4] == b"\x7fELF"
    assert binary.read_bytes()[18] == 0x3E  # e_machine: x86-64


def _synthetic_run(prepared: Path, folder: Path, scale: float, device: str = "synthetic"):
    campaign = pd.read_csv(prepared / "campaign.csv")
    arch = load_arch("gpu-h100")
    features = {c: campaign[c].to_numpy(float) for c in gpu_latency.COLUMNS}
    seconds = scale * gpu_latency.cycles(features, 2 * gpu_latency.parameter_set().defaults) \
        / (arch.clock_ghz * 1e9)
    folder.mkdir()
    shutil.copy(prepared / "campaign.csv", folder)
    shutil.copy(prepared / "manifest.json", folder)
    pd.DataFrame({"id": campaign.id, "status": "ok", "median_s": seconds, "min_s": seconds,
                  "max_s": seconds, "first_s": seconds, "reps": 5, "max_rel_err": 1e-7,
                  "device": device, "sm_count": 132, "l2_bytes": 52428800,
                  "cc": "9.0", "driver_version": 13000, "runtime_version": 13000}
                 ).to_csv(folder / "timings.csv", index=False)


def test_one_run_reports_no_retest_as_null_in_strict_json(prepared, tmp_path, capsys):
    """A single run has no dataflow measured twice: its retest spreads are null (not NaN,
    which JSON readers other than Python's refuse) in `--json` and in summary.json."""
    _synthetic_run(prepared, tmp_path / "a", 1.0)
    out = tmp_path / "report"
    capsys.readouterr()
    assert main(["validate", "gpu", "--results", str(tmp_path / "a"), "--out", str(out),
                 "--json"]) == 0
    for text in (capsys.readouterr().out, (out / "summary.json").read_text()):
        summary = json.loads(text, parse_constant=_refuse_non_finite)
        assert summary["retest"] == {"dataflows": 0, "median_spread": None,
                                     "max_spread": None}
        assert summary["model_version"] == MODEL_VERSION  # the prepared campaign's


def _refuse_non_finite(token: str):
    raise ValueError(f"non-finite number {token} in the JSON")


def test_counts_of_two_runs_add_up_per_status(prepared, tmp_path):
    """Each run with one dataflow skipped by its budget: the report counts two."""
    for name in ("a", "b"):
        _synthetic_run(prepared, tmp_path / name, 1.0)
        timings = pd.read_csv(tmp_path / name / "timings.csv")
        timings.loc[0, "status"] = "skipped_budget"
        timings.to_csv(tmp_path / name / "timings.csv", index=False)
    out = tmp_path / "report"
    assert main(["validate", "gpu", "--results", str(tmp_path / "a"), "--results",
                 str(tmp_path / "b"), "--out", str(out)]) == 0
    counts = json.loads((out / "summary.json").read_text())["counts"]
    assert counts["not_run"] == {"skipped_budget": 2}
    assert counts["ran"] == 2 * (len(pd.read_csv(prepared / "campaign.csv")) - 1)


def test_two_runs_are_one_campaign_and_their_common_dataflows_a_retest(prepared, tmp_path):
    """The same campaign run twice, the second 10 % slower: every dataflow is kept once
    (the first run's row) and the retest spread is exactly 10 %; a run on another GPU is
    refused."""
    _synthetic_run(prepared, tmp_path / "a", 1.0)
    _synthetic_run(prepared, tmp_path / "b", 1.1)
    out = tmp_path / "report"
    assert main(["validate", "gpu", "--results", str(tmp_path / "a"), "--results",
                 str(tmp_path / "b"), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = len(pd.read_csv(prepared / "campaign.csv"))
    assert summary["counts"]["prepared"] == 2 * rows
    assert summary["counts"]["repeated_across_runs"] == rows
    assert sum(summary["points"].values()) == rows
    assert summary["retest"]["dataflows"] == rows
    assert summary["retest"]["median_spread"] == pytest.approx(0.1)
    assert "measured in more than one run" in (out / "report.md").read_text()
    _synthetic_run(prepared, tmp_path / "c", 1.0, device="another GPU")
    assert main(["validate", "gpu", "--results", str(tmp_path / "a"), "--results",
                 str(tmp_path / "c"), "--out", str(out)]) == 2


def _edit_csv(path: Path, line: int, column: str, value: str) -> None:
    rows = list(csv.reader(path.open(newline="")))
    rows[line - 1][rows[0].index(column)] = value
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)


def _edit_manifest(folder: Path, **changes) -> None:
    path = folder / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize(("damage", "expected"), [
    (lambda f: _edit_csv(f / "campaign.csv", 3, "model_s", "abc"),
     "campaign.csv, line 3, column 'model_s': 'abc' is not a number"),
    (lambda f: _edit_csv(f / "campaign.csv", 3, "model_s", "inf"),
     "campaign.csv, line 3, column 'model_s': 'inf' is out of range"),
    (lambda f: _edit_csv(f / "campaign.csv", 3, "key",
                         pd.read_csv(f / "campaign.csv").key[0]),
     "campaign.csv, line 3, column 'key'"),
    (lambda f: (f / "campaign.csv").write_text(""), "campaign.csv: the file is empty"),
    (lambda f: (f / "manifest.json").write_text("[1, 2]"),
     "manifest.json: expected a JSON object"),
    (lambda f: _edit_manifest(f, nvcc_flags=3), "manifest.json, nvcc_flags: expected a list"),
    (lambda f: _edit_csv(f / "timings.csv", 3, "id", "x"),
     "timings.csv, line 3, column 'id': 'x' is not a number"),
    (lambda f: _edit_csv(f / "timings.csv", 3, "max_rel_err", "bad"),
     "timings.csv, line 3, column 'max_rel_err'"),
    (lambda f: _edit_csv(f / "timings.csv", 3, "device", "another GPU"),
     "timings.csv, line 3, column 'device': expected the machine of the file's first row"),
    (lambda f: (f / "timings.csv").write_text((f / "timings.csv").read_text().splitlines()[0]
                                              + "\n"), "timings.csv: 0 rows"),
])
def test_damaged_results_are_refused_naming_file_and_place(prepared, tmp_path, capsys, damage,
                                                           expected):
    """A results folder damaged in transit or by hand: exit 2, the file, its line and
    column (or key) named; never a traceback or a report from what is not there."""
    folder = tmp_path / "results"
    _synthetic_run(prepared, folder, 1.0)
    damage(folder)
    capsys.readouterr()
    assert main(["validate", "gpu", "--results", str(folder), "--out",
                 str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err
    assert not (tmp_path / "report" / "summary.json").exists()


def test_runs_of_two_campaigns_or_one_folder_twice_are_refused(prepared, tmp_path, capsys):
    _synthetic_run(prepared, tmp_path / "a", 1.0)
    _synthetic_run(prepared, tmp_path / "b", 1.0)
    _edit_manifest(tmp_path / "b", arch="gpu-a100")
    out = str(tmp_path / "report")
    assert main(["validate", "gpu", "--results", str(tmp_path / "a"), "--results",
                 str(tmp_path / "b"), "--out", out]) == 2
    assert "prepared with arch 'gpu-a100'" in capsys.readouterr().err
    assert main(["validate", "gpu", "--results", str(tmp_path / "a"), "--results",
                 str(tmp_path / "a"), "--out", out]) == 2
    assert "the same results folder is given twice" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [["--points", "5"], ["--data", "x"],
                                   ["--report-only"], ["--overlap", "perfect"]])
def test_options_another_target_reads_are_refused_with_results(prepared, tmp_path, capsys,
                                                               extra):
    _synthetic_run(prepared, tmp_path / "a", 1.0)
    assert main(["validate", "gpu", "--results", str(tmp_path / "a"), "--out",
                 str(tmp_path / "report"), *extra]) == 2
    assert extra[0] in capsys.readouterr().err


def test_the_report_s_model_version_is_the_campaign_s(prepared, tmp_path):
    """The predictions in campaign.csv were made when the campaign was prepared: the report
    gives that model's version (null for a campaign prepared before manifests held it),
    and runs of campaigns prepared under two versions are not one campaign."""
    _synthetic_run(prepared, tmp_path / "old", 1.0)
    manifest = json.loads((tmp_path / "old" / "manifest.json").read_text())
    assert manifest["model_version"] == MODEL_VERSION
    del manifest["model_version"]
    (tmp_path / "old" / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "report"
    assert main(["validate", "gpu", "--results", str(tmp_path / "old"), "--out",
                 str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["model_version"] is None
    _synthetic_run(prepared, tmp_path / "new", 1.0)
    assert main(["validate", "gpu", "--results", str(tmp_path / "new"), "--results",
                 str(tmp_path / "old"), "--out", str(out)]) == 2


def test_a_message_names_the_file_line_past_blank_lines(prepared, tmp_path, capsys):
    """Blank lines count: the line named is the file's, where an editor shows it."""
    folder = tmp_path / "results"
    _synthetic_run(prepared, folder, 1.0)
    lines = (folder / "timings.csv").read_text().splitlines()
    lines.insert(2, "")  # a blank line 3: the first data row stays line 2
    lines[4] = lines[4].replace(",5,", ",0,", 1)  # reps 0 on line 5 (the third row)
    (folder / "timings.csv").write_text("\n".join(lines) + "\n")
    assert main(["validate", "gpu", "--results", str(folder), "--out",
                 str(tmp_path / "o")]) == 2
    assert "timings.csv, line 5, column 'reps'" in capsys.readouterr().err
