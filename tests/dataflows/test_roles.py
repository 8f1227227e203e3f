"""The baselines are chosen by the operators' roles, not by the number of dimensions; grouped-
query attention's query heads reuse K and V in the chain baselines."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CONV, small_arch, workload

from tileflow.cost import evaluate
from tileflow.dataflows import baselines_for, build
from tileflow.dataflows.chain import Roles
from tileflow.dataflows.conv import ConvRoles
from tileflow.dataflows.registry import CHAIN, ONLINE, role
from tileflow.dataflows.registry import CONV as CONV_FLOWS
from tileflow.specs.workload import load_workload

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "search" / "quality" / "workloads"
GQA = (SUITE / "gqa.yaml").read_text()
MHA = (REPO / "workloads" / "attention.yaml").read_text().split("presets:")[0]

# a GEMM chain with a head dim: two operators with 4-D outputs and no window
GEMM_CHAIN_4D = """
name: heads-chain
dims: {b: 2, h: 2, m: 4, l: 4, k: 2, n: 2}
ops:
  - {name: g1, expr: "C[b,h,m,l] += A[b,h,m,k] * B[b,h,k,l]"}
  - {name: g2, expr: "E[b,h,m,n] += C[b,h,m,l] * D[b,h,l,n]"}
"""


@pytest.mark.parametrize("name, expected", [
    ("attention", "chain"), ("gemm-chain", "chain"), ("mlp", "chain"),
    ("attention-online", "online"), ("conv-chain", "conv"), ("gemm", "other"),
])
def test_each_shipped_workload_has_the_role_of_its_operators(name, expected):
    assert role(load_workload(name)) == expected


@pytest.mark.parametrize("name, expected", [
    ("gqa", "chain"), ("dwpw", "conv"), ("swiglu", "other"),
])
def test_each_suite_workload_has_the_role_of_its_operators(name, expected):
    assert role(load_workload(str(SUITE / f"{name}.yaml"))) == expected


def test_a_four_dimensional_gemm_chain_is_a_chain_not_a_conv_chain():
    """Two operators with 4-D outputs used to be taken for a conv chain; no operator slides a
    window, so it is a chain whose head dim `h` is looped inside each row block."""
    w = workload(GEMM_CHAIN_4D)
    assert role(w) == "chain"
    assert baselines_for(w) == CHAIN
    r = Roles.of(w)
    assert (r.batch, r.heads, r.rows, r.inner) == ("b", ("h",), "m", "l")


def test_the_conv_chain_roles_are_its_window_dims():
    w = load_workload("conv-chain")
    r = ConvRoles.of(w)
    assert (r.ops, r.p, r.q) == (("conv1", "conv2"), "p", "q")
    assert baselines_for(w) == CONV_FLOWS


def test_a_one_dimensional_conv_chain_is_not_a_conv_chain_of_rows_and_columns():
    """The conv baselines tile two window dims; a 1-D conv chain has one."""
    assert role(workload(CONV)) == "chain"


def test_a_conv_chain_with_an_activation_gets_conv_and_chain_dataflows():
    w = load_workload(str(SUITE / "dwpw.yaml"))
    r = ConvRoles.of(w)
    assert (r.ops, r.p, r.q) == (("dw", "relu", "pw"), "p", "q")
    assert baselines_for(w) == CONV_FLOWS + CHAIN[1:]


def test_online_softmax_is_recognised_by_its_carried_state():
    assert baselines_for(load_workload("attention-online")) == ONLINE


def test_gqa_query_heads_are_the_head_dim_that_k_and_v_do_not_carry():
    w = workload(GQA)
    r = Roles.of(w)
    assert (r.batch, r.heads, r.rows, r.inner) == ("g", ("h",), "m", "l")
    assert r.reused_across(w) == {"h": ("K", "V")}


@pytest.mark.parametrize("name", ["tileflow-pipe", "flat-rgran", "flat-hgran", "uni-pipe"])
def test_a_gqa_baseline_moves_a_quarter_of_the_multi_head_forms_k_and_v_words(name):
    """GQA with g = 2 KV heads of h = 4 query heads against attention with b = 8 heads, on
    chip buffers large enough for whole tiles: K (k x l per KV head) and V (l x n) are read
    from DRAM once each, g x 4 x 8 = 64 words for GQA and b x 4 x 8 = 256 for MHA; Q is the
    same 8 x 8 x 4 = 256 words in both."""
    arch = small_arch()
    gqa = workload(GQA, g=2, h=4, m=8, l=8, k=4, n=4)
    mha = workload(MHA, b=8, m=8, l=8, k=4, n=4)
    got = {}
    for w in (gqa, mha):
        r = evaluate(w, arch, build(name, w, arch))
        assert r.valid, [v.message for v in r.violations]
        got[w.name] = {t: r.traffic["DRAM"][t].read for t in ("K", "V", "Q")}
    assert got["gqa"] == {"K": 2 * 4 * 8, "V": 2 * 8 * 4, "Q": 8 * 8 * 4}
    assert got["attention"] == {"K": 8 * 4 * 8, "V": 8 * 8 * 4, "Q": 8 * 8 * 4}


def test_chimera_reuses_k_and_v_across_the_heads_of_a_step():
    """Chimera runs its stages one after another, so K and V are reused across query heads
    only when a step holds every head of the group (`h` tiled by 4): 64 words each, as
    above; one head per step reads them once per head (256)."""
    arch = small_arch()
    w = workload(GQA, g=2, h=4, m=8, l=8, k=4, n=4)
    whole = evaluate(w, arch, build("chimera", w, arch, {"m": 8, "l": 8, "h": 4}))
    one = evaluate(w, arch, build("chimera", w, arch, {"m": 8, "l": 8, "h": 1}))
    assert whole.traffic["DRAM"]["K"].read == whole.traffic["DRAM"]["V"].read == 64
    assert one.traffic["DRAM"]["K"].read == 256


GQA_ONLINE = """
name: gqa-online
dims: {g: 2, h: 4, m: 8, l: 8, k: 4, n: 4}
ops:
  - {name: qk,  expr: "S[g,h,m,l] += Q[g,h,m,k] * K[g,k,l]"}
  - {name: max, expr: "M[g,h,m] max= S[g,h,m,l]", carried: l}
  - {name: sub, expr: "D[g,h,m,l] = S[g,h,m,l] - M[g,h,m]"}
  - {name: exp, expr: "E[g,h,m,l] = exp(D[g,h,m,l])"}
  - {name: sum, expr: "Z[g,h,m] += E[g,h,m,l]"}
  - {name: pv,  expr: "U[g,h,m,n] += E[g,h,m,l] * V[g,l,n]"}
  - {name: div, expr: "O[g,h,m,n] = U[g,h,m,n] / Z[g,h,m]"}
"""


@pytest.mark.parametrize("name", ["flash", "flash-pipe"])
def test_flash_on_gqa_reads_a_quarter_of_the_multi_head_forms_k_and_v(name):
    """The online form: the query heads loop inside each l tile of the sweep, so each K and V
    tile serves the 4 heads of its group. The same row blocks (2 of 4 rows per head, the
    builder's twice-the-PE-rows) read K and V once per row block: 2 x 64 = 128 words each for
    GQA's 2 KV heads against 2 x 256 = 512 for 8 heads; the cycles are the same."""
    arch = small_arch()
    gqa = workload(GQA_ONLINE)
    mha = workload((REPO / "workloads" / "attention-online.yaml").read_text()
                   .split("presets:")[0], b=8, m=8, l=8, k=4, n=4)
    got = {}
    for w in (gqa, mha):
        r = evaluate(w, arch, build(name, w, arch, {"l": 8}))
        assert r.valid, [v.message for v in r.violations]
        got[w.name] = (r.traffic["DRAM"]["K"].read, r.traffic["DRAM"]["V"].read, r.cycles)
    assert got["gqa-online"][:2] == (2 * (2 * 4 * 8),) * 2
    assert got["attention-online"][:2] == (2 * (8 * 4 * 8),) * 2
    assert got["gqa-online"][2] == pytest.approx(got["attention-online"][2])


def test_layerwise_spreads_any_chain_s_batch_over_the_cores_whatever_its_name():
    """GQA's batch is its KV heads `g` (no dim is named `b`): Layerwise spreads it over the
    cores as it does the multi-head form's `b`, its rows the other way; a convolution's
    `n` is left as before (the conv chain's Layerwise is unchanged). Before: `g` was taken
    for a row dim and the cores split the sequence instead."""
    from tileflow.dataflows.chain import _batch  # the rule under test

    gqa, mha = workload(GQA), workload(MHA)
    assert _batch(gqa, "qk") == "g" and _batch(gqa, "pv") == "g"
    assert _batch(mha, "qk") == "b"
    assert _batch(load_workload("conv-chain"), "conv1") is None
    assert _batch(load_workload("mlp"), "fc1") is None
    arch = small_arch(cores=2)
    qk = build("layerwise", gqa, arch).root.children[0]
    spread = [lp for lp in qk.loops if lp.spatial]
    assert [(lp.dim, lp.factor) for lp in spread] == [("g", 2)]
