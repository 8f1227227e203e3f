"""The surfaces' fuzz corpus (tests/fuzz_surfaces.py): seeded, it covers explore, studies,
sweep, import and validate, and a small slice of it passes through the real command line.
The whole corpus runs with `python -m tests.fuzz_surfaces --cases 1500`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.fuzz_surfaces import KEEP, Case, generate, judge_surface, run_case

CORPUS = generate(1500, seed=21)
SLICE = CORPUS[7::250]  # 6 cases


def test_the_corpus_is_seeded_and_covers_every_surface():
    again = generate(1500, seed=21)
    assert [(c.args, c.files) for c in again] == [(c.args, c.files) for c in CORPUS]
    kinds = Counter(c.kind for c in CORPUS)
    assert len(CORPUS) == 1500
    assert set(kinds) == {"explore", "study", "sweep", "import", "validate"}
    assert min(kinds.values()) >= 100
    assert sum(c.must_fail for c in CORPUS) >= 300  # known-bad inputs: no silent accept


@pytest.mark.parametrize("case", SLICE, ids=lambda c: c.ident[:60])
def test_sliced_case(case):
    outcome, detail = run_case(case, timeout_s=120)
    assert outcome in ("ok", "error"), f"{outcome}: {' '.join(case.args)}\n{detail}"


def test_the_judge_finds_silent_accepts_and_lost_files(tmp_path: Path):
    bad = Case("bad", "explore", ["explore"], {}, ["c.yaml, line "], must_fail=True, out="out")
    assert judge_surface(bad, 0, "{}", "", tmp_path)[0] == "silent"
    keep = tmp_path / "out" / KEEP
    assert judge_surface(bad, 2, "", "tileflow: error: c.yaml, line 3: x\n", tmp_path,
                         keep)[0] == "lost"
    keep.parent.mkdir()
    keep.write_text("notes")
    assert judge_surface(bad, 2, "", "tileflow: error: c.yaml, line 3: x\n", tmp_path,
                         keep)[0] == "error"
    assert judge_surface(bad, 2, "", "tileflow: error: something\n", tmp_path)[0] == \
        "unlocated"
    listed = Case("ok", "explore", ["explore"], {}, [], out="out")
    assert judge_surface(listed, 0, '{"files": {"a": "out/a.csv"}}', "", tmp_path)[0] == \
        "lost"
    imported = Case("imp", "import", ["import"], {}, [], out="out")
    assert judge_surface(imported, 0, "wrote out/x.yaml\n", "", tmp_path)[0] == "lost"
    (tmp_path / "out" / "x.yaml").write_text("x")
    assert judge_surface(imported, 0, "wrote out/x.yaml\n", "", tmp_path)[0] == "ok"
    notes = "wrote out/x.yaml\nnotes (1):\n  x.yaml, line 3 (meshX): not read\n"
    assert judge_surface(imported, 0, notes, "", tmp_path)[0] == "ok"
    assert judge_surface(imported, 0, notes + "stray\n", "", tmp_path)[0] == "wrong"
    assert judge_surface(imported, 0, "notes (1):\n  x\n", "", tmp_path)[0] == "wrong"
