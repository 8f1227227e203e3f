"""Closed forms: for C = A x B, E = C x D with one on-chip level, loop order (m, l, k, n)
and tiles T_M, T_K, T_L, T_N, DRAM traffic and footprints have closed forms (Chimera)."""

from __future__ import annotations

from math import ceil

from helpers import CHAIN, small_arch, workload
from hypothesis import given, settings
from hypothesis import strategies as st

from tileflow.cost import evaluate
from tileflow.tree import Dataflow, tile


def chain_tree(M: int, K: int, L: int, N: int, TM: int, TK: int, TL: int, TN: int,
               primitive: str = "Seq") -> Dataflow:
    """m, l in the shared DRAM-level parent; k in the first GEMM's subtree, n in the second's."""
    root = tile("DRAM", f"m:{ceil(M / TM)} l:{ceil(L / TL)}",
                tile("DRAM", f"k:{ceil(K / TK)}", tile("L1", f"m:{TM} k:{TK} l:{TL}", "g1")),
                tile("DRAM", f"n:{ceil(N / TN)}", tile("L1", f"m:{TM} l:{TL} n:{TN}", "g2")),
                primitive=primitive)
    return Dataflow(root, "chain")


def run(M, K, L, N, TM, TK, TL, TN, primitive="Seq"):
    w = workload(CHAIN, m=M, k=K, l=L, n=N)
    return evaluate(w, small_arch(), chain_tree(M, K, L, N, TM, TK, TL, TN, primitive))


sizes = st.integers(1, 40)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.data(), sizes, sizes, sizes, sizes)
def test_chain_dram_traffic_and_footprint_match_closed_form(data, M, K, L, N):
    TM, TK, TL, TN = (data.draw(st.integers(1, x)) for x in (M, K, L, N))
    r = run(M, K, L, N, TM, TK, TL, TN)
    dram = r.traffic["DRAM"]
    assert dram["A"].read == M * K * ceil(L / TL)
    assert dram["B"].read == K * L * ceil(M / TM)
    assert dram["D"].read == N * L * ceil(M / TM)
    assert dram["E"].update == M * N * ceil(L / TL)
    assert dram["E"].read == M * N * (ceil(L / TL) - 1)
    assert "C" not in dram  # the intermediate never leaves the chip
    fp = {f.level: f for f in r.footprints}["L1"]
    tm, tk, tl, tn = min(TM, M), min(TK, K), min(TL, L), min(TN, N)
    assert fp.words == max(tm * tk + tk * tl + tm * tl, tm * tl + tl * tn + tm * tn)
    assert r.macs == M * K * L + M * L * N


def test_shar_keeps_a_resident_when_k_is_not_tiled():
    """Under Shar the first GEMM's A tile stays across l steps when T_K = K; Seq reloads it."""
    seq = run(16, 8, 32, 8, 4, 8, 8, 8, "Seq")
    shar = run(16, 8, 32, 8, 4, 8, 8, 8, "Shar")
    assert seq.traffic["DRAM"]["A"].read == 16 * 8 * 4
    assert shar.traffic["DRAM"]["A"].read == 16 * 8
    # with k tiled, A's tile changes inside the first GEMM anyway: no saving
    assert run(16, 8, 32, 8, 4, 4, 8, 8, "Shar").traffic["DRAM"]["A"].read == 16 * 8 * 4
