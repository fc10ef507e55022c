"""The store on disk: an SQLite snapshot in the node's state directory.

Every few seconds the keys changed since the last write are written (inserted, replaced
or deleted) in one transaction, so a crash mid-write leaves the previous snapshot whole
and the cost follows the rate of change, not the size of the table; at stop the same
happens once more. The snapshot is read when the node starts. On disk a record's expiry
is a wall-clock time, so after a restart it lives only for what is left of its TTL, and
expired records are dropped on load. Loading also moves the store's hybrid clock past
every version it held, so a restarted node never reuses a version. Writing happens in a
thread, from rows made on the reactor thread.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer, task, threads
from twisted.logger import Logger

from gtmcluster.state.store import Record, Store, Version
from gtmcluster.state.values import plain, shared_text

log = Logger()

FILENAME = "state.sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    key TEXT PRIMARY KEY,
    value TEXT,
    wall_ms INTEGER NOT NULL,
    logical INTEGER NOT NULL,
    origin TEXT NOT NULL,
    expires REAL
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT);
"""

Row = tuple[str, str, int, int, str, float | None]


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


def write(path: Path, data: list[Row], node: str, deleted: list[str] | None = None, full: bool = True) -> int:
    """Write *data* to the snapshot at *path* in one transaction: all of it (*full*:
    replacing what was there), or as changes (*data* replaced, *deleted* removed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    try:
        db.executescript(SCHEMA)
        with db:
            if full:
                db.execute("DELETE FROM records")
            db.executemany("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?)", data)
            db.executemany("DELETE FROM records WHERE key = ?", [(k,) for k in deleted or ()])
            db.execute("INSERT OR REPLACE INTO meta VALUES ('node', ?)", (node,))
    finally:
        db.close()
    os.chmod(path, 0o600)
    return len(data)


def read(path: Path, store: Store, wall_now: float) -> int:
    """Merge the snapshot at *path* into *store*; returns how many live records it held."""
    if not path.exists():
        return 0
    db = sqlite3.connect(path)
    try:
        db.executescript(SCHEMA)
        found = db.execute("SELECT key, value, wall_ms, logical, origin, expires FROM records").fetchall()
    finally:
        db.close()
    local_now = store.clock()
    loaded = 0
    for key, value, wall_ms, logical, origin, expires in found:
        ttl = None if expires is None else expires - wall_now
        if ttl is not None and ttl <= 0:
            continue
        try:
            decoded: Any = json.loads(value)
        except ValueError:
            continue
        if store.merge(Record(key, decoded, Version(wall_ms, logical, shared_text(origin)), ttl, local_now)):
            loaded += 1
    return loaded


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
        loaded = read(self.path, self.store, self.wall())
        self._dirty.clear()
        if loaded:
            log.info("loaded {count} records from {path}", count=loaded, path=str(self.path))
        return loaded

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
            log.failure("could not write the state snapshot {path}", failure, path=str(self.path))

        d.addBoth(done)
        d.addErrback(failed)
        self._writing = d
        return d

    def stopService(self) -> defer.Deferred[Any]:
        super().stopService()
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        pending = self._writing if self._writing is not None else defer.succeed(None)
        return pending.addCallback(lambda _: self.save())
