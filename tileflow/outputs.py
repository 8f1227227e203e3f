"""Files the tool writes: checked before any work starts, then written atomically (a temporary
file in the same folder, renamed over the final name), so an interrupted or failed run never
leaves a partial file under its final name."""

from __future__ import annotations

import io
import json
import math
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from tileflow.errors import InputError

PLOT_SUFFIXES = (".png", ".pdf", ".svg")
YAML_SUFFIXES = (".yaml", ".yml")


def _plain_name(path: str | Path, flag: str) -> None:
    """Output paths are printed one per line (`wrote PATH`, summaries, JSON read by
    scripts): a control character such as a newline in one would break that."""
    bad = next((c for c in str(path) if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise InputError(f"cannot write {ascii(str(path))}: the path holds a control "
                         f"character ({ascii(bad)}); give a plain name", where=flag)


def check_output_file(path: str | Path, suffixes: Iterable[str], flag: str) -> Path:
    """A file we may create or replace: a known extension, an existing writable folder, and
    not a directory or a special file (a device, a pipe). Raises InputError naming `flag`."""
    _plain_name(path, flag)
    path = Path(path)
    suffixes = tuple(suffixes)
    if path.suffix.lower() not in suffixes:
        raise InputError(f"cannot write '{path}': the name must end in "
                         f"{' or '.join(suffixes)}", where=flag)
    try:
        info = path.stat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise InputError(f"cannot write '{path}' ({exc.strerror})", where=flag) from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise InputError(f"cannot write '{path}': it exists and is not a regular file",
                         where=flag)
    check_output_folder(path.parent, flag, create=False)
    return path


def check_output_folder(folder: str | Path, flag: str, create: bool = True) -> Path:
    """A folder we may write into (created, with its parents, when `create` is set)."""
    _plain_name(folder, flag)
    folder = Path(folder) if str(folder) else Path(".")
    try:
        if create:
            folder.mkdir(parents=True, exist_ok=True)
        info = folder.stat()
    except FileNotFoundError:
        raise InputError(f"cannot write into '{folder}': no such folder", where=flag) from None
    except FileExistsError:
        raise InputError(f"cannot write into '{folder}': it is not a folder", where=flag) \
            from None
    except OSError as exc:
        raise InputError(f"cannot write into '{folder}' ({exc.strerror})", where=flag) from None
    if not stat.S_ISDIR(info.st_mode):
        raise InputError(f"cannot write into '{folder}': it is not a folder", where=flag)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"cannot write into '{folder}': permission denied", where=flag)
    return folder


def write_atomic(path: str | Path, write: Callable[[IO], None], binary: bool = False,
                 flag: str | None = None) -> Path:
    """Call `write(handle)` on a temporary file beside `path`, then rename it to `path`.
    On any failure (disk full, Ctrl-C) the temporary file is removed and `path` is untouched;
    an OSError becomes an InputError naming the file."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    temp = None
    try:
        fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{path.name[:80]}.", suffix=".tmp")
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})
                       ) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o666 & ~_umask())
        os.replace(temp, path)
        temp = None
    except OSError as exc:
        raise InputError(f"cannot write '{path}' ({exc.strerror or exc})", where=flag) from None
    finally:
        if temp is not None:
            try:
                os.unlink(temp)
            except OSError:
                pass
    return path


def write_text_atomic(path: str | Path, text: str, flag: str | None = None) -> Path:
    return write_atomic(path, lambda handle: handle.write(text), flag=flag)


def yaml_text(data) -> str:
    """Plain data as block-style YAML with flow-style leaves, as the shipped files are written."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.default_flow_style = None
    yaml.width = 100
    buffer = io.StringIO()
    yaml.dump(data, buffer)
    return buffer.getvalue()


def write_yaml(path: str | Path, data, header: str = "", flag: str | None = None) -> Path:
    """`data` as YAML (after an optional comment header), written atomically."""
    return write_text_atomic(path, header + yaml_text(data), flag=flag)


def write_csv(frame, path: str | Path, flag: str | None = None) -> Path:
    """A pandas DataFrame as CSV (no index), written atomically."""
    return write_atomic(path, lambda handle: frame.to_csv(handle, index=False), flag=flag)


def save_figure(fig, path: str | Path, flag: str | None = None, **kw) -> Path:
    """Save a Matplotlib figure atomically, in the format its extension names."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".") or "png"
    return write_atomic(path, lambda handle: fig.savefig(handle, format=fmt, **kw),
                        binary=True, flag=flag)


def finite(value):
    """`value` with every NaN or infinite number replaced by None (null in JSON): JSON has
    no such numbers, and a reader would take them for figures. NumPy scalars become
    Python numbers."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_text(value, **options) -> str:
    """`value` as strict JSON: NaN and infinities as null (`finite`), never as the bare
    `NaN` that JSON readers other than Python's refuse."""
    return json.dumps(finite(value), allow_nan=False, **options)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
