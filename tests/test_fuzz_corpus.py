"""The fuzz corpus (tests/fuzz_corpus.py): the generator is seeded and covers every input
kind, and a sample of it passes through the real command line — each case a subprocess with
a timeout and a memory cap, ending in exit 2 with a located message or in a finite, correct
result. The whole corpus runs with `python -m tests.fuzz_corpus --cases 1500`."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.fuzz_corpus import Case, generate, judge, run_case

CORPUS = generate(1500, seed=6)
SAMPLE = CORPUS[::25]  # 60 cases


def test_the_corpus_is_seeded_and_covers_every_kind():
    again = generate(1500, seed=6)
    assert [(c.args, c.files) for c in again] == [(c.args, c.files) for c in CORPUS]
    assert generate(50, seed=7)[0].args != CORPUS[0].args or \
        generate(50, seed=7)[0].files != CORPUS[0].files
    kinds = Counter(c.kind for c in CORPUS)
    assert len(CORPUS) == 1500
    assert set(kinds) == {"accelerator", "workload", "dataflow", "flags", "filesystem"}
    assert min(kinds.values()) >= 100


@pytest.mark.slow
@pytest.mark.parametrize("case", SAMPLE, ids=lambda c: c.ident[:60])
def test_sampled_case(case):
    outcome, detail = run_case(case, timeout_s=60)
    assert outcome in ("ok", "error"), f"{outcome}: {' '.join(case.args)}\n{detail}"


# The judge itself: what it must refuse.
CASE = Case("judge", "accelerator", ["evaluate"], {}, ["arch.yaml, line "], macs=12)


@pytest.mark.parametrize("code, out, err, outcome", [
    (2, "", "tileflow: error: arch.yaml, line 3 (levels[0]): bad\n", "error"),
    (2, "", "tileflow: error: bad, but where?\n", "unlocated"),
    (2, "", "tileflow: error: arch.yaml, line 3: two\nparagraphs\n", "bad-exit"),
    (1, "", "Traceback (most recent call last):\n  ...\nKeyError: 'x'\n", "traceback"),
    (0, '{"cycles": NaN, "macs": 12}', "", "nonfinite"),
    (0, '{"cycles": Infinity, "macs": 12}', "", "nonfinite"),
    (0, '{"cycles": 1e999, "macs": 12}', "", "nonfinite"),
    (0, '{"cycles": 5, "macs": 11}', "", "wrong"),
    (0, '{"cycles": 5, "macs": 12, "energy_pj": -1}', "", "wrong"),
    (0, '{"cycles": 5, "macs": 12}', "", "ok"),
    (0, '[{"cycles": 5, "macs": 12}, {"cycles": 0, "macs": 12}]', "", "wrong"),
    (-9, "", "", "bad-exit"),
])
def test_the_judge(code, out, err, outcome):
    assert judge(CASE, code, out, err)[0] == outcome


def test_a_usage_error_names_the_flag():
    case = Case("usage", "flags", ["compare", "--arch", "edge", "--double-buffer"], {}, [])
    err = "tileflow: error: unrecognized arguments: --double-buffer (see 'tileflow --help')\n"
    assert judge(case, 2, "", err)[0] == "error"
    assert judge(case, 2, "", "tileflow: error: something is wrong\n")[0] == "unlocated"
