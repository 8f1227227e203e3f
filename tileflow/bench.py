"""How many evaluations per second the analysis sustains, single process."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

from tileflow.analysis.prepare import prepare
from tileflow.cost import evaluate_plan
from tileflow.dataflows import build
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload


def run_bench(workload: Workload, arch: Architecture, dataflows: Sequence[str],
              seconds: float = 3.0) -> list[dict]:
    """Time full evaluations (structure checks included) of each named dataflow."""
    rows = []
    for name in dataflows:
        flow = build(name, workload, arch)
        times = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(times) < 5:
            start = time.perf_counter()
            evaluate_plan(prepare(workload, arch, flow))
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        rows.append({"dataflow": name, "runs": len(times), "median_us": median * 1e6,
                     "evals_per_second": 1.0 / median})
    return rows
