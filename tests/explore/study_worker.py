"""A worker process for the study tests: `python study_worker.py URL WORKER BUDGET BATCH
RESUME [MEET WORKERS]` joins (or, with WORKER -1, creates) the study of `candidates()` and
runs until the budget of evaluations is spent; RESUME 1 first marks trials left running by a
killed process as failed, as `tileflow explore --resume` does. With MEET (a folder) and
WORKERS, the worker stops after its first completed trial until WORKERS workers have each
completed one (a file per worker in MEET): every worker takes a share however late the
machine lets it start, without changing how the study hands out work."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from optuna.trial import TrialState  # noqa: E402

from tileflow.dataflows import build  # noqa: E402
from tileflow.evaluator.structure import structure_of  # noqa: E402
from tileflow.explore.factors.space import Limits  # noqa: E402
from tileflow.explore.studies import study as studies  # noqa: E402
from tileflow.specs.arch import load_arch  # noqa: E402
from tileflow.specs.workload import load_workload  # noqa: E402

SIZES = {"b": 4, "m": 128, "l": 128, "k": 32, "n": 32}


def candidates() -> list[studies.Candidate]:
    w, arch = load_workload("gemm-chain", SIZES), load_arch("edge")
    return [studies.Candidate(name, structure_of(w, arch, build(name, w, arch)))
            for name in ("tileflow-pipe", "chimera")]


def meet(folder: Path, worker: int, workers: int, timeout_s: float = 300.0):
    """A progress callback: after this worker's first trial, wait for the others' first."""
    state = {"waited": False}

    def progress(w) -> None:
        if state["waited"] or not any(
                studies.worker_of(t.user_attrs["points"]) == worker
                for t in w.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if "points" in t.user_attrs):
            return
        state["waited"] = True
        (folder / str(worker)).write_text("")
        deadline = time.monotonic() + timeout_s
        while len(list(folder.iterdir())) < workers and time.monotonic() < deadline:
            time.sleep(0.05)

    return progress


def main(url: str, worker: int, budget: int, batch: int, resume: bool,
         meet_folder: str | None = None, workers: int = 1) -> None:
    cands = candidates()
    storage = studies.open_storage(url)
    if worker < 0:
        studies.create_or_load(storage, cands, "latency", Limits(), resume=False)
        return
    study = studies.create_or_load(storage, cands, "latency", Limits(), resume=True,
                                   fail_running=resume)
    progress = meet(Path(meet_folder), worker, workers) if meet_folder else None
    studies.run(study, cands, "latency", Limits(), seed=0, worker=worker, batch=batch,
                shared=True, budget_evals=budget, progress=progress)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
         sys.argv[5] == "1", *(sys.argv[6:7]), *(int(a) for a in sys.argv[7:8]))
