"""Progress lines for a run whose stderr is not a terminal (a log, a pipe, a batch job):
one line every few seconds with the phase, points so far, best so far and time elapsed, so a
long run is never silent until its end."""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

HEARTBEAT_INTERVAL_S = 10.0


class ProgressLine:
    """Writes `beat(...)` as a line at most once per `interval_s` (the first after
    `interval_s` too); `interval_s=None` writes nothing."""

    def __init__(self, name: str, interval_s: float | None = HEARTBEAT_INTERVAL_S,
                 stream: TextIO | None = None, clock=time.perf_counter):
        self.name, self.interval_s, self.clock = name, interval_s, clock
        self.stream = stream
        self.start = clock()
        self.last = self.start
        self.lines = 0

    def beat(self, phase: str, points: int, best: float | None, unit: str = "points",
             force: bool = False) -> None:
        if self.interval_s is None:
            return
        now = self.clock()
        if not force and now - self.last < self.interval_s:
            return
        self.last = now
        shown = "-" if best is None or not math.isfinite(best) else f"{best:,.6g}"
        print(f"{self.name}: {phase}, {points:,} {unit}, best {shown}, "
              f"{now - self.start:,.0f} s elapsed", file=self.stream or sys.stderr,
              flush=True)
        self.lines += 1


def interval_for(quiet: bool, stream: TextIO | None = None) -> float | None:
    """The heartbeat interval: none when `quiet` or when the stream is a terminal (a
    progress bar is shown there instead)."""
    stream = stream or sys.stderr
    if quiet:
        return None
    try:
        return None if stream.isatty() else HEARTBEAT_INTERVAL_S
    except (AttributeError, ValueError):
        return HEARTBEAT_INTERVAL_S
