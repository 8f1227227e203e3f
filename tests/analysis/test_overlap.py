"""The overlap convention, selectable per accelerator (`overlap:`), per call and on the command
line (`--overlap`): hand-derived cycles of one small pipeline under both conventions."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import GEMM, small_arch, workload

from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.specs.arch import parse_arch
from tileflow.specs.yamlfile import Field
from tileflow.tree import Dataflow, tile

REPO = Path(__file__).resolve().parents[2]
# m=n=k=4, two DRAM steps over n. Per run: A and B loaded once (32 words at 4 words/cycle:
# 8 cycles), 64 steps on one MAC, C written back once (16 words: 4 cycles).
# perfect: max(8, 64, 4) = 64; fill-drain: + (8 + 64 + 4 - 64) / 2 steps = 70.
PERFECT, FILL_DRAIN = 64, 64 + (8 + 64 + 4 - 64) / 2
FLOW = Dataflow(tile("DRAM", "n:2", tile("L1", "m:4 n:2 k:4", "mm")))


def test_the_accelerator_chooses_the_convention_and_a_call_overrides_it():
    w = workload(GEMM, m=4, n=4, k=4)
    arch = small_arch()
    assert arch.overlap == "fill-drain"
    assert evaluate(w, arch, FLOW).cycles == FILL_DRAIN
    perfect = replace(arch, overlap="perfect")
    assert evaluate(w, perfect, FLOW).cycles == PERFECT
    assert evaluate(w, perfect, FLOW, overlap="fill-drain").cycles == FILL_DRAIN
    assert evaluate(w, arch, FLOW, overlap="perfect").cycles == PERFECT
    with pytest.raises(ValueError, match="perfect, fill-drain"):
        evaluate(w, arch, FLOW, overlap="some")


def test_the_first_word_latency_is_charged_only_with_fill_and_drain():
    w = workload(GEMM, m=4, n=4, k=4)
    dram = replace(small_arch().levels[0], latency_cycles=30)
    arch = replace(small_arch(), levels=(dram, *small_arch().levels[1:]))
    assert evaluate(w, arch, FLOW).cycles == FILL_DRAIN + 30
    assert evaluate(w, arch, FLOW, overlap="perfect").cycles == PERFECT


ARCH_YAML = """
name: tiny
levels:
  - {name: DRAM, read_words_per_cycle: 4, write_words_per_cycle: 4}
  - {name: L1, capacity_words: 4096, read_words_per_cycle: 16, write_words_per_cycle: 16}
compute:
  matrix: {rows: 1, cols: 1, level: L1}
"""


def _arch_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(ARCH_YAML.replace("name: tiny", "name: tiny" + extra))
    return path


def test_the_accelerator_file_key_is_read_and_checked(tmp_path):
    from ruamel.yaml import YAML

    data = YAML(typ="rt").load(ARCH_YAML + "overlap: perfect\n")
    assert parse_arch(Field(data, "a.yaml")).overlap == "perfect"
    bad = YAML(typ="rt").load(ARCH_YAML + "overlap: yes\n")
    with pytest.raises(InputError, match="'overlap' must be one of perfect, fill-drain"):
        parse_arch(Field(bad, "a.yaml"))


def _cycles(*args: str) -> float:
    proc = subprocess.run([sys.executable, "-m", "tileflow.cli", "evaluate", *args, "--json"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["cycles"]


def test_the_command_line_flag_wins_over_the_file(tmp_path):
    """One MAC: 64 steps; DRAM-level loop n:2 as above on a 1 x 1 array fed from L1."""
    arch = _arch_file(tmp_path, "\noverlap: perfect")
    flow = tmp_path / "flow.yaml"
    flow.write_text("root: {level: DRAM, loops: [n:2], children: [{level: L1, "
                    "loops: [m:4, n:2, k:4], children: [mm]}]}\n")
    wl = tmp_path / "gemm.yaml"
    wl.write_text(GEMM)
    common = ("--arch", str(arch), "--workload", str(wl), "--dataflow", str(flow))
    assert _cycles(*common) == PERFECT
    assert _cycles(*common, "--overlap", "fill-drain") == FILL_DRAIN
