"""The free parameters a campaign fits: name, where each applies, physical bounds, default."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Parameter:
    name: str
    applies_to: str  # the field of the description it stands for, e.g. "DRAM read rate"
    lower: float
    upper: float
    default: float
    unit: str = ""
    log_scale: bool = True  # fitted as log(value): rates and throughputs span decades

    def __post_init__(self):
        if not (math.isfinite(self.lower) and math.isfinite(self.upper)) or \
                not self.lower < self.upper:
            raise ValueError(f"parameter '{self.name}': bounds must be finite with lower < "
                             f"upper, got [{self.lower}, {self.upper}]")
        if self.log_scale and self.lower <= 0:
            raise ValueError(f"parameter '{self.name}': a log-scale parameter needs a "
                             f"positive lower bound, got {self.lower}")
        if not self.lower <= self.default <= self.upper:
            raise ValueError(f"parameter '{self.name}': default {self.default} lies outside "
                             f"[{self.lower}, {self.upper}]")


@dataclass(frozen=True)
class ParameterSet:
    parameters: tuple[Parameter, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    @property
    def defaults(self) -> np.ndarray:
        return np.array([p.default for p in self.parameters], dtype=float)

    def to_search(self, values: Sequence[float]) -> np.ndarray:
        """Values -> the solver's coordinates: log for log-scale parameters, else the value
        over its span (so that every coordinate moves on a comparable scale)."""
        return np.array([math.log(v) if p.log_scale else v / (p.upper - p.lower)
                         for p, v in zip(self.parameters, values, strict=True)])

    def from_search(self, x: Sequence[float]) -> np.ndarray:
        return np.array([math.exp(v) if p.log_scale else v * (p.upper - p.lower)
                         for p, v in zip(self.parameters, x, strict=True)])

    def search_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lo = self.to_search([p.lower for p in self.parameters])
        hi = self.to_search([p.upper for p in self.parameters])
        return lo, hi

    def as_dict(self, values: Sequence[float]) -> dict[str, float]:
        return {p.name: float(v) for p, v in zip(self.parameters, values, strict=True)}

    def at_bounds(self, values: Sequence[float], rel: float = 1e-3) -> list[dict]:
        """Every parameter within `rel` of a bound (on the solver's scale): a fit that ends
        there is limited by the bound, not by the data."""
        lo, hi = self.search_bounds()
        x = self.to_search(values)
        hits = []
        for p, xi, a, b, v in zip(self.parameters, x, lo, hi, values, strict=True):
            span = b - a
            for side, bound, at in (("lower", p.lower, xi - a), ("upper", p.upper, b - xi)):
                if at <= rel * span:
                    hits.append({"parameter": p.name, "applies_to": p.applies_to,
                                 "bound": side, "bound_value": bound, "value": float(v)})
        return hits

    def check(self, values: Mapping[str, float]) -> np.ndarray:
        missing = [n for n in self.names if n not in values]
        if missing:
            raise ValueError(f"missing parameter values: {', '.join(missing)}")
        return np.array([float(values[n]) for n in self.names])
