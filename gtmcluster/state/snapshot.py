"""The store on disk: an SQLite snapshot in the node's state directory.

Every few seconds the keys changed since the last write are written (inserted, replaced
or deleted) in one transaction, so the cost follows the rate of change, not the size of
the table; at stop the same happens once more. The snapshot is read when the node starts.
On disk a record's expiry is a wall-clock time, so after a restart it lives only for what
is left of its TTL, and expired records are dropped on load. Loading also moves the
store's hybrid clock past every version it held, so a restarted node never reuses a
version. Writing happens in a thread, from rows made on the reactor thread. This module is the
file; `state.snapshotter` is the service that loads and writes it.

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
  `Unreadable`: `Snapshotter.load` (`state.snapshotter`) moves it (and its journal) aside with a log line
  saying why, and the node starts with an empty store, which its peers fill when they
  connect. A snapshot is loaded whole or not at all. A file found damaged by a write is
  moved aside the same way, and the next write saves the whole store to a new one.
- A well-formed row whose record the schema of its kind refuses (`state.schema`) is not a
  damaged file: that record is skipped with a log line (see `Reader`), the rest is loaded.
"""

from __future__ import annotations

import errno
import json
import math
import os
import sqlite3
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from twisted.logger import Logger

from gtmcluster.runtime import gil
from gtmcluster.state import schema
from gtmcluster.state.loading import Damaged
from gtmcluster.state.record import Record, Version
from gtmcluster.state.store import Store
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
#: records skipped on loading (see `Reader`) that are logged one by one, at most
LOGGED_SKIPS = 10
#: keys of the later part remembered as not in the file, at most (see `Reader.fetch`)
MAX_ABSENT = 100_000
#: rows a write makes per reactor turn, when it has more than that: 500 take 5 ms (2,000
#: held the reactor 17-23 ms a turn while an outage's 12,500 verdicts were saved)
ROWS_PER_TURN = 500
#: files SQLite keeps beside the database, moved aside with it
COMPANIONS = ("-journal", "-wal", "-shm")
#: the largest parts of a version (see `store.fingerprint`: wall_ms is packed as 64 bits,
#: the logical counter as 32)
MAX_WALL_MS = 2**64 - 1
MAX_LOGICAL = 2**32 - 1

Row = tuple[str, str, int, int, str, float | None]


class Unreadable(Damaged):
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
    """A connection in autocommit mode (transactions are explicit), rollback journal, full
    syncs. Raises `Unreadable` when the file or a file SQLite keeps beside it (its journal)
    is a symbolic link or not a regular file: SQLite would follow the link, reading another
    file as the state or creating one where the link points."""
    for name in (path, *(Path(f"{path}{suffix}") for suffix in COMPANIONS)):
        refuse_link(name)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute("PRAGMA synchronous=EXTRA")
    except BaseException:
        db.close()
        raise
    return db


def refuse_link(path: Path) -> None:
    """Raise `Unreadable` when *path* is a symbolic link (dangling or not) or anything but a
    regular file; nothing there is fine."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise Unreadable(f"{path} is a symbolic link (never followed)")
    if not stat.S_ISREG(mode):
        raise Unreadable(f"{path} is not a regular file")


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_private(path: Path) -> None:
    """Create *path* empty with mode 0600 (never readable by others, not even for a moment)
    and make its name durable; an existing file is only narrowed to 0600. Never through a
    symbolic link: one at *path* raises `Unreadable` (and is set aside like a damaged file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        pass
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Unreadable(f"{path} is a symbolic link (never followed)") from None
        raise
    else:
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Unreadable(f"{path} is not a regular file")
            if st.st_mode & 0o077:
                os.fchmod(fd, 0o600)  # written by an older version
        finally:
            os.close(fd)
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        # O_EXCL: fails on anything already at *path*, a symbolic link included (not followed)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        refuse_link(path)  # made meanwhile: a link is refused, a file is another writer's
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


def write_beside(path: Path, data: list[Row], node: str, deleted: list[str]) -> int:
    """`write` changes in a thread beside the reactor, handing the GIL over often: binding
    the rows' values holds it, and a write of 25,000 rows (a member that reconciled) made
    the reactor wait for it at each of its system calls, 30-50 ms late (`gtmcluster.runtime.gil`)."""
    with gil.yielding_often():
        return write(path, data, node, deleted, False)


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


class Refused(Exception):
    """A well-formed row holding a record its kind's schema refuses (`state.schema`): it is
    skipped, and the rest of the file loaded."""

    def __init__(self, problem: schema.Problem):
        super().__init__(problem.text)
        self.problem = problem


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _record(entry: tuple[Any, ...], wall_now: float, local_now: float) -> Record | None:
    """The record of a row, or None when it has expired; raises `Unreadable` for a row
    this version does not write, and `Refused` for a record its kind's schema refuses."""
    if not _valid(entry):
        raise Unreadable(f"record {entry[0]!r}: malformed row {entry!r}")
    key, value, wall_ms, logical, origin, expires = entry
    ttl = None if expires is None else expires - wall_now
    if ttl is not None and ttl <= 0:
        return None
    try:
        decoded: Any = json.loads(value, parse_constant=_constant)
    except (ValueError, RecursionError) as e:
        raise Unreadable(f"record {key!r}: the value is not JSON ({e})") from None
    problem = schema.problem(key, decoded, origin, ttl)
    if problem is not None:
        raise Refused(problem)
    # compact at once (as the store would): a large table's values are not held twice
    return Record(key, compact(key, decoded), Version(wall_ms, logical, shared_text(origin)), ttl, local_now)


def key_range(prefix: str) -> tuple[str, str]:
    """The keys starting with *prefix*, as a range [low, high) of SQLite's text order."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


class Reader:
    """A snapshot open for reading, in two parts.

    `open` checks the whole file (SQLite's check, the schema version) before anything is
    read. `first` merges every row but those under the prefix *later*, all of them or,
    when one is malformed, none. The rows under *later* (the numerous path records) are
    then read in slices in the table's own order (`next_slice`), and any one of them not
    read yet can be read at once by its key (`fetch`, a lookup in the key's index), so
    a node can answer from the whole snapshot while most of it is still on disk. Records
    go into the store with `Store.load`: newest version wins, no listener hears of them.

    A well-formed row whose record its kind's schema refuses (`state.schema`: a value of
    another shape, a TTL or size beyond the kind's cap, an unknown kind; or one beyond its
    origin's cap of records of that kind) is skipped, counted in *refused* by (kind,
    reason), and logged (the first `LOGGED_SKIPS` of them, then a count when reading ends):
    one bad record, which a peer may have sent before this version checked, does not cost
    the rest of the file.

    Times: a record's remaining TTL is counted from the wall-clock time *wall* gives when
    its row is read. Every call runs on one thread (the reactor's).
    """

    def __init__(
        self,
        db: sqlite3.Connection,
        later: str | None,
        wall: Callable[[], float],
        refused: Counter[tuple[str, str]] | None = None,
        path: Path | None = None,
    ):
        self.db = db
        self.path = path
        self.refused: Counter[tuple[str, str]] = Counter() if refused is None else refused
        #: records skipped by this reader
        self.skipped = 0
        self.later = key_range(later) if later else None
        self.wall = wall
        #: the rowid of the last row of the later part read (rows up to it are in the store)
        self.cursor = 0
        #: rows of the later part at the start, and how many of them have been read
        self.total = 0
        self.done_rows = 0
        #: every row has been read
        self.done = later is None
        #: keys of the later part looked up and not in the file (asked again and again for
        #: LDNSes never measured: an index lookup each time would cost tens of microseconds)
        self._absent: set[str] = set()

    @classmethod
    def open(
        cls,
        path: Path,
        later: str | None,
        wall: Callable[[], float],
        refused: Counter[tuple[str, str]] | None = None,
        connect: Callable[[Path], sqlite3.Connection] | None = None,
    ) -> Reader | None:
        """The snapshot at *path* opened and checked whole (opening rolls back a write that
        was cut short, see the module's docstring); None when there is no snapshot (no
        file, or no write committed yet). Raises `Unreadable`. *connect* opens it another
        way (the replay's read-only copy, `replay.statecopy`)."""
        if not os.path.lexists(path):
            return None
        try:
            db = (connect or _connect)(path)
        except sqlite3.Error as e:
            raise Unreadable(str(e)) from e
        try:
            (version,) = db.execute("PRAGMA user_version").fetchone()
            if version > SCHEMA_VERSION:
                raise Unreadable(_newer(version))
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "records" not in tables:
                db.close()
                return None  # created, but no write committed yet
            problems = [text for (text,) in db.execute("PRAGMA quick_check(3)")]
            if problems != ["ok"]:
                raise Unreadable("SQLite's check found: " + "; ".join(problems))
        except sqlite3.Error as e:
            db.close()
            raise Unreadable(str(e)) from e
        except BaseException:
            db.close()
            raise
        return cls(db, later, wall, refused, path)

    def close(self) -> None:
        self.db.close()

    def first(self, store: Store) -> int:
        """Merge every row outside the later part into *store* (all or, raising
        `Unreadable`, none), and move the store's clock past every version the file
        holds; how many records changed the store."""
        columns = "key, value, wall_ms, logical, origin, expires"
        try:
            if self.later is None:
                found = self.db.execute(f"SELECT {columns} FROM records").fetchall()
            else:
                low, high = self.later
                found = self.db.execute(
                    f"SELECT {columns} FROM records WHERE key < ? OR key >= ?", (low, high)
                ).fetchall()
                # one pass over the table: the rows of the later part and the latest version
                count, latest = self.db.execute("SELECT count(*), max(wall_ms) FROM records").fetchone()
        except sqlite3.Error as e:
            raise Unreadable(str(e)) from e
        wall_now, local_now = self.wall(), store.clock()
        records = self._records(found, 0, wall_now, local_now)
        if self.later is not None:
            self.total = count - len(found)
            self.done = self.total == 0
            if type(latest) is int and 0 <= latest <= MAX_WALL_MS:
                # the next millisecond: past every logical counter of that one
                store.witness(latest + 1, 0)
        # every row is well-formed: only now does the store see any of them
        return store.load(self._within_caps(store, records))

    def next_slice(self, store: Store, count: int) -> int:
        """Read the rows of the later part among the next *count* rows of the table (by
        rowid: a slice looks at *count* rows at most, also where the table holds a long run
        of other rows) into *store*; how many records changed it. Raises `Unreadable`
        (having merged none of the slice) for a damaged row or page; `done` once every row
        has been read."""
        if self.later is None or self.done:
            return 0
        low, high = self.later
        start = self.cursor
        try:
            # "+key": walk the table by rowid, not through the key index (see `fetch`)
            found = self.db.execute(
                "SELECT rowid, key, value, wall_ms, logical, origin, expires FROM records "
                "WHERE rowid > ? AND rowid <= ? AND +key >= ? AND +key < ? ORDER BY rowid",
                (start, start + count, low, high),
            ).fetchall()
            self.cursor = start + count
            if not found:  # past a gap in the rowids, or past the last row
                (following,) = self.db.execute("SELECT min(rowid) FROM records WHERE rowid > ?", (start,)).fetchone()
                if following is None:
                    self.done = True
                else:
                    self.cursor = max(self.cursor, following - 1)
        except sqlite3.Error as e:
            raise Unreadable(str(e)) from e
        records = self._records(found, 1, self.wall(), store.clock())
        self.done_rows += len(found)
        return store.load(self._within_caps(store, records))

    def fetch(self, store: Store, key: str) -> bool:
        """Read *key*'s row into *store* now if it belongs to the later part and its slice
        has not been read yet (a row at or before the cursor is in the store already, or
        expired); whether a record was taken. Raises `Unreadable`."""
        if self.later is None or self.done or not self.later[0] <= key < self.later[1]:
            return False
        if key in self._absent:
            return False
        try:
            entry = self.db.execute(
                "SELECT rowid, key, value, wall_ms, logical, origin, expires FROM records WHERE key = ?", (key,)
            ).fetchone()
        except sqlite3.Error as e:
            raise Unreadable(str(e)) from e
        if entry is None:
            # (a key written into the file later is one the store holds: never asked for)
            if len(self._absent) < MAX_ABSENT:
                self._absent.add(key)
            return False
        if entry[0] <= self.cursor:
            return False
        records = self._records([entry], 1, self.wall(), store.clock())
        return store.load(self._within_caps(store, records)) == 1

    def _records(self, rows: list[Any], skip: int, wall_now: float, local_now: float) -> list[Record]:
        """The live records of *rows* (each from its column *skip* on); raises `Unreadable`
        for a malformed row, and skips (see `_skip`) one its kind's schema refuses."""
        out = []
        for entry in rows:
            try:
                record = _record(entry[skip:] if skip else entry, wall_now, local_now)
            except Refused as e:
                self._skip(e.problem)
                continue
            if record is not None:
                out.append(record)
        return out

    def _within_caps(self, store: Store, records: Iterable[Record]) -> Iterator[Record]:
        """*records* but those beyond their origin's cap of records of their kind, counted
        as the store takes each one (`Store.load` reads them one at a time)."""
        held_by = store.held_by
        kinds = schema.KINDS
        for record in records:
            kind = record.key.partition("/")[0]
            limit = kinds[kind].max_records
            if held_by(record.origin, kind) >= limit:
                held = store.raw(record.key)
                if held is None or held.origin != record.origin:
                    self._skip(
                        schema.Problem(
                            kind, "count", f"record {record.key[:60]!r}: {record.origin} holds {limit} {kind} records"
                        )
                    )
                    continue
            yield record

    def _skip(self, problem: schema.Problem) -> None:
        self.refused[problem.kind, problem.reason] += 1
        self.skipped += 1
        if self.skipped <= LOGGED_SKIPS:
            log.warn(
                "state snapshot {path}: skipped a record this version does not take: {why}",
                path=str(self.path),
                why=problem.text,
                event="snapshot_record_skipped",
            )


def read(path: Path, store: Store, wall_now: float, connect: Callable[[Path], sqlite3.Connection] | None = None) -> int:
    """Merge the snapshot at *path* into *store* (silently: see `Store.load`); returns how
    many live records it held; *connect*: see `Reader.open`.

    Raises `Unreadable` (having merged nothing) when the file cannot be trusted."""
    reader = Reader.open(path, None, lambda: wall_now, connect=connect)
    if reader is None:
        return 0
    try:
        return reader.first(store)
    finally:
        reader.close()


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
    while any(os.path.lexists(f"{target}{suffix}") for suffix in ("", *COMPANIONS)):
        n += 1
        target = path.with_name(f"{path.name}.bad-{stamp}-{n}")
    os.rename(path, target)
    for suffix in COMPANIONS:
        companion = Path(f"{path}{suffix}")
        if os.path.lexists(companion):  # (a link is renamed itself, not followed)
            os.rename(companion, f"{target}{suffix}")
    _fsync_directory(path.parent)
    return target
