"""The record store: versions, newest wins, TTL, tombstones, listeners."""

from __future__ import annotations

from gtmcluster.state.record import MAX_LOGICAL, Record, Version
from gtmcluster.state.store import Store


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_versions_increase_even_when_the_clock_stands_still_or_goes_back() -> None:
    """Local writes get strictly increasing versions (hybrid logical clock)."""
    clock = Clock()
    store = Store("n1", clock)
    a = store.put("k", 1)
    b = store.put("k", 2)
    clock.now -= 100  # the wall clock steps back
    c = store.put("k", 3)
    assert a.version < b.version < c.version
    assert store.get("k") is not None and store.get("k").value == 3  # type: ignore[union-attr]


def test_merge_keeps_the_newest_version_whatever_the_order() -> None:
    """Merging is order-independent: the highest version wins; older copies are ignored."""
    old = Record("k", "old", Version(1000, 0, "n2"), None, 0.0)
    new = Record("k", "new", Version(2000, 0, "n3"), None, 0.0)
    for order in ([old, new], [new, old], [new, new, old]):
        store = Store("n1", Clock())
        for record in order:
            store.merge(record)
        assert store.get("k").value == "new"  # type: ignore[union-attr]


def test_merge_moves_the_local_clock_past_what_it_saw() -> None:
    """After merging a record from the future, local writes still win over it."""
    clock = Clock(1.0)
    store = Store("n1", clock)
    store.merge(Record("k", "remote", Version(9_000_000, 5, "n2"), None, 0.0))
    mine = store.put("k", "local")
    assert mine.version > Version(9_000_000, 5, "n2")
    assert store.get("k").value == "local"  # type: ignore[union-attr]


def test_ttl_expiry_and_listeners() -> None:
    """A record lives for its TTL; expire() drops it and tells listeners."""
    clock = Clock()
    store = Store("n1", clock)
    heard: list[str] = []
    store.subscribe(lambda r: heard.append(r.key))
    store.put("short", 1, ttl=10)
    store.put("long", 1)
    clock.now += 11
    assert store.get("short") is None
    assert [r.key for r in store.expire()] == ["short"]
    assert heard == ["short", "long", "short"]
    assert [r.key for r in store.scan("")] == ["long"]


def test_delete_is_a_tombstone_that_beats_older_copies() -> None:
    """A deleted key stays deleted when an older copy of the record arrives later."""
    clock = Clock()
    store = Store("n1", clock)
    first = store.put("admin/vs/a", {"state": "disabled"})
    store.delete("admin/vs/a")
    assert store.get("admin/vs/a") is None
    assert not store.merge(first)
    assert store.get("admin/vs/a") is None


def test_a_failing_listener_does_not_stop_the_others() -> None:
    """Listeners are isolated from each other's errors."""
    store = Store("n1", Clock())
    heard: list[str] = []

    def broken(_: Record) -> None:
        raise RuntimeError("listener bug")

    store.subscribe(broken)
    store.subscribe(lambda r: heard.append(r.key))
    store.put("k", 1)
    assert heard == ["k"]


def test_a_full_logical_counter_moves_to_the_next_millisecond() -> None:
    """A peer's version ahead of our clock with the largest logical counter moves this node's
    clock there; its next version is the next millisecond with counter 0, never a counter
    beyond the limit (which every peer would refuse)."""
    store = Store("a", lambda: 100.0)
    ahead = 100_000 + 5000
    assert store.merge(Record("k", 1, Version(ahead, MAX_LOGICAL, "b"), None, 100.0))
    record = store.put("mine", 2)
    assert (record.wall_ms, record.logical) == (ahead + 1, 0)
    assert store.put("mine", 3).version > record.version
