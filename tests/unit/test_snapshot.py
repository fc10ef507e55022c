"""The SQLite snapshot: incremental writes, wall-clock expiry, restore."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twisted.internet import task

from gtmcluster.state import snapshot
from gtmcluster.state.snapshot import Snapshotter
from gtmcluster.state.store import Store


class InlineThreads:
    """A reactor stand-in whose 'thread pool' runs work at once (for deterministic tests)."""

    def __init__(self) -> None:
        self.clock = task.Clock()
        self.ran = 0

    def getThreadPool(self) -> InlineThreads:
        return self

    def callInThreadWithCallback(
        self, on_result: Callable[[bool, Any], None], f: Callable[..., Any], *a: Any, **kw: Any
    ) -> None:
        self.ran += 1
        try:
            result = f(*a, **kw)
        except Exception as e:  # delivered as a failure, as the real pool does
            on_result(False, e)
        else:
            on_result(True, result)

    def callFromThread(self, f: Callable[..., Any], *a: Any, **kw: Any) -> None:
        f(*a, **kw)

    def seconds(self) -> float:
        return self.clock.seconds()

    def callLater(self, *a: Any, **kw: Any) -> Any:
        return self.clock.callLater(*a, **kw)


def test_changes_are_written_and_restored(tmp_path: Path) -> None:
    """Puts, overwrites and deletions since the last write reach disk; a new store loads
    exactly the same state (equal digests); the file is private (0600)."""
    reactor = InlineThreads()
    store = Store("n1", reactor.seconds)
    snaps = Snapshotter(store, tmp_path, reactor, lambda: 10_000.0, interval=5)
    for i in range(50):
        store.put(f"k/{i}", {"i": i})
    snaps.save()
    store.put("k/0", "changed")
    store.delete("k/1")
    store.put("short", 1, ttl=30)
    snaps.save()
    restored = Store("n1", reactor.seconds)
    assert snapshot.read(tmp_path / snapshot.FILENAME, restored, 10_000.0) == 51
    assert restored.digest() == store.digest()
    assert restored.get("k/0").value == "changed"  # type: ignore[union-attr]
    assert restored.get("k/1") is None
    assert stat.S_IMODE(os.stat(tmp_path / snapshot.FILENAME).st_mode) == 0o600


def test_only_changed_keys_are_written(tmp_path: Path, monkeypatch: Any) -> None:
    """A save writes the keys changed since the previous one, not the whole table."""
    reactor = InlineThreads()
    store = Store("n1", reactor.seconds)
    snaps = Snapshotter(store, tmp_path, reactor, lambda: 0.0)
    for i in range(1000):
        store.put(f"k/{i}", i)
    snaps.save()
    written: list[int] = []
    original = snapshot.write

    def counting(path: Path, data: list[Any], node: str, deleted: Any = None, full: bool = True) -> int:
        written.append(len(data) + len(deleted or ()))
        return original(path, data, node, deleted, full)

    monkeypatch.setattr(snapshot, "write", counting)  # a spy: it still writes
    store.put("k/5", "new")
    snaps.save()
    assert written == [1]


def test_expiry_is_wall_clock_time_on_disk(tmp_path: Path) -> None:
    """A record with 100 s left, restored 60 s (wall clock) later, has 40 s left; one
    restored after its end is dropped."""
    reactor = InlineThreads()
    store = Store("n1", reactor.seconds)
    store.put("persist/x", {"pool": "p", "members": ["v"]}, ttl=100)
    snapshot.write(tmp_path / "s.sqlite", snapshot.rows(store, 5000.0, reactor.seconds()), "n1")
    later = Store("n1", reactor.seconds)
    assert snapshot.read(tmp_path / "s.sqlite", later, 5060.0) == 1
    assert later.raw("persist/x").remaining(reactor.seconds()) == 40  # type: ignore[union-attr]
    too_late = Store("n1", reactor.seconds)
    assert snapshot.read(tmp_path / "s.sqlite", too_late, 5101.0) == 0


def test_periodic_save_and_save_at_stop(tmp_path: Path) -> None:
    """The service writes every interval when something changed, and once more at stop."""
    reactor = InlineThreads()
    store = Store("n1", reactor.seconds)
    snaps = Snapshotter(store, tmp_path, reactor, lambda: 0.0, interval=5)
    snaps.startService()
    store.put("a", 1)
    reactor.clock.advance(5)
    assert reactor.ran == 1
    reactor.clock.advance(5)
    assert reactor.ran == 1  # nothing changed: no write
    store.put("b", 2)
    snaps.stopService()
    restored = Store("n1", reactor.seconds)
    assert snapshot.read(tmp_path / snapshot.FILENAME, restored, 0.0) == 2
