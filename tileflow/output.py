"""Writing result files atomically: a temporary file beside the target, then a rename, so a
reader (or an interrupted run) never sees half a file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call `write(tmp)` on a temporary path in the target's folder, then move it into place."""
    path = Path(path)
    handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix,
                                        dir=path.parent if str(path.parent) else ".")
    os.close(handle)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_text(path: str | Path, text: str) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text))
