"""Whatever a user writes, the command line answers with a result or a clear error (exit 2):
never a traceback. Random edits of the shipped files check it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tileflow.cli import main

REPO = Path(__file__).resolve().parents[2]
TOKENS = ["-1", "0", "3", "x", "[]", "{}", "null", "1.5", "'m:4'", "[m:0]", "DRAM", "Sp", ":",
          "[b:8, q:2]", "{op: zz}", "true", "''"]


def _mutate(text: str, data) -> str:
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        if ":" in line and data.draw(st.booleans()):
            key, _, _ = line.partition(":")
            lines[i] = f"{key}: {data.draw(st.sampled_from(TOKENS))}"
        elif data.draw(st.booleans()):
            del lines[i]
            if not lines:
                lines = ["x: 1"]
        else:
            lines[i] = line.replace(",", "", 1) if "," in line else line + " ]"
    return "\n".join(lines) + "\n"


SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))

# (shipped file to edit, the command line that reads it as {path})
CASES = {
    "dataflow": ("dataflows/gemm-chain-chimera.yaml",
                 ["evaluate", "--arch", "edge", "--workload", "gemm-chain", "--dataflow",
                  "{path}"]),
    "accelerator": ("accelerators/edge.yaml",
                    ["evaluate", "--arch", "{path}", "--workload", "gemm-chain", "--dataflow",
                     "flat-rgran"]),
    "workload": ("workloads/attention.yaml",
                 ["evaluate", "--arch", "edge", "--workload", "{path}", "--dataflow",
                  "layerwise"]),
}


@pytest.mark.parametrize("case", CASES)
def test_edited_files_never_crash(tmp_path_factory, case):
    source, args = CASES[case]
    text = (REPO / source).read_text()

    @SETTINGS
    @given(st.data())
    def check(data):
        path = tmp_path_factory.mktemp(case) / Path(source).name
        path.write_text(_mutate(text, data))
        code = main([a.format(path=path) for a in args] + ["--json"])
        assert code in (0, 2)

    check()
