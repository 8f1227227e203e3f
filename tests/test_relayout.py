"""`tools/relayout.py`, the move into the layered layout: on a small tree in the old layout
(tests/data/relayout_old_tree.json) it moves whole files, rewrites imports, dotted and file
paths (keeping the public `tileflow.cost` outside the package), leaves unknown files in place
and says so; a second run changes nothing; and this repository is fully moved (a dry run has
nothing to rewrite)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "relayout.py"
CASE = json.loads((REPO / "tests" / "data" / "relayout_old_tree.json").read_text())


def load_script():
    """A fresh copy of the script (its rules are built at import, in the current folder)."""
    spec = importlib.util.spec_from_file_location("relayout_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          cwd=root, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def old_tree(tmp_path, monkeypatch):
    for rel, text in CASE["old_tree"].items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "old layout")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_an_old_tree_is_moved_and_rewritten_once(old_tree, capsys):
    script = load_script()
    assert script.main([]) == 0
    said = capsys.readouterr().out
    for gone, there in CASE["moved"]:
        assert not (old_tree / gone).exists() and (old_tree / there).exists()
    for rel, pieces in CASE["contains"].items():
        text = (old_tree / rel).read_text()
        for piece in pieces:
            assert piece in text, (rel, piece, text)
    for line in CASE["said"]:
        assert line in said
    assert (old_tree / "tileflow/explore/factors/__init__.py").exists()
    git(old_tree, "add", "-A")
    assert script.main([]) == 0
    assert "nothing to rewrite" in capsys.readouterr().out
    assert git(old_tree, "diff") == ""  # nothing changed since the first run was staged
    assert git(old_tree, "ls-files", "--others", "--exclude-standard") == ""


def test_this_repository_needs_no_relayout(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    assert load_script().main(["--dry-run"]) == 0
    said = capsys.readouterr().out
    assert "would" not in said and "nothing to rewrite" in said
