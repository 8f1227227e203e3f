"""The documentation in docs/ stands on its own and cannot drift from the code: the key
reference covers every key the validators accept, and the worked examples' numbers are what
the tool computes (derived here by hand, independently of the tool)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from tileflow.errors import InputError
from tileflow.reference import FILES, markdown
from tileflow.specs.arch import parse_arch
from tileflow.specs.dataflow import parse_dataflow
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
DATAFLOW = {"root": {"level": "DRAM", "loops": [{"dim": "m", "factor": 2}],
                     "children": [{"op": "mm"}]}}

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
        "docs/reference.md is stale: run `python -m tileflow.reference docs/reference.md`")


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
