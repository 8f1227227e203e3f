"""Every target of the RTL report is judged met or missed against its threshold, and each
one missed carries the mechanism still missing; figures below are chosen by hand."""

from __future__ import annotations

from tileflow.rtl.targets import TARGETS, status, targets_section

FIGURES = {"mape": 0.02, "r2": 0.999, "spearman_within_shape_mean": 0.95,
           "top1_regret_mean": 0.01, "top1_regret_max": 0.02}
HALF = {"read_words_per_cycle": 4.0, "write_words_per_cycle": 3.5,
        "step_overhead_cycles": 20.0, "latency_cycles": 0.0}


def summary(**figures) -> dict:
    s = {"fused_dram_exact_rows": 131}
    for kind in ("gemm", "fused"):
        for key, value in FIGURES.items():
            s[f"{kind}_{key}"] = value
        s[f"{kind}_mape_calibrated_heldout"] = 0.01
        s[f"{kind}_r2_calibrated_heldout"] = 0.999
        s[f"{kind}_calibrated_heldout"] = dict(FIGURES)
        s[f"{kind}_calibrated_dram_parameters"] = [HALF, HALF]
        s[f"{kind}_overlap_lockstep"] = dict(FIGURES)
    s.update(figures)
    return s


def test_thresholds_are_judged_as_the_issue_states_them():
    # the fused Spearman target is >= 0.90: 0.90 meets it, 0.899 does not; GEMM MAPE < 10 %:
    # exactly 10 % misses it; 130 of 131 rows with exact DRAM traffic misses
    s = summary(fused_spearman_within_shape_mean=0.90, gemm_mape=0.10,
                fused_dram_exact_rows=130)
    met = {e["figure"]: e["met"] for e in status(s)}
    assert met["fused_spearman_within_shape_mean"] and not met["gemm_mape"]
    assert not met["fused_dram_exact_rows"] and met["gemm_r2"]
    assert not status(summary(fused_spearman_within_shape_mean=0.899))[0]["met"]
    assert len(status(s)) == len(TARGETS) == 9


def test_every_missed_target_names_its_mechanism_in_summary_and_report():
    s = summary(gemm_top1_regret_mean=0.05)
    s["targets"] = status(s)
    missed = [e for e in s["targets"] if not e["met"]]
    assert [e["figure"] for e in missed] == ["gemm_top1_regret_mean"]
    assert "cost per DRAM-level step" in missed[0]["missing_mechanism"]
    assert all("missing_mechanism" not in e for e in s["targets"] if e["met"])
    text = "\n".join(targets_section(s))
    assert "| GEMM top-1 regret, mean | <= 3.00% | 5.00% | **no** | 1.00% |" in text
    assert text.count("**no**") == 1
