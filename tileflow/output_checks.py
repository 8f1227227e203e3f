"""Checks of a search's places before any work starts: the output folder and the study
storage. A bad one is an exit-2 message naming the flag (or the config line) and what is
wrong, never a traceback after the whole search."""

from __future__ import annotations

import tempfile
from pathlib import Path

from tileflow.errors import InputError
from tileflow.outputs import check_output_folder

MEMORY_SQLITE = ("sqlite://", "sqlite:///", "sqlite:///:memory:")


def _writable(folder: Path, what: str, where: str) -> None:
    """Create `folder` (with its parents) and write a scratch file into it: the OS answers
    for read-only file systems, /proc and /sys, which a permission check alone misses."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except FileExistsError:
        raise InputError(f"cannot write {what} into '{folder}': it is not a folder",
                         where=where) from None
    except OSError as exc:
        raise InputError(f"cannot write {what} into '{folder}' ({exc.strerror or exc})",
                         where=where) from None


def check_out(folder: str | Path, source: str | None = None, where: str = "--out") -> Path:
    """The output folder of a search, created and written to once before the search starts.
    `source` and `where` name the config file and line when the folder came from there."""
    try:
        path = check_output_folder(folder, where)
        _writable(path, "the outputs", where)
    except InputError as exc:
        raise InputError(exc.message, source, where) from None
    return path


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite storage URL (or of a bare PATH.db), None for other storages."""
    if url.endswith(".db") and "://" not in url:
        return Path(url)
    for prefix in ("sqlite:///", "sqlite+pysqlite:///"):
        if url.startswith(prefix):
            return Path(url[len(prefix):].split("?", 1)[0])
    return None


def check_storage(url: str | None, flag: str = "--storage") -> None:
    """A study storage the run can keep: an in-memory SQLite URL is refused (its study would
    end with the process, and workers could not share it), and a SQLite file must be one
    the run can create or open in a folder it can write."""
    if not url or url == "memory":
        return
    base = url.split("?", 1)[0]
    if base in MEMORY_SQLITE or base.endswith(":memory:"):
        raise InputError(f"'{url}' is an in-memory SQLite database: its study would end with "
                         "this process and workers could not share it; give a file "
                         "(sqlite:///FILE.db) or leave --storage out for an in-memory study",
                         where=flag)
    path = sqlite_path(url)
    if path is None:
        if url.startswith("sqlite:"):
            raise InputError(f"'{url}' is not a SQLite URL TileFlow reads: give "
                             "sqlite:///FILE.db", where=flag)
        return
    if not str(path):
        raise InputError(f"'{url}' names no database file: give sqlite:///FILE.db", where=flag)
    try:
        exists_not_file = path.exists() and not path.is_file()
    except OSError as exc:  # a name too long, a loop of links
        raise InputError(f"cannot use the study storage '{url}' ({exc.strerror or exc})",
                         where=flag) from None
    if exists_not_file:
        raise InputError(f"the study storage '{path}' is not a file", where=flag)
    _writable(path.parent if str(path.parent) else Path("."), "the study storage", flag)
