"""The online-softmax section of the reference report: the best of each form per shape (the
fewest cycles among valid rows, fitted or explored), ratios computed from them, and a
rerun that replaces the section between its markers instead of appending another."""

from __future__ import annotations

import pandas as pd

from tileflow.commands.online_study import BEGIN, END, section, write_online


def _frame() -> pd.DataFrame:
    rows = []
    for arch in ("edge", "cloud"):
        for form, name, cycles, valid, bound in (
                ("five-operator", "layerwise", 1000.0, True, "DRAM read bandwidth"),
                ("five-operator", "tileflow-pipe", 400.0, True, "vector unit"),
                ("five-operator", "chimera", 100.0, False, "vector unit"),  # invalid: skipped
                ("online", "flash", 500.0, True, "vector unit"),
                ("online", "explored (flash-pipe)", 250.0, True, "matrix unit")):
            rows.append({"arch": arch, "preset": "G1", "form": form, "dataflow": name,
                         "l_steps": 4 if form == "online" else 1, "valid": valid,
                         "cycles": cycles, "dram_words": 2e6 if form == "online" else 1e6,
                         "energy_pj": 1.0, "vector_ops": 3e6 if form == "online" else 4e6,
                         "bottleneck": bound, "budget_evals": 100,
                         "speedup": 1000.0 / cycles})
    return pd.DataFrame(rows)


def test_section_compares_the_best_valid_dataflow_of_each_form():
    text = section(_frame(), "tileflow reproduce --online-only")
    row = next(line for line in text.splitlines() if line.startswith("| G1"))
    # five-operator: tileflow-pipe (400; chimera is invalid), online: the explored 250
    assert row.startswith("| G1 | 2.50x tileflow-pipe | 4.00x explored (flash-pipe) | 1.60x | 4 |")
    assert "1.00M / 2.00M" in row and "4.00M / 3.00M" in row
    assert "vector unit; matrix unit" in row
    assert "the online form is 1.60x faster" in text
    assert "bound by the vector unit (1 of 1 shapes), the online ones by the matrix unit" in text
    assert "tiles l (more than one l step) in 1 of 1 shapes" in text


def test_rerun_replaces_the_section(tmp_path):
    report = tmp_path / "reference-experiments.md"
    report.write_text("# Reference experiments\n\nbody\n")
    write_online(_frame(), tmp_path, "cmd")
    first = report.read_text()
    assert first.startswith("# Reference experiments\n\nbody\n\n" + BEGIN)
    write_online(_frame(), tmp_path, "cmd")
    assert report.read_text() == first
    assert first.count(BEGIN) == 1 and first.count(END) == 1
    assert (tmp_path / "online-softmax.csv").exists()
