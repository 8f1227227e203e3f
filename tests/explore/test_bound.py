"""The data-movement bound: never below the compulsory traffic, non-increasing in capacity,
equal to the compulsory traffic once everything fits, equal to an independent brute force
over every tiling (the scalar model at each capacity, no pruning), and to a hand-derived
closed form for a GEMM."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from helpers import CHAIN, GEMM, scalar_evaluate, small_arch, workload
from hypothesis import given, settings
from hypothesis import strategies as st

from tileflow.evaluator.batch import evaluate_batch
from tileflow.explore.structures.bound import compulsory_words, data_movement_bound, lifted, pareto
from tileflow.explore.sweeps.sweep import bound_structures
from tileflow.tree import Op, Tile


def with_l1(arch, words: float):
    return replace(arch, levels=tuple(replace(lv, capacity_words=words) if lv.name == "L1"
                                      else lv for lv in arch.levels))


def exact_rows(structure) -> np.ndarray:
    """Every factor vector (divisors of each slot's dim) whose factors along every
    operator's path multiply to the dim's size: written independently of the library's
    enumeration (all combinations, then a filter)."""
    w = structure.workload
    leaves = {}

    def walk(node, path):
        if isinstance(node, Op):
            leaves[node.op] = path
            return
        for i, c in enumerate(node.children):
            walk(c, f"{path}.{i}")

    walk(structure.template.root, "root")
    dims = sorted({s.dim for s in structure.slots})
    per_dim = []
    for d in dims:
        ks = [k for k, s in enumerate(structure.slots) if s.dim == d]
        size = w.sizes[d]
        options = [x for x in range(1, size + 1) if size % x == 0]
        good = []
        for combo in itertools.product(options, repeat=len(ks)):
            ok = True
            for op, leaf in leaves.items():
                if d not in w.op_by_name[op].dims:
                    continue
                on_path = [f for k, f in zip(ks, combo, strict=True)
                           if leaf.startswith(structure.slots[k].path + ".")]
                ok &= math.prod(on_path) == size
            if ok:
                good.append(dict(zip(ks, combo, strict=True)))
        per_dim.append(good)
    rows = []
    for parts in itertools.product(*per_dim):
        row = [1] * len(structure.slots)
        for part in parts:
            for k, x in part.items():
                row[k] = x
        rows.append(row)
    return np.array(rows, dtype=np.int64).reshape(len(rows), len(structure.slots))


# ---- a GEMM: hand-derived, and the scalar model over every tiling -------------------------

M, N, K = 4, 8, 2


@pytest.fixture(scope="module")
def gemm():
    w = workload(GEMM, m=M, n=N, k=K)
    arch = small_arch(cores=1, pes=4)
    structures = bound_structures(w, arch, "L1")
    return w, arch, structures, data_movement_bound(structures, "L1")


def hand_dram_words(tm: int, tn: int, tk: int) -> int:
    """A tile of tm x tn outputs over tk at L1, the DRAM tile's loops m, n, k (k innermost):
    each output is written once (k innermost keeps it until it is complete); A's tile changes
    with k, so it is read again for every n step unless k is whole; B's tile changes with n
    or k, so it is read again for every m step unless it is all of B."""
    a = M * K * (1 if tk == K else N // tn)
    b = K * N * (1 if (tk == K and tn == N) else M // tm)
    return M * N + a + b


def hand_bound(capacity_words: float) -> float:
    best = math.inf
    for tm, tn, tk in itertools.product(*[[d for d in range(1, s + 1) if s % d == 0]
                                          for s in (M, N, K)]):
        if tm * tk + tk * tn + tm * tn <= capacity_words:
            best = min(best, hand_dram_words(tm, tn, tk))
    return best


def test_the_gemm_space_tiles_at_dram_in_the_order_the_hand_derivation_assumes(gemm):
    _, _, structures, _ = gemm
    orders = set()
    for _, s in structures:
        for tile in (s.template.root, *[c for c in s.template.root.children
                                        if isinstance(c, Tile)]):
            if tile.level == "DRAM":
                orders.add(tuple(lp.dim for lp in tile.loops if not lp.spatial))
    assert orders <= {(), ("m", "n", "k")}


@pytest.mark.parametrize("capacity", [2, 3, 5, 8, 12, 14, 20, 24, 40, 56, 1000])
def test_gemm_bound_is_the_hand_derived_least_traffic(gemm, capacity):
    _, _, _, bound = gemm
    assert bound.at(capacity) == hand_bound(capacity)


def test_gemm_with_one_word_of_each_tensor_moves_every_operand_per_mac(gemm):
    # 3 words hold one element of A, B and C: with k innermost C is written once (32),
    # A and B are read for every MAC (64 each)
    _, _, _, bound = gemm
    assert bound.at(3) == M * N + 2 * M * N * K == 160
    assert bound.at(2.9) == math.inf


def test_gemm_with_a_row_block_of_a_resident_reads_b_once_per_row_block(gemm):
    # 8 words hold a block of 2 whole rows of A (2 x 2), one column of B (2) and the 2 x 1
    # block of C: A is read once (8), B once per row block (2 x 16), C written once (32);
    # no other tile of at most 8 words does better (1x1x1: 160, 2x2x1: 96, 1x2x2: 104)
    _, _, _, bound = gemm
    assert 2 * 2 + 2 * 1 + 2 * 1 == 8
    assert hand_dram_words(2, 1, 2) == 8 + 2 * 16 + 32 == 72
    assert bound.at(8) == 72 == hand_bound(8)
    assert hand_dram_words(1, 1, 1) == 160 and hand_dram_words(2, 2, 1) == 96


def test_gemm_bound_matches_the_scalar_model_over_every_tiling(gemm):
    w, arch, structures, bound = gemm
    for capacity in (3, 8, 14, 24, 56):
        real = with_l1(arch, capacity)
        best = math.inf
        for _, s in structures:
            for row in exact_rows(s):
                result = scalar_evaluate(w, real, s.dataflow(row))
                if result.valid:
                    best = min(best, result.dram_words)
        assert bound.at(capacity) == best, capacity


# ---- a two-GEMM chain: every tiling of every structure, evaluated at each capacity --------

@pytest.fixture(scope="module", params=[(1, 4), (2, 2)], ids=["one-core", "two-cores"])
def chain(request):
    """(cores, m): on two cores, two rows (one per core when m is spread) keep the brute
    force small; every structure of the one-core case is there, with spreads over cores."""
    cores, m = request.param
    w = workload(CHAIN, m=m, l=2, k=2, n=2)
    arch = small_arch(cores=cores, pes=4)
    structures = bound_structures(w, arch, "L1")
    return w, arch, structures, data_movement_bound(structures, "L1")


@pytest.mark.slow
def test_chain_bound_matches_every_tiling_evaluated_at_each_capacity(chain):
    w, arch, structures, bound = chain
    rows = {name: exact_rows(s) for name, s in structures}
    # the brute force sees every tiling (spatial factors beyond the fan-out too: invalid)
    assert sum(len(r) for r in rows.values()) >= bound.tilings
    assert bound.evaluated < bound.tilings  # and the bound pruned some
    # every tiling once with L1 unbounded: the least DRAM words at every capacity
    points = []
    for name, s in structures:
        result = evaluate_batch(s, rows[name])
        fp = result.footprint_words["L1"]
        points += [(f, d) for f, d, ok in zip(fp, result.dram_words, result.valid,
                                              strict=True) if ok]
    for capacity in range(0, int(max(f for f, _ in points)) + 2):
        brute = min((d for f, d in points if f <= capacity), default=math.inf)
        assert bound.at(capacity) == brute, capacity
    # and at a few capacities, on the accelerator as it is (nothing lifted)
    for capacity in (4, 10, 40):
        best = math.inf
        for name, s in structures:
            real = replace(s, arch=with_l1(arch, capacity))
            result = evaluate_batch(real, rows[name])
            if result.valid.any():
                best = min(best, float(result.dram_words[result.valid].min()))
        assert bound.at(capacity) == best, capacity


def test_chain_bound_reaches_compulsory_traffic_once_everything_fits(chain):
    w, _, _, bound = chain
    everything = sum(w.tensor_words(t) for t in w.tensors)
    m, k, l, n = (w.sizes[d] for d in "mkln")  # noqa: E741
    # A (m x k), B (k x l) and D (l x n) read once, E (m x n) written once
    assert bound.compulsory_words == compulsory_words(w) == m * k + k * l + l * n + m * n
    assert bound.at(everything) == bound.compulsory_words


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 200, allow_nan=False), min_size=2, max_size=12))
def test_chain_bound_is_non_increasing_and_never_below_compulsory(chain, capacities):
    _, _, _, bound = chain
    values = bound.curve(sorted(capacities))
    assert (np.diff(values[np.isfinite(values)]) <= 0).all()
    assert (values >= bound.compulsory_words).all()
    assert not np.isfinite(values[:-1]).any() or np.isfinite(values[-1])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.integers(1, 20)), min_size=1, max_size=30))
def test_pareto_front_keeps_exactly_the_undominated_points(points):
    fp = np.array([p[0] for p in points], dtype=float)
    dram = np.array([p[1] for p in points], dtype=float)
    front = pareto(fp, dram)
    for i in range(len(points)):
        dominated = any(fp[j] <= fp[i] and dram[j] <= dram[i]
                        and (fp[j] < fp[i] or dram[j] < dram[i]) for j in range(len(points)))
        on_front = any(fp[j] == fp[i] and dram[j] == dram[i] for j in front)
        assert on_front == (not dominated)
    assert (np.diff(fp[front]) > 0).all() and (np.diff(dram[front]) < 0).all()


def test_lifting_the_level_leaves_the_others():
    arch = small_arch(l1_words=10, reg_words=4, cores=1)
    up = lifted(arch, "L1")
    assert up.level("L1").capacity_words == math.inf
    assert up.level("Reg").capacity_words == 4


def test_left_out_structures_are_named_and_their_samples_kept_apart(chain):
    w, arch, structures, full = chain
    partial = data_movement_bound(structures, "L1", max_rows=50, sample_rows=300)
    assert partial.skipped and all("more than 50" in s for s in partial.skipped)
    assert partial.evaluated < full.evaluated
    assert partial.sampled  # random tilings of the left-out structures
    for p in (*partial.front, *partial.sampled):
        # everything found either way is a tiling the full enumeration covers
        assert full.at(p.footprint_words) <= p.dram_words
    for capacity in (4, 10, 40):
        assert partial.at(capacity) >= full.at(capacity)


def test_a_dimension_with_more_assignments_than_the_limit_is_left_out_before_listing_them():
    """m = 2^20 over the gemm structures' loops along m: 21 divisors per loop, thousands of
    exact assignments of m alone, more than a limit of 10: each such structure is named
    as left out, without its assignments being listed (a size like 2^31 would fill the
    memory), and the bound covers the others."""
    w = workload(GEMM, m=2**20, n=2, k=2)
    arch = small_arch(cores=1, pes=4)
    structures = bound_structures(w, arch, "L1")
    partial = data_movement_bound(structures, "L1", max_rows=10)
    assert partial.skipped
    assert all("more than 10 tilings" in s for s in partial.skipped)
    assert any("of 'm' alone" in s for s in partial.skipped)
