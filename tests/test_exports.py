"""Getting numbers out, the way a user meets it: `--csv` beside `--json` in the same run, plot
files named by the sizes they ran with, titles in words, and result files written atomically."""

from __future__ import annotations

import csv
import json

import pytest
from test_cli import tileflow

from tileflow.commands.report import run_title
from tileflow.outputs import write_atomic, write_text_atomic
from tileflow.provenance import MODEL_VERSION
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload


def _rows(path):
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_evaluate_csv_has_one_row_per_level_and_tensor_matching_the_json(tmp_path):
    out = tmp_path / "flat.csv"
    proc = tileflow("evaluate", "--arch", "edge", "--workload", "attention", "--dataflow",
                    "flat-rgran", "--json", "--csv", str(out))
    assert proc.returncode == 0, proc.stderr
    levels = json.loads(proc.stdout)["levels"]
    rows = _rows(out)
    assert list(rows[0]) == ["level", "tensor", "fill", "read", "update", "energy_pj",
                             "model_version"]
    assert {r["model_version"] for r in rows} == {MODEL_VERSION}
    assert {(r["level"], r["tensor"]) for r in rows} == {
        (lv, t) for lv, data in levels.items() for t in data["per_tensor"]}
    for r in rows:
        expected = levels[r["level"]]["per_tensor"][r["tensor"]]
        assert float(r["fill"]) == pytest.approx(expected["fills"])
        assert float(r["read"]) == pytest.approx(expected["reads"])
        assert float(r["update"]) == pytest.approx(expected["updates"])
    for lv, data in levels.items():
        energy = sum(float(r["energy_pj"]) for r in rows if r["level"] == lv)
        assert energy == pytest.approx(data["energy_pj"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flat.csv"]  # no temporary left


def test_compare_csv_has_one_row_per_dataflow_matching_the_json(tmp_path):
    out = tmp_path / "cmp.csv"
    proc = tileflow("compare", "--arch", "edge", "--workload", "mlp", "--json", "--no-plot",
                    "--csv", str(out))
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    rows = _rows(out)
    assert [r["dataflow"] for r in rows] == [r["dataflow"] for r in results]
    base = results[0]["cycles"]
    for row, res in zip(rows, results, strict=True):
        assert row["valid"] == str(res["valid"])
        assert row["model_version"] == res["model_version"] == MODEL_VERSION
        assert row["violations"] == "; ".join(v["message"] for v in res["violations"])
        for key in ("cycles", "dram_words", "energy_pj"):
            assert float(row[key]) == pytest.approx(res[key])
        if res["valid"]:
            assert float(row["speedup"]) == pytest.approx(base / res["cycles"])
            assert float(row["utilization"]) == pytest.approx(res["utilization"])
            assert row["reason"] == ""
        else:  # no speed-up or utilization for a dataflow the chip cannot run: its reason
            assert row["speedup"] == row["utilization"] == ""
            assert row["reason"] == res["reason"] != ""
        for level, words in res["footprint_words"].items():
            assert float(row[f"footprint_words_{level}"]) == pytest.approx(words)
    assert any(not r["valid"] for r in results)  # the invalid rows are exported too


@pytest.mark.slow
def test_compare_plot_names_carry_the_sizes_so_runs_do_not_overwrite(tmp_path):
    for m in (256, 128):
        proc = tileflow("compare", "--arch", "edge", "--workload", "G4", "--set", f"m={m}",
                        cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        title = proc.stdout.splitlines()[0]
        assert "{" not in title and "preset G4" in title and f"m={m}" in title
        assert "accelerator edge" in title
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"compare-attention-b_12-m_{m}-l_256-k_64-n_64-edge.png"
                     for m in (128, 256)]
    assert all((tmp_path / n).read_bytes()[:4] == b"\x89PNG" for n in names)


def test_titles_name_workload_preset_and_accelerator_in_words():
    arch = load_arch("cloud")
    title = run_title(load_workload("C1"), arch, "C1")
    assert title.startswith("workload conv-chain (preset C1; ")
    assert "c0=64" in title and arch.description in title and "{" not in title
    plain = run_title(load_workload("gemm-chain", {"m": 64}), arch, None, {"m": 64})
    assert "default sizes with --set m=64" in plain


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "table.csv"
    write_text_atomic(target, "old\n")

    def broken(handle):
        handle.write("half a fi")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, broken)
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]


def test_shipped_dataflow_files_by_name():
    proc = tileflow("evaluate", "--arch", "edge", "--workload", "gemm-chain", "--dataflow",
                    "gemm-chain-chimera", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["dataflow"] == "chimera"
