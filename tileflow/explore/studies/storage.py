"""Study storages (in memory, a SQLite file, a PostgreSQL server) and the liveness of the
processes that share one.

Every process on a database storage records a heartbeat for its running trial (Optuna's
heartbeat table, stamped with the server's clock); a trial whose heartbeat is older than
GRACE_S, or whose process on this host is gone, is stale and is failed by whichever process
notices first, which returns the points it had claimed to the pool. A process resuming a
study that another still runs therefore joins it: the other's trials stay alive."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from tileflow.errors import InputError

HEARTBEAT_S = 1  # a running trial's heartbeat period (Optuna takes whole seconds)
GRACE_S = 6  # a trial whose heartbeat is this old belongs to a dead process
HOST = socket.gethostname()



def open_storage(url: str | None, existing: bool = False):
    """An Optuna storage for a URL: None or 'memory' -> in memory; 'sqlite:///PATH' or a
    path ending in .db -> SQLite (write-ahead log); 'postgresql://...' -> the server.
    `existing`: a storage this run has opened already (a worker's), so its tables are not
    checked again (a second saved at every worker's start)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not url or url == "memory":
        return optuna.storages.InMemoryStorage()
    if url.endswith(".db") and "://" not in url:
        url = f"sqlite:///{url}"
    url = _driver(url)
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    with creation_lock(url):
        storage = _connect(url, existing=existing)
    if url.startswith("sqlite"):
        from sqlalchemy import event

        @event.listens_for(storage.engine, "connect")
        def _wal(connection, _record):  # durable against a killed process, fewer fsyncs
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        storage.engine.dispose()
    return storage


def _connect(url: str, tries: int = 3, existing: bool = False):
    """The RDB storage; two processes creating one database's tables at the same moment can
    collide on a server (a duplicate key): the later one tries again and finds them made."""
    import optuna

    for attempt in range(tries):
        try:
            with warnings.catch_warnings():  # the heartbeat is marked experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url),
                                                  heartbeat_interval=HEARTBEAT_S,
                                                  grace_period=GRACE_S,
                                                  skip_compatibility_check=existing,
                                                  skip_table_creation=existing)
        except Exception as exc:  # a bad URL, a server that does not answer, a missing driver
            text = str(exc.__cause__ or exc)
            if attempt + 1 < tries and ("UNIQUE" in text or "duplicate key" in text):
                time.sleep(0.2 * (attempt + 1))
                continue
            raise InputError(f"cannot open the study storage '{url}': {_cause(exc)}") from None
    raise AssertionError("unreachable")


def _driver(url: str) -> str:
    """PostgreSQL through psycopg2 (the 'distributed' extra) unless psycopg 3 is there."""
    scheme, sep, rest = url.partition("://")
    if scheme not in ("postgresql", "postgres"):
        return url
    try:
        import psycopg  # noqa: F401

        return url
    except ImportError:
        return f"postgresql+psycopg2://{rest}"


def _engine_kwargs(url: str) -> dict:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30}}
    return {"pool_pre_ping": True}


@contextlib.contextmanager
def creation_lock(url: str | None) -> Iterator[None]:
    """For a SQLite file, an exclusive lock (FILE.db-lock beside it) while a process creates
    its tables or its studies: two processes starting on one new file at the same moment
    take turns instead of colliding. Other storages: nothing to do."""
    if not url or not url.startswith("sqlite:///"):
        yield
        return
    path = Path(url[len("sqlite:///"):])
    try:
        handle = open(f"{path}-lock", "a+")  # noqa: SIM115 - held for the block
    except OSError:  # a read-only folder: SQLite itself will say what is wrong
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def lock_of(storage):
    """`creation_lock` for an open storage."""
    return creation_lock(str(getattr(storage, "url", "")) or None)


@contextlib.contextmanager
def storage_errors(url: str | None) -> Iterator[None]:
    """A storage that cannot be read (a damaged file, a stored value that is not what was
    written) ends the command with a message naming it, not a traceback."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except (optuna.exceptions.StorageInternalError, SQLAlchemyError) as exc:
        raise InputError(f"the study storage '{url}' is damaged or unreadable: {_cause(exc)}; "
                         "give another --storage (or remove the damaged file)") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"the study storage '{url}' holds a value that is not JSON ({exc}); "
                         "it is damaged: give another --storage, or --restart") from None


def _cause(exc: BaseException) -> str:
    """The database's own words for an error, without the statement it was running."""
    text = str(exc.__cause__ or exc).split("[SQL:")[0]
    return " ".join(text.split())[:300]


def ask(study):
    """A new trial (Optuna warns that heartbeats are meant for `optimize`; we beat ourselves)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage")
        return study.ask()


def owner() -> dict:
    """Who runs a trial: the host and process (see `reap`)."""
    return {"host": HOST, "pid": os.getpid()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a child killed but not yet waited for is a zombie: dead
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def reap(study) -> None:
    """Fail the study's stale running trials: a heartbeat older than GRACE_S (any host), or a
    process on this host that is gone."""
    import optuna
    from optuna.trial import TrialState

    storage = study._storage
    if not hasattr(storage, "record_heartbeat"):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.storages.fail_stale_trials(study)
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        who = t.user_attrs.get("owner")
        if (isinstance(who, dict) and who.get("host") == HOST and isinstance(who.get("pid"), int)
                and who["pid"] != os.getpid() and not _alive(who["pid"])):
            try:
                storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # it finished, or another process failed it first


class Heartbeat:
    """A thread that records the heartbeat of this process's running trial (none on an
    in-memory storage, which no other process shares)."""

    def __init__(self, storage):
        self.storage = storage if hasattr(storage, "record_heartbeat") else None
        self.trial_id: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.storage is not None:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()

    def track(self, trial_id: int | None) -> None:
        """Beat for this trial from now on (its first beat at once, before the thread
        knows it: the first beat makes the trial's row, later ones update it)."""
        if self.storage is not None and trial_id is not None:
            with contextlib.suppress(Exception):  # a busy database: the thread beats next
                self.storage.record_heartbeat(trial_id)
        self.trial_id = trial_id

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            trial_id = self.trial_id
            if trial_id is None:
                continue
            with contextlib.suppress(Exception):  # a busy database: the next beat
                self.storage.record_heartbeat(trial_id)

    def stop(self) -> None:
        self._stop.set()
