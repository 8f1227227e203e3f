"""Whatever a user writes, the command line answers with a result or a clear error (exit 2):
never a traceback. Random edits of the shipped files check it."""

from __future__ import annotations

from pathlib import Path

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


@SETTINGS
@given(st.data())
def test_edited_dataflow_files_never_crash(tmp_path_factory, data):
    text = (REPO / "dataflows" / "gemm-chain-chimera.yaml").read_text()
    path = tmp_path_factory.mktemp("f") / "flow.yaml"
    path.write_text(_mutate(text, data))
    code = main(["evaluate", "--arch", "edge", "--workload", "gemm-chain", "--dataflow",
                 str(path), "--json"])
    assert code in (0, 2)


@SETTINGS
@given(st.data())
def test_edited_accelerator_files_never_crash(tmp_path_factory, data):
    text = (REPO / "accelerators" / "edge.yaml").read_text()
    path = tmp_path_factory.mktemp("a") / "arch.yaml"
    path.write_text(_mutate(text, data))
    code = main(["evaluate", "--arch", str(path), "--workload", "gemm-chain", "--dataflow",
                 "flat-rgran", "--json"])
    assert code in (0, 2)


@SETTINGS
@given(st.data())
def test_edited_workload_files_never_crash(tmp_path_factory, data):
    text = (REPO / "workloads" / "attention.yaml").read_text()
    path = tmp_path_factory.mktemp("w") / "workload.yaml"
    path.write_text(_mutate(text, data))
    code = main(["evaluate", "--arch", "edge", "--workload", str(path), "--dataflow",
                 "layerwise", "--json"])
    assert code in (0, 2)
