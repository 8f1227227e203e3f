"""Outputs are checked before any work starts and written atomically: an interrupted or
failed write leaves the final name untouched (absent, or its previous content) and no
temporary file behind."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tileflow.errors import InputError
from tileflow.outputs import (
    PLOT_SUFFIXES,
    check_output_file,
    check_output_folder,
    json_text,
    write_atomic,
    write_text_atomic,
)


def test_a_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "out.csv"
    write_text_atomic(path, "a,b\n1,2\n")
    write_text_atomic(path, "a,b\n3,4\n")
    assert path.read_text() == "a,b\n3,4\n"
    assert os.listdir(tmp_path) == ["out.csv"]


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, OSError])
def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, interrupt):
    path = tmp_path / "out.csv"
    path.write_text("old\n")

    def half_then_stop(handle):
        handle.write("new, but only half")
        raise interrupt(28, "No space left on device")

    with pytest.raises(KeyboardInterrupt if interrupt is KeyboardInterrupt else InputError):
        write_atomic(path, half_then_stop)
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.csv"]


def test_a_full_device_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot write"):
        write_atomic(Path("/proc/no-such-folder/out.png"), lambda h: h.write(b"x"), binary=True)


@pytest.mark.parametrize("name, message", [
    ("chart", "must end in .png or .pdf or .svg"),
    ("chart.jpeg", "must end in .png or .pdf or .svg"),
    ("missing/chart.png", "no such folder"),
    ("file.txt/chart.png", "(?i)not a (folder|directory)"),
])
def test_output_file_checks(tmp_path, name, message):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(InputError, match=message):
        check_output_file(tmp_path / name, PLOT_SUFFIXES, "--plot")


def test_special_files_and_folders_are_not_outputs(tmp_path):
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(InputError, match="not a regular file"):
        check_output_file(tmp_path / "dir.png", PLOT_SUFFIXES, "--plot")
    with pytest.raises(InputError, match="not a regular file"):
        check_output_file("/dev/null", ("",), "--plot")


def test_output_folder_is_created_or_refused(tmp_path):
    assert check_output_folder(tmp_path / "a" / "b", "--out").is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="--out"):
        check_output_folder(tmp_path / "file" / "sub", "--out")


@pytest.mark.parametrize("name", ["out\nline", "tab\there", "bell\x07", "del\x7f"])
def test_an_output_path_with_a_control_character_is_refused(tmp_path, name):
    """Paths are printed one per line: `wrote out\\nline/x.yaml` would read as two lines."""
    with pytest.raises(InputError, match="control character"):
        check_output_folder(tmp_path / name, "--out")
    with pytest.raises(InputError, match="control character"):
        check_output_file(tmp_path / f"{name}.csv", [".csv"], "--out")
    assert not (tmp_path / name).exists()


def test_import_refuses_an_out_folder_with_a_newline(tmp_path, capsys):
    from tileflow.cli import main

    code = main(["import", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "a\nb")])
    assert code == 2 and "--out" in capsys.readouterr().err


def _refuse(token: str):
    raise ValueError(f"non-finite number {token} in the JSON")


_numbers = st.one_of(st.floats(), st.integers(-2**40, 2**40),
                     st.floats(width=32).map(np.float32), st.floats().map(np.float64),
                     st.integers(-2**31, 2**31).map(np.int64), st.booleans().map(np.bool_))
_documents = st.recursive(_numbers | st.text(max_size=5) | st.none(),
                          lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                          max_leaves=20)


def _same(read, value) -> bool:
    """Whether `read` (parsed JSON) is `value` with non-finite numbers as None."""
    if isinstance(value, dict):
        return read.keys() == value.keys() and all(_same(read[k], v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return len(read) == len(value) and all(map(_same, read, value))
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        return read is None
    if isinstance(value, np.generic):
        return read == value.item() and type(read) is type(value.item())
    return read == value


@given(_documents)
def test_json_text_is_strict_json_with_null_for_what_is_not_a_finite_number(value):
    """Any figure NaN or infinite (Python's or NumPy's) becomes null, every other value
    reads back as itself, and the text parses where NaN is refused."""
    read = json.loads(json_text(value), parse_constant=_refuse)
    assert _same(read, value)
