"""A worker process for the study tests: `python study_worker.py URL WORKER BUDGET BATCH
RESUME` joins (or, with WORKER -1, creates) the study of `candidates()` and runs until the
budget of evaluations is spent; RESUME 1 first marks trials left running by a killed
process as failed, as `tileflow explore --resume` does."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tileflow.dataflows import build  # noqa: E402
from tileflow.explore import study as studies  # noqa: E402
from tileflow.explore.space import Limits  # noqa: E402
from tileflow.explore.structure import structure_of  # noqa: E402
from tileflow.specs.arch import load_arch  # noqa: E402
from tileflow.specs.workload import load_workload  # noqa: E402

SIZES = {"b": 4, "m": 128, "l": 128, "k": 32, "n": 32}


def candidates() -> list[studies.Candidate]:
    w, arch = load_workload("gemm-chain", SIZES), load_arch("edge")
    return [studies.Candidate(name, structure_of(w, arch, build(name, w, arch)))
            for name in ("tileflow-pipe", "chimera")]


def main(url: str, worker: int, budget: int, batch: int, resume: bool) -> None:
    cands = candidates()
    storage = studies.open_storage(url)
    if worker < 0:
        studies.create_or_load(storage, cands, "latency", Limits(), resume=False)
        return
    study = studies.create_or_load(storage, cands, "latency", Limits(), resume=True,
                                   fail_running=resume)
    studies.run(study, cands, "latency", Limits(), seed=0, worker=worker, batch=batch,
                shared=True, budget_evals=budget)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
         sys.argv[5] == "1")
