"""Without the RTL dataset, `tileflow validate rtl` says where the measurements come from,
which files and columns it needs and how to point at them, and exits with status 2."""

from __future__ import annotations

from test_cli import tileflow

from tileflow.rtl.study import COLUMNS, FILES


def test_validate_rtl_without_the_dataset_explains_where_to_get_it(tmp_path):
    proc = tileflow("validate", "rtl", "--data", str(tmp_path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    message = proc.stderr
    assert "Traceback" not in message and str(tmp_path) in message
    assert "TileFlow paper" in message and "MIT licence" in message
    assert "github.com/pku-liang/TileFlow" in message
    for key, name in FILES.items():
        assert name in message
        assert ", ".join(COLUMNS[key]) in message
    assert "--data DIR" in message
    assert not (tmp_path / "out").exists()


def test_validate_rtl_names_the_missing_columns(tmp_path):
    (tmp_path / "gemm_1152.csv").write_text("M,N,K,tile_M,tile_N,tile_K,rtl_cycles\n"
                                            "16,16,16,16,16,16,100\n")
    (tmp_path / "gemm_chain_131.csv").write_text("M,L,K,N,tile_M\n64,64,16,16,16\n")
    proc = tileflow("validate", "rtl", "--data", str(tmp_path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "gemm_chain_131.csv" in proc.stderr and "missing columns tile_K, tile_L" in proc.stderr
