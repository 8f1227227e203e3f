"""One dataflow's cost: `evaluate` reads the whole `Result` (traffic, footprints, energy,
every tile's latency and the bottleneck, violations) from the evaluator's pass at the
dataflow's own factors (`explain`), the same rules the search runs; the records' types
(`result`), per-component energy and area (`components`)."""

from tileflow.cost.components import ComponentCost, component_costs
from tileflow.cost.explain import evaluate
from tileflow.cost.result import Movement, NodeLatency, Result

__all__ = [
    "ComponentCost",
    "Movement",
    "NodeLatency",
    "Result",
    "component_costs",
    "evaluate",
]
