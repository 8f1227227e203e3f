"""Move TileFlow's modules into their layered subpackages and rewrite every reference to them.

Run from the repository root:  python tools/relayout.py [--dry-run]

What it does (only whole-file moves and reference rewrites, never a change inside a module's
code, so that it can be re-run on a tree where others have edited the moved files):

1. `git mv` of each file in MOVES whose old path exists and whose new path does not. A move
   already done is skipped; a file missing at both paths, or present at both, is reported.
2. Rewrites every reference to a moved module in tileflow/, tests/, search/, validate/,
   tools/, docs/, notebooks/ (code and markdown cells), README.md, setup.py and
   pyproject.toml: import statements (parsed, so `from tileflow.explore import sums` becomes
   `from tileflow.evaluator import sums`), dotted paths (`tileflow.explore.batch`), short
   dotted paths in prose (`explore.batch`) and file paths (`tileflow/explore/batch.py`,
   `explore/batch.py`). Outside the package, `tileflow.cost` stays: it is the public name.
   Docstring and comment lines the longer paths push past the line length are split.
3. Creates the `__init__.py` of each new subpackage (a docstring); regenerates
   `tileflow/cost/__init__.py`, which re-exports the public names of `tileflow.cost.model`
   (those it defines or imports from the cost package) so that `tileflow.cost.evaluate`,
   `Result`, ... keep working.
4. Sorts the rewritten imports with `ruff check --select I --fix` (when ruff is installed).
5. Reports the Python files in the reorganised folders (tileflow/*.py, tileflow/explore/*.py)
   that it does not know: they stay where they are; add them to MOVES and run it again.

Running it again on a moved tree changes nothing (every rewrite matches old names only).
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import shutil
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

# (old path, new path), relative to the repository root
MOVES: tuple[tuple[str, str], ...] = (
    # the cost model and its conventions: one package
    ("tileflow/cost.py", "tileflow/cost/model.py"),
    ("tileflow/cost_components.py", "tileflow/cost/components.py"),
    ("tileflow/step_pipeline.py", "tileflow/cost/step_pipeline.py"),
    # shipped-file lookup (was tileflow/resources.py, a clash with analysis/resources.py)
    ("tileflow/resources.py", "tileflow/shipped.py"),
    # the model's size bounds, beside the analysis they bound
    ("tileflow/workbound.py", "tileflow/analysis/workbound.py"),
    # the generated key reference belongs to the input specifications
    ("tileflow/reference.py", "tileflow/specs/reference.py"),
    # commands: what the command line runs (cli.py stays the entry point)
    ("tileflow/bench.py", "tileflow/commands/bench.py"),
    ("tileflow/sweep_command.py", "tileflow/commands/sweep.py"),
    ("tileflow/report.py", "tileflow/commands/report.py"),
    ("tileflow/experiments.py", "tileflow/commands/experiments.py"),
    ("tileflow/online_study.py", "tileflow/commands/online_study.py"),
    # the batched evaluator, beside analysis/
    ("tileflow/explore/structure.py", "tileflow/evaluator/structure.py"),
    ("tileflow/explore/compiled.py", "tileflow/evaluator/compiled.py"),
    ("tileflow/explore/engine.py", "tileflow/evaluator/engine.py"),
    ("tileflow/explore/limits.py", "tileflow/evaluator/limits.py"),
    ("tileflow/explore/lattice.py", "tileflow/evaluator/lattice.py"),
    ("tileflow/explore/sums.py", "tileflow/evaluator/sums.py"),
    ("tileflow/explore/windows.py", "tileflow/evaluator/windows.py"),
    ("tileflow/explore/shared_inputs.py", "tileflow/evaluator/shared_inputs.py"),
    ("tileflow/explore/batch.py", "tileflow/evaluator/batch.py"),
    # explorer, layer 1: the factor space of one structure
    ("tileflow/explore/space.py", "tileflow/explore/factors/space.py"),
    ("tileflow/explore/bounds.py", "tileflow/explore/factors/bounds.py"),
    ("tileflow/explore/exhaustive.py", "tileflow/explore/factors/exhaustive.py"),
    # layer 2: the tile-factor search
    ("tileflow/explore/mcts.py", "tileflow/explore/tilesearch/mcts.py"),
    ("tileflow/explore/search.py", "tileflow/explore/tilesearch/search.py"),
    ("tileflow/explore/fit.py", "tileflow/explore/tilesearch/fit.py"),
    # layer 3: the structure search
    ("tileflow/explore/encoding.py", "tileflow/explore/structures/encoding.py"),
    ("tileflow/explore/canonical.py", "tileflow/explore/structures/canonical.py"),
    ("tileflow/explore/tilings.py", "tileflow/explore/structures/tilings.py"),
    ("tileflow/explore/structure_space.py", "tileflow/explore/structures/structure_space.py"),
    ("tileflow/explore/fitness.py", "tileflow/explore/structures/fitness.py"),
    ("tileflow/explore/genetic.py", "tileflow/explore/structures/genetic.py"),
    ("tileflow/explore/bound.py", "tileflow/explore/structures/bound.py"),
    # layer 4: studies (`tileflow explore`)
    ("tileflow/explore/study.py", "tileflow/explore/studies/study.py"),
    ("tileflow/explore/config.py", "tileflow/explore/studies/config.py"),
    ("tileflow/explore/structure_study.py", "tileflow/explore/studies/structure_study.py"),
    ("tileflow/explore/session.py", "tileflow/explore/studies/session.py"),
    ("tileflow/explore/outputs.py", "tileflow/explore/studies/outputs.py"),
    ("tileflow/explore/pareto.py", "tileflow/explore/studies/pareto.py"),
    ("tileflow/explore/timeline.py", "tileflow/explore/studies/timeline.py"),
    ("tileflow/explore/storage.py", "tileflow/explore/studies/storage.py"),
    ("tileflow/explore/workers.py", "tileflow/explore/studies/workers.py"),
    # checks of output folders and storage URLs before any work (explore, sweep, import)
    ("tileflow/explore/inputs.py", "tileflow/output_checks.py"),
    # layer 5: sweeps (`tileflow sweep`)
    ("tileflow/explore/sweep.py", "tileflow/explore/sweeps/sweep.py"),
    ("tileflow/explore/sweep_config.py", "tileflow/explore/sweeps/sweep_config.py"),
    ("tileflow/explore/sweep_outputs.py", "tileflow/explore/sweeps/sweep_outputs.py"),
)

PACKAGES: dict[str, str] = {
    "tileflow/commands": "What the command line runs, one module per command family; "
                         "`tileflow.cli` parses and dispatches to them.",
    "tileflow/evaluator": "The batched evaluator: a structure compiled once (`compiled`), "
                          "evaluated over arrays of factor rows (`batch`).",
    "tileflow/explore/factors": "The factor space of one structure: slots, limits, "
                                "completion, pruning bounds and exhaustive enumeration.",
    "tileflow/explore/tilesearch": "The tile-factor search over one structure's space "
                                   "(MCTS, random, TPE) and fitted baselines.",
    "tileflow/explore/structures": "The structure search: tile trees as genes, their "
                                   "canonical form, the genetic search, the fitness of a "
                                   "structure and the data-movement bound.",
    "tileflow/explore/studies": "`tileflow explore`: configs, studies in an Optuna storage, "
                                "the session that runs them, and what they write.",
    "tileflow/explore/sweeps": "`tileflow sweep`: an exploration at every point of a sweep "
                               "of accelerator parameters.",
}

COST_INIT = "tileflow/cost/__init__.py"
COST_DOC = ("The cost model: latency and energy of one dataflow from the analysis' counts, "
            "under the accelerator's overlap convention (`model`), per-component energy "
            "and area (`components`), per-step pipelines (`step_pipeline`).")

# Where references are rewritten: (folder or file, glob)
TARGETS = (("tileflow", "**/*.py"), ("tests", "**/*.py"), ("search", "**/*.py"),
           ("validate", "**/*.py"), ("tools", "**/*.py"), ("docs", "**/*.md"),
           ("search", "**/*.md"), ("validate", "**/*.md"), ("notebooks", "**/*.ipynb"),
           (".", "README.md"), (".", "setup.py"), (".", "pyproject.toml"))
LINE_LENGTH = 100  # [tool.ruff] line-length
QUOTES = '"' * 3
REORGANISED = ("tileflow", "tileflow/explore")  # folders whose unknown .py files are reported


def dotted(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


MODULES = {dotted(old): dotted(new) for old, new in MOVES}
KEPT_PUBLIC = {"tileflow.cost"}  # old module paths that stay valid names outside the package
NEW_PACKAGES = {dotted(p) for p in PACKAGES} | {"tileflow.cost"}


def submodules_of(package: str) -> list[str]:
    """The last names of the new modules directly inside `package`."""
    return sorted({new[len(package) + 1:].split(".")[0] for new in MODULES.values()
                   if new.startswith(package + ".")})


def guard(old: str) -> str:
    """A lookahead that keeps a rewritten name from matching again where an old module path
    is now a package (`tileflow.cost` -> `tileflow.cost.model`)."""
    if old not in NEW_PACKAGES:
        return ""
    return r"(?!\.(?:" + "|".join(map(re.escape, submodules_of(old))) + r")\b)"


def file_name_elsewhere(name: str, old: str, new: str) -> bool:
    """Whether a module of the package other than `old`/`new` has the file name `name`."""
    mine = {old.replace(".", "/") + ".py", new.replace(".", "/") + ".py"}
    return any(p.as_posix() not in mine for p in Path("tileflow").rglob(name))


def text_rules(in_package: bool) -> tuple[list, list]:
    """Regex rules, longest names first: (full, short). Full rules match whole paths
    (`tileflow.explore.batch`, `tileflow/explore/batch.py`) and apply everywhere; short ones
    (`explore.batch`, `explore/batch.py`, `cost_components.py`) only in prose: markdown,
    and the strings and comments of Python code."""
    full: list[tuple[re.Pattern, str]] = []
    short: list[tuple[re.Pattern, str]] = []
    for old, new in sorted(MODULES.items(), key=lambda kv: -len(kv[0])):
        g = guard(old)
        if old not in KEPT_PUBLIC or in_package:  # the public name stays; its file moves
            full.append((re.compile(r"(?<![\w.])" + re.escape(old) + r"(?![\w])" + g), new))
        old_rel, new_rel = old.split(".")[1:], new.split(".")[1:]
        old_slash, new_slash = "/".join(old_rel), "/".join(new_rel)
        full.append((re.compile(r"(?<![\w./])tileflow/" + re.escape(old_slash)
                                + r"\.py(?![\w])"), f"tileflow/{new_slash}.py"))
        if len(old_rel) >= 2:  # explore.batch, explore/batch.py, explore/batch.x
            short.append((re.compile(r"(?<![\w./])" + re.escape(old_slash)
                                     + r"(?![\w/])"), new_slash))
            short.append((re.compile(r"(?<![\w./])" + re.escape(".".join(old_rel))
                                     + r"(?![\w])"), ".".join(new_rel)))
        elif not file_name_elsewhere(old_rel[0] + ".py", old, new):
            # a top-level module named by its file alone (cost_components.py), where no
            # other module of the package has that file name (analysis/resources.py)
            short.append((re.compile(r"(?<![\w./])" + re.escape(old_rel[0])
                                     + r"\.py(?![\w])"), f"{new_slash}.py"))
    return full, short


RULES = {True: text_rules(True), False: text_rules(False)}


def rewrite_text(text: str, in_package: bool, prose: bool = True) -> str:
    full, short = RULES[in_package]
    for pattern, new in full + (short if prose else []):
        text = pattern.sub(new, text)
    return text


def rewrite_prose_in_code(source: str, in_package: bool) -> str:
    """The short rules inside the strings and comments of Python code only."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    spans = [(offsets[t.start[0] - 1] + t.start[1], offsets[t.end[0] - 1] + t.end[1])
             for t in tokens if t.type in (tokenize.STRING, tokenize.COMMENT)]
    for start, end in reversed(spans):
        piece = source[start:end]
        new = rewrite_text(piece, in_package)
        if new != piece:
            source = source[:start] + new + source[end:]
    return source


def rewrite_import_lines(text: str, in_package: bool) -> str:
    """Single-line imports in prose or unparsable code (markdown code blocks)."""
    out = []
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith(("from tileflow", "import tileflow")):
            try:
                node = ast.parse(stripped).body[0]
            except SyntaxError:
                node = None
            new = import_lines(node, in_package) if node is not None else None
            if new is not None:
                indent = line[:len(line) - len(line.lstrip())]
                end = "\n" if line.endswith("\n") else ""
                line = indent + f"\n{indent}".join(new) + end
        out.append(line)
    return "".join(out)


def import_lines(node: ast.AST, in_package: bool) -> list[str] | None:
    """The statements that replace an import of a moved module (None: unchanged)."""
    def mapped(module: str) -> str | None:
        if module in KEPT_PUBLIC and not in_package:
            return None
        return MODULES.get(module)

    def alias(name: str, asname: str | None) -> str:
        return f"{name} as {asname}" if asname and asname != name else name

    if isinstance(node, ast.Import):
        if not any(mapped(a.name) for a in node.names):
            return None
        parts = []
        for a in node.names:
            new = mapped(a.name)
            if new is None:
                parts.append(alias(a.name, a.asname))
            elif a.asname:
                parts.append(f"{new} as {a.asname}")
            else:  # `import tileflow.x.y` binds `tileflow`; the new path does too
                parts.append(new)
        return [f"import {', '.join(parts)}"]
    if not isinstance(node, ast.ImportFrom) or node.level or not node.module or \
            not node.module.startswith("tileflow"):
        return None
    new_module = mapped(node.module)
    if new_module is not None:
        names = ", ".join(alias(a.name, a.asname) for a in node.names)
        return [f"from {new_module} import {names}"]
    kept, moved = [], []
    for a in node.names:
        new = mapped(f"{node.module}.{a.name}")
        if new is None:
            kept.append(alias(a.name, a.asname))
        else:
            parent, base = new.rsplit(".", 1)
            moved.append(f"from {parent} import {alias(base, a.asname or a.name)}")
    if not moved:
        return None
    return ([f"from {node.module} import {', '.join(kept)}"] if kept else []) + moved


def rewrite_python(source: str, in_package: bool) -> str:
    """Imports first (parsed), then the text rules; unparsable code gets the text rules."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return rewrite_text(rewrite_import_lines(source, in_package), in_package)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            new = import_lines(node, in_package)
            if new is not None:
                start = offsets[node.lineno - 1] + len(
                    lines[node.lineno - 1].encode()[:node.col_offset].decode())
                end = offsets[node.end_lineno - 1] + len(
                    lines[node.end_lineno - 1].encode()[:node.end_col_offset].decode())
                indent = " " * node.col_offset
                comments = re.findall(r"#[^\n]*", source[start:end])  # a noqa on `(`
                if comments:
                    new = [f"{line}  {comments[0]}" for line in new]
                edits.append((start, end, f"\n{indent}".join(new)))
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    new = rewrite_text(rewrite_prose_in_code(source, in_package), in_package, prose=False)
    return reflow(new) if new != source else new


def reflow(source: str) -> str:
    """Split the docstring and comment lines longer than the line length at a space (a
    rewritten path made them longer); other long lines are left for ruff to report."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    prose: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str):
            prose.update(range(node.lineno, node.end_lineno + 1))
    out = []
    for number, line in enumerate(source.splitlines(keepends=True), 1):
        while len(line.rstrip("\n")) > LINE_LENGTH:
            body = line.lstrip()
            indent = line[:len(line) - len(body)]
            if body.startswith("#"):
                lead = indent + "# "
            elif number in prose:
                lead = indent + (" " * 3 if body.startswith(QUOTES) else "")
            else:
                break
            cut = line.rfind(" ", len(lead) + 1, LINE_LENGTH + 1)
            if cut <= len(lead):
                break
            out.append(line[:cut].rstrip() + "\n")
            line = lead + line[cut + 1:]
        out.append(line)
    return "".join(out)


def rewrite_notebook(text: str) -> str:
    nb = json.loads(text)
    for cell in nb.get("cells", []):
        source = "".join(cell.get("source", []))
        if cell.get("cell_type") == "code":
            new = rewrite_python(source, in_package=False)
        else:
            new = rewrite_text(rewrite_import_lines(source, False), in_package=False)
        if new != source:
            cell["source"] = new.splitlines(keepends=True)
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def git(*args: str, dry: bool) -> None:
    if dry:
        print("  would run: git", *args)
        return
    subprocess.run(["git", *args], check=True)


def move_files(root: Path, dry: bool) -> list[str]:
    notes = []
    for old, new in MOVES:
        src, dst = root / old, root / new
        if src.exists() and not dst.exists():
            if not dry:
                dst.parent.mkdir(parents=True, exist_ok=True)
            git("mv", old, new, dry=dry)
            print(f"moved   {old} -> {new}")
        elif src.exists() and dst.exists():
            notes.append(f"both {old} and {new} exist: merge {old} into {new} by hand")
        elif not dst.exists():
            notes.append(f"neither {old} nor {new} exists: skipped")
    return notes


def docstring(text: str) -> str:
    """A module docstring wrapped to the line length."""
    lines = textwrap.wrap(text, LINE_LENGTH - 6, break_on_hyphens=False)
    return QUOTES + "\n".join(lines) + QUOTES + "\n"


def write_if_changed(path: Path, text: str, dry: bool) -> bool:
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    if dry:
        print(f"  would write {path}")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return True


def public_names(module_file: Path, package: str) -> list[str]:
    """Top-level public names a module defines or imports from its own package (what the
    package re-exports)."""
    tree = ast.parse(module_file.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith(package + "."):
            names += [a.asname or a.name for a in node.names]
    return sorted({n for n in names if not n.startswith("_") and n != "annotations"})


def package_inits(root: Path, dry: bool) -> None:
    for folder, doc in PACKAGES.items():
        init = root / folder / "__init__.py"
        if not init.exists() and (root / folder).exists():
            write_if_changed(init, docstring(doc), dry)
            if not dry:
                subprocess.run(["git", "add", str(init.relative_to(root))], check=True)
            print(f"created {init.relative_to(root)}")
    model = root / "tileflow/cost/model.py"
    if model.exists():
        names = public_names(model, "tileflow.cost")
        body = "".join(f"    {n},\n" for n in names)
        listed = "".join(f'    "{n}",\n' for n in names)
        text = (f"{docstring(COST_DOC)}\nfrom tileflow.cost.model import (\n{body})\n\n"
                f"__all__ = [\n{listed}]\n")
        if write_if_changed(root / COST_INIT, text, dry):
            if not dry:
                subprocess.run(["git", "add", COST_INIT], check=True)
            print(f"wrote   {COST_INIT} (re-exports of tileflow.cost.model)")


def rewrite_references(root: Path, dry: bool) -> list[Path]:
    changed = []
    this = Path(__file__).resolve()
    seen: set[Path] = set()
    for folder, pattern in TARGETS:
        base = root / folder
        if not base.exists():
            continue
        for path in sorted(base.glob(pattern)):
            if path in seen or path.resolve() == this or not path.is_file() or \
                    ".ipynb_checkpoints" in path.parts or "_data" in path.parts:
                continue
            seen.add(path)
            text = path.read_text(encoding="utf-8")
            rel = path.relative_to(root).as_posix()
            in_package = rel.startswith("tileflow/")
            if path.suffix == ".py":
                new = rewrite_python(text, in_package)
            elif path.suffix == ".ipynb":
                new = rewrite_notebook(text)
            else:
                new = rewrite_text(rewrite_import_lines(text, in_package), in_package)
            if new != text:
                changed.append(path)
                write_if_changed(path, new, dry)
    return changed


def unknown_files(root: Path) -> list[str]:
    known = {p for pair in MOVES for p in pair}
    out = []
    for folder in REORGANISED:
        for path in sorted((root / folder).glob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel not in known and path.name not in ("__init__.py", "cli.py", "errors.py",
                                                      "outputs.py", "tree.py"):
                out.append(rel)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="say what would change")
    args = parser.parse_args(argv)
    root = Path.cwd()
    if not (root / "tileflow").is_dir():
        print("relayout: run from the repository root (no tileflow/ here)", file=sys.stderr)
        return 2
    notes = move_files(root, args.dry_run)
    changed = rewrite_references(root, args.dry_run)
    package_inits(root, args.dry_run)  # after the rewrite: it reads tileflow/cost/model.py
    for path in changed:
        print(f"rewrote {path.relative_to(root)}")
    python = [str(p) for p in changed if p.suffix == ".py"]
    python += [str(root / COST_INIT)] if (root / COST_INIT).exists() else []
    if python and not args.dry_run:
        ruff = shutil.which("ruff")
        if ruff:
            subprocess.run([ruff, "check", "--quiet", "--select", "I", "--fix", *python],
                           check=False)
        else:
            print("relayout: ruff not found; sort the rewritten imports by hand")
    for note in notes:
        print(f"note:   {note}")
    for rel in unknown_files(root):
        print(f"unknown: {rel} (not in MOVES; left in place)")
    if not changed and not any(n.startswith("both") for n in notes):
        print("relayout: nothing to rewrite")
    return 0


if __name__ == "__main__":
    sys.exit(main())
