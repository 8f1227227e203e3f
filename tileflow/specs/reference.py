"""The reference of every key of the input files, generated from the validators' key tables
(`tileflow.specs.keys`). `python -m tileflow.specs.reference docs/reference.md` rewrites it; a test
fails when the file and the tables disagree."""

from __future__ import annotations

import sys
from pathlib import Path

from tileflow.outputs import write_text_atomic
from tileflow.specs.keys import (
    ACCELERATOR_SECTIONS,
    DATAFLOW_SECTIONS,
    EXPLORE_SECTIONS,
    SWEEP_SECTIONS,
    WORKLOAD_SECTIONS,
    Section,
)

# (heading, sections): one part of the reference per kind of input file
FILES: tuple[tuple[str, tuple[Section, ...]], ...] = (
    ("Accelerator files (`--arch`)", ACCELERATOR_SECTIONS),
    ("Workload files (`--workload`)", WORKLOAD_SECTIONS),
    ("Dataflow files (`--dataflow`)", DATAFLOW_SECTIONS),
    ("Exploration configs (`tileflow explore CONFIG.yaml`)", EXPLORE_SECTIONS),
    ("Sweep configs (`tileflow sweep`)", SWEEP_SECTIONS),
)

HEAD = """# Reference: every key of the input files

Generated from the tables the validators read (`tileflow/specs/keys.py`) by
`python -m tileflow.specs.reference docs/reference.md`; do not edit by hand. Unknown keys are
errors, and so is a value of the wrong type or range: the message names the file, the line
and what was expected. A default of *required* means the key must be given. Each part below
is one kind of YAML mapping; "where" says where it sits in its file. How to add a key:
[adding-a-key.md](adding-a-key.md).
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def section_markdown(section: Section) -> str:
    lines = [f"### `{section.name}`", "", f"Where: {section.where}.", ""]
    if section.about:
        lines += [section.about, ""]
    lines += ["| key | type | unit | default | meaning |", "|---|---|---|---|---|"]
    for key in section.keys:
        default = "*required*" if key.required else key.default
        lines.append(f"| `{key.name}` | {_cell(key.type)} | {_cell(key.unit)} | "
                     f"{_cell(default)} | {_cell(key.meaning)} |")
    return "\n".join(lines) + "\n"


def markdown() -> str:
    parts = [HEAD]
    for heading, sections in FILES:
        parts.append(f"## {heading}\n")
        parts += [section_markdown(s) for s in sections]
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    if not argv:
        print(markdown(), end="")
        return 0
    write_text_atomic(Path(argv[0]), markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
