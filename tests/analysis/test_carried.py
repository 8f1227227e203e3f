"""State carried across a reduction loop (online softmax, `carried: l`): hand-derived DRAM
traffic, rescaling operations and footprint of a FlashAttention-like tree; the five-operator
softmax still rejects the same loop; one l tile gives the plain model's numbers exactly; the
tree rules of the construct; and the enumerating oracle agrees on random trees."""

from __future__ import annotations

import pytest
from helpers import scalar_evaluate, small_arch, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_sim import Oracle
from scalar_prepare import prepare
from scalar_traffic import count
from trees import CHAINS, LEVELS, _chain

from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, Loop, Tile, render, tile

ARCH = small_arch()
NAMES = [lv.name for lv in ARCH.levels]
SIZES = {"b": 2, "m": 8, "l": 8, "k": 4, "n": 4}


def online(**sizes: int):
    return load_workload("attention-online", {**SIZES, **sizes})


def flash_tree(tm: int = 4, tl: int = 2, m: int = 8, l_size: int = 8,
               sweep_primitive: str = "Shar", root: str = "") -> Dataflow:
    """Row blocks of `tm` (b:2 x m:m/tm at DRAM), then per block a DRAM-level sweep over l in
    tiles of `tl` running Q x K, the online softmax and x V on L1 tiles; the division after
    the sweep, once per row block."""
    sweep = tile("DRAM", f"l:{l_size // tl}",
                 tile("L1", f"m:{tm} l:{tl} k:4", tile("Reg", "", "qk")),
                 tile("L1", f"m:{tm} l:{tl}", "max"), tile("L1", f"m:{tm} l:{tl}", "sub"),
                 tile("L1", f"m:{tm} l:{tl}", "exp"), tile("L1", f"m:{tm} l:{tl}", "sum"),
                 tile("L1", f"m:{tm} n:4 l:{tl}", tile("Reg", "", "pv")),
                 primitive=sweep_primitive, name="sweep")
    return Dataflow(tile("DRAM", root or f"b:2 m:{m // tm}", sweep,
                         tile("L1", f"m:{tm} n:4", "div"),
                         name="flash"), "flash")


def dram(result) -> dict[str, tuple[float, float]]:
    return {t: (mv.read, mv.update) for t, mv in result.traffic["DRAM"].items()}


def test_flash_tree_reads_q_k_v_once_per_sweep_and_writes_o_once():
    """b=2, m=8 in row blocks of 4: 4 sweeps. Per sweep Q's block (4 x k=4) is read once
    (Shar keeps it across the l steps), all of K[b] (k x l = 32) and V[b] (l x n = 32) once:
    Q 2*8*4 = 64, K 4*32 = 128, V 4*32 = 128; O (b x m x n = 64) written once. The score,
    probability, running max, running sum and unnormalised output never reach DRAM."""
    r = evaluate(online(), ARCH, flash_tree())
    assert r.valid, r.violations
    assert dram(r) == {"Q": (64, 0), "K": (128, 0), "V": (128, 0), "O": (0, 64)}


def test_rescaling_is_counted_per_l_step_after_the_first():
    """Per sweep 4 l steps, so 3 rescalings; each corrects the block's 4 running maxima
    (a subtraction and an exp each) and multiplies the 4 running sums and the 4 x 4
    unnormalised outputs: sub = exp = 4 sweeps x 3 x 4 = 48, mul = 4 x 3 x (4 + 16) = 240.
    Closed form: b*m*(L/tl - 1) and b*m*(1 + n)*(L/tl - 1). They are vector operations of
    the carried operator, besides its b*m*l = 128 maxima."""
    w = online()
    leaf = count(prepare(w, ARCH, flash_tree())).leaves["max"]
    assert dict(leaf.rescale) == {"sub": 48, "exp": 48, "mul": 240}
    assert dict(leaf.rescale) == {"sub": 2 * 8 * 3, "exp": 2 * 8 * 3, "mul": 2 * 8 * 5 * 3}
    r = evaluate(w, ARCH, flash_tree())
    assert r.ops["max"] == 128 + 48 + 48 + 240
    assert r.macs == 2 * 8 * 8 * 4 * 2  # qk and pv, rescaling not among them
    for tl, steps in ((1, 8), (4, 2), (8, 1)):
        leaf = count(prepare(w, ARCH, flash_tree(tl=tl))).leaves["max"]
        expected = {} if steps == 1 else {"sub": 16 * (steps - 1), "exp": 16 * (steps - 1),
                                          "mul": 80 * (steps - 1)}
        assert dict(leaf.rescale) == expected


def test_running_state_stays_resident_in_l1():
    """L1 holds per step Q's block (4 x 4 = 16), K's and V's l tile (4 x 2, 2 x 4: 8 each),
    the step's S, D, E (4 x 2 each, at their common ancestor, the sweep), the running max
    (4) and, for the whole row block, the running sum (4) and the unnormalised output
    (4 x 4 = 16): 80 words."""
    r = evaluate(online(), ARCH, flash_tree())
    l1 = next(f for f in r.footprints if f.level == "L1")
    assert l1.by_tensor == {"Q": 16, "K": 8, "V": 8, "S": 8, "D": 8, "E": 8, "M": 4, "Z": 4,
                            "U": 16}
    assert l1.words == 80


def test_running_max_is_read_back_at_every_l_step_but_never_refetched_from_above():
    """The max tile updates its 4 running maxima at every l step: 8 updates of L1 per row
    per l step (2 l elements per step x 4 rows = 8 per step, 128 in all), and reads them as
    accumulators 128 - 16 times (the first touch of each of b*m = 16 maxima needs no read):
    the state is one epoch across the sweep, not a fresh tensor per step."""
    r = evaluate(online(), ARCH, flash_tree())
    assert r.traffic["L1"]["M"].update == 2 * 8 * 8
    assert r.traffic["L1"]["M"].read == 2 * 8 * 8 - 16 + 2 * 8 * 8  # + sub's reads
    assert "M" not in r.traffic["DRAM"]


FIVE_OPERATOR = load_workload("attention", SIZES)


def _five_operator_tree(tl: int, root: str = "b:2 m:2") -> Dataflow:
    sweep = tile("DRAM", f"l:{8 // tl}",
                 tile("L1", f"m:4 l:{tl} k:4", tile("Reg", "", "qk")),
                 *(tile("L1", f"m:4 l:{tl}", o) for o in ("max", "sub", "exp", "sum", "div")),
                 tile("L1", f"m:4 n:4 l:{tl}", tile("Reg", "", "pv")), primitive="Shar")
    return Dataflow(tile("DRAM", root, sweep))


def test_the_five_operator_form_rejects_the_loop_the_online_form_accepts():
    """l tiled in the sweep, a common ancestor of max and sub: with the five-operator
    softmax sub would read a partial maximum (and div a partial sum), a dependency
    violation; declared carried, the same loop is legal. Without `carried:` the online
    workload is rejected as well."""
    r = evaluate(FIVE_OPERATOR, ARCH, _five_operator_tree(2))
    found = {(v.kind, v.tensor) for v in r.violations}
    assert ("dependency", "M") in found and ("dependency", "Z") in found
    assert evaluate(online(), ARCH, flash_tree()).valid
    plain = _without_carried()
    r = evaluate(plain, ARCH, flash_tree())
    assert {(v.kind, v.tensor) for v in r.violations} == {("dependency", "M")}


def _without_carried():
    text = open(load_workload("attention-online").source).read()
    return workload(text.replace(", carried: l}", "}"), **SIZES)


def test_one_l_tile_gives_the_plain_model_exactly():
    """Metamorphic: with the whole of l in one step, carrying changes nothing (no
    rescaling, the same counts, footprints and cycles as the same workload without
    `carried:`), and DRAM moves what the five-operator form moves with the same row blocks:
    Q, K, V read and O written."""
    w, plain = online(), _without_carried()
    a, b = evaluate(w, ARCH, flash_tree(tl=8)), evaluate(plain, ARCH, flash_tree(tl=8))
    assert a.valid and b.valid
    assert a.traffic == b.traffic and a.ops == b.ops and a.footprints == b.footprints
    assert a.cycles == b.cycles and a.energy_pj == b.energy_pj
    # rows outer, batch inner: K and V change at every root step in both trees (with the
    # batch outer, the five-operator tree, whose sweep is the root's only child, would keep
    # K[b] across row blocks, while the flash tree's Seq drops it for the division)
    a = evaluate(w, ARCH, flash_tree(tl=8, root="m:2 b:2"))
    five = evaluate(FIVE_OPERATOR, ARCH, _five_operator_tree(8, root="m:2 b:2"))
    assert five.valid
    assert dram(five) == dram(a) == {"Q": (64, 0), "K": (128, 0), "V": (128, 0), "O": (0, 64)}


def test_rescaling_costs_vector_time_and_energy():
    """Rescaling adds its operations to the vector energy (1 pJ per operation on the small
    accelerator) and time to the carried operator's leaf."""
    w, plain = online(), _without_carried()
    a = evaluate(w, ARCH, flash_tree(tl=2))
    b = evaluate(plain, ARCH, flash_tree(tl=2))  # invalid (dependency) but still costed
    assert a.compute_energy_pj - b.compute_energy_pj == pytest.approx(48 + 48 + 240)
    assert a.vector_ops - b.vector_ops == 48 + 48 + 240
    assert a.cycles >= b.cycles


def test_a_spatial_carried_loop_is_a_dependency():
    flow = flash_tree()
    sweep = flow.root.children[0]
    split = Tile("DRAM", (Loop("l", 2), Loop("l", 2, True)), sweep.children, "Shar")
    flow = Dataflow(Tile("DRAM", flow.root.loops, (split, flow.root.children[1]), "Seq"))
    r = evaluate(online(), ARCH, flow)
    assert any(v.kind == "dependency" and "must be temporal" in v.message
               for v in r.violations)


def test_a_loop_inside_the_carried_loop_is_a_dependency():
    """Rows stepped inside the sweep: the running state of the first rows would have to
    leave while the others are swept."""
    sweep = tile("DRAM", "l:4 m:2",
                 tile("L1", "m:4 l:2 k:4", tile("Reg", "", "qk")),
                 tile("L1", "m:4 l:2", "max"), tile("L1", "m:4 l:2", "sub"),
                 tile("L1", "m:4 l:2", "exp"), tile("L1", "m:4 l:2", "sum"),
                 tile("L1", "m:4 n:4 l:2", tile("Reg", "", "pv")), primitive="Shar")
    flow = Dataflow(tile("DRAM", "b:2", sweep, tile("L1", "m:8 n:4", "div")))
    r = evaluate(online(), ARCH, flow)
    assert any(v.kind == "dependency" and "innermost" in v.message for v in r.violations)


def test_a_result_of_the_running_value_may_not_leave_the_sweep_unless_rescaled():
    """x V outside the sweep would multiply probabilities computed with stale maxima."""
    sweep = tile("DRAM", "l:4",
                 tile("L1", "m:4 l:2 k:4", tile("Reg", "", "qk")),
                 tile("L1", "m:4 l:2", "max"), tile("L1", "m:4 l:2", "sub"),
                 tile("L1", "m:4 l:2", "exp"), tile("L1", "m:4 l:2", "sum"), primitive="Shar")
    flow = Dataflow(tile("DRAM", "b:2 m:2", sweep,
                         tile("L1", "m:4 n:4 l:8", tile("Reg", "", "pv")),
                         tile("L1", "m:4 n:4", "div")))
    r = evaluate(online(), ARCH, flow)
    assert any(v.kind == "dependency" and v.tensor == "E" and "leaves" in v.message
               for v in r.violations)


def test_carried_must_name_a_reduction_dim_of_the_operator():
    text = open(load_workload("attention-online").source).read()
    with pytest.raises(InputError, match="carried 'm' must be one of its reduction dims"):
        workload(text.replace("carried: l", "carried: m"))
    with pytest.raises(InputError, match="must be a string"):
        workload(text.replace("carried: l", "carried: 3"))


# ---- the oracle on random FlashAttention-like trees ---------------------------------------

SMALL_ONLINE = """
name: online
dims: {m: 3, l: 5, k: 2, n: 2}
ops:
  - {name: qk, expr: "S[m,l] += Q[m,k] * K[k,l]"}
  - {name: mx, expr: "M[m] max= S[m,l]", carried: l}
  - {name: sub, expr: "D[m,l] = S[m,l] - M[m]"}
  - {name: ex, expr: "E[m,l] = exp(D[m,l])"}
  - {name: sm, expr: "Z[m] += E[m,l]"}
  - {name: pv, expr: "U[m,n] += E[m,l] * V[l,n]"}
  - {name: dv, expr: "O[m,n] = U[m,n] / Z[m]"}
"""


@st.composite
def sweeps(draw, w):
    """Rows (temporal, sometimes also split over the L1 instances) and sometimes a repeated
    n loop at the root; a sweep tile at DRAM or L1 with one or two loops over l (clipped
    now and then); random chains for the operators inside and for the division after."""
    data = draw(st.data())
    root_loops, ext = [], dict(w.sizes)
    tm = data.draw(st.integers(1, 3))
    n_m = -(-3 // tm)
    if n_m > 1:
        root_loops.append(Loop("m", n_m))
        ext["m"] = tm
    if data.draw(st.integers(0, 3)) == 0:
        root_loops.append(Loop("n", 2))
    tl = data.draw(st.integers(1, 5))
    steps = -(-5 // tl)
    sweep_loops = [Loop("l", steps)]
    if steps > 2 and data.draw(st.booleans()):
        sweep_loops = [Loop("l", -(-steps // 2)), Loop("l", 2)]
    level = data.draw(st.sampled_from(["DRAM", "L1"]))
    allowed = [c for c in CHAINS if LEVELS.index(c[0]) >= LEVELS.index(level)]
    inside = []
    for op in ("qk", "mx", "sub", "ex", "sm", "pv"):
        required = {d: (tl if d == "l" else ext[d]) for d in w.op_by_name[op].dims}
        exact = {"l"} | ({"m"} if "m" in ext and ext["m"] != 3 else set())
        inside.append(_chain(data, w, op, required, data.draw(st.sampled_from(allowed)),
                             exact & set(required)))
    sweep = Tile(level, tuple(sweep_loops), tuple(inside),
                 data.draw(st.sampled_from(["Seq", "Shar", "Pipe"])))
    after = _chain(data, w, "dv", {"m": ext["m"], "n": 2},
                   data.draw(st.sampled_from(CHAINS)), {"m"} if ext["m"] != 3 else set())
    root = Tile("DRAM", tuple(root_loops), (sweep, after),
                data.draw(st.sampled_from(["Seq", "Shar"])))
    return Dataflow(root, "random-sweep")


def test_model_matches_the_oracle_on_random_sweeps():
    """Fills, reads and updates per level and tensor, operations (rescaling included, per
    function), and footprints agree exactly with the enumerating oracle."""
    w = workload(SMALL_ONLINE)
    compared, rescaled = [], []

    @settings(max_examples=60, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(sweeps(w))
    def check(flow: Dataflow) -> None:
        result = evaluate(w, ARCH, flow)
        if any(v.kind in ("coverage", "dependency", "window") for v in result.violations):
            compared.append(False)
            return
        oracle = Oracle(w, NAMES, flow)
        got = {(lv, t): [round(m.fill), round(m.read), round(m.update)]
               for lv, tensors in result.traffic.items() for t, m in tensors.items()}
        got = {k: v for k, v in got.items() if any(v)}
        expected = {k: v for k, v in oracle.traffic.items() if any(v)}
        assert got == expected, render(flow.root)
        leaves = count(prepare(w, ARCH, flow)).leaves
        model_rescale = {o: dict(lf.rescale) for o, lf in leaves.items() if lf.rescale}
        oracle_rescale = {o: c for o, c in oracle.rescale.items() if any(c.values())}
        assert model_rescale == oracle_rescale, render(flow.root)
        ops = {o: n + sum(oracle.rescale.get(o, {}).values()) for o, n in oracle.ops.items()}
        assert dict(result.ops) == ops
        assert {f.level: f.words for f in result.footprints} == oracle.footprints, \
            render(flow.root)
        compared.append(True)
        rescaled.append(bool(model_rescale))

    check()
    assert sum(compared) >= 45, f"only {sum(compared)} of {len(compared)} trees compared"
    assert sum(rescaled) >= 25, "too few trees with more than one l step"


def test_the_batched_evaluator_models_carried_state():
    """The vectorised engine models the epochs across a carried loop and the rescaling (no
    row by row): the flash tree's hand-derived operations (128 maxima + 48 + 48 + 240
    rescaling operations besides the other operators') and the scalar copy's cycles."""
    import numpy as np

    from tileflow.evaluator.batch import evaluate_batch
    from tileflow.evaluator.structure import structure_of

    w = online()
    structure = structure_of(w, ARCH, flash_tree())
    batch = evaluate_batch(structure, structure.default_factors[None, :])
    r = scalar_evaluate(w, ARCH, flash_tree())
    assert batch.ops[0] == sum(r.ops.values())
    assert batch.ops[0] - sum(v for o, v in r.ops.items() if o != "max") == \
        128 + 48 + 48 + 240
    assert batch.cycles[0] == pytest.approx(r.cycles, rel=1e-9)
    assert np.all(batch.valid)


@pytest.mark.parametrize("overlap", ["fill-drain", "perfect", "lockstep"])
def test_the_batch_equals_the_model_on_random_sweeps(overlap: str):
    """Random FlashAttention-like sweeps and random factor rows around each (clipped l
    tiles, carried loops of one iteration, loops inside the carried one, spatial rows): the
    batch equals the scalar model row by row, the tree rules' violations included."""
    from dataclasses import replace

    import numpy as np

    from tests.explore.test_batch import TIMED, assert_rows_equal, random_rows
    from tileflow.evaluator.structure import structure_of

    w = workload(SMALL_ONLINE)
    arch = replace(TIMED, overlap=overlap)  # per-step overheads and first-word latencies
    rng = np.random.default_rng(41)
    totals = [0, 0]

    @settings(max_examples=30, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(sweeps(w))
    def check(flow: Dataflow) -> None:
        structure = structure_of(w, arch, flow)
        compared, rejected = assert_rows_equal(structure, random_rows(structure, 16, rng))
        totals[0] += compared
        totals[1] += rejected

    check()
    assert totals[0] >= 120 and totals[1] >= 10, totals


def test_kernels_are_not_generated_for_carried_state():
    """The kernel generators emit no rescaling: they refuse such workloads with a clear
    error instead of producing a kernel that computes something else."""
    from tileflow.kernels.nest import analyse

    with pytest.raises(InputError, match="carry state across a reduction loop"):
        analyse(online(), ARCH, flash_tree())


def test_flash_baseline_on_edge_at_g1_size():
    """Edge, G1 (b=8, m=512, l=512, k=n=64), Flash with row blocks of 64 and l tiles of 64:
    b spread over the 4 cores, 8 row blocks per b. Per block the sweep reads Q's block once
    and all of K[b] and V[b]: Q + 8 K + 8 V, and O once: 18 x 262,144 words. 8 l steps per
    sweep, 7 rescalings of b*m = 4,096 rows: sub = exp = 28,672, mul = 7 x 4,096 x 65."""
    from tileflow.dataflows import build
    from tileflow.specs.arch import load_arch

    w, edge = load_workload("attention-online", preset="G1"), load_arch("edge")
    flow = build("flash", w, edge, {"m": 64, "l": 64})
    r = evaluate(w, edge, flow)
    assert r.valid
    words = 8 * 512 * 64
    assert dram(r) == {"Q": (words, 0), "K": (8 * words, 0), "V": (8 * words, 0),
                       "O": (0, words)}
    leaf = count(prepare(w, edge, flow)).leaves["max"]
    assert dict(leaf.rescale) == {"sub": 7 * 4096, "exp": 7 * 4096, "mul": 7 * 4096 * 65}


def test_the_online_workload_has_the_five_operator_presets():
    """G1-G12 give the same sizes to both forms; a bare preset name still means the
    five-operator attention."""
    for i in range(1, 13):
        a = load_workload("attention", preset=f"G{i}")
        b = load_workload("attention-online", preset=f"G{i}")
        assert dict(a.sizes) == dict(b.sizes)
        assert a.total_ops("matrix") == b.total_ops("matrix")
    assert load_workload("G1").name == "attention"
