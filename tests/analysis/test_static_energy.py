"""Whole-block accesses (`block_words`) and leakage (`leakage_pj_per_cycle`), derived by
hand on a 4 x 4 x 4 GEMM split over 2 of 4 L1 instances; the keys' bad values are exit-2
errors naming the file and line; the defaults leave the energy per word unchanged."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tileflow.cli import main
from tileflow.evaluator.static_energy import whole_block_words

ARCH = """
name: blocks
levels:
  - name: DRAM
    read_words_per_cycle: 1000
    write_words_per_cycle: 1000
    energy_pj_per_word: {read: 1, write: 2, update: 4}
    block_words: 6
    leakage_pj_per_cycle: 0.25
  - name: L1
    capacity_words: 1024
    fanout: 4
    read_words_per_cycle: 1000
    write_words_per_cycle: 1000
    energy_pj_per_word: {read: 1, write: 2, update: 4}
    block_words: 3
    leakage_pj_per_cycle: 0.5
compute:
  matrix: {rows: 1, cols: 1, level: L1, energy_pj_per_op: 0, leakage_pj_per_cycle: 0.125}
overlap: perfect
"""

GEMM = """
name: gemm
dims: {m: 4, n: 4, k: 4}
ops:
  - {name: mm, expr: "C[m,n] += A[m,k] * B[k,n]"}
"""

# m split over 2 of the 4 L1 instances; each holds A[2 x 4], B[4 x 4], C[2 x 4]
FLOW = """
root:
  level: DRAM
  loops: ["m:2:Sp"]
  children:
    - level: L1
      loops: ["m:2", "n:4", "k:4"]
      children: [mm]
"""


def _files(tmp_path: Path, arch: str = ARCH) -> list[str]:
    out = []
    for name, text in (("arch.yaml", arch), ("gemm.yaml", GEMM), ("flow.yaml", FLOW)):
        (tmp_path / name).write_text(textwrap.dedent(text))
        out.append(str(tmp_path / name))
    return ["--arch", out[0], "--workload", out[1], "--dataflow", out[2]]


def _json(tmp_path: Path, capsys, arch: str = ARCH, *extra: str) -> dict:
    assert main(["evaluate", *_files(tmp_path, arch), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_whole_blocks_and_leakage_by_hand(tmp_path, capsys):
    """Counts: DRAM reads A 16 and B 16 (sent once to both instances) and is updated 16
    times (C); L1 fills A 16 (8 per instance) and B 32 (16 each), reads A and B 64 each
    (one per MAC, 32 per instance), reads C 48 (64 less the 16 first touches) and updates
    it 64 times. DRAM, 6-word blocks on its one instance: 16 -> 18 words each: reads 36 x 1
    + updates 18 x 4 = 108 (96 word by word). L1, 3-word blocks per instance in use (2):
    fills A 2 x 9 = 18 and B 2 x 18 = 36 (x 2 pJ = 108), reads A and B 2 x 33 = 66 each
    and C 2 x 24 = 48 (180), updates 66 (x 4 = 264): 552 (528 word by word). 64 MACs on 2
    PEs: 32 cycles. Leakage: DRAM 0.25 x 1 x 32 = 8, L1 0.5 x 2 instances in use (of 4)
    x 32 = 32, the MACs 0.125 x 2 x 32 = 8. Total 108 + 552 + 48 = 708 pJ."""
    r = _json(tmp_path, capsys)
    assert r["cycles"] == 32
    levels = r["levels"]
    assert levels["DRAM"]["per_tensor"]["A"]["reads"] == 16
    assert levels["L1"]["per_tensor"]["B"]["fills"] == 32
    assert (levels["DRAM"]["energy_pj"], levels["DRAM"]["leakage_pj"]) == (108 + 8, 8)
    assert (levels["L1"]["energy_pj"], levels["L1"]["leakage_pj"]) == (552 + 32, 32)
    assert r["leakage_pj"] == 48
    assert r["energy_pj"] == 708
    units = {c["component"]: c["energy_pj"] for c in r["components"]}
    assert units == {"DRAM": 116, "L1": 584, "matrix unit": 8}


def test_without_the_keys_every_word_is_charged_on_its_own(tmp_path, capsys):
    """96 + 528 pJ (above), no leakage; `--conventions timeloop` sets blocks of one word,
    which change nothing where every count per instance is whole."""
    plain = "\n".join(line for line in ARCH.splitlines()
                      if not line.strip().startswith(("block_words", "leakage_pj_per_cycle")))
    plain = plain.replace(", leakage_pj_per_cycle: 0.125", "")
    r = _json(tmp_path, capsys, plain)
    assert (r["energy_pj"], r["leakage_pj"]) == (96 + 528, 0)
    assert _json(tmp_path, capsys, plain, "--conventions", "timeloop")["energy_pj"] == 624


@given(words=st.integers(0, 10_000), instances=st.integers(1, 64),
       block=st.integers(1, 64))
def test_whole_blocks_cover_the_words_by_less_than_a_block_per_instance(words, instances,
                                                                        block):
    charged = whole_block_words(float(words), instances, block)
    assert charged % block == 0 or words == 0
    assert words <= charged < words + instances * block or words == charged == 0
    if words % (instances * block) == 0:
        assert charged == words


@pytest.mark.parametrize("where, key, value", [
    ("    block_words: 3", "block_words", "0"),
    ("    block_words: 3", "block_words", "2.5"),
    ("    block_words: 3", "block_words", "three"),
    ("    leakage_pj_per_cycle: 0.5", "leakage_pj_per_cycle", "-1"),
    ("    leakage_pj_per_cycle: 0.5", "leakage_pj_per_cycle", ".nan"),
    ("    leakage_pj_per_cycle: 0.5", "leakage_pj_per_cycle", "lots"),
    ("    leakage_pj_per_cycle: 0.5", "leakage_pj_per_cycle", "true"),
    ("leakage_pj_per_cycle: 0.125}", "leakage_pj_per_cycle", "-0.1}"),
])
def test_bad_values_are_errors_naming_file_and_line(where, key, value, tmp_path, capsys):
    text = ARCH.replace(where, where.rsplit(":", 1)[0] + ": " + value)
    assert text != ARCH
    code = main(["evaluate", *_files(tmp_path, text)])
    err = capsys.readouterr().err
    line = next(n for n, row in enumerate(textwrap.dedent(text).splitlines(), 1)
                if f"{key}: {value}" in row)
    assert code == 2 and f"arch.yaml, line {line}" in err and key in err, err
    assert "Traceback" not in err
