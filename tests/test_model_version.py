"""`MODEL_VERSION` moves with the model's figures: the fingerprint of what a fixed set of
dataflows cost (`tests/model_fingerprint.py`) is recorded beside the version it was taken
under, and a change that moves any figure without raising the version fails here (a study
resumed across it would mix points of two models)."""

from __future__ import annotations

import json

from model_fingerprint import RECORD, fingerprint

from tileflow.provenance import MODEL_VERSION

RECORD_IT = "python tests/model_fingerprint.py --record"


def test_the_model_s_figures_move_only_with_its_version():
    recorded = json.loads(RECORD.read_text())
    assert recorded["model_version"] == MODEL_VERSION, (
        f"MODEL_VERSION is {MODEL_VERSION}, the fingerprint was taken under "
        f"{recorded['model_version']}: record it under the new version ({RECORD_IT})")
    now, then = fingerprint(), recorded["cases"]
    changed = sorted(k for k in now.keys() & then.keys() if now[k] != then[k])
    assert not changed, (
        f"the cost model's figures changed on {len(changed)} cases (first: "
        f"{', '.join(changed[:5])}): raise tileflow.provenance.MODEL_VERSION, then {RECORD_IT} "
        f"(only where a fingerprinted input itself changed, a shipped file or a tree of "
        f"search/quality, record anew without raising it)")
    assert now.keys() == then.keys(), (
        f"the fingerprinted cases changed (new: {sorted(now.keys() - then.keys())[:5]}, gone: "
        f"{sorted(then.keys() - now.keys())[:5]}), not their figures: {RECORD_IT}")
