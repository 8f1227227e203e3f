"""Pieces shared by the readers: loop factors, permutations, and names that must be plain."""

from __future__ import annotations

import re
from collections.abc import Mapping

from tileflow.specs.yamlfile import Field

IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")
FACTOR = re.compile(r"^([A-Za-z_]\w*)\s*=\s*(\S+)$")


def factors(f: Field, sizes: Mapping[str, int], rest: bool = False) -> dict[str, int]:
    """'R=3 S=3 P=7' (or comma-separated) -> {dim: factor}; unnamed dims are 1. With `rest`,
    a factor 0 (Timeloop: whatever the dimension's other factors leave) is returned as 0."""
    text = f.get("factors", "")
    if isinstance(text, list):
        text = " ".join(str(t) for t in text)
    if not isinstance(text, str):
        raise f.error(f"'factors' must be a string like 'M=4 K=2', got {text!r}", "factors")
    out: dict[str, int] = {}
    for token in re.split(r"[,\s]+", re.sub(r"\s*=\s*", "=", text.strip())):
        if not token:
            continue
        match = FACTOR.match(token) or _run_together(token, sizes)
        if not match:
            raise f.error(f"cannot read factor '{token}': expected DIM=INTEGER (or DIM"
                          "INTEGER, as Timeloop's mapper writes it: K32)", "factors")
        dim, value = match.groups()
        if dim not in sizes:
            raise f.error(f"factor for unknown dimension '{dim}' (dimensions: "
                          f"{', '.join(sizes)})", "factors")
        if value == "?" or not value.isdigit():
            raise f.error(
                f"factor '{dim}={value}' is not a number: '?' and named factors are left to a "
                "search; TileFlow evaluates fixed mappings (write the numbers, or search with "
                "TileFlow's own dataflows)", "factors")
        if int(value) < (0 if rest else 1):
            raise f.error(f"factor '{dim}={value}' must be at least 1", "factors")
        if dim in out:
            raise f.error(f"dimension '{dim}' has two factors", "factors")
        out[dim] = int(value)
    return out


def _run_together(token: str, sizes: Mapping[str, int]) -> re.Match | None:
    """'K32' (the mapper's output) as K=32, when K is a dimension."""
    match = re.fullmatch(r"([A-Za-z_]\w*?)(\d+)", token)
    if match and match.group(1) in sizes:
        return match
    return None


def permutation(f: Field, chosen: Mapping[str, int], dims: Mapping[str, int]) -> list[str]:
    """The dims of the non-unit factors, outermost first (files write them innermost first).
    Single-letter dims may be run together ('RSP'); longer names are separated by spaces."""
    text = f.get("permutation")
    moving = [d for d, n in chosen.items() if n != 1]  # 0: the rest, maybe above 1
    if text is None:
        if len(moving) > 1:
            raise f.error(f"no 'permutation' for factors of {', '.join(moving)}: the loop "
                          "order must be given", "permutation")
        return moving
    if isinstance(text, list) and all(isinstance(t, str) for t in text):
        text = " ".join(text)
    if not isinstance(text, str):
        raise f.error(f"'permutation' must be a string, got {text!r}", "permutation")
    tokens = text.replace(",", " ").split()
    if len(tokens) == 1 and tokens[0] not in dims and all(len(d) == 1 for d in dims):
        tokens = list(tokens[0])
    missing = [d for d in moving if d not in tokens]
    if missing:
        raise f.error(f"'permutation' does not place {', '.join(missing)} (factor > 1)",
                      "permutation")
    unknown = [d for d in tokens if d not in dims]
    if unknown:
        raise f.error(f"'permutation' names unknown dimension(s) {', '.join(unknown)}",
                      "permutation")
    return [d for d in reversed(tokens) if chosen.get(d, 1) != 1]


def identifier(f: Field, key: str, what: str) -> str:
    value = f.get(key)
    if not isinstance(value, str) or not IDENTIFIER.match(value.strip()):
        raise f.error(f"{what} must be a plain name (letters, digits, _), got {value!r}", key)
    return value.strip()


def names(f: Field, key: str) -> list[str]:
    """A list of names written as a YAML list or 'A, B' / 'A B'."""
    value = f.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in re.split(r"[,\s]+", value.strip()) if v]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value]
    raise f.error(f"'{key}' must be a list of names, got {value!r}", key)
