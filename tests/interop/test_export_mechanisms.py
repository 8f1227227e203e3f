"""Export of the per-tile mechanisms to Timeloop: a tile's bypass list becomes a bypass
directive (keep the rest); a per-tensor buffering depth has no mapping equivalent."""

from __future__ import annotations

import pytest

from tests.interop.samples import ARCH_V03, GEMM_PROBLEM, write
from tileflow.errors import InputError
from tileflow.interop.export import timeloop_mapping
from tileflow.interop.files import load_arch_any, load_workload_any
from tileflow.tree import Dataflow, tile


@pytest.fixture
def gemm(tmp_path):
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_V03))
    return load_workload_any(write(tmp_path, "prob.yaml", GEMM_PROBLEM)), arch


def test_a_tiles_bypass_list_is_a_bypass_directive(gemm):
    w, arch = gemm
    flow = Dataflow(tile("DRAM", "M:8 N:6", tile("Buffer", "", tile("Reg", "K:4", "gemm"),
                                                 bypass=("A",))))
    mapping = timeloop_mapping(flow, w, arch)["mapping"]
    directive = next(d for d in mapping if d["target"] == "Buffer" and d["type"] == "bypass")
    assert directive["bypass"] == ["A"] and sorted(directive["keep"]) == ["B", "Z"]


def test_per_tensor_buffering_cannot_be_exported(gemm):
    w, arch = gemm
    flow = Dataflow(tile("DRAM", "M:8 N:6", tile("Reg", "K:4", "gemm", buffering={"Z": 1})))
    with pytest.raises(InputError, match="multiple_buffering"):
        timeloop_mapping(flow, w, arch)


def test_a_timeloop_bypass_of_some_tensors_is_read_as_the_tiles_bypass(tmp_path, gemm):
    from tests.interop.samples import GEMM_MAPPING
    from tileflow.cost import evaluate
    from tileflow.interop.files import load_dataflow_any

    w, arch = gemm
    text = GEMM_MAPPING + "- {target: Buffer, type: bypass, keep: [A, B], bypass: [Z]}\n"
    flow = load_dataflow_any(write(tmp_path, "map.yaml", text), w, arch)
    buffer = flow.root.children[0]
    assert buffer.level == "Buffer" and buffer.bypass == ("Z",)
    r = evaluate(w, arch, flow)
    assert "Z" not in r.traffic.get("Buffer", {}) or r.traffic["Buffer"]["Z"].fill == 0
    # Z skips the buffer: each PE's one-element slice changes at every step of the
    # buffer's M loop, inside its K:4 loop, so each of the 8 x 6 elements goes back to
    # DRAM after each of the 4 K steps and is read back before the last 3
    assert r.traffic["DRAM"]["Z"].update == 8 * 6 * 4
    assert r.traffic["DRAM"]["Z"].read == 8 * 6 * 3
    again = timeloop_mapping(flow, w, arch)["mapping"]
    directive = next(d for d in again if d["target"] == "Buffer" and d["type"] == "bypass")
    assert directive["bypass"] == ["Z"]
