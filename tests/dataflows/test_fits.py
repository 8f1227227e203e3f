"""The builders size their tiles with the model's own checks (`common.fits`): on every
candidate tree they try, for every shipped workload on three accelerators, the verdict is
the tests' scalar copy's (its structural checks, footprints and fan-out, written apart)."""

from __future__ import annotations

import pytest
from scalar_checks import structural_violations
from scalar_prepare import prepare
from scalar_resources import footprints, spatial_violations

from tileflow import shipped
from tileflow.analysis.tree_checks import InvalidDataflow
from tileflow.dataflows import chain, common, online, registry
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload


def scalar_fits(w, arch, flow) -> bool:
    try:
        plan = prepare(w, arch, flow)
    except InvalidDataflow:
        return False
    return not structural_violations(plan) and not spatial_violations(plan) and all(
        f.words <= f.capacity_words for f in footprints(plan))


@pytest.mark.parametrize("arch", ["edge", "cloud", "cpu"])
def test_every_candidate_tile_gets_the_scalar_copy_s_verdict(arch: str, monkeypatch) -> None:
    verdicts = []
    model_fits = common.fits

    def both(w, a, flow):
        verdicts.append((w.name, flow.name, model_fits(w, a, flow), scalar_fits(w, a, flow)))
        return verdicts[-1][2]

    for module in (common, chain, online):
        monkeypatch.setattr(module, "fits", both)
    chip = load_arch(arch)
    for name in shipped.shipped("workloads"):
        w = load_workload(name)
        for baseline in registry.baselines_for(w):
            try:
                registry.BASELINES[baseline](w, chip, None)
            except InvalidDataflow:
                pass
    assert len(verdicts) >= 100 and any(v[2] for v in verdicts) and not all(v[2] for v in verdicts)
    assert [v for v in verdicts if v[2] != v[3]] == []
