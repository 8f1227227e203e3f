"""The two mapping families of the RTL dataset, as tile trees built from a CSV row."""

from __future__ import annotations

from math import ceil

from tileflow.tree import Dataflow, tile

ARRAY = 16  # PE rows and columns


def gemm_mapping(M: int, N: int, K: int, tile_M: int, tile_N: int, tile_K: int) -> Dataflow:
    """gemm_1152: DRAM loops N, M, K (K innermost); buffer loops K, M, N (N innermost);
    M over the PE rows, K over the PE columns (spatial reduction); one element per register.
    The measured programs reload A and B tiles at every DRAM-level step (no_reuse)."""
    root = tile("DRAM", f"n:{ceil(N / tile_N)} m:{ceil(M / tile_M)} k:{ceil(K / tile_K)}",
                tile("Buffer", f"k:{ceil(tile_K / ARRAY)} m:{ceil(tile_M / ARRAY)} n:{tile_N} "
                               f"m:{ARRAY}:Sp k:{ARRAY}:Sp",
                     tile("Reg", "", "gemm")),
                no_reuse=("A", "B"), name="dram")
    return Dataflow(root, "rtl-gemm")


def chain_mapping(M: int, L: int, K: int, N: int, tile_M: int, tile_K: int,
                  tile_L: int) -> Dataflow:
    """gemm_chain_131: row blocks of M at DRAM level; per block the two GEMMs one after the
    other, C's row block kept in the buffer. GEMM1: DRAM loops K then L, buffer K, M, L;
    GEMM2: DRAM loop L, buffer L, M, N (N not split). M over PE rows, the reduction over PE
    columns, one element per register."""
    gemm1 = tile("DRAM", f"k:{ceil(K / tile_K)} l:{ceil(L / tile_L)}",
                 tile("Buffer", f"k:{ceil(tile_K / ARRAY)} m:{ceil(tile_M / ARRAY)} l:{tile_L} "
                                f"m:{ARRAY}:Sp k:{ARRAY}:Sp",
                      tile("Reg", "", "gemm1")), name="gemm1")
    gemm2 = tile("DRAM", f"l:{ceil(L / tile_L)}",
                 tile("Buffer", f"l:{ceil(tile_L / ARRAY)} m:{ceil(tile_M / ARRAY)} n:{N} "
                                f"m:{ARRAY}:Sp l:{ARRAY}:Sp",
                      tile("Reg", "", "gemm2")), name="gemm2")
    root = tile("DRAM", f"m:{ceil(M / tile_M)}", gemm1, gemm2, primitive="Seq", name="rows")
    return Dataflow(root, "rtl-chain", {"C": "Buffer"})
