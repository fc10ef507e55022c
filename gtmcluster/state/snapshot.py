"""The store on disk: an SQLite snapshot in the node's state directory.

Every few seconds the keys changed since the last write are written (inserted, replaced
or deleted) in one transaction, so the cost follows the rate of change, not the size of
the table; at stop the same happens once more. The snapshot is read when the node starts.
On disk a record's expiry is a wall-clock time, so after a restart it lives only for what
is left of its TTL, and expired records are dropped on load. Loading also moves the
store's hybrid clock past every version it held, so a restarted node never reuses a
version. Writing happens in a thread, from rows made on the reactor thread.

Crash safety (a node may be killed at any instant, also in the middle of a write):

- Each write is one SQLite transaction in rollback-journal mode (``journal_mode=DELETE``):
  before a page of the file changes, its old content is in ``state.sqlite-journal``, and
  the transaction commits when that journal is deleted. A write cut short leaves the
  journal behind, and whoever opens the file next rolls it back: the file always holds
  the state of the last committed write, never part of a later one (tests/process/
  test_snapshot_kill.py kills a writer mid-write a hundred times and checks exactly this).
- ``synchronous=EXTRA``: the journal is synced before the file changes, the file before
  the journal goes, and the directory after the journal is created and after it is
  deleted, so a committed write also survives losing power, not only a killed process.
- The file is created with mode 0600 (the journal inherits it) and its directory synced
  once, so the file's name is as durable as its content.
- ``user_version`` holds `SCHEMA_VERSION`. A file this version cannot trust (not SQLite,
  truncated, failing SQLite's check, of a newer schema, or with a malformed row) is
  `Unreadable`: `Snapshotter.load` moves it (and its journal) aside with a log line
  saying why, and the node starts with an empty store, which its peers fill when they
  connect. A snapshot is loaded whole or not at all. A file found damaged by a write is
  moved aside the same way, and the next write saves the whole store to a new one.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer, task, threads
from twisted.logger import Logger

from gtmcluster.state.store import Record, Store, Version
from gtmcluster.state.values import compact, plain, shared_text

log = Logger()

FILENAME = "state.sqlite"
#: the layout below; a file with a larger ``user_version`` was written by a newer gtmcluster
SCHEMA_VERSION = 1
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS records (
    key TEXT PRIMARY KEY,
    value TEXT,
    wall_ms INTEGER NOT NULL,
    logical INTEGER NOT NULL,
    origin TEXT NOT NULL,
    expires REAL
)""",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)",
)
#: files SQLite keeps beside the database, moved aside with it
COMPANIONS = ("-journal", "-wal", "-shm")
#: the largest parts of a version (see `store.fingerprint`: wall_ms is packed as 64 bits,
#: the logical counter as 32)
MAX_WALL_MS = 2**64 - 1
MAX_LOGICAL = 2**32 - 1

Row = tuple[str, str, int, int, str, float | None]


class Unreadable(Exception):
    """The snapshot file cannot be trusted; the message says why."""


def row(record: Record, wall_now: float, local_now: float) -> Row | None:
    """A record as a table row (expiry as wall-clock time), or None when it has expired."""
    remaining = record.remaining(local_now)
    if remaining is not None and remaining <= 0:
        return None
    expires = None if remaining is None else wall_now + remaining
    value = json.dumps(record.value, default=plain)
    return (record.key, value, record.wall_ms, record.logical, record.origin, expires)


def rows(store: Store, wall_now: float, local_now: float) -> list[Row]:
    """The whole store as table rows."""
    return [r for record in store.all_records() if (r := row(record, wall_now, local_now)) is not None]


def _connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), rollback journal, full syncs."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute("PRAGMA synchronous=EXTRA")
    except BaseException:
        db.close()
        raise
    return db


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_private(path: Path) -> None:
    """Create *path* empty with mode 0600 (never readable by others, not even for a moment)
    and make its name durable; an existing file is only narrowed to 0600."""
    if path.exists():
        if os.stat(path).st_mode & 0o077:
            os.chmod(path, 0o600)  # written by an older version
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    os.close(fd)
    _fsync_directory(path.parent)


def write(path: Path, data: list[Row], node: str, deleted: list[str] | None = None, full: bool = True) -> int:
    """Write *data* to the snapshot at *path* in one transaction: all of it (*full*:
    replacing what was there), or as changes (*data* replaced, *deleted* removed)."""
    _create_private(path)
    db = _connect(path)
    try:
        # BEGIN IMMEDIATE takes the write lock at once; closing without COMMIT rolls back.
        db.execute("BEGIN IMMEDIATE")
        (version,) = db.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise Unreadable(_newer(version))
        for statement in SCHEMA:
            db.execute(statement)
        if version != SCHEMA_VERSION:
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        if full:
            db.execute("DELETE FROM records")
        db.executemany("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?)", data)
        db.executemany("DELETE FROM records WHERE key = ?", [(k,) for k in deleted or ()])
        db.execute("INSERT OR REPLACE INTO meta VALUES ('node', ?)", (node,))
        db.execute("COMMIT")
    finally:
        db.close()
    return len(data)


def _newer(version: int) -> str:
    return f"schema version {version} is newer than this gtmcluster reads ({SCHEMA_VERSION})"


def _valid(found: tuple[Any, ...]) -> bool:
    """Whether a row has the types and ranges this version writes."""
    key, value, wall_ms, logical, origin, expires = found
    return (
        type(key) is str
        and type(value) is str
        and type(wall_ms) is int
        and 0 <= wall_ms <= MAX_WALL_MS
        and type(logical) is int
        and 0 <= logical <= MAX_LOGICAL
        and type(origin) is str
        and (expires is None or (type(expires) in (int, float) and math.isfinite(expires)))
    )


def _rows_of(path: Path) -> list[tuple[Any, ...]]:
    """Every row of the snapshot at *path*, after SQLite's own check of the whole file.

    Opening the file rolls back a write that was cut short (see the module's docstring)."""
    try:
        db = _connect(path)
        try:
            (version,) = db.execute("PRAGMA user_version").fetchone()
            if version > SCHEMA_VERSION:
                raise Unreadable(_newer(version))
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "records" not in tables:
                return []  # created, but no write committed yet
            problems = [text for (text,) in db.execute("PRAGMA quick_check(3)")]
            if problems != ["ok"]:
                raise Unreadable("SQLite's check found: " + "; ".join(problems))
            return db.execute("SELECT key, value, wall_ms, logical, origin, expires FROM records").fetchall()
        finally:
            db.close()
    except sqlite3.Error as e:
        raise Unreadable(str(e)) from e


def read(path: Path, store: Store, wall_now: float) -> int:
    """Merge the snapshot at *path* into *store*; returns how many live records it held.

    Raises `Unreadable` (having merged nothing) when the file cannot be trusted."""
    if not path.exists():
        return 0
    found = _rows_of(path)
    local_now = store.clock()
    records: list[Record] = []
    for entry in found:
        if not _valid(entry):
            raise Unreadable(f"record {entry[0]!r}: malformed row {entry!r}")
        key, value, wall_ms, logical, origin, expires = entry
        ttl = None if expires is None else expires - wall_now
        if ttl is not None and ttl <= 0:
            continue
        try:
            # compact at once (as the store would): a large table's values are not held twice
            decoded: Any = compact(key, json.loads(value))
        except ValueError as e:
            raise Unreadable(f"record {key!r}: the value is not JSON ({e})") from None
        records.append(Record(key, decoded, Version(wall_ms, logical, shared_text(origin)), ttl, local_now))
    # every row is good: only now does the store see any of them
    return sum(1 for record in records if store.merge(record))


def damaged(error: BaseException) -> bool:
    """Whether *error* says the file itself is bad (rather than the disk, a lock or a
    permission), so that moving it aside helps."""
    if isinstance(error, Unreadable):
        return True
    name = getattr(error, "sqlite_errorname", "")
    return isinstance(error, sqlite3.DatabaseError) and (name.startswith("SQLITE_CORRUPT") or name == "SQLITE_NOTADB")


def set_aside(path: Path, wall_now: float) -> Path:
    """Rename the snapshot at *path* (and the journal beside it, so the two stay a pair
    that SQLite can open) to ``state.sqlite.bad-<UTC time>``; returns the new name.

    The database goes first: should the node stop in between, the journal left behind
    names a file that no longer exists, and SQLite ignores a journal beside an empty file."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(wall_now))
    target = path.with_name(f"{path.name}.bad-{stamp}")
    n = 1
    while any(Path(f"{target}{suffix}").exists() for suffix in ("", *COMPANIONS)):
        n += 1
        target = path.with_name(f"{path.name}.bad-{stamp}-{n}")
    os.rename(path, target)
    for suffix in COMPANIONS:
        companion = Path(f"{path}{suffix}")
        if companion.exists():
            os.rename(companion, f"{target}{suffix}")
    _fsync_directory(path.parent)
    return target


class Snapshotter(Service):
    """Loads the snapshot at start; writes it every `interval` seconds when changed, and at stop."""

    def __init__(self, store: Store, directory: Path, reactor: Any, wall: Callable[[], float], interval: float = 10.0):
        self.store = store
        self.path = directory / FILENAME
        self.reactor = reactor
        self.wall = wall
        self.interval = interval
        self._dirty: set[str] = set()  # keys changed since the last write
        self._writing: defer.Deferred[Any] | None = None
        self._loop: task.LoopingCall | None = None
        store.subscribe(self._changed)

    def _changed(self, record: Record) -> None:
        self._dirty.add(record.key)

    def load(self) -> int:
        """Merge the snapshot into the store. A file that cannot be trusted is moved aside
        (see `set_aside`) and nothing is loaded: the node starts anyway, empty, and its
        peers send it their state when they connect."""
        interrupted = Path(f"{self.path}-journal").exists()
        try:
            loaded = read(self.path, self.store, self.wall())
        except Unreadable as e:
            self._set_aside(str(e), "starting with an empty store, which the sync group's peers fill")
            loaded = 0
        else:
            if interrupted:
                log.info(
                    "the snapshot write under way when the node stopped was rolled back: "
                    "{path} holds the write before it",
                    path=str(self.path),
                )
        self._dirty.clear()
        if loaded:
            log.info("loaded {count} records from {path}", count=loaded, path=str(self.path))
        return loaded

    def _set_aside(self, reason: str, then: str) -> None:
        """Move the damaged file aside (on the reactor thread: a rename and a directory sync,
        once per damaged file) and say so, and what happens *then*."""
        try:
            moved = set_aside(self.path, self.wall())
        except OSError as e:
            log.error(
                "state snapshot {path} is unreadable ({reason}) and could not be moved aside ({error}); {then}",
                path=str(self.path),
                reason=reason,
                error=str(e),
                then=then,
            )
            return
        log.warn(
            "state snapshot {path} is unreadable ({reason}): moved it aside to {moved}; {then}",
            path=str(self.path),
            reason=reason,
            moved=str(moved),
            then=then,
        )

    def startService(self) -> None:
        super().startService()
        self._loop = task.LoopingCall(self.save_if_changed)
        self._loop.clock = self.reactor
        self._loop.start(self.interval, now=False)

    def save_if_changed(self) -> defer.Deferred[Any] | None:
        if not self._dirty or self._writing is not None:
            return None
        return self.save()

    def save(self) -> defer.Deferred[Any]:
        """Write the keys changed since the last write (in a thread)."""
        dirty, self._dirty = self._dirty, set()
        wall, local = self.wall(), self.store.clock()
        data: list[Row] = []
        deleted: list[str] = []
        for key in dirty:
            record = self.store.raw(key)
            made = row(record, wall, local) if record is not None else None
            if made is None:
                deleted.append(key)
            else:
                data.append(made)
        d = threads.deferToThreadPool(
            self.reactor, self.reactor.getThreadPool(), write, self.path, data, self.store.origin, deleted, False
        )

        def done(result: Any) -> Any:
            self._writing = None
            return result

        def failed(failure: Any) -> None:
            self._dirty |= dirty  # try these again next time
            if damaged(failure.value):
                # the file went bad under us: start a new one, with everything in it
                self._set_aside(str(failure.value), "the next write saves the whole store to a new file")
                self._dirty = {record.key for record in self.store.all_records()}
                return
            log.failure("could not write the state snapshot {path}", failure, path=str(self.path))

        d.addBoth(done)
        d.addErrback(failed)
        self._writing = d
        return d

    def flush(self) -> defer.Deferred[bool]:
        """Write every change made so far now, without waiting for the interval; fires with
        whether it is on disk. A write in progress is waited for first (it may hold older
        values of the same keys). An acknowledged admin write waits for this: a node killed
        right after its answer must not come back without it."""

        def after_current(_: object) -> defer.Deferred[bool] | bool:
            if self._writing is not None:  # another write began meanwhile: wait for it too
                return self.flush()
            if not self._dirty:
                return True
            return self.save().addCallback(lambda written: written is not None)

        return self._after_current().addCallback(after_current)

    def _after_current(self) -> defer.Deferred[None]:
        """Fires when the write in progress (if any) is done, leaving its result alone."""
        if self._writing is None:
            return defer.succeed(None)
        waiter: defer.Deferred[None] = defer.Deferred()

        def done(result: Any) -> Any:
            waiter.callback(None)
            return result

        self._writing.addBoth(done)
        return waiter

    def stopService(self) -> defer.Deferred[Any]:
        super().stopService()
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        pending = self._writing if self._writing is not None else defer.succeed(None)
        return pending.addCallback(lambda _: self.save())
