"""The cost model: latency and energy of one dataflow from the analysis' counts, under the
accelerator's overlap convention (`model`), per-component energy and area (`components`),
per-step pipelines (`step_pipeline`)."""

from tileflow.cost.model import (
    ComponentCost,
    Movement,
    NodeLatency,
    Result,
    charged_stores,
    component_costs,
    evaluate,
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
