"""One dataflow's cost: `evaluate` reads the whole `Result` (traffic, footprints, energy,
every tile's latency and the bottleneck, violations) from the evaluator's pass at the
dataflow's own factors (`explain`), the same rules the search runs; the records' types and
the scalar rules they were first written as (`model`, `step_pipeline`: kept as the tests'
second copy), per-component energy and area
(`components`)."""

from tileflow.cost.explain import evaluate
from tileflow.cost.model import (
    ComponentCost,
    Movement,
    NodeLatency,
    Result,
    charged_stores,
    component_costs,
    evaluate_plan,
    latency,
    lockstep_cycles,
    tensor_dims,
)

__all__ = [
    "ComponentCost",
    "Movement",
    "NodeLatency",
    "Result",
    "charged_stores",
    "component_costs",
    "evaluate",
    "evaluate_plan",
    "latency",
    "lockstep_cycles",
    "tensor_dims",
]
