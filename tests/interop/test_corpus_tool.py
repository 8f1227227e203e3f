"""tools/timeloop_corpus.py reads Timeloop's stats.txt as written: counts per level and
tensor over the utilised instances, energies per level with the leakage, the total from the
fJ/Compute summary (current releases) or the topology's total (2022 releases)."""

from __future__ import annotations

from tests.interop.samples import STATS_V04, write
from tools.timeloop_corpus import ert_beside, reference, reference_energy


def test_counts_energies_and_total_of_a_current_release(tmp_path):
    stats = tmp_path / "timeloop-mapper.stats.txt"
    write(tmp_path, stats.name, STATS_V04)
    assert reference(stats)["counts"] == {("Buffer", "Weights"): [100, 20, 0],
                                          ("Buffer", "Outputs"): [0, 0, 10]}
    assert reference_energy(stats) == {"levels": {"mac": 25, "Buffer": 75},
                                       "leak": {"Buffer": 2.5}, "total": 100,
                                       "computes": 100}


def test_the_2022_total_and_the_ert_beside_the_stats(tmp_path):
    text = STATS_V04.replace("Computes = 100", "MACCs = 100").replace(
        "Summary Stats", "Total topology energy: 100.00 pJ\n\nSummary Stats").replace(
        "fJ/Compute", "pJ/MACC")
    stats = tmp_path / "timeloop-model.stats.txt"
    write(tmp_path, stats.name, text)
    assert reference_energy(stats)["total"] == 100
    assert ert_beside(stats) is None
    write(tmp_path, "timeloop-model.ERT.yaml", "ERT: {version: 0.4, tables: []}\n")
    assert ert_beside(stats) == tmp_path / "timeloop-model.ERT.yaml"
