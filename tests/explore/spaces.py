"""Small workloads and spaces shared by the structure-search tests."""

from __future__ import annotations

from helpers import CHAIN, small_arch, workload

from tileflow.explore.structures.structure_space import SpaceOptions, StructureSpace

# a diamond that is not a chain: two branches from one producer, joined again
DIAMOND = """
name: diamond
dims: {m: 4, k: 2, n: 4}
ops:
  - {name: a, expr: "X[m,n] += P[m,k] * Q[k,n]"}
  - {name: b, expr: "Y[m,n] = exp(X[m,n])"}
  - {name: c, expr: "Z[m] += X[m,n]"}
  - {name: d, expr: "W[m,n] = Y[m,n] / Z[m]"}
"""

# every loop as the defaults place it: only fusion, primitives and homes vary
FUSION_ONLY = SpaceOptions(loop_orders=False, spatial=False, outer_tiles=False, shares=(1,),
                           bypass=False)


def tiny_chain_space() -> StructureSpace:
    """Two chained GEMMs, tiny, on one core with four PEs and a 20-word L1: small enough to
    enumerate every structure and every divisor tiling."""
    return StructureSpace(workload(CHAIN, m=4, l=4, k=2, n=2),
                          small_arch(l1_words=20, cores=1, pes=4), FUSION_ONLY)
