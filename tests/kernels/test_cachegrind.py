"""Cache traffic measured under cachegrind: a streaming kernel's misses are its compulsory
lines exactly, and the model's boundary words agree with them; what the kernel calls
(memset, libm) counts and what the driver does around it does not; cachegrind counts lines
brought in, not write-backs."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tileflow.cost import evaluate
from tileflow.kernels.boundary import boundary_words, inbound_words
from tileflow.kernels.build import CC, FLAGS, KEEP_LOOP_ORDER
from tileflow.kernels.c_source import generate_c
from tileflow.kernels.cache_view import cache_view_words
from tileflow.kernels.cachegrind import (
    DRIVER_FLAGS,
    CacheGeometry,
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
HOST = single_core(load_arch("host"))
SKIP = valgrind_missing()


def test_parse_output_sums_the_kernel_function_only():
    text = ("events: Ir Dr D1mr DLmr Dw D1mw DLmw\nfl=k.c\nfn=main\n1 5 5 5 5 5 5 5\n"
            "fn=tf_kernel\n3 10 4 2 1 6 1 0\n4 1 1 1 1 1 1 1\nfn=other\n9 9 9 9 9 9 9 9\n")
    totals = parse_output(text)
    assert totals == {"Ir": 11, "Dr": 5, "D1mr": 3, "DLmr": 2, "Dw": 7, "D1mw": 2, "DLmw": 1}


def test_parse_output_whole_program_reads_the_summary_line():
    text = "events: Dr D1mr\nfn=main\n1 5 5\nfn=tf_kernel\n3 10 4\nsummary: 17 9\n"
    assert parse_output(text, None) == {"Dr": 17, "D1mr": 9}


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


def gemm(tmp_path, m: int, k: int, n: int):
    """C[m,n] += A[m,k] B[k,n]; rows of 32 and 48 words are whole lines (no padding)."""
    spec = tmp_path / f"gemm{m}.yaml"
    spec.write_text(f"name: gemm\ndims: {{m: {m}, k: {k}, n: {n}}}\n"
                    "ops:\n  - {name: mm, expr: \"C[m,n] += A[m,k] * B[k,n]\"}\n")
    return load_workload(str(spec))


WORDS_PER_LINE = 16
# 64 sets of 16 ways: the test's few hundred lines spread without conflict misses
D1, LL = CacheGeometry(65536, 16, 64), CacheGeometry(262144, 8, 64)
CAPACITIES = {"L1": D1.size_bytes / 4, "L2": LL.size_bytes / 4}


@pytest.mark.skipif(SKIP is not None, reason=f"cachegrind unavailable: {SKIP}")
def test_gemm_fitting_the_caches_costs_its_array_sizes_whatever_the_tree(tmp_path):
    """A 64x32x48 GEMM (26 KB) fits both caches: every line is missed once, so both
    boundaries see A + B + C = 2048 + 1536 + 3072 words. The kernel zeroes C with a loop
    the compiler turns into a memset call, so counting the kernel function alone would miss
    C's 192 lines; counting the whole driver would add its initialisation of every array.
    The tree reloads B for every row (its L1 tile holds one 32x16 slice and n moves fastest
    around it): 64 x 3 x 512 words. The cache keeps B, and the cache view says so."""
    w = gemm(tmp_path, 64, 32, 48)
    flow = Dataflow(tile("DRAM", "m:64 n:3", tile("L1", "k:32", tile("Reg", "n:16:SpY",
                                                                      "mm"))))
    m = measure(generate_c(analyse(w, CPU, flow), threads=False), w, D1, LL)
    compulsory = 2048 + 1536 + 3072
    assert m.d1_misses * WORDS_PER_LINE == pytest.approx(compulsory, rel=0.01)
    assert m.ll_misses * WORDS_PER_LINE == pytest.approx(compulsory, rel=0.01)
    model = evaluate(w, CPU, flow)
    sizes = {t: w.tensor_words(t) for t in w.tensors}
    assert inbound_words(model, "L1", sizes) == 2048 + 64 * 3 * 512 + 3072
    for level in ("L1", "L2"):
        assert cache_view_words(w, CPU, flow, model, level, CAPACITIES) == compulsory


@pytest.mark.skipif(SKIP is not None, reason=f"cachegrind unavailable: {SKIP}")
def test_partial_sums_written_back_count_once_per_fill_not_per_write_back(tmp_path):
    """A 512x32x48 GEMM with the reduction split in two passes outside the L1 tiles: C (96
    KB) does not fit the 64 KB first level, so its partial sums go out after the first pass
    and come back for the second. The model moves C's 24,576 words out twice and in once;
    cachegrind counts lines brought in: the second pass's reads plus one write-allocation
    per line (the first pass), and the write-backs not at all. The kernel also zeroes C in
    a sweep of its own first (1,536 lines the model does not count). A (16,384
    words) is read once, B (1,536) once per k half, kept across the 32 row blocks. The last
    level (256 KB) holds everything: only compulsory misses."""
    w = gemm(tmp_path, 512, 32, 48)
    flow = Dataflow(tile("DRAM", "k:2 m:32", tile("L1", "m:16 k:16 n:3",
                                                  tile("Reg", "n:16:SpY", "mm"))))
    model = evaluate(w, CPU, flow)
    sizes = {t: w.tensor_words(t) for t in w.tensors}
    c, a, b = 512 * 48, 512 * 32, 32 * 48
    assert boundary_words(model, "L1") == a + b + c + 2 * c  # both ways
    assert inbound_words(model, "L1", sizes) == a + b + c + c  # in: one fill, one allocation
    m = measure(generate_c(analyse(w, CPU, flow), threads=False), w, D1, LL)
    zeroing = c
    assert m.d1_misses * WORDS_PER_LINE == pytest.approx(a + b + 2 * c + zeroing, rel=0.01)
    assert m.ll_misses * WORDS_PER_LINE == pytest.approx(a + b + c, rel=0.01)
    assert cache_view_words(w, CPU, flow, model, "L2", CAPACITIES) == a + b + c
    assert cache_view_words(w, CPU, flow, model, "L1", CAPACITIES) == a + b + 2 * c


@pytest.mark.skipif(SKIP is not None, reason=f"cachegrind unavailable: {SKIP}")
def test_an_on_chip_buffer_is_allocated_once(tmp_path):
    """Y = exp(X), Z = exp(Y) fused per 16 elements: X and Z stream through (32,768 words
    each), Y's 16-word buffer is allocated once; libm's tables add a few lines."""
    n = 32768
    spec = tmp_path / "s2.yaml"
    spec.write_text(f"name: s2\ndims: {{i: {n}}}\nops:\n"
                    "  - {name: e, expr: \"Y[i] = exp(X[i])\"}\n"
                    "  - {name: f, expr: \"Z[i] = exp(Y[i])\"}\n")
    w = load_workload(str(spec))
    flow = Dataflow(tile("DRAM", f"i:{n // 256}", tile("L1", "i:16",
                                                       tile("Reg", "i:16:SpY", "e"),
                                                       tile("Reg", "i:16:SpY", "f"))))
    m = measure(generate_c(analyse(w, CPU, flow), threads=False), w, D1, LL)
    assert m.d1_misses * WORDS_PER_LINE == pytest.approx(2 * n + 16, rel=0.005)
    assert m.ll_misses * WORDS_PER_LINE == pytest.approx(2 * n + 16, rel=0.005)


# a campaign tree (gemm chain, m=l=256, k=n=64) whose gemm1 nest -O3 reorders: the k loop
# between l and m outside the L1 tile; GCC moves it inwards unless told to keep the order
REORDERED = {"name": "random-89", "root": {
    "level": "DRAM", "name": "rows", "loops": ["m:2"], "children": [{
        "level": "L3", "name": "fused", "loops": ["m:2"], "primitive": "Seq", "children": [
            {"level": "L2", "name": "gemm1-L2", "loops": ["l:8", "k:64", "m:2"], "children": [
                {"level": "L1", "name": "gemm1-L1", "loops": ["l:2", "m:32"], "children": [
                    {"level": "Reg", "loops": ["l:16:Sp"], "children": [{"op": "gemm1"}]}]}]},
            {"level": "L2", "name": "gemm2-L2", "loops": ["n:4", "l:32"], "children": [
                {"level": "L1", "name": "gemm2-L1", "loops": ["l:8", "m:64"], "children": [
                    {"level": "Reg", "loops": ["n:16:Sp"], "children": [{"op": "gemm2"}]}]}]}]}]}}


def _reordered():
    from tileflow.specs.dataflow import parse_dataflow
    from tileflow.specs.yamlfile import Field

    w = load_workload("gemm-chain", {"b": 1, "m": 256, "l": 256, "k": 64, "n": 64})
    return w, parse_dataflow(Field(REORDERED, "test"))


@pytest.mark.skipif(shutil.which(CC) is None, reason=f"no C compiler '{CC}'")
@pytest.mark.parametrize("flags", [DRIVER_FLAGS, FLAGS], ids=["driver", "timing"])
def test_the_compiler_keeps_the_trees_loop_order(tmp_path, flags):
    """GCC says which loops it interchanged: without KEEP_LOOP_ORDER it reorders this
    kernel (the plain nest), with the flags the kernels are built with it reorders nothing,
    in either kernel style."""
    w, flow = _reordered()
    nest = analyse(w, HOST, flow)

    def report(style, options):
        source = tmp_path / f"k-{style}.c"
        source.write_text(generate_c(nest, threads=False, style=style).text)
        options = [f for f in options if f not in ("-shared",) and not f.startswith("-Wl")]
        done = subprocess.run([CC, *options, "-c", str(source), "-o", str(tmp_path / "k.o"),
                               "-fopt-info-loop-optimized"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stderr

    assert "interchanged" in report("plain", [f for f in flags if f not in KEEP_LOOP_ORDER])
    for style in ("plain", "registers"):
        assert "interchanged" not in report(style, flags)
        assert "and jam" not in report(style, flags)


@pytest.mark.skipif(SKIP is not None, reason=f"cachegrind unavailable: {SKIP}")
def test_padded_rows_cost_no_traffic(tmp_path):
    """Rows of 64 words are laid out with a line of padding (80 words apart). A 64x32x64
    GEMM that fits both caches touches 2 lines per row of A, 4 per row of B and of C, the
    padding never: zeroing C must leave it alone too. 64 x 2 + 32 x 4 + 64 x 4 lines."""
    w = gemm(tmp_path, 64, 32, 64)
    flow = Dataflow(tile("DRAM", "m:64 n:4", tile("L1", "k:32", tile("Reg", "n:16:SpY",
                                                                      "mm"))))
    m = measure(generate_c(analyse(w, CPU, flow), threads=False), w, D1, LL)
    lines = 64 * 2 + 32 * 4 + 64 * 4
    assert m.ll_misses == pytest.approx(lines, rel=0.01)
    assert m.d1_misses == pytest.approx(lines, rel=0.01)
