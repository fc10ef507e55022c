"""A member's state snapshot as `gtmcluster replay --state` reads it: a copy in memory, so
that a replay next to a running (or crashed) node never changes its ``state.sqlite`` and
never holds it locked for longer than a copy takes.

Opened the way the node opens it (read-write, ``PRAGMA journal_mode``), a reader rolls
back the write a killed node left half done (its ``-journal``): it rewrote and synced the
file and deleted the journal, as whichever user ran the replay, under a node that had not
started again. And every query of a long read held SQLite's shared lock, which the node's
next write had to wait for.

Here the file is opened read-only (``mode=ro``: SQLite writes nothing, and makes no
journal beside it) and copied whole into memory with SQLite's backup API in one step: the
shared lock is held for that copy only (milliseconds for a few megabytes), and the copy is
one committed state. The node's own checks (`snapshot.Reader`) then run on the copy. A
file whose writer died mid-write (SQLite: ``SQLITE_READONLY_ROLLBACK``) is copied with its
journal into a private temporary folder and rolled back there, the original files left as
they were; a copy during which either file changed is made again (`TRIES`). A writer that
keeps the file locked for longer than `LOCK_WAIT` seconds makes the replay give up, saying
so. Symbolic links are refused, as the node refuses them.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
import urllib.parse
from pathlib import Path

from gtmcluster.state.snapshot import COMPANIONS, Unreadable, refuse_link

#: seconds to wait for a writer that holds the snapshot locked
LOCK_WAIT = 10.0
#: copies of a file with a journal, while one of the two changes during the copy
TRIES = 3


class _Locked(Exception):
    pass


def connect(path: Path, lock_wait: float = LOCK_WAIT) -> sqlite3.Connection:
    """A connection to an in-memory copy of the snapshot at *path*; raises `Unreadable`."""
    for name in (path, *(Path(f"{path}{suffix}") for suffix in COMPANIONS)):
        refuse_link(name)
    memory = sqlite3.connect(":memory:", isolation_level=None)
    try:
        try:
            _copy(_uri(path, "ro"), memory, lock_wait)
        except sqlite3.OperationalError as e:
            if getattr(e, "sqlite_errorname", "") != "SQLITE_READONLY_ROLLBACK":
                raise
            _copy_unfinished(path, memory, lock_wait)
    except sqlite3.Error as e:
        memory.close()
        raise Unreadable(str(e)) from e
    except _Locked:
        memory.close()
        raise Unreadable(f"its writer held it locked for more than {lock_wait:g} s; try again") from None
    except BaseException:
        memory.close()
        raise
    return memory


def _uri(path: Path, mode: str) -> str:
    return f"file:{urllib.parse.quote(os.path.abspath(path))}?mode={mode}"


def _copy(uri: str, memory: sqlite3.Connection, lock_wait: float) -> None:
    """Copy the database at *uri* into *memory* in one step of the backup API."""
    deadline = time.monotonic() + lock_wait

    def progress(status: int, remaining: int, total: int) -> None:
        if status in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) and time.monotonic() > deadline:
            raise _Locked

    source = sqlite3.connect(uri, uri=True, timeout=lock_wait, isolation_level=None)
    try:
        source.backup(memory, pages=-1, progress=progress, sleep=0.05)
    finally:
        source.close()


def _copy_unfinished(path: Path, memory: sqlite3.Connection, lock_wait: float) -> None:
    """Copy the file and its journal (a write its writer did not finish) into a private
    folder and roll the copy back there into *memory*; the originals are only read."""
    journal = Path(f"{path}-journal")
    for _ in range(TRIES):
        with tempfile.TemporaryDirectory(prefix="gtmcluster-replay-") as folder:
            copy = Path(folder) / path.name
            before = (_stamp(path), _stamp(journal))
            shutil.copyfile(path, copy)
            if before[1] is not None:
                shutil.copyfile(journal, Path(f"{copy}-journal"))
            if (_stamp(path), _stamp(journal)) != before:
                continue  # (its node is writing it: again)
            _copy(_uri(copy, "rw"), memory, lock_wait)
            return
    raise Unreadable(f"it changed during each of {TRIES} copies (its node is writing it); try again")


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
