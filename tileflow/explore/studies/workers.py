"""Worker processes of `tileflow explore --workers N`: started only when the search will
outlast their start-up, ended with the main process (a killed main process takes its workers
with it), and a worker that dies hands its claimed points back (see `storage.reap`)."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time

import pandas as pd

STARTUP_S = 5.0  # about what a worker process takes to start (imports, its search trees)
MEASURE_S = 0.5  # search seconds of the main process before its rate is trusted


def usable_workers(workers: int) -> int:
    """`workers`, capped by the cores this process may run on (more processes than cores
    only share them, and each holds its own copy of the search): a warning says so."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    if workers > cores:
        print(f"tileflow: warning: --workers {workers} is more than the {cores} cores this "
              f"process may use; running {cores} workers", file=sys.stderr)
        workers = cores
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if workers > 1 and load >= cores:
        print(f"tileflow: warning: the machine is busy (load {load:.1f} on {cores} cores): "
              f"{workers} workers share the cores with it and may not be faster than one",
              file=sys.stderr)
    return workers


def watch_parent() -> None:
    """End this process when its parent ends (whatever killed it)."""
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def orphaned() -> None:
        wait([parent.sentinel])
        os._exit(1)  # its running trial is failed by whoever resumes or runs the study

    threading.Thread(target=orphaned, daemon=True).start()


class Pool:
    """The worker processes of one run, started once the main process's search shows that
    what is left of the budget outlasts their start-up (else they would only slow it)."""

    def __init__(self, config, url: str | None, workers: int, entry):
        """`entry(config, url, worker, ready, stop, deadline)`: what a worker process runs
        (importable by name: processes are spawned)."""
        self.config, self.url, self.wanted, self.entry = config, url, workers, entry
        self.context = multiprocessing.get_context("spawn")
        self.stop = self.context.Event()
        self.deadline = (None if config.budget_seconds is None
                         else time.time() + config.budget_seconds)
        self.procs: list[tuple] = []  # (process, ready event)
        self.decided = workers <= 1
        self.why_not: str | None = None
        self.searched_s = 0.0
        self.started_at = 0.0
        self.finished_after_s = 0.0  # seconds from the workers' start to the budget's end

    def tend(self, worker, searched_s: float) -> None:
        """After each trial of the main process: start the workers when they pay off, and
        collect dead ones (so their trials read as a dead process's)."""
        for p, _ in self.procs:
            p.is_alive()
        self.searched_s = searched_s
        if self.decided:
            return
        if self.deadline is not None:
            left_s = self.deadline - time.time()
        else:
            if searched_s < MEASURE_S:
                return
            evaluated = sum(c.evaluations for c in worker.caches)
            if evaluated == 0:
                return
            left = (self.config.budget_evals or 0) - worker.completed_rows
            left_s = left * searched_s / evaluated
        self.decided = True
        if left_s > STARTUP_S:
            self._start()
        else:
            self.why_not = (f"about {left_s:.1f} s of search were left after {searched_s:.1f} "
                            f"s, less than a worker's start-up (about {STARTUP_S:.0f} s)")

    def _start(self) -> None:
        self.started_at = time.perf_counter()
        for k in range(1, self.wanted):
            ready = self.context.Event()
            p = self.context.Process(target=self.entry, daemon=True,
                                     args=(self.config, self.url, k, ready, self.stop,
                                           self.deadline))
            p.start()
            self.procs.append((p, ready))

    def finish(self) -> None:
        """The main process's budget is spent: a worker still starting up has nothing to do
        and is stopped at once; the others finish their running trial."""
        self.stop.set()
        self.finished_after_s = time.perf_counter() - self.started_at
        for p, ready in self.procs:
            if not ready.is_set():
                p.terminate()
            p.join()

    def terminate(self) -> None:
        for p, _ in self.procs:
            p.terminate()
            p.join()

    def report(self, points: pd.DataFrame, interrupted: bool) -> dict:
        """Points per worker, and why a worker died, evaluated nothing or was not started
        (each also a warning on stderr)."""
        counts = points.groupby("worker").size().to_dict() if len(points) else {}
        notes = []
        if self.wanted > 1 and not self.procs and not interrupted:
            why = self.why_not or (f"the search ended after {self.searched_s:.1f} s, before "
                                   "its rate was known")
            notes.append(f"no worker process was started: {why}; --workers pays off on "
                         "longer searches")
        for k, (p, ready) in enumerate(self.procs, start=1):
            if interrupted:
                break
            if p.exitcode not in (0, None) and ready.is_set():
                notes.append(f"worker {k} (process {p.pid}) stopped with exit {p.exitcode}; "
                             "the points it had claimed went back to the others")
            elif not counts.get(k):
                notes.append(f"worker {k} evaluated no point: the budget was spent "
                             f"{self.finished_after_s:.1f} s after it was started, before "
                             "it was ready (its start-up is slower on a busy machine)")
        for note in notes:
            print(f"tileflow: warning: {note}", file=sys.stderr)
        return {"processes": 1 + len(self.procs), "requested": self.wanted,
                "points_by_worker": {str(int(k)): int(v) for k, v in sorted(counts.items())},
                "notes": notes}
