"""A NumPy reference of a workload: every operator evaluated over whole tensors (float64),
affine (strided, windowed) indices included; out-of-shape elements read as zero (padding)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tileflow.specs.expressions import Access
from tileflow.specs.workload import Operator, Workload

GELU_C = 0.7978845608028654  # sqrt(2 / pi), tanh form of GELU (the kernels use the same)


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x**3)))


FUNCTIONS = {
    "exp": np.exp,
    "gelu": gelu,
    "copy": lambda x: x,
}
BINARY = {"mul": np.multiply, "sub": np.subtract, "add": np.add, "div": np.divide}


def random_inputs(w: Workload, seed: int = 0) -> dict[str, np.ndarray]:
    """Input tensors of the workload's shapes, float32, uniform in [-1, 1)."""
    rng = np.random.default_rng(seed)
    return {t: rng.uniform(-1, 1, w.shapes[t]).astype(np.float32) for t in w.inputs}


def _gather(w: Workload, op: Operator, access: Access, value: np.ndarray) -> np.ndarray:
    """The operand as an array over the operator's dims (in op.dims order, broadcast where
    the access does not use a dim); padded (out-of-shape) elements are zero."""
    grids = np.meshgrid(*[np.arange(w.sizes[d]) for d in op.dims], indexing="ij", sparse=True)
    by_dim = dict(zip(op.dims, grids, strict=True))
    index = []
    valid = np.ones((1,) * len(op.dims), dtype=bool)
    for axis, size in zip(access.axes, value.shape, strict=True):
        expr = axis.offset + sum(c * by_dim[d] for d, c in axis.terms)
        expr = np.asarray(expr) + np.zeros((1,) * len(op.dims), dtype=int)
        valid = valid & (expr >= 0) & (expr < size)
        index.append(np.clip(expr, 0, size - 1))
    return np.where(valid, value[tuple(index)], 0.0)


def evaluate_op(w: Workload, op: Operator, tensors: Mapping[str, np.ndarray]) -> np.ndarray:
    """One operator over whole tensors: the output tensor (float64)."""
    args = [_gather(w, op, a, tensors[a.tensor].astype(np.float64)) for a in op.inputs]
    if op.function in BINARY:
        value = BINARY[op.function](args[0], args[1])
    elif op.function in FUNCTIONS:
        value = FUNCTIONS[op.function](args[0])
    else:
        raise ValueError(f"operator '{op.name}': no reference for function '{op.function}'")
    value = np.broadcast_to(value, tuple(w.sizes[d] for d in op.dims))
    axes = tuple(i for i, d in enumerate(op.dims) if d not in op.output.dims)
    if op.update == "+=":
        value = value.sum(axis=axes)
    elif op.update == "max=":
        value = value.max(axis=axes)
    kept = [d for d in op.dims if d in op.output.dims]
    value = np.transpose(value, [kept.index(d) for d in op.output.dims])
    shape = w.shapes[op.output.tensor]
    out = np.zeros(shape)
    out[tuple(slice(0, w.sizes[d]) for d in op.output.dims)] = value
    return out


def run_reference(w: Workload, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor of the workload (inputs as given, the rest computed), float64."""
    tensors: dict[str, np.ndarray] = {t: np.asarray(v, dtype=np.float64)
                                      for t, v in inputs.items()}
    for op in w.ops:
        tensors[op.output.tensor] = evaluate_op(w, op, tensors)
    return tensors
