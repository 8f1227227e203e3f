"""Atomic outputs: written to a temporary file beside the target, then renamed over it, so
that an interrupted run never leaves half a report."""

from __future__ import annotations

import os
from pathlib import Path


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp{path.suffix}")


def write_text(path: str | Path, text: str) -> Path:
    path = Path(path)
    tmp = _temporary(path)
    tmp.write_text(text)
    tmp.replace(path)
    return path


def write_csv(frame, path: str | Path) -> Path:
    path = Path(path)
    tmp = _temporary(path)
    frame.to_csv(tmp, index=False)
    tmp.replace(path)
    return path


def save_figure(fig, path: str | Path, dpi: int = 100) -> Path:
    path = Path(path)
    tmp = _temporary(path)
    fig.savefig(tmp, dpi=dpi)
    tmp.replace(path)
    return path
