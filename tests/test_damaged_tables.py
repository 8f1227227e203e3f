"""`validate cpu --report-only` and `validate rtl --data` read their CSV files with columns,
types and ranges checked: a damaged file (empty, cut off mid-line, binary, Latin-1, ragged,
a missing or non-numeric column, a time that is zero, negative or infinite) ends with exit 2
naming the file, the line and the column, never a traceback; JSON outputs hold no NaN."""

from __future__ import annotations

import json
import math

import pytest

from tests.calibrate.test_cpu_report import saved_campaign
from tileflow.cli import main
from tileflow.outputs import finite

GEMM = "M,N,K,tile_M,tile_N,tile_K,rtl_cycles\n16,64,16,16,16,16,702\n16,64,32,16,16,16,1262\n"
FUSED = ("M,L,K,N,tile_M,tile_K,tile_L,rtl_cycles,dram_to_buffer_bits,buffer_to_dram_bits,"
         "buffer_to_reg_bits,reg_to_buffer_bits\n"
         "64,64,16,16,16,16,16,54297,3407872,52428,7602176,3774873\n"
         "64,64,16,16,16,16,32,53753,3407872,52428,7602176,3774873\n")

# damage -> (bytes of the gemm file, what the message must name besides the file)
DAMAGES = {
    "empty": (b"", ["empty"]),
    "blank": (b"\n\n", ["empty"]),
    "cut mid-line": (GEMM.encode()[:-9], ["line 3", "cut off"]),
    "binary": (bytes(range(256)) * 4, ["binary"]),
    "latin-1": (GEMM.replace("702", "70\xe9").encode("latin-1"), ["UTF-8", "line 2"]),
    "ragged": (GEMM.replace("702", "702,5").encode(), ["line 2", "8 fields"]),
    "missing column": (GEMM.replace(",rtl_cycles", "").replace(",702", "")
                       .replace(",1262", "").encode(), ["rtl_cycles", "line 1"]),
    "non-numeric": (GEMM.replace("702", "fast").encode(), ["line 2", "rtl_cycles", "fast"]),
    "zero": (GEMM.replace("702", "0").encode(), ["line 2", "rtl_cycles"]),
    "negative": (GEMM.replace("1262", "-5").encode(), ["line 3", "rtl_cycles"]),
    "infinite": (GEMM.replace("702", "inf").encode(), ["line 2", "rtl_cycles"]),
    "nan": (GEMM.replace("702", "nan").encode(), ["line 2", "rtl_cycles"]),
    "fractional tile": (GEMM.replace("16,16,16,702", "16,16,1.5,702").encode(),
                        ["line 2", "tile_K", "integer"]),
    "empty value": (GEMM.replace(",702", ",").encode(), ["line 2", "rtl_cycles", "empty"]),
    # headers swapped: a cycle count read as a size would take the analysis hours
    "swapped header": (GEMM.replace("M,N,K,tile_M,tile_N,tile_K,rtl_cycles",
                                    "rtl_cycles,N,K,tile_M,tile_N,tile_K,M")
                       .replace("702", "54297").encode(),
                       ["line 2", "'M'", "16,384"]),
}


@pytest.mark.parametrize("damage", DAMAGES, ids=str)
def test_validate_rtl_names_the_damage(damage, tmp_path, capsys):
    data, words = DAMAGES[damage]
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "gemm_1152.csv").write_bytes(data)
    (folder / "gemm_chain_131.csv").write_text(FUSED)
    code = main(["validate", "rtl", "--data", str(folder), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "gemm_1152.csv" in err and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)
    assert not (tmp_path / "out").exists()


CPU_DAMAGES = {
    "min_s zero": ("min_s", "0", ["min_s"]),
    "min_s negative": ("min_s", "-1e-3", ["min_s"]),
    "measured_s infinite": ("measured_s", "inf", ["measured_s"]),
    "model_s not a number": ("model_s", "slow", ["model_s", "slow"]),
    "macs empty": ("macs", "", ["macs", "empty"]),
    "traffic negative": ("measured_first_level_bytes", "-4", ["measured_first_level_bytes"]),
}


@pytest.mark.parametrize("damage", CPU_DAMAGES, ids=str)
def test_validate_cpu_report_names_the_row_and_column(damage, tmp_path, capsys):
    column, value, words = CPU_DAMAGES[damage]
    folder = tmp_path / "cpu"
    frame = saved_campaign(folder)
    frame[column] = frame[column].astype(object)
    frame.loc[7, column] = value
    frame.to_csv(folder / "measurements.csv", index=False)
    code = main(["validate", "cpu", "--report-only", "--out", str(folder)])
    err = capsys.readouterr().err
    assert code == 2 and "measurements.csv" in err and "line 9" in err, err  # row 7: line 9
    for word in words:
        assert word in err
    assert not (folder / "summary.json").exists()


@pytest.mark.parametrize("damage", ["empty", "cut mid-line", "binary", "latin-1", "ragged"])
def test_validate_cpu_report_refuses_a_damaged_file(damage, tmp_path, capsys):
    folder = tmp_path / "cpu"
    saved_campaign(folder)
    text = (folder / "measurements.csv").read_bytes()
    data = {"empty": b"", "cut mid-line": text[:len(text) // 2],
            "binary": b"\x00\x01" + text, "latin-1": text.replace(b"gemm-chain", b"gemm\xe9", 1),
            "ragged": text.replace(b"\n", b",x\n", 3)}[damage]
    (folder / "measurements.csv").write_bytes(data)
    code = main(["validate", "cpu", "--report-only", "--out", str(folder)])
    err = capsys.readouterr().err
    assert code == 2 and "measurements.csv" in err and "Traceback" not in err, err


def test_json_outputs_never_hold_nan():
    value = {"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": "nan", "e": 2}
    assert finite(value) == {"a": None, "b": [1.0, None, {"c": None}], "d": "nan", "e": 2}
    json.dumps(finite(value), allow_nan=False)


def test_validate_cpu_report_checks_the_tree_column(tmp_path, capsys):
    """Headers swapped (tree <-> another column): the tree column must hold JSON objects."""
    folder = tmp_path / "cpu"
    frame = saved_campaign(folder)
    frame.loc[3, "tree"] = "12.5"
    frame.to_csv(folder / "measurements.csv", index=False)
    code = main(["validate", "cpu", "--report-only", "--out", str(folder)])
    err = capsys.readouterr().err
    assert code == 2 and "line 5, column 'tree'" in err and "JSON object" in err, err


@pytest.mark.parametrize("column", ["dataflow", "kind", "model_bottleneck", "measured_s"])
def test_validate_cpu_report_needs_the_columns_the_report_reads(column, tmp_path, capsys):
    folder = tmp_path / "cpu"
    saved_campaign(folder).drop(columns=[column]).to_csv(folder / "measurements.csv",
                                                         index=False)
    code = main(["validate", "cpu", "--report-only", "--out", str(folder)])
    err = capsys.readouterr().err
    assert code == 2 and "line 1" in err and column in err and "Traceback" not in err, err


def test_a_damaged_retest_file_is_named(tmp_path, capsys):
    folder = tmp_path / "cpu"
    saved_campaign(folder)
    (folder / "retest.csv").write_text("key,workload,min_s,min_s_again\nk0,attention,1e-3,\n")
    code = main(["validate", "cpu", "--report-only", "--out", str(folder)])
    err = capsys.readouterr().err
    assert code == 2 and "retest.csv, line 2, column 'min_s_again'" in err, err


def _strict(text: str):
    """JSON that may not hold NaN or infinities (Python's reader takes them by default)."""
    def refuse(constant: str):
        raise AssertionError(f"{constant} in JSON output")
    return json.loads(text, parse_constant=refuse)


def test_an_undefined_metric_is_null_in_the_json_and_the_summary(tmp_path, capsys):
    """Every GEMM measurement takes the same cycles: their R^2 and rank correlation are
    undefined. They are written as null, never as NaN, on stdout and in summary.json."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "gemm_1152.csv").write_text(GEMM.replace("1262", "702"))
    (folder / "gemm_chain_131.csv").write_text(FUSED)
    code = main(["validate", "rtl", "--data", str(folder), "--out", str(tmp_path / "out"),
                 "--json"])
    said = capsys.readouterr()
    assert code == 0, said.err
    for data in (_strict(said.out), _strict((tmp_path / "out" / "summary.json").read_text())):
        assert data["gemm_r2"] is None and data["gemm_spearman_within_shape_mean"] is None
