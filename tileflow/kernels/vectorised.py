"""Which loops of a generated C kernel the compiler vectorised, as the compiler reports it.

Whether a loop runs in SIMD vectors is the compiler's decision: it may vectorise the
innermost loop, or the loop around it (outer-loop vectorisation, which turns an innermost
reduction into independent vector lanes), or neither (an access pattern it cannot prove
safe). The kernel is compiled once more with the build's flags and `-fopt-info-vec`, which
names each vectorised loop by line and the vector size it used; the answer is cached by
source, like the library."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tileflow.kernels.build import CC, FLAGS, BuildError, cache_dir

LOOP = re.compile(r"for \(int \w+ = .*\{  /\* (\w+):(\d+)")
STATEMENT = re.compile(r"/\* (\w+): ")
VECTORISED = re.compile(r":(\d+):\d+: optimized: loop vectorized using (\d+) byte vectors")


@dataclass(frozen=True)
class OpLoops:
    """The loops around one operator's statement in the kernel, outermost first."""

    op: str
    loops: tuple[tuple[int, str, int], ...]  # (line, dim, factor)
    line: int = 0  # the statement's own line

    def vectorised(self, lines: dict[int, int]) -> list[tuple[tuple[int, str, int], int]]:
        """The loops around the statement the compiler reports vectorised, outermost first,
        with their vector's words. An `omp simd` loop is reported at the line of the
        statement in its body, not at its `for`: that is the innermost loop."""
        hits = [(lp, lines[lp[0]]) for lp in self.loops if lp[0] in lines]
        if self.loops and self.line in lines and self.loops[-1][0] not in lines:
            hits.append((self.loops[-1], lines[self.line]))
        return hits


def op_loops(source: str) -> dict[str, OpLoops]:
    """The tree loops (`for` lines the generator marks with their loop) around each
    operator's statement (marked with the operator's name)."""
    out: dict[str, OpLoops] = {}
    stack: list[tuple[int, int, str, int]] = []  # (indent, line, dim, factor)
    for number, text in enumerate(source.splitlines(), start=1):
        indent = len(text) - len(text.lstrip())
        while stack and stack[-1][0] >= indent and text.strip():
            stack.pop()
        loop = LOOP.search(text)
        if loop:
            stack.append((indent, number, loop.group(1), int(loop.group(2))))
            continue
        statement = STATEMENT.search(text)
        if statement and not text.lstrip().startswith(("for", "/*")):
            name = statement.group(1)
            out[name] = OpLoops(name, tuple((ln, d, f) for _, ln, d, f in stack), number)
    return out


def vectorised_lines(source: str, flags: tuple[str, ...] = FLAGS) -> dict[int, int]:
    """Line of each loop the compiler vectorised -> the narrowest vector it used (words of
    4 bytes; a main loop and its vector epilogue report the same line)."""
    key = hashlib.sha256("\0".join((CC, *flags, "opt-info-vec", source)).encode())
    cached = cache_dir() / f"v{key.hexdigest()[:24]}.json"
    if cached.exists():
        return {int(k): v for k, v in json.loads(cached.read_text()).items()}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.c"
        src.write_text(source)
        done = subprocess.run([CC, *flags, "-S", "-fopt-info-vec-optimized", str(src), "-o",
                               str(Path(tmp) / "kernel.s")], capture_output=True, text=True)
    if done.returncode:
        raise BuildError(f"{CC} failed on a generated kernel:\n{done.stderr[-4000:]}")
    lines: dict[int, int] = {}
    for match in VECTORISED.finditer(done.stderr):
        line, words = int(match.group(1)), int(match.group(2)) // 4
        lines[line] = min(words, lines.get(line, words))
    staged = cached.with_suffix(".tmp")
    staged.write_text(json.dumps(lines))
    staged.replace(cached)
    return lines


def simd_loops(source: str) -> dict[str, tuple[int, int]]:
    """Per operator whose statement sits in a vectorised loop: (the loop's trip count, the
    vector's words) of the innermost such loop."""
    lines = vectorised_lines(source)
    out = {}
    for name, around in op_loops(source).items():
        hits = [(lp[2], words) for lp, words in around.vectorised(lines)]
        if hits:
            out[name] = hits[-1]
    return out
