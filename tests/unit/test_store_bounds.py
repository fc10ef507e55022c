"""Bounded kinds of record: at most `limit` held, those of greatest version, alike on every
member whatever the order records arrive in; evictions told to listeners as endings."""

from __future__ import annotations

import gc
import random
import tracemalloc
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.state.bounds import VersionOrder
from gtmcluster.state.record import Record, Version
from gtmcluster.state.store import Store


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def record(key: str, wall_ms: int, origin: str = "gtm-b", logical: int = 0, ttl: float | None = 600.0) -> Record:
    return Record(key, {"pool": "p", "members": ["m"]}, Version(wall_ms, logical, origin), ttl, 1000.0)


def held(store: Store, prefix: str = "persist/") -> dict[str, Version]:
    return {r.key: r.version for r in store.all_records() if r.key.startswith(prefix)}


def test_a_bounded_kind_keeps_its_newest_records_and_counts_the_evicted() -> None:
    """Own writes past the bound evict the record of least version; other kinds are left
    alone; each eviction is counted."""
    clock = Clock()
    store = Store("gtm-a", clock)
    store.bound("persist", 3)
    store.put("obs/vs/web/gtm-a", {"up": True})
    for i in range(10):
        clock.now += 1
        store.put(f"persist/w/1/10.0.{i}.0/24", {"pool": "p", "members": ["m"]}, ttl=600)
    assert sorted(held(store)) == [f"persist/w/1/10.0.{i}.0/24" for i in (7, 8, 9)]
    assert store.get("obs/vs/web/gtm-a") is not None
    assert store.kinds() == {"persist": 3, "obs": 1}
    assert store.bounds()["persist"].evicted == 7


def test_a_rewrite_makes_a_record_the_newest() -> None:
    """A record written again (a persistence refresh) has a new version, so it outlives
    records written after its first version."""
    clock = Clock()
    store = Store("gtm-a", clock)
    store.bound("persist", 2)
    store.put("persist/a", 1)
    clock.now += 1
    store.put("persist/b", 1)
    clock.now += 1
    store.put("persist/a", 2)  # refreshed
    clock.now += 1
    store.put("persist/c", 1)
    assert sorted(held(store)) == ["persist/a", "persist/c"]


def test_listeners_hear_an_eviction_as_an_ending_not_as_news() -> None:
    """An evicted record is told to listeners as it was but no longer live (as an expiry
    is told), so a replicator does not relay it and a snapshot deletes it."""
    clock = Clock()
    store = Store("gtm-a", clock)
    store.bound("persist", 1)
    heard: list[Record] = []
    store.subscribe(heard.append)
    first = store.put("persist/a", 1, ttl=600)
    clock.now += 5
    second = store.put("persist/b", 1, ttl=600)
    assert [r.key for r in heard] == ["persist/a", "persist/b", "persist/a"]
    ended = heard[-1]
    assert ended.version == first.version and ended.value == first.value
    assert not ended.live(clock.now) and second.live(clock.now)
    assert store.raw("persist/a") is None


def test_a_merged_record_older_than_every_held_one_is_refused() -> None:
    """A full bounded kind refuses a record that would be the first to go (a peer offering
    what this node evicted), and takes a newer one in place of its oldest."""
    store = Store("gtm-a", Clock())
    store.bound("persist", 2)
    assert store.merge(record("persist/x", 5_000))
    assert store.merge(record("persist/y", 6_000))
    assert not store.merge(record("persist/old", 4_000))
    assert store.raw("persist/old") is None
    assert store.merge(record("persist/new", 7_000))
    assert sorted(held(store)) == ["persist/new", "persist/y"]
    bound = store.bounds()["persist"]
    assert (bound.evicted, bound.refused) == (1, 1)


def test_a_newer_version_of_a_held_key_is_taken_when_full() -> None:
    """Replacing a held key does not grow the kind: nothing is evicted."""
    store = Store("gtm-a", Clock())
    store.bound("persist", 2)
    store.merge(record("persist/x", 5_000))
    store.merge(record("persist/y", 6_000))
    assert store.merge(record("persist/x", 8_000))
    assert held(store) == {"persist/x": Version(8_000, 0, "gtm-b"), "persist/y": Version(6_000, 0, "gtm-b")}


def test_lowering_a_bound_evicts_at_once_and_raising_it_admits_again() -> None:
    clock = Clock()
    store = Store("gtm-a", clock)
    for i in range(6):
        clock.now += 1
        store.put(f"persist/{i}", i, ttl=600)
    assert len(store.bound("persist", 4)) == 2  # bounding a kind that is already over
    assert sorted(held(store)) == [f"persist/{i}" for i in (2, 3, 4, 5)]
    evicted = store.bound("persist", 2)
    assert sorted(r.key for r in evicted) == ["persist/2", "persist/3"]
    store.bound("persist", 3)
    assert store.merge(record("persist/1", 1_001_000, origin="gtm-a"))
    store.bound("persist", None)
    for i in range(10, 20):
        store.put(f"persist/{i}", i)
    assert len(held(store)) == 13


def test_expired_records_free_their_place() -> None:
    clock = Clock()
    store = Store("gtm-a", clock)
    store.bound("persist", 2)
    store.put("persist/short", 1, ttl=10)
    store.put("persist/long", 1, ttl=1000)
    clock.now += 11
    store.expire()
    assert store.merge(record("persist/older-than-both", 1))  # there is room again
    assert sorted(held(store)) == ["persist/long", "persist/older-than-both"]


# -- every member alike -------------------------------------------------------------------

ORIGINS = ["gtm-a", "gtm-b", "gtm-c"]

#: records as members write them: a version is one write, so it fixes the value
records = st.builds(
    lambda key, wall, logical, origin, deleted: Record(
        f"persist/{key}",
        None if deleted else zlib.crc32(repr((key, wall, logical, origin)).encode()) % 7,
        Version(wall, logical, origin),
        None,
        0.0,
    ),
    key=st.integers(0, 20),
    wall=st.integers(1, 3_000),
    logical=st.integers(0, 2),
    origin=st.sampled_from(ORIGINS),
    deleted=st.booleans(),
)


def newest_per_key_then_top(batch: list[Record], limit: int) -> dict[str, Version]:
    """The model: of the newest version of each key, the *limit* greatest (by version,
    then key)."""
    newest: dict[str, Record] = {}
    for r in batch:
        held_r = newest.get(r.key)
        if held_r is None or r.newer_than(held_r):
            newest[r.key] = r
    top = sorted(newest.values(), key=lambda r: (r.version, r.key), reverse=True)[:limit]
    return {r.key: r.version for r in top}


@settings(max_examples=300)
@given(st.lists(records, max_size=60), st.integers(1, 8), st.randoms(use_true_random=False))
def test_what_a_bounded_store_holds_does_not_depend_on_the_order_records_arrive_in(
    batch: list[Record], limit: int, rng: random.Random
) -> None:
    """Merged in any order, with duplicates, a bounded kind ends holding the same records:
    the `limit` of greatest version among the newest of each key. So members that have seen
    the same records hold the same ones, and their digests agree."""
    stores = []
    for _ in range(3):
        arrivals = batch + rng.sample(batch, len(batch) // 2)
        rng.shuffle(arrivals)
        store = Store("observer", lambda: 0.0)
        store.bound("persist", limit)
        for r in arrivals:
            store.merge(r)
        stores.append(store)
    expected = newest_per_key_then_top(batch, limit)
    for store in stores:
        assert held(store) == expected
    assert len({store.digest() for store in stores}) == 1


@settings(max_examples=100)
@given(st.lists(records, min_size=1, max_size=60), st.integers(1, 8), st.randoms(use_true_random=False))
def test_members_exchanging_what_differs_end_with_equal_digests(
    batch: list[Record], limit: int, rng: random.Random
) -> None:
    """Records delivered to random members, then each member merging what every other one
    holds (what anti-entropy does), leaves every member with the same records."""
    stores = []
    for name in ORIGINS:
        store = Store(name, lambda: 0.0)
        store.bound("persist", limit)
        stores.append(store)
    for r in batch:
        stores[rng.randrange(len(stores))].merge(r)
    for _ in range(2):
        for receiver in stores:
            for sender in stores:
                for r in list(sender.all_records()):
                    receiver.merge(r)
    digests = {store.digest() for store in stores}
    assert len(digests) == 1
    # what they agree on is the bound's rule applied to what any of them kept
    assert all(len(held(store)) <= limit for store in stores)


# -- the version order --------------------------------------------------------------------


def test_the_version_order_stays_near_the_size_of_the_kind_under_rewrites() -> None:
    """Keys rewritten over and over (paths re-measured, persistence refreshed) leave stale
    entries behind; bins half stale are compacted, so the order holds at most about twice
    the records."""
    clock = Clock()
    store = Store("gtm-a", clock)
    store.bound("persist", 1000)
    for round_ in range(50):
        for i in range(100):
            clock.now += 0.05
            store.put(f"persist/{i}", round_)
    order = store.bounds()["persist"].order
    assert len(held(store)) == 100
    assert len(order) <= 2 * 100 + 50


def test_a_bounded_store_does_not_grow_with_what_is_flooded_through_it() -> None:
    """Records written and evicted by the ten thousand (a flood of new clients, each with a
    TTL of an hour) leave nothing behind: not in the version order, the expiry queue or
    the anti-entropy buckets. The memory held after 20,000 more is what it was."""
    clock = Clock()
    store = Store("gtm-a", clock)
    store.bound("persist", 500)

    def flood(start: int, count: int) -> None:
        for i in range(start, start + count):
            clock.now += 0.001
            store.put(f"persist/w/1/{10 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}.0/24", {"pool": "p"}, ttl=3600)

    tracemalloc.start()  # (before the first flood: what it allocates and later frees is seen)
    try:
        flood(0, 5_000)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        flood(5_000, 20_000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert store.kinds() == {"persist": 500}
    assert store.bounds()["persist"].evicted == 24_500
    # 20,000 more records of ~300 bytes each would be 6 MB
    assert grown < 60_000, grown


def test_the_least_version_is_found_across_bins_and_late_arrivals() -> None:
    versions: dict[str, tuple[int, int, str]] = {}
    order = VersionOrder(versions.get, width_ms=1000)

    def put(key: str, wall: int, logical: int = 0, origin: str = "a") -> None:
        old = versions.get(key)
        versions[key] = (wall, logical, origin)
        if old is not None:
            order.dropped(old[0])
        order.add(key, wall)

    put("k1", 5_500)
    put("k2", 5_100)
    put("k3", 9_000)
    assert order.least() == "k2"  # the front is bin 5 now
    put("k4", 5_050)  # into the sorted front
    assert order.least() == "k4"
    put("k5", 2_000)  # older than the front's bin: it comes first
    assert order.least() == "k5"
    del versions["k5"]
    order.dropped(2_000)
    put("k4", 9_500)  # rewritten: its old entry is stale
    assert order.least() == "k2"
    for key in ("k2", "k1", "k3", "k4"):
        assert order.least() == key
        order.dropped(versions.pop(key)[0])
    assert order.least() is None


@given(
    st.lists(
        st.tuples(st.sampled_from(["put", "drop", "least"]), st.integers(0, 30), st.integers(0, 5_000)),
        max_size=200,
    ),
    st.integers(2, 6),
)
def test_with_bins_split_the_least_version_is_always_the_least_held(
    steps: list[tuple[str, int, int]], split_at: int
) -> None:
    """However bins split (here after a few keys), `least` names the key of least version
    among those held, as a sort of everything would."""
    versions: dict[str, tuple[int, int, str]] = {}
    order = VersionOrder(versions.get, width_ms=1000, split_at=split_at)
    logical = 0
    for action, n, wall in steps:
        key = f"k{n}"
        if action == "put":
            logical += 1
            old = versions.get(key)
            versions[key] = (wall, logical, "a")
            if old is not None:
                order.dropped(old[0])
            order.add(key, wall)
        elif action == "drop" and key in versions:
            order.dropped(versions.pop(key)[0])
        expected = min(versions, key=lambda k: (*versions[k], k)) if versions else None
        assert order.least() == expected


def test_a_minute_of_many_versions_is_never_sorted_whole() -> None:
    """A table written at thousands of records a second puts a million versions in one
    minute's bin; the bin splits as it grows, so finding the least version reads about
    `split_at` keys, not the bin (a 4.2 s stall at a million paths)."""
    versions: dict[str, tuple[int, int, str]] = {}
    looked: list[str] = []

    def version_of(key: str) -> tuple[int, int, str] | None:
        looked.append(key)
        return versions.get(key)

    order = VersionOrder(version_of, width_ms=60_000, split_at=256)
    for i in range(50_000):
        key = f"path/{i}"
        versions[key] = (1_000_000 + i, 0, "a")  # 50,000 versions within one minute
        order.add(key, 1_000_000 + i)
    looked.clear()
    assert order.least() == "path/0"
    assert len(looked) < 4 * 256, len(looked)
    for i in range(10):  # evictions take the front in order
        order.dropped(versions.pop(f"path/{i}")[0])
        assert order.least() == f"path/{i + 1}"
