"""Spec files are read defensively: whatever is at the path (a folder, a device, a huge or
binary file, deep nesting, alias bombs), the answer is exit 2 with the file and, where the
problem has one, the line — before any memory or time is spent on it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tileflow.cli import main
from tileflow.specs.yamlfile import MAX_DEPTH, MAX_FILE_BYTES

REPO = Path(__file__).resolve().parents[2]
EDGE = (REPO / "accelerators" / "edge.yaml").read_text()


def run_arch(capsys, path: str) -> tuple[int, str]:
    code = main(["evaluate", "--arch", path, "--workload", "attention", "--dataflow",
                 "layerwise"])
    return code, capsys.readouterr().err


def check(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert err.startswith("tileflow: error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, err


def test_nul_byte_names_its_line(tmp_path, capsys):
    path = tmp_path / "a.yaml"
    path.write_bytes(EDGE.encode().replace(b"word_bits: 16", b"word_bits: 1\x006"))
    line = EDGE[: EDGE.index("word_bits")].count("\n") + 1
    check(*run_arch(capsys, str(path)), f"a.yaml, line {line}", "control character 0x00")


def test_non_utf8_byte_names_its_line(tmp_path, capsys):
    path = tmp_path / "a.yaml"
    path.write_bytes(EDGE.encode().replace(b"name: edge", b"name: ed\xffge"))
    line = EDGE[: EDGE.index("name: edge")].count("\n") + 1
    check(*run_arch(capsys, str(path)), f"a.yaml, line {line}", "byte 0xff is not UTF-8")


@pytest.mark.parametrize("char", ["\x1b", "\x7f", "\x85"])
def test_control_characters(tmp_path, capsys, char):
    path = tmp_path / "a.yaml"
    path.write_text(EDGE.replace("name: edge", f"name: ed{char}ge"), encoding="utf-8")
    check(*run_arch(capsys, str(path)), "a.yaml, line", "control character")


def test_deep_nesting(tmp_path, capsys):
    path = tmp_path / "a.yaml"
    path.write_text("a: " + "[" * 500 + "]" * 500 + "\n")
    check(*run_arch(capsys, str(path)), "a.yaml, line 1", f"more than {MAX_DEPTH} levels")


def test_nesting_within_the_limit_is_read(tmp_path, capsys):
    path = tmp_path / "a.yaml"
    path.write_text("a: " + "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2) + "\n")
    check(*run_arch(capsys, str(path)), "unknown key 'a'")  # parsed, then validated


@pytest.mark.parametrize("tail", ["", "d: 1\n"], ids=["plain", "duplicate-key"])
def test_billion_laughs_is_refused_at_once(tmp_path, capsys, tail):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        lines.append(f"{chr(ord('a') + i)}: &{chr(ord('a') + i)} [" + ", ".join([f"*{prev}"] * 10)
                     + "]")
    path = tmp_path / "a.yaml"
    path.write_text("\n".join(lines) + "\nd: 1\n" + tail)
    start = time.monotonic()
    check(*run_arch(capsys, str(path)), "a.yaml, line 2", "aliases")
    assert time.monotonic() - start < 5


def test_oversized_file(tmp_path, capsys):
    path = tmp_path / "a.yaml"
    path.write_text("# " + "x" * MAX_FILE_BYTES + "\n")
    check(*run_arch(capsys, str(path)), "a.yaml", "bytes")


@pytest.mark.parametrize("text, words", [
    ("", ["line 1 (top level)", "expected a mapping, got nothing"]),
    ("# only a comment\n", ["line 1 (top level)", "expected a mapping"]),
    ("- a\n- b\n", ["line 1 (top level)", "expected a mapping, got a list"]),
    ("just text\n", ["line 1 (top level)", "expected a mapping, got str"]),
])
def test_empty_or_non_mapping_file(tmp_path, capsys, text, words):
    path = tmp_path / "a.yaml"
    path.write_text(text)
    check(*run_arch(capsys, str(path)), "a.yaml", *words)


def test_device_is_not_read(capsys):
    check(*run_arch(capsys, "/dev/zero"), "/dev/zero", "special file")


def test_folder(tmp_path, capsys):
    check(*run_arch(capsys, str(tmp_path)), "got a folder")


def test_fifo_is_not_opened(tmp_path, capsys):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    check(*run_arch(capsys, str(fifo)), "special file")


def test_path_too_long(capsys):
    check(*run_arch(capsys, "/tmp/" + "x" * 5000 + ".yaml"), "x.yaml")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_unreadable_folder(tmp_path, capsys):
    folder = tmp_path / "locked"
    folder.mkdir()
    (folder / "a.yaml").write_text(EDGE)
    folder.chmod(0)
    try:
        check(*run_arch(capsys, str(folder / "a.yaml")), "a.yaml")
    finally:
        folder.chmod(0o700)
