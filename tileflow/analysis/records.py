"""What an evaluation says about a dataflow as records with amounts, not text: why a tree is
invalid (`Violation`) and what bounds its latency (`Bottleneck`). The human text is each
record's `message`; `--json` and the reports use the fields."""

from __future__ import annotations

from dataclasses import asdict, dataclass

# The violation kinds, kept few:
#   capacity    a level's footprint exceeds its capacity (needed / available words)
#   fanout      spatial loops exceed a level's fan-out or the compute units (instances)
#   array       spatial loops exceed one axis of the PE array or a level's mesh (instances)
#   coverage    the factors of a dimension on an operator's path do not reach its size
#   dependency  a tree order the data dependences forbid (a producer's reduction in a
#               common ancestor with its consumers; dependent Para children)
#   window      a producer's tile does not cover the rows a windowed consumer reads
VIOLATION_KINDS = ("capacity", "fanout", "array", "coverage", "dependency", "window")

# The bottleneck kinds: the compute unit running a leaf, or one port of a level.
BOTTLENECK_KINDS = ("compute", "read", "write")


@dataclass(frozen=True)
class Violation:
    """One constraint the dataflow breaks: where (node path, level, tensor), and by how much
    (`needed` against `available`, in `unit`). Fields that do not apply are None."""

    kind: str
    node: str | None
    level: str | None
    tensor: str | None
    needed: float | None
    available: float | None
    unit: str | None
    message: str

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Bottleneck:
    """What bounds the latency: a compute unit ('compute', `unit` = 'matrix' or 'vector')
    or a level's read or write port ('read'/'write', `level`), at a node of the tree."""

    kind: str
    level: str | None
    unit: str | None
    node: str | None
    message: str

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict:
        return asdict(self)
