"""A time budget caps the whole `tileflow explore` process, outputs included, even where
drawing the figures would take longer than the time left (a loaded machine: matplotlib's
import and two figures took 4.8-8 s in the quality suite's 60 s units): the essential
outputs are written first, the figures only within the deadline, and `tileflow figures OUT`
draws the skipped ones from the saved folder."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tileflow.cli import main

CONFIG = """\
accelerator: edge
workload: gemm-chain
sizes: {b: 2, m: 256, l: 128, k: 32, n: 32}
structures: [tileflow-pipe]
batch: 16
budget: {seconds: 5}
"""
BUDGET_S = 5.0
TOLERANCE_S = 1.0  # the interpreter's exit and a loaded machine's scheduling
# the command line with a convergence plot that takes 60 s (a stand-in for a slow machine)
SLOW_FIGURES = textwrap.dedent("""\
    import sys, time
    from tileflow.explore.studies import figures
    draw = figures.convergence_plot
    def slow(data, path):
        time.sleep(60)
        draw(data, path)
    figures.convergence_plot = slow
    from tileflow.cli import main
    sys.argv = ["tileflow", *sys.argv[1:]]
    sys.exit(main())
    """)


def test_slow_figures_are_skipped_within_the_budget_and_redrawn_later(tmp_path: Path):
    config = tmp_path / "study.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "out"
    (out).mkdir()
    (out / "convergence.png").write_bytes(b"an earlier run's figure")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", SLOW_FIGURES, "explore", str(config),
                           "--out", str(out), "--quiet"], capture_output=True, text=True)
    wall_s = time.perf_counter() - start  # from before the interpreter started
    assert done.returncode == 0, done.stderr
    assert wall_s <= BUDGET_S + TOLERANCE_S
    summary = json.loads((out / "summary.json").read_text())
    skipped = summary["figures_skipped"]
    assert skipped["files"][0] == "convergence.png"  # drawn first, it never finished
    assert skipped["redraw"] == f"tileflow figures {out}"
    for name in skipped["files"]:  # not listed, not left from the earlier run
        assert name not in summary["files"] and not (out / name).exists()
    assert not list(out.glob(".convergence.png.*"))  # no temporary file left behind
    for name in ("best.yaml", "points.csv", "summary.md", "timeline.json"):
        assert (out / name).is_file() and name in summary["files"]
    md = (out / "summary.md").read_text()
    assert "![convergence](convergence.png)" not in md
    assert f"`tileflow figures {out}` draws them" in md
    assert "convergence.png" in done.stderr and "tileflow figures" in done.stderr
    # the saved folder alone is enough to draw them
    assert main(["figures", str(out)]) == 0
    for name in ("convergence.png", "timeline.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figures_are_drawn_when_there_is_time(tmp_path: Path):
    config = tmp_path / "study.yaml"
    config.write_text(CONFIG.replace("seconds: 5", "evaluations: 64"))
    out = tmp_path / "out"
    assert main(["explore", str(config), "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "figures_skipped" not in summary
    for name in ("convergence.png", "timeline.png"):
        assert name in summary["files"] and (out / name).is_file()
    assert "![convergence](convergence.png)" in (out / "summary.md").read_text()


def test_figures_of_a_folder_that_is_not_a_study_exit_2(tmp_path: Path, capsys):
    assert main(["figures", str(tmp_path)]) == 2
    assert "no summary.json" in capsys.readouterr().err
