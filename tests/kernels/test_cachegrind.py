"""Cache traffic measured under cachegrind: a streaming kernel's misses are its compulsory
lines exactly, and the model's boundary words agree with them."""

from __future__ import annotations

import pytest

from tileflow.cost import evaluate
from tileflow.kernels.c_source import generate_c
from tileflow.kernels.cachegrind import (
    CacheGeometry,
    boundary_words,
    geometry,
    measure,
    parse_output,
    valgrind_missing,
)
from tileflow.kernels.nest import analyse
from tileflow.kernels.trees import single_core
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, tile

CPU = single_core(load_arch("cpu"))
SKIP = valgrind_missing()


def test_parse_output_sums_the_kernel_function_only():
    text = ("events: Ir Dr D1mr DLmr Dw D1mw DLmw\nfl=k.c\nfn=main\n1 5 5 5 5 5 5 5\n"
            "fn=tf_kernel\n3 10 4 2 1 6 1 0\n4 1 1 1 1 1 1 1\nfn=other\n9 9 9 9 9 9 9 9\n")
    totals = parse_output(text)
    assert totals == {"Ir": 11, "Dr": 5, "D1mr": 3, "DLmr": 2, "Dw": 7, "D1mw": 2, "DLmw": 1}


def test_geometry_from_the_description_is_a_valid_cachegrind_cache():
    for level in ("L1", "L2"):
        g = geometry(CPU, level)
        sets = g.size_bytes // (g.assoc * g.line_bytes)
        assert sets & (sets - 1) == 0 and g.size_bytes <= CPU.level(level).capacity_words * 4


@pytest.mark.skipif(SKIP is not None, reason=f"cachegrind unavailable: {SKIP}")
def test_streaming_kernel_misses_are_its_compulsory_lines(tmp_path):
    n = 32768  # 128 KB per tensor: larger than the first level, so nothing stays behind
    spec = tmp_path / "stream.yaml"
    spec.write_text(f"name: stream\ndims: {{i: {n}}}\n"
                    "ops:\n  - {name: e, expr: \"Y[i] = exp(X[i])\"}\n")
    w = load_workload(str(spec))
    flow = Dataflow(tile("DRAM", f"i:{n // 256}", tile("L1", "i:16", tile("Reg", "i:16:Sp",
                                                                          "e"))))
    d1, ll = CacheGeometry(32768, 8, 64), CacheGeometry(262144, 8, 64)
    m = measure(generate_c(analyse(w, CPU, flow), threads=False), w, d1, ll)
    lines = 2 * n * 4 // 64  # X read once, Y written once (write-allocate)
    assert abs(m.d1_misses - lines) <= 0.02 * lines
    assert abs(m.ll_misses - lines) <= 0.02 * lines
    model = evaluate(w, CPU, flow)
    assert boundary_words(model, "L1") * 4 == pytest.approx(m.d1_bytes, rel=0.02)
