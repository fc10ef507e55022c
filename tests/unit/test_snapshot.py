"""The SQLite snapshot: incremental writes, wall-clock expiry, restore; damaged files set aside."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sqlite3
import stat
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import task
from twisted.logger import capturedLogs, formatEvent

from gtmcluster.state import schema, snapshot
from gtmcluster.state.snapshotter import Snapshotter
from gtmcluster.state.store import Store
from tests.support.inline import InlineThreads


def test_changes_are_written_and_restored(tmp_path: Path) -> None:
    """Puts, overwrites and deletions since the last write reach disk; a new store loads
    exactly the same state (equal digests); the file is private (0600)."""
    reactor = InlineThreads()
    store = Store("n1", reactor.seconds)
    snaps = Snapshotter(store, tmp_path, reactor, lambda: 10_000.0, interval=5)
    for i in range(50):
        store.put(f"admin/vs/k{i}", {"state": "enabled", "i": i})
    snaps.save()
    store.put("admin/vs/k0", {"state": "drain"})
    store.delete("admin/vs/k1")
    store.put("probe/192.0.2.1", {"by": "n1"}, ttl=30)
    snaps.save()
    restored = Store("n1", reactor.seconds)
    assert snapshot.read(tmp_path / snapshot.FILENAME, restored, 10_000.0) == 51
    assert restored.digest() == store.digest()
    assert restored.get("admin/vs/k0").value == {"state": "drain"}  # type: ignore[union-attr]
    assert restored.get("admin/vs/k1") is None
    assert stat.S_IMODE(os.stat(tmp_path / snapshot.FILENAME).st_mode) == 0o600


def test_only_changed_keys_are_written(tmp_path: Path, monkeypatch: Any) -> None:
    """A save writes the keys changed since the previous one, not the whole table."""
    reactor = InlineThreads()
    store = Store("n1", reactor.seconds)
    snaps = Snapshotter(store, tmp_path, reactor, lambda: 0.0)
    for i in range(1000):
        store.put(f"admin/vs/k{i}", {"state": "enabled"})
    snaps.save()
    written: list[int] = []
    original = snapshot.write

    def counting(path: Path, data: list[Any], node: str, deleted: Any = None, full: bool = True) -> int:
        written.append(len(data) + len(deleted or ()))
        return original(path, data, node, deleted, full)

    monkeypatch.setattr(snapshot, "write", counting)  # a spy: it still writes
    store.put("admin/vs/k5", {"state": "drain"})
    snaps.save()
    assert written == [1]


def test_expiry_is_wall_clock_time_on_disk(tmp_path: Path) -> None:
    """A record with 100 s left, restored 60 s (wall clock) later, has 40 s left; one
    restored after its end is dropped."""
    reactor = InlineThreads()
    store = Store("n1", reactor.seconds)
    store.put("persist/www/1/192.0.2.0/24", {"pool": "p", "members": ["v"]}, ttl=100)
    snapshot.write(tmp_path / "s.sqlite", snapshot.rows(store, 5000.0, reactor.seconds()), "n1")
    later = Store("n1", reactor.seconds)
    assert snapshot.read(tmp_path / "s.sqlite", later, 5060.0) == 1
    assert later.raw("persist/www/1/192.0.2.0/24").remaining(reactor.seconds()) == 40  # type: ignore[union-attr]
    too_late = Store("n1", reactor.seconds)
    assert snapshot.read(tmp_path / "s.sqlite", too_late, 5101.0) == 0


def test_periodic_save_and_save_at_stop(tmp_path: Path) -> None:
    """The service writes every interval when something changed, and once more at stop."""
    reactor = InlineThreads()
    store = Store("n1", reactor.seconds)
    snaps = Snapshotter(store, tmp_path, reactor, lambda: 0.0, interval=5)
    snaps.startService()
    store.put("admin/vs/a", {"state": "enabled"})
    reactor.clock.advance(5)
    assert reactor.ran == 1
    reactor.clock.advance(5)
    assert reactor.ran == 1  # nothing changed: no write
    store.put("admin/vs/b", {"state": "enabled"})
    snaps.stopService()
    restored = Store("n1", reactor.seconds)
    assert snapshot.read(tmp_path / snapshot.FILENAME, restored, 0.0) == 2


# --- files that cannot be trusted, and the file itself ----------------------------------


def saved(directory: Path, count: int = 20) -> tuple[Path, Store]:
    """A snapshot of *count* records written the node's way; the store it came from."""
    reactor = InlineThreads()
    store = Store("n1", reactor.seconds)
    snaps = Snapshotter(store, directory, reactor, lambda: 0.0)
    for i in range(count):
        store.put(f"admin/vs/k{i}", {"state": "enabled", "i": i, "pad": "x" * 300})
    snaps.save()
    assert snapshot.read(directory / snapshot.FILENAME, Store("n1", reactor.seconds), 0.0) == count
    return directory / snapshot.FILENAME, store


def load_logged(directory: Path) -> tuple[Snapshotter, Store, int, list[str]]:
    """A fresh store loaded by a Snapshotter; the log lines it wrote (formatted)."""
    reactor = InlineThreads()
    store = Store("n1", reactor.seconds)
    snaps = Snapshotter(store, directory, reactor, lambda: 1_700_000_000.0)
    with capturedLogs() as events:
        loaded = snaps.load()
    return snaps, store, loaded, [formatEvent(e) for e in events]


def set_aside_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".bad-" in p.name)


def damage_header(path: Path) -> None:
    with path.open("r+b") as f:
        f.write(b"this is no SQLite file at all!!\0" * 4)


def truncate_half(path: Path) -> None:
    os.truncate(path, os.path.getsize(path) // 2)


def newer_schema(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()


def bad_version_part(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("UPDATE records SET logical = ? WHERE key = 'admin/vs/k7'", (2**40,))
    db.commit()
    db.close()


def value_not_json(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("UPDATE records SET value = '{not json' WHERE key = 'admin/vs/k3'")
    db.commit()
    db.close()


def wall_ms_as_text(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("UPDATE records SET wall_ms = 'soon' WHERE key = 'admin/vs/k5'")
    db.commit()
    db.close()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (damage_header, "file is not a database"),
        (truncate_half, "malformed"),
        (newer_schema, "schema version 99 is newer than this gtmcluster reads (1)"),
        (bad_version_part, "record 'admin/vs/k7': malformed row"),
        (value_not_json, "record 'admin/vs/k3': the value is not JSON"),
        (wall_ms_as_text, "record 'admin/vs/k5': malformed row"),
    ],
)
def test_an_untrustworthy_snapshot_is_set_aside_and_the_node_starts_empty(
    tmp_path: Path, damage: Callable[[Path], None], reason: str
) -> None:
    """A damaged file (garbage, truncated, a newer schema, a malformed row) loads nothing at
    all, not the rows that still look fine; it is moved aside to state.sqlite.bad-<time>,
    with a warning naming the file, the reason and the new name; the next save starts a
    fresh snapshot that loads again."""
    path, _ = saved(tmp_path)
    damage(path)
    with pytest.raises(snapshot.Unreadable, match=re.escape(reason)):
        snapshot.read(path, Store("n1", lambda: 0.0), 0.0)
    snaps, store, loaded, lines = load_logged(tmp_path)
    assert loaded == 0
    assert len(store) == 0
    assert set_aside_files(tmp_path) == ["state.sqlite.bad-20231114T221320Z"]
    assert not path.exists()
    warning = [line for line in lines if "unreadable" in line]
    assert len(warning) == 1, lines
    assert str(path) in warning[0] and reason in warning[0], warning
    assert "moved it aside to " + str(tmp_path / "state.sqlite.bad-20231114T221320Z") in warning[0], warning
    assert "starting with an empty store" in warning[0], warning
    store.put("admin/vs/fresh", {"state": "enabled"})
    snaps.save()
    again = Store("n1", lambda: 0.0)
    assert snapshot.read(path, again, 0.0) == 1
    assert again.get("admin/vs/fresh") is not None


def test_setting_aside_keeps_the_journal_with_its_file_and_never_overwrites(tmp_path: Path) -> None:
    """The file and its journal are renamed together (SQLite finds a journal by the file's
    name), and a second damaged file in the same second gets a name of its own."""
    path = tmp_path / snapshot.FILENAME
    for expected in ("state.sqlite.bad-20231114T221320Z", "state.sqlite.bad-20231114T221320Z-2"):
        path.write_bytes(b"garbage" * 100)
        Path(f"{path}-journal").write_bytes(b"journal of " + expected.encode())
        moved = snapshot.set_aside(path, 1_700_000_000.0)
        assert moved.name == expected
        assert Path(f"{moved}-journal").read_bytes() == b"journal of " + expected.encode()
        assert not path.exists() and not Path(f"{path}-journal").exists()


def test_an_empty_or_never_committed_file_loads_as_empty_without_complaint(tmp_path: Path) -> None:
    """A file created but killed before its first commit (0 bytes, or SQLite's header without
    tables) holds the state before any write: nothing, and it is kept."""
    path = tmp_path / snapshot.FILENAME
    path.write_bytes(b"")
    _, store, loaded, lines = load_logged(tmp_path)
    assert (loaded, len(store), set_aside_files(tmp_path)) == (0, 0, [])
    assert not [line for line in lines if "unreadable" in line], lines
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 0")
    db.execute("VACUUM")
    db.close()
    _, store, loaded, lines = load_logged(tmp_path)
    assert (loaded, len(store), set_aside_files(tmp_path)) == (0, 0, [])


def test_a_snapshot_of_the_version_before_schema_versions_loads_and_is_upgraded(tmp_path: Path) -> None:
    """A file with the records table but no user_version (as written before it existed)
    loads whole; the next write marks it with the current schema version."""
    path = tmp_path / snapshot.FILENAME
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE records (key TEXT PRIMARY KEY, value TEXT, wall_ms INTEGER NOT NULL,"
        " logical INTEGER NOT NULL, origin TEXT NOT NULL, expires REAL);"
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT);"
        "INSERT INTO records VALUES ('admin/vs/old', '{\"state\": \"drain\"}', 5, 0, 'n2', NULL);"
    )
    db.close()
    reactor = InlineThreads()
    store = Store("n1", reactor.seconds)
    snaps = Snapshotter(store, tmp_path, reactor, lambda: 0.0)
    assert snaps.load() == 1
    assert store.get("admin/vs/old").value == {"state": "drain"}  # type: ignore[union-attr]
    store.put("admin/vs/new", {"state": "enabled"})
    snaps.save()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (snapshot.SCHEMA_VERSION,)
    assert db.execute("SELECT count(*) FROM records").fetchone() == (2,)
    db.close()


def test_a_snapshot_of_a_newer_schema_is_never_written_into(tmp_path: Path) -> None:
    """A write finding a newer schema version (a file swapped in while running) fails and
    leaves the file as it was."""
    path, _ = saved(tmp_path)
    newer_schema(path)
    before = path.read_bytes()
    with pytest.raises(snapshot.Unreadable, match="schema version 99"):
        snapshot.write(path, [("k", "1", 1, 0, "n1", None)], "n1", full=False)
    assert path.read_bytes() == before


def test_the_file_is_private_before_sqlite_writes_a_byte(tmp_path: Path, monkeypatch: Any) -> None:
    """Even with a umask of 0, the snapshot exists with mode 0600 before SQLite opens it (so
    it is never readable by others, nor is the journal SQLite makes with the file's mode);
    a file written by an older version with mode 0644 is narrowed to 0600."""
    modes: list[int] = []
    original = snapshot._connect

    def spying(path: Path) -> Any:
        modes.append(stat.S_IMODE(os.stat(path).st_mode))
        return original(path)

    monkeypatch.setattr(snapshot, "_connect", spying)  # a spy: it still connects
    old = os.umask(0)
    try:
        snapshot.write(tmp_path / "new" / snapshot.FILENAME, [("k", "1", 1, 0, "n1", None)], "n1")
    finally:
        os.umask(old)
    assert modes == [0o600]
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700
    older = tmp_path / "old" / snapshot.FILENAME
    older.parent.mkdir()
    older.touch(mode=0o644)
    os.chmod(older, 0o644)
    snapshot.write(older, [("k", "1", 1, 0, "n1", None)], "n1")
    assert stat.S_IMODE(os.stat(older).st_mode) == 0o600


def test_writes_use_the_rollback_journal_and_extra_syncs(tmp_path: Path) -> None:
    """The settings crash safety rests on (see the module docstring): journal_mode DELETE,
    synchronous EXTRA (3), on every connection the snapshot opens."""
    path, _ = saved(tmp_path)
    db = snapshot._connect(path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        assert db.execute("PRAGMA synchronous").fetchone() == (3,)
    finally:
        db.close()


def test_a_snapshot_damaged_while_running_is_set_aside_and_written_whole_again(tmp_path: Path) -> None:
    """A write that finds the file damaged (here: its header overwritten while the node
    runs) moves it aside with a warning, and the next write saves the whole store, not only
    what changed since, so the new file loads into the same state."""
    path, store = saved(tmp_path)
    reactor = InlineThreads()
    snaps = Snapshotter(store, tmp_path, reactor, lambda: 1_700_000_000.0)
    damage_header(path)
    store.put("admin/vs/later", {"state": "enabled"})
    with capturedLogs() as events:
        snaps.save()
    lines = [formatEvent(e) for e in events]
    warning = [line for line in lines if "unreadable" in line]
    assert len(warning) == 1, lines
    assert "file is not a database" in warning[0], warning
    assert "the next write saves the whole store to a new file" in warning[0], warning
    assert set_aside_files(tmp_path) == ["state.sqlite.bad-20231114T221320Z"]
    snaps.save()
    again = Store("n1", reactor.seconds)
    assert snapshot.read(path, again, 0.0) == len(store) == 21
    assert again.digest() == store.digest()


class Turns(InlineThreads):
    """InlineThreads whose zero-delay calls wait in a list: `turn` runs the first of them."""

    def __init__(self) -> None:
        super().__init__()
        self.soon: list[Callable[[], None]] = []

    def callLater(self, delay: float, f: Callable[..., Any], *a: Any, **kw: Any) -> Any:
        if delay:
            return super().callLater(delay, f, *a, **kw)
        self.soon.append(lambda: f(*a, **kw))
        return task.Clock().callLater(0, lambda: None)  # a delayed call nobody runs

    def turn(self) -> None:
        self.soon.pop(0)()


def test_a_write_of_many_rows_makes_them_a_few_thousand_per_reactor_turn(tmp_path: Path, monkeypatch: Any) -> None:
    """A save of more than `ROWS_PER_TURN` keys (the whole store, after a damaged file) makes
    its rows `ROWS_PER_TURN` per reactor turn, then writes them; a key changed meanwhile
    is written by the next save."""
    reactor = Turns()
    store = Store("n1", reactor.seconds)
    snaps = Snapshotter(store, tmp_path, reactor, lambda: 0.0)
    count = 3 * snapshot.ROWS_PER_TURN + 5
    for i in range(count):
        store.put(f"admin/vs/k{i}", {"state": "enabled"})
    made: list[int] = []
    original = snapshot.row

    def counting(record: Any, wall: float, local: float) -> Any:
        made.append(1)
        return original(record, wall, local)

    monkeypatch.setattr(snapshot, "row", counting)
    saving = snaps.save()
    assert made == [] and reactor.ran == 0
    per_turn = []
    while reactor.soon:
        before = len(made)
        reactor.turn()
        per_turn.append(len(made) - before)
        if per_turn[-1] and len(per_turn) == 2:
            store.put("admin/vs/k0", {"state": "drain"})
    assert max(per_turn) == snapshot.ROWS_PER_TURN and sum(per_turn) == count
    assert saving.called and reactor.ran == 1
    snaps.save()
    again = Store("n1", reactor.seconds)
    assert snapshot.read(tmp_path / snapshot.FILENAME, again, 0.0) == count
    assert again.get("admin/vs/k0").value == {"state": "drain"}  # type: ignore[union-attr]


class HeldThreads(InlineThreads):
    """A 'thread pool' that holds each write until the test releases it (a write in progress)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[Callable[[], None]] = []

    def callInThreadWithCallback(
        self, on_result: Callable[[bool, Any], None], f: Callable[..., Any], *a: Any, **kw: Any
    ) -> None:
        self.held.append(lambda: InlineThreads.callInThreadWithCallback(self, on_result, f, *a, **kw))

    def release(self) -> None:
        self.held.pop(0)()


def on_disk(path: Path) -> dict[str, Any]:
    restored = Store("other", lambda: 0.0)
    snapshot.read(path / snapshot.FILENAME, restored, 0.0)
    return {r.key: r.value for r in restored.all_records()}


def test_flush_writes_at_once_and_fires_once_on_disk(tmp_path: Path) -> None:
    """What an acknowledged admin write waits for: no interval to wait out, and the answer
    comes only after the write is done."""
    reactor = HeldThreads()
    store = Store("n1", reactor.seconds)
    snaps = Snapshotter(store, tmp_path, reactor, lambda: 0.0, interval=60)
    snaps.startService()
    store.put("admin/vs/a", {"state": "disabled"})
    results: list[bool] = []
    snaps.flush().addCallback(results.append)
    assert results == []  # not before the write is done
    reactor.release()
    assert results == [True]
    assert on_disk(tmp_path) == {"admin/vs/a": {"state": "disabled"}}


def test_flush_waits_for_the_write_in_progress_then_writes_what_changed_since(tmp_path: Path) -> None:
    reactor = HeldThreads()
    store = Store("n1", reactor.seconds)
    snaps = Snapshotter(store, tmp_path, reactor, lambda: 0.0, interval=5)
    snaps.startService()
    store.put("admin/vs/a", {"state": "drain"})
    reactor.clock.advance(5)  # the periodic write of "drain" begins, and is held
    store.put("admin/vs/a", {"state": "disabled"})
    results: list[bool] = []
    snaps.flush().addCallback(results.append)
    reactor.release()  # "drain" on disk; the flush then writes "disabled"
    assert results == []
    assert on_disk(tmp_path) == {"admin/vs/a": {"state": "drain"}}
    reactor.release()
    assert results == [True]
    assert on_disk(tmp_path) == {"admin/vs/a": {"state": "disabled"}}


def test_flush_with_nothing_changed_writes_nothing(tmp_path: Path) -> None:
    reactor = InlineThreads()
    snaps = Snapshotter(Store("n1", reactor.seconds), tmp_path, reactor, lambda: 0.0, interval=5)
    results: list[bool] = []
    snaps.flush().addCallback(results.append)
    assert results == [True] and reactor.ran == 0


def test_flush_says_when_the_write_failed(tmp_path: Path) -> None:
    reactor = InlineThreads()
    store = Store("n1", reactor.seconds)
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    snaps = Snapshotter(store, blocked, reactor, lambda: 0.0, interval=5)
    store.put("a", 1)
    results: list[bool] = []
    snaps.flush().addCallback(results.append)
    assert results == [False]
    store.put("b", 1)
    assert snaps._dirty == {"a", "b"}  # kept for the next write


# --- records their kind does not allow (state/schema.py) ------------------------------------


def add_rows(path: Path, rows: list[tuple[Any, ...]]) -> None:
    db = sqlite3.connect(path)
    db.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()


def test_a_record_its_kind_does_not_allow_is_skipped_and_the_rest_loaded(tmp_path: Path) -> None:
    """Issue 13: a verdict [] under the node's own origin came back from the snapshot at every
    restart. Rows whose records their kind refuses (that one, an admin state "x", an invented
    kind) are skipped, each with a warning, and counted; every other record loads, and the
    file is not set aside for them."""
    path, store = saved(tmp_path)
    add_rows(
        path,
        [
            ("obs/vs/vs-m/zz", "[]", 5, 0, "n1", 1_700_000_090.0),
            ("admin/vs/vs-a", '"x"', 5, 0, "n2", None),
            ("zz/0", json.dumps({"x": "y" * 50_000}), 5, 0, "n2", 1_700_000_000.0 + 10 * 365 * 86400),
        ],
    )
    snaps, loaded_store, loaded, lines = load_logged(tmp_path)
    assert loaded == 20 and loaded_store.digest() == store.digest()
    assert set_aside_files(tmp_path) == [] and path.exists()
    skipped = [line for line in lines if "skipped a record this version does not take" in line]
    assert len(skipped) == 3, lines
    assert any("'obs/vs/vs-m/zz' is a verdict of 'zz' written by 'n1'" in line for line in skipped), skipped
    assert any("'admin/vs/vs-a': the value is not a mapping" in line for line in skipped), skipped
    assert any("'zz/0' is of no known kind" in line for line in skipped), skipped
    assert any("skipped 3 records of" in line for line in lines), lines
    assert snaps.refused == {("obs", "origin"): 1, ("admin", "value"): 1, ("unknown", "kind"): 1}


def test_records_beyond_an_origins_cap_are_skipped_on_loading(tmp_path: Path, monkeypatch: Any) -> None:
    """A file holding more of one origin's records of a kind than the cap loads the cap of
    them; the rest are skipped and counted."""
    saved(tmp_path)  # 20 admin records of n1
    monkeypatch.setitem(schema.KINDS, "admin", dataclasses.replace(schema.KINDS["admin"], max_records=15))
    snaps, store, loaded, _ = load_logged(tmp_path)
    assert loaded == 15 and store.held_by("n1", "admin") == 15
    assert snaps.refused == {("admin", "count"): 5}


def test_a_bad_record_in_the_part_read_later_is_skipped(tmp_path: Path) -> None:
    """The path records are read in slices after the node answers (state/loading.py): a bad
    one among them is skipped too, the others of its slice are taken."""
    good = {
        "rtt": 1000,
        "last_rtt": 1000,
        "hops": 0,
        "completion": 10000,
        "protocol": "udp",
        "failures": 0,
        "window": "1",
        "by": "n1",
    }
    rows: list[snapshot.Row] = [
        (f"path/192.0.2.{i}/DC1", json.dumps(good if i != 7 else {**good, "rtt": "fast"}), 5, i, "n1", 3600.0)
        for i in range(1, 21)
    ]
    path = tmp_path / snapshot.FILENAME
    snapshot.write(path, rows, "n1")
    refused: Counter[tuple[str, str]] = Counter()
    reader = snapshot.Reader.open(path, "path/", lambda: 0.0, refused)
    assert reader is not None
    store = Store("n1", lambda: 0.0)
    reader.first(store)
    taken = 0
    while not reader.done:
        taken += reader.next_slice(store, 10)
    reader.close()
    assert taken == 19 and store.raw("path/192.0.2.7/DC1") is None
    assert refused == {("path", "value"): 1}


# --- symbolic links are never followed ----------------------------------------------------------


@pytest.mark.parametrize("name", ["state.sqlite", "state.sqlite-journal", "state.sqlite-wal"])
@pytest.mark.parametrize("dangling", [True, False])
def test_a_symbolic_link_in_the_state_directory_is_never_followed(tmp_path: Path, name: str, dangling: bool) -> None:
    """Issue 13: a dangling link at the snapshot's place made the writer create an SQLite
    file at its target (mode 0644); a link to a file got that file chmod-ed. Now a link at
    the snapshot's or its journal's place is neither read, written, created nor chmod-ed
    through: loading and writing set it aside (renamed, the link itself) with a warning,
    and the next write makes a regular 0600 file that loads the whole store."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    if not dangling:
        target.write_bytes(b"precious")
        target.chmod(0o644)
    (state / name).symlink_to(target)
    reactor = InlineThreads()
    store = Store("n1", reactor.seconds)
    snaps = Snapshotter(store, state, reactor, lambda: 1_700_000_000.0)
    with capturedLogs() as events:
        assert snaps.load() == 0
        store.put("admin/vs/a", {"state": "drain"})
        snaps.save()  # (a link left behind by the load, if any, is set aside here)
        snaps.save()
    warnings = [formatEvent(e) for e in events if "symbolic link" in formatEvent(e)]
    assert warnings and "moved it aside" in warnings[0], [formatEvent(e) for e in events]
    if dangling:
        assert not os.path.lexists(target)
    else:
        assert target.read_bytes() == b"precious" and stat.S_IMODE(target.stat().st_mode) == 0o644
    moved = [p for p in state.iterdir() if p.is_symlink()]
    assert [p.name.startswith("state.sqlite.bad-") for p in moved] == [True]
    path = state / snapshot.FILENAME
    assert not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) == 0o600
    again = Store("n1", reactor.seconds)
    assert snapshot.read(path, again, 0.0) == 1 and again.get("admin/vs/a") is not None


def test_a_link_where_a_file_is_set_aside_is_replaced_not_followed(tmp_path: Path) -> None:
    """Setting aside renames the entries themselves: a link at the name a file is moved to
    is not written through."""
    state = tmp_path / "state"
    state.mkdir()
    target = tmp_path / "elsewhere"
    target.write_bytes(b"precious")
    path = state / snapshot.FILENAME
    path.write_bytes(b"garbage" * 100)
    (state / "state.sqlite.bad-20231114T221320Z").symlink_to(target)
    moved = snapshot.set_aside(path, 1_700_000_000.0)
    assert moved.name == "state.sqlite.bad-20231114T221320Z-2"
    assert target.read_bytes() == b"precious" and moved.read_bytes() == b"garbage" * 100
