"""The documentation in docs/ stands on its own and cannot drift from the code: the key
reference covers every key the validators accept, and the worked examples' numbers are what
the tool computes (derived here by hand, independently of the tool)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from tileflow.errors import InputError
from tileflow.explore.studies.config import parse_config
from tileflow.explore.sweeps.sweep_config import parse_sweep
from tileflow.specs.arch import parse_arch
from tileflow.specs.dataflow import parse_dataflow
from tileflow.specs.reference import FILES, markdown
from tileflow.specs.workload import parse_workload
from tileflow.specs.yamlfile import Field

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

SECTIONS = {s.name: s for _, sections in FILES for s in sections}

ARCH = {
    "levels": [
        {"name": "DRAM", "read_words_per_cycle": 1, "write_words_per_cycle": 1},
        {"name": "Reg", "capacity_words": 4, "fanout": 4, "read_words_per_cycle": 1,
         "write_words_per_cycle": 1, "energy_pj_per_word": {"read": 1, "write": 1}},
    ],
    "compute": {"matrix": {"level": "Reg", "rows": 2, "cols": 2},
                "vector": {"level": "Reg", "lanes": 4}},
}
WORKLOAD = {"dims": {"m": 2, "k": 2, "n": 2},
            "ops": [{"name": "mm", "expr": "C[m,n] += A[m,k] * B[k,n]"}]}
EXPLORE = {"accelerator": "edge", "workload": "G1", "structures": "search",
           "genetic": {"population": 4}, "limits": {"dram_words": 1},
           "budget": {"evaluations": 10}, "tie_break": {"tolerance": 0.01}}
SWEEP = {"accelerator": "edge", "workload": "gemm-chain",
         "sweep": {"parameters": {"L1.capacity_bytes": [4096, 8192]}}}
DATAFLOW = {"root": {"level": "DRAM", "loops": [{"dim": "m", "factor": 2}],
                     "children": [{"op": "mm"}]},
            "found_for": {"accelerator": "edge", "workload": "mm.yaml", "sizes": {"m": 2}}}

# section -> (parser, a valid document, the path of that section's mapping in it)
PROBES = {
    "accelerator": (parse_arch, ARCH, ()),
    "level": (parse_arch, ARCH, ("levels", 1)),
    "energy_pj_per_word": (parse_arch, ARCH, ("levels", 1, "energy_pj_per_word")),
    "compute": (parse_arch, ARCH, ("compute",)),
    "compute.matrix": (parse_arch, ARCH, ("compute", "matrix")),
    "compute.vector": (parse_arch, ARCH, ("compute", "vector")),
    "workload": (parse_workload, WORKLOAD, ()),
    "operator": (parse_workload, WORKLOAD, ("ops", 0)),
    "dataflow": (parse_dataflow, DATAFLOW, ()),
    "tile": (parse_dataflow, DATAFLOW, ("root",)),
    "leaf": (parse_dataflow, DATAFLOW, ("root", "children", 0)),
    "loop": (parse_dataflow, DATAFLOW, ("root", "loops", 0)),
    "explore": (parse_config, EXPLORE, ()),
    "genetic": (parse_config, EXPLORE, ("genetic",)),
    "limits": (parse_config, EXPLORE, ("limits",)),
    "budget": (parse_config, EXPLORE, ("budget",)),
    "tie_break": (parse_config, EXPLORE, ("tie_break",)),
    "found_for": (parse_dataflow, DATAFLOW, ("found_for",)),
    "sweep": (parse_sweep, SWEEP, ("sweep",)),
    "sweep.parameters": (parse_sweep, SWEEP, ("sweep", "parameters")),
}


def _accepted_keys(parser, document: dict, path: tuple) -> set[str]:
    """Ask the validator itself: give it an unknown key and read the keys its error lists."""
    doc = copy.deepcopy(document)
    parser(Field(doc, "probe.yaml"))  # the probe document is valid as it stands
    target = doc
    for step in path:
        target = target[step]
    target["no_such_key_anywhere"] = 1
    with pytest.raises(InputError) as caught:
        parser(Field(doc, "probe.yaml"))
    listed = re.search(r"expected one of: (.*)$", caught.value.message)
    assert listed, caught.value.message
    return set(listed.group(1).split(", "))


@pytest.mark.parametrize("name", sorted(PROBES))
def test_every_key_the_validator_accepts_is_in_the_reference(name):
    accepted = _accepted_keys(*PROBES[name])
    assert accepted == set(SECTIONS[name].allowed)
    reference = (DOCS / "reference.md").read_text()
    part = reference.split(f"### `{name}`", 1)[1].split("\n### ", 1)[0]
    for key in accepted:
        assert f"| `{key}` |" in part, f"key '{key}' of '{name}' missing from docs/reference.md"


def test_every_section_is_probed():
    assert set(PROBES) == set(SECTIONS)


def test_reference_is_generated_from_the_key_tables():
    assert (DOCS / "reference.md").read_text() == markdown(), (
        "docs/reference.md is stale: run `python -m tileflow.specs.reference docs/reference.md`")


def test_every_key_has_type_unit_default_and_meaning():
    for section in SECTIONS.values():
        for key in section.keys:
            assert key.type and key.meaning and key.unit, (section.name, key.name)


def test_docs_are_linked_from_the_readme_and_never_point_outside_the_repository():
    readme = (REPO / "README.md").read_text()
    assert "docs/README.md" in readme
    for path in [REPO / "README.md", *DOCS.rglob("*.md")]:
        text = path.read_text()
        assert "DESIGN.md" not in text, path
        for target in re.findall(r"\]\(([^)#]+)", text):
            if not target.startswith("http"):
                assert (path.parent / target).exists(), f"{path.name} links to {target}"


# --- the worked examples of docs/, run the way the docs run them -------------------------

EXAMPLES = DOCS / "examples"


def _evaluate(workload: str, dataflow: str, arch: str = "tiny-npu.yaml") -> dict:
    import json

    from test_cli import tileflow

    proc = tileflow("evaluate", "--arch", str(EXAMPLES / arch), "--workload",
                    str(EXAMPLES / workload), "--dataflow", str(EXAMPLES / dataflow), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _moves(result: dict, level: str, tensor: str) -> tuple[float, float, float]:
    t = result["levels"][level]["per_tensor"][tensor]
    return t["fills"], t["reads"], t["updates"]


def test_counting_example_multicast_spatial_reduction_first_touch():
    """docs/counting.md: GEMM 4 x 4 x 8, m over 2 cores, (m, k) over each core's 2 x 2 PEs,
    16 temporal steps (n:4, k:4) per core."""
    r = _evaluate("gemm.yaml", "gemm-spatial.yaml")
    cores, pes, steps = 2, 4, 16
    # A[m,k]: every PE gets its own word each step; no two PEs share one: no multicast
    assert _moves(r, "Reg", "A") == (cores * pes * steps, cores * pes * steps, 0)
    assert _moves(r, "L1", "A")[1] == cores * pes * steps
    # B[k,n]: the two PEs of a column (same k, other m) share a word: L1 reads it once
    assert _moves(r, "Reg", "B")[0] == cores * pes * steps
    assert _moves(r, "L1", "B")[1] == cores * 2 * steps
    # C[m,n]: 4 x 4 results, each made of partial sums from 2 PEs (k spatial), reduced on
    # the way: L1 is updated once per element; never filled (first touch)
    assert _moves(r, "L1", "C") == (0, 0, 16)
    ops = 4 * 4 * 8
    # one register update per MAC; no read of the accumulator on its first touch in a PE
    # (each PE starts 4 elements: one per n step)
    assert _moves(r, "Reg", "C") == (0, ops - cores * pes * 4, ops)
    # DRAM: A once (each core its half), B once (multicast to both cores), C once
    assert [_moves(r, "DRAM", t) for t in "ABC"] == [(0, 32, 0), (0, 32, 0), (0, 0, 16)]
    assert _moves(r, "L1", "A")[0] == 32 and _moves(r, "L1", "B")[0] == 2 * 32
    # footprints per instance: L1 holds A 2x8, B 8x4, C 2x4; a PE one word of each
    assert r["footprint_words"] == {"L1": 16 + 32 + 8, "Reg": 3}


def test_latency_example_overlap_and_fill_drain():
    """docs/latency.md: the same GEMM; per-instance bandwidths in words per cycle."""
    r = _evaluate("gemm.yaml", "gemm-spatial.yaml")
    leaf = (128 + 128 + 96) / (8 * 2)  # Reg operand reads over 8 PEs at 2 words/cycle = 22
    l1_load = 256 / (8 * 2)  # Reg fills over 8 PEs at 2 words/cycle = 16
    l1_store = 32 / (8 * 2)  # partial sums leaving 8 PEs before the reduction = 2
    l1 = max(l1_load, leaf, l1_store) + (l1_load + leaf + l1_store - leaf) / 16
    root_load, root_store = 64 / 2, 16 / 2  # DRAM: 64 words read, 16 written, 2 words/cycle
    root = max(root_load, l1, root_store) + (root_load + l1 + root_store - root_load) / 1
    assert l1 == 23.125 and r["cycles"] == pytest.approx(root) == pytest.approx(63.125)
    assert (r["bottleneck"]["kind"], r["bottleneck"]["level"]) == ("read", "DRAM")


def test_latency_example_step_overhead_and_latency(tmp_path):
    text = (EXAMPLES / "tiny-npu.yaml").read_text().replace(
        "{name: DRAM, read_words_per_cycle: 2,",
        "{name: DRAM, step_overhead_cycles: 5, latency_cycles: 50, read_words_per_cycle: 2,")
    assert "step_overhead_cycles" in text
    (tmp_path / "slow.yaml").write_text(text)
    r = _evaluate("gemm.yaml", "gemm-spatial.yaml", arch=str(tmp_path / "slow.yaml"))
    load = 32 + 5 * 1  # one step of the root reads DRAM
    assert r["cycles"] == pytest.approx(load + (23.125 + 8) + 50)


def test_energy_example():
    r = _evaluate("gemm.yaml", "gemm-spatial.yaml")
    dram = (64 + 16) * 100
    l1 = (192 + 96 + 16) * 10
    reg = (352 + 256 + 128) * 1
    assert {k: v["energy_pj"] for k, v in r["levels"].items()} == {
        "DRAM": dram, "L1": l1, "Reg": reg}
    assert r["energy_pj"] == dram + l1 + reg + 128 * 1 == 11904


def test_seq_drops_shar_keeps_and_homes():
    """docs/counting.md: C = A B, E = C D; m=4 l=4 k=2 n=2; DRAM loop over 2 row blocks."""
    seq = _evaluate("chain.yaml", "chain-seq.yaml")
    shar = _evaluate("chain.yaml", "chain-shar.yaml")
    home = _evaluate("chain.yaml", "chain-home-dram.yaml")
    dram = {name: {t: _moves(r, "DRAM", t) for t in r["levels"]["DRAM"]["per_tensor"]}
            for name, r in (("seq", seq), ("shar", shar), ("home", home))}
    # A (4x2) read once in halves; B (2x4) and D (4x2) do not depend on m: Seq drops them
    # after the child that used them, so each row block reads them again; Shar keeps them
    assert dram["seq"] == {"A": (0, 8, 0), "B": (0, 16, 0), "D": (0, 16, 0), "E": (0, 0, 8)}
    assert dram["shar"] == {"A": (0, 8, 0), "B": (0, 8, 0), "D": (0, 8, 0), "E": (0, 0, 8)}
    # C lives in L1 (its default home): g1 updates it once per element (k innermost), g2
    # reads it once per MAC (16 ops per row block x 2); with homes {C: DRAM} it goes out and
    # comes back: 16 words written to DRAM, 16 read back into L1
    assert _moves(seq, "L1", "C") == (0, 32, 16)
    assert dram["home"]["C"] == (0, 16, 16) and _moves(home, "L1", "C") == (16, 32, 16)
    # footprints: Seq the larger child (A 4 + B 8 + C 8 = C 8 + D 8 + E 4 = 20), Shar the
    # union (A, B, C, D, E: 32); in the registers, Shar needs 5 words and tiny-npu has 4
    assert seq["footprint_words"]["L1"] == 20 and shar["footprint_words"]["L1"] == 32
    assert seq["valid"] and not shar["valid"]
    [v] = shar["violations"]
    assert (v["kind"], v["level"], v["needed"], v["available"], v["unit"]) == \
        ("capacity", "Reg", 5, 4, "words")


def test_pipe_example():
    """docs/latency.md: chain-pipe overlaps g1 of one row block with g2 of the previous."""
    r = _evaluate("chain.yaml", "chain-pipe.yaml")
    g1 = 40 + (32 + 40 + 8 - 40) / 32  # leaf: 80 operand reads at 2 words/cycle
    g2 = 44 + (32 + 44 + 4 - 44) / 32  # leaf: 88 operand reads at 2 words/cycle
    stages = [g1 / 2, g2 / 2]
    inner = sum(stages) + (2 - 1) * max(stages)
    assert r["cycles"] == pytest.approx(inner + (12 + 4) / 2) == pytest.approx(73.75)
    seq = _evaluate("chain.yaml", "chain-seq.yaml")
    assert seq["cycles"] == pytest.approx(g1 + g2 + (40 / 2 + 8 / 2) / 2) == 98.375
    assert r["footprint_words"]["Reg"] == 6  # Pipe: the stages' registers add up


def test_vector_example_lanes():
    """docs/concepts.md: exp over 4 x 8 on 2 cores x 4 lanes, 4 cycles per exp."""
    r = _evaluate("rowexp.yaml", "rowexp-lanes.yaml")
    compute = (2 * 2) * 4  # temporal steps per core (m:2, l:2) x cycles per exp
    assert r["vector_ops"] == 32 and r["macs"] == 0
    assert r["cycles"] == 16 + (16 + compute + 16 - 16)  # DRAM loads S, stores E: 16 each
    assert (r["bottleneck"]["kind"], r["bottleneck"]["unit"]) == ("compute", "vector")


def test_vector_example_too_many_lanes(tmp_path):
    text = (EXAMPLES / "rowexp-lanes.yaml").read_text()
    (tmp_path / "wide.yaml").write_text(text.replace("[m:2, l:2, l:4:Sp]", "[m:2, l:8:Sp]"))
    r = _evaluate("rowexp.yaml", str(tmp_path / "wide.yaml"))
    assert not r["valid"]
    [v] = r["violations"]
    assert (v["kind"], v["node"], v["level"], v["needed"], v["available"], v["unit"]) == \
        ("fanout", "root.0", "L1", 8, 4, "vector units")


def test_no_reuse_example(tmp_path):
    """docs/counting.md: with no_reuse A is read at every step of the root's 4 steps."""
    reload = _evaluate("gemm.yaml", "gemm-no-reuse.yaml")
    text = (EXAMPLES / "gemm-no-reuse.yaml").read_text()
    (tmp_path / "reuse.yaml").write_text(text.replace("  no_reuse: [A]\n", ""))
    reuse = _evaluate("gemm.yaml", str(tmp_path / "reuse.yaml"))
    assert _moves(reuse, "DRAM", "A") == (0, 2 * 8 * 2, 0)
    assert _moves(reload, "DRAM", "A") == (0, 4 * 16, 0)
    assert _moves(reload, "DRAM", "B") == _moves(reuse, "DRAM", "B") == (0, 64, 0)


# --- docs/your-own-chip.md: a user's own accelerator and dataflow, end to end ------------

OWN = DOCS / "your-own-chip.md"
SIZES = {"b": 1, "m": 256, "l": 256, "k": 64, "n": 64}


def _blocks(text: str, kind: str) -> list[str]:
    """The fenced blocks of a Markdown text whose info string is `kind` ('' for plain)."""
    found, current, inside = [], [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if inside is None:
                inside, current = line[3:].strip(), []
            else:
                if inside == kind:
                    found.append("\n".join(current) + "\n")
                inside = None
        elif inside is not None:
            current.append(line)
    return found


def _own_run(tmp_path, *args: str) -> dict | str:
    from test_cli import tileflow

    proc = tileflow(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if "--json" in args else proc.stdout


@pytest.fixture()
def own(tmp_path):
    """A scratch folder with the docs, where the page's commands run as written."""
    import shutil

    shutil.copytree(DOCS, tmp_path / "docs")
    return tmp_path


def test_own_chip_page_shows_the_files_it_uses():
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe")
    arch_block, flow_block = _blocks(OWN.read_text(), "yaml")
    chip = yaml.load(EXAMPLES / "small-chip.yaml")
    del chip["description"]  # the only line the page leaves out
    assert yaml.load(arch_block) == chip
    assert yaml.load(flow_block) == yaml.load(EXAMPLES / "my-chain.yaml")


def test_own_chip_page_commands_run_and_say_what_the_page_says(own):
    text = OWN.read_text()
    commands = [" ".join(b.replace("\\\n", " ").split()) for b in _blocks(text, "bash")]
    assert len(commands) == 2 and all(c.startswith("tileflow ") for c in commands)
    compare, evaluate_ = (_own_run(own, *c.split()[1:]) for c in commands)
    shown = [line for block in _blocks(text, "") for line in block.splitlines()
             if "INVALID:" in line]
    assert len(shown) == 2
    for line in shown:
        name, reason = line.split(" ... ")
        [row] = [r for r in compare.splitlines() if r.startswith(name + " ")]
        assert row.endswith(reason)
    assert "valid        yes" in evaluate_ and "DRAM traffic 163,840 words" in evaluate_


def test_own_chip_numbers_by_hand(own):
    sizes = [a for k, v in SIZES.items() for a in ("--set", f"{k}={v}")]
    arch = ["--arch", "docs/examples/small-chip.yaml", "--workload", "gemm-chain", *sizes]
    m, l_, k, n = SIZES["m"], SIZES["l"], SIZES["k"], SIZES["n"]
    capacity = 262144 // 2
    a, b, c, d, e = m * k, k * l_, m * l_, l_ * n, m * n
    layerwise = _own_run(own, "evaluate", *arch, "--dataflow", "layerwise", "--json")
    assert layerwise["dram_words"] == a + b + 2 * c + d + e == 196_608
    r = _own_run(own, "evaluate", *arch, "--dataflow", "docs/examples/my-chain.yaml", "--json")
    blocks, rows = 4, 64
    dram = {t: v["reads"] + v["writes"] for t, v in r["levels"]["DRAM"]["per_tensor"].items()}
    assert dram == {"A": a, "B": blocks * b, "D": blocks * d, "E": e}  # no C: it stays in L1
    assert r["dram_words"] == 163_840
    gemm1 = rows * k + b + rows * l_  # a block of A, all of B, a block of C
    gemm2 = rows * l_ + d + rows * n
    assert r["valid"] and r["footprint_words"] == {"L1": max(gemm1, gemm2), "Reg": 3}
    assert max(gemm1, gemm2) == 36_864 and capacity == 131_072
    macs = 2 * m * l_ * k
    assert r["macs"] == macs == 8_388_608 and r["cycles"] >= macs / 64 == 131_072
    assert round(r["cycles"]) == 134_350 and r["bottleneck"]["message"] == \
        "matrix unit ('gemm1')"
    text = OWN.read_text()
    for number in (196_608, 163_840, 36_864, 131_072, 16_384, 65_536, 8_388_608, 134_350):
        assert f"{number:,}" in text


def test_own_chip_edits_of_the_page(own):
    """The two edits of section 4, made as the page says."""
    text = OWN.read_text()
    sizes = [a for k, v in SIZES.items() for a in ("--set", f"{k}={v}")]
    arch = ["--arch", "docs/examples/small-chip.yaml", "--workload", "gemm-chain", *sizes]
    flow = (EXAMPLES / "my-chain.yaml").read_text()
    new, old = re.search(r"loops\n`(\[.*?\])` in place of `(\[.*?\])`", text).groups()
    assert old in flow
    (own / "array.yaml").write_text(flow.replace(old, new))
    r = _own_run(own, "evaluate", *arch, "--dataflow", "array.yaml", "--json")
    [v] = r["violations"]
    assert (v["kind"], v["node"], v["needed"], v["available"]) == ("array", "root.0", 16, 8)
    assert v["message"] in text
    whole = flow.replace("loops: [m:4]", "loops: [m:1]").replace("[m:8, ", "[m:32, ")
    (own / "whole.yaml").write_text(whole)
    r = _own_run(own, "evaluate", *arch, "--dataflow", "whole.yaml", "--json")
    m, l_, k, n = SIZES["m"], SIZES["l"], SIZES["k"], SIZES["n"]
    assert r["valid"] and r["footprint_words"]["L1"] == m * k + k * l_ + m * l_ == 98_304
    assert r["dram_words"] == m * k + k * l_ + l_ * n + m * n == 65_536
    assert "98,304" in text and "`m:1` at the root, `m:32` in each L1 tile" in text

def test_online_softmax_example():
    """docs/online-softmax.md: attention-online at b=2 m=8 l=8 k=4 n=4, row blocks of 4 and
    a sweep over l in tiles of 2 (4 steps)."""
    import json

    from test_cli import tileflow

    sizes = [x for d, v in (("b", 2), ("m", 8), ("l", 8), ("k", 4), ("n", 4))
             for x in ("--set", f"{d}={v}")]
    proc = tileflow("evaluate", "--arch", str(EXAMPLES / "tiny-npu.yaml"), "--workload",
                    "attention-online", *sizes, "--dataflow",
                    str(EXAMPLES / "flash-online.yaml"), "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["valid"]
    dram = {t: (m["reads"], m["updates"]) for t, m in r["levels"]["DRAM"]["per_tensor"].items()}
    # 4 sweeps: Q's block once each (64), K and V all of l per sweep (4 x 32), O once
    assert dram == {"Q": (64, 0), "K": (128, 0), "V": (128, 0), "O": (0, 64)}
    assert r["dram_words"] == 384
    # 3 corrections per sweep x 4 sweeps: sub and exp of 4 maxima, mul of 4 + 16
    assert r["ops"]["max"] == 2 * 8 * 8 + 48 + 48 + 240
    assert r["vector_ops"] == 464 + 3 * 128 + 64  # max, sub, exp, sum, div
    assert r["footprint_words"]["L1"] == 16 + 8 + 8 + 3 * 8 + 4 + 4 + 16
    # the max leaf: 128 steps on one lane, plus 48 + 48 x 4 + 240 rescaling cycles
    from tileflow.cost import evaluate
    from tileflow.specs.arch import load_arch
    from tileflow.specs.dataflow import load_dataflow_file
    from tileflow.specs.workload import load_workload

    w = load_workload("attention-online", {"b": 2, "m": 8, "l": 8, "k": 4, "n": 4})
    arch = load_arch(str(EXAMPLES / "tiny-npu.yaml"))
    result = evaluate(w, arch, load_dataflow_file(EXAMPLES / "flash-online.yaml"))
    tiles = {t.path: t for t in result.latency_breakdown}
    assert tiles["root.0.1"].inner_cycles == 128 + 48 + 4 * 48 + 240
