"""Small workloads and accelerators written inline, for tests."""

from __future__ import annotations

import math

from ruamel.yaml import YAML
from scalar_model import evaluate_plan
from scalar_prepare import prepare

from tileflow.cost.result import Result
from tileflow.specs.arch import Architecture, ComputeUnit, Level
from tileflow.specs.workload import Workload, parse_workload
from tileflow.specs.yamlfile import Field
from tileflow.tree import Dataflow, Tile


def scalar_evaluate(w: Workload, arch: Architecture, flow: Dataflow | Tile,
                    **options) -> Result:
    """The scalar rules' `Result` (`scalar_model.evaluate_plan`, with `evaluate()`'s options): a
    second copy of the model, written separately, that the differential tests hold the
    evaluator to field by field until the enumerating oracle covers what they check."""
    if isinstance(flow, Tile):
        flow = Dataflow(flow, flow.name or "dataflow")
    return evaluate_plan(prepare(w, arch, flow), **options)


def workload(text: str, **sizes: int) -> Workload:
    data = YAML(typ="rt").load(text)
    return parse_workload(Field(data, "test.yaml"), sizes)


def level(name: str, capacity: float, fanout: int, instances: int, bw: float = 8.0,
          energy: float = 1.0) -> Level:
    return Level(name, capacity, fanout, instances, bw, bw, energy, energy, energy)


def small_arch(l1_words: float = math.inf, reg_words: float = math.inf, cores: int = 2,
               pes: int = 4) -> Architecture:
    """DRAM -> L1 (`cores` instances) -> Reg (`pes` per core) -> matrix and vector units."""
    levels = (
        level("DRAM", math.inf, 1, 1, 4.0, 100.0),
        level("L1", l1_words, cores, cores, 16.0, 10.0),
        level("Reg", reg_words, pes, cores * pes, 3.0, 0.5),
    )
    matrix = ComputeUnit("matrix", "Reg", 1, 1.0, {"default": 1.0}, 2, pes // 2)
    vector = ComputeUnit("vector", "L1", pes, 1.0, {"default": 1.0}, pes, 1)
    return Architecture("small", levels, matrix, vector, 1.0, 2)


GEMM = """
name: gemm
dims: {m: 4, n: 4, k: 4}
ops:
  - {name: mm, expr: "C[m,n] += A[m,k] * B[k,n]"}
"""

CHAIN = """
name: chain
dims: {m: 4, l: 4, k: 3, n: 3}
ops:
  - {name: g1, expr: "C[m,l] += A[m,k] * B[k,l]"}
  - {name: g2, expr: "E[m,n] += C[m,l] * D[l,n]"}
"""

SOFTMAX = """
name: softmax
dims: {m: 3, l: 4, k: 2}
ops:
  - {name: qk,  expr: "S[m,l] += Q[m,k] * K[k,l]"}
  - {name: mx,  expr: "M[m] max= S[m,l]"}
  - {name: sub, expr: "D[m,l] = S[m,l] - M[m]"}
  - {name: sm,  expr: "Z[m] += D[m,l]"}
  - {name: div, expr: "P[m,l] = D[m,l] / Z[m]"}
"""

CONV = """
name: conv1d
params: {k1: 3, k2: 3}
dims: {c0: 2, c1: 2, c2: 2, p: 5, r: k1, t: k2}
ops:
  - {name: conv1, expr: "A[c1,p] += X[c0,p+r-1] * W1[c1,c0,r]"}
  - {name: conv2, expr: "B[c2,p] += A[c1,p+t-1] * W2[c2,c1,t]"}
shapes:
  X: [c0, p]
  A: [c1, p]
"""

STRIDED = """
name: strided
dims: {c0: 2, c1: 2, p: 3, r: 3}
params: {h: 6}
ops:
  - {name: conv, expr: "Y[c1,p] += X[c0,2*p+r-1] * W[c1,c0,r]"}
shapes:
  X: [c0, h]
"""

# a 1-D window whose input is as long as its output: its last windows are clipped, so the
# counts along p are sums over the steps of p (set p to exceed the model's bounds)
CLIPPED_WINDOW = """
name: conv1d
dims: {p: 100, r: 3}
ops:
  - {name: c, expr: "Y[p] += X[p+r] * W[r]"}
shapes:
  X: [p]
"""

TWINS = """
name: twins
dims: {m: 4, n: 3, k: 3, j: 2}
ops:
  - {name: g1, expr: "C[m,n] += A[m,k] * B[k,n]"}
  - {name: g2, expr: "E[m,j] += A[m,k] * D[k,j]"}
"""
