"""The store's compact forms (path and persistence values) and its expiry queue.

A compact value must be indistinguishable from the dict it stands for everywhere a value
is read or leaves the process (the API, the wire, the snapshot, the digests); a value of
another shape must be kept exactly as it came. The expiry queue must end every record at
its own end, however often the record was rewritten.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.proximity.table import PathValue, from_record, updated
from gtmcluster.state import keys, snapshot
from gtmcluster.state.expiry import ExpiryQueue
from gtmcluster.state.persistence import PersistKey, PersistValue, StorePersistence
from gtmcluster.state.record import BUCKETS, Record, Version, bucket_of
from gtmcluster.state.store import Store
from gtmcluster.sync import codec


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def path_value() -> dict[str, object]:
    return updated(None, True, 12_345, 7, "icmp", "gtm-1", "192.0.2.9", "DC1").value()


def test_a_path_value_is_kept_compact_and_reads_as_its_dict() -> None:
    store = Store("gtm-1", Clock())
    plain = path_value()
    record = store.put(keys.path("192.0.2.9", "DC1"), plain)
    assert type(record.value) is PathValue
    assert record.value == plain and dict(record.value) == plain
    assert record.value["rtt"] == 12_345 and len(record.value) == 8
    info = from_record(record, 1000.0)
    assert info is not None and info.rtt_us == 12_345 and info.hops == 7 and info.by == "gtm-1"


def test_values_of_another_shape_are_kept_exactly() -> None:
    """A path key holding a value a newer version shapes otherwise (a ninth field, a float)
    is neither compacted nor altered, so it is relayed and saved as it came."""
    store = Store("gtm-1", Clock())
    for odd in ({**path_value(), "jitter": 3}, {**path_value(), "rtt": 1.5}, {"rtt": 1}):
        record = store.put(keys.path("192.0.2.9", "DC2"), odd)
        assert type(record.value) is dict and record.value == odd


def test_compact_values_travel_and_persist_as_their_dicts(tmp_path: Path) -> None:
    """Wire (codec) and disk (snapshot) carry the plain dict; the receiving store holds the
    compact form again and both stores have the same digest."""
    clock = Clock()
    store = Store("gtm-1", clock)
    store.put(keys.path("192.0.2.9", "DC1"), path_value(), ttl=600)
    persist_key = PersistKey("www.example.", 1, "10.0.0.0/24")
    store.put(keys.persist(persist_key), {"pool": "p1", "members": ["a", "b"]}, ttl=60)

    batch, _ = next(codec.batches(store.all_records(), now=1000.0))
    on_wire = {entry[0]: entry[1] for entry in json.loads(batch)}
    assert on_wire[keys.path("192.0.2.9", "DC1")] == path_value()
    assert on_wire[keys.persist(persist_key)] == {"pool": "p1", "members": ["a", "b"]}

    received = Store("gtm-2", clock)
    for record in codec.decode(batch, now=1000.0):
        received.merge(record)
    assert received.digest() == store.digest()
    assert type(received.get(keys.path("192.0.2.9", "DC1")).value) is PathValue  # type: ignore[union-attr]

    snapshot.write(tmp_path / snapshot.FILENAME, snapshot.rows(store, 50_000.0, 1000.0), "gtm-1")
    restored = Store("gtm-1", clock)
    assert snapshot.read(tmp_path / snapshot.FILENAME, restored, 50_000.0) == 2
    assert restored.digest() == store.digest()
    held = StorePersistence(restored).get(persist_key, 1000.0)
    assert held is not None and held.pool == "p1" and held.members == ("a", "b")
    assert type(restored.get(keys.persist(persist_key)).value) is PersistValue  # type: ignore[union-attr]


def test_a_persistence_value_hands_out_copies() -> None:
    """Reading "members" gives a new list each time, as a copy of the dict would: a caller
    changing it cannot change the record (or the other records sharing the value)."""
    store = Store("gtm-1", Clock())
    a = store.put("persist/w/1/10.0.0.0/24", {"pool": "p", "members": ["x"]}).value
    b = store.put("persist/w/1/10.0.1.0/24", {"pool": "p", "members": ["x"]}).value
    assert a is b  # shared
    members = a["members"]
    members.append("y")
    assert b["members"] == ["x"] and b == {"pool": "p", "members": ["x"]}


def test_a_rewritten_record_ends_at_its_latest_end_not_its_first() -> None:
    clock = Clock(0.0)
    store = Store("gtm-1", clock)
    store.put("k", 1, ttl=100)  # ends at 100
    clock.now = 90.0
    store.put("k", 2, ttl=100)  # now ends at 190
    clock.now = 150.0
    assert store.expire() == [] and store.get("k") is not None
    clock.now = 190.0
    assert [r.value for r in store.expire()] == [2] and store.get("k") is None


def test_a_record_shortened_by_a_rewrite_ends_early() -> None:
    clock = Clock(0.0)
    store = Store("gtm-1", clock)
    store.put("k", 1, ttl=1000)
    store.put("k", 2, ttl=5)
    clock.now = 6.0
    assert [r.value for r in store.expire()] == [2]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abcde"), st.one_of(st.none(), st.floats(1, 500)), st.floats(0, 50)),
        max_size=40,
    )
)
def test_expiry_matches_a_plain_scan(writes: list[tuple[str, float | None, float]]) -> None:
    """Whatever the writes (keys rewritten with longer, shorter or no TTLs, time moving on
    between them), after each `expire` the store holds exactly the records a full scan
    says are alive, and each expired record is reported once, soonest first."""
    clock = Clock(0.0)
    store = Store("gtm-1", clock)
    for key, ttl, step in writes:
        store.put(key, 1, ttl=ttl)
        clock.now += step
        dead = store.expire()
        ends = [r.expires() for r in dead]
        assert ends == sorted(ends)  # type: ignore[type-var]
        assert all(not r.live(clock.now) for r in dead)
        assert all(r.live(clock.now) for r in store.all_records())


def test_the_queue_gives_keys_in_order_across_windows() -> None:
    ends = {"a": 130.0, "b": 10.0, "c": 65.0, "d": 61.0}
    queue = ExpiryQueue(ends.get, width=60.0)
    for key, at in ends.items():
        queue.add(key, at)
    assert queue.due(5.0) == []
    assert queue.due(70.0) == ["b", "d", "c"]
    assert queue.due(1000.0) == ["a"]
    assert len(queue) == 0


def test_a_window_opens_a_step_at_a_time_ahead_of_its_start() -> None:
    """The keys of the next window move into the exact heap `step` at a time, from `lead`
    seconds before it begins (a minute of a big member's verdicts, 50,000 keys, moved at
    once held the reactor 50 ms); what is left moves when it begins; none comes out early."""
    ends = {f"k{i}": 125.0 + i / 100 for i in range(10)}
    queue = ExpiryQueue(ends.get, width=60.0, step=3, lead=30.0)
    for key, at in ends.items():
        queue.add(key, at)
    assert queue.due(50.0) == [] and len(queue._soon) == 0  # window 2 begins at 120: not yet
    assert queue.due(91.0) == [] and len(queue._soon) == 3
    assert queue.due(92.0) == [] and len(queue._soon) == 6
    ends["k0"] = 300.0  # rewritten with a later end: it moves on when met
    assert queue.due(125.02) == ["k1", "k2"]  # the rest moved when the window began
    assert queue.due(126.0) == [f"k{i}" for i in range(3, 10)]
    assert queue.due(299.0) == [] and queue.due(300.0) == ["k0"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from("abcdefgh"), st.floats(0, 400), st.floats(0, 40)), max_size=60),
)
def test_a_queue_opening_windows_in_steps_gives_what_is_due(writes: list[tuple[str, float, float]]) -> None:
    """Keys written with ends anywhere, time moving on between writes and `due` called at
    each step (windows of 60 s opened 2 keys at a time, 30 s ahead), each key given out
    handled as the store does: every key whose end has come is given out by then."""
    ends: dict[str, float] = {}
    queue = ExpiryQueue(ends.get, width=60.0, step=2, lead=30.0)
    now = 0.0
    for key, at, step in writes:
        ends[key] = max(at, now)
        queue.add(key, ends[key])
        now += step
        for k in queue.due(now):  # what Store.expire does with each
            if k not in ends:
                continue  # given out before: nothing is held at it
            if ends[k] > now:
                queue.add(k, ends[k])  # rewritten since with a later end
            else:
                del ends[k]
        assert all(end > now for end in ends.values())


def test_record_versions_compare_as_versions() -> None:
    old = Record("k", 1, Version(1000, 0, "b"), None, 0.0)
    new = Record("k", 1, Version(1000, 1, "a"), None, 0.0)
    assert new.newer_than(old) and not old.newer_than(new)
    assert old.same_version(Record("k", 2, Version(1000, 0, "b"), None, 5.0))
    assert new.version == Version(1000, 1, "a")


KEYS = [
    "obs/vs/www1/gtm-1",
    "obs/vs/www1/gtm-2",
    "obs/vs/www10/gtm-1",
    "obs/link/isp1/gtm-1",
    "admin/vs/www1",
    "path/192.0.2.1/DC1",
    "path/192.0.2.1/DC2",
    "path/192.0.2.10/DC1",
    "persist/w/1/10.0.0.0/24",
    "plain",
]
PREFIXES = ["obs/", "obs/vs/www1/", "obs/vs/", "obs/link/", "admin/", "path/", "path/192.0.2.1/", "persist/", "", "p"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(KEYS),
            st.sampled_from(["put", "delete", "merge-old", "merge-new"]),
            st.one_of(st.none(), st.floats(1, 100)),
            st.floats(0, 30),
        ),
        max_size=40,
    )
)
def test_scans_and_kind_counts_match_a_plain_walk(ops: list[tuple[str, str, float | None, float]]) -> None:
    """Scans of one kind look only at that kind's records (an index); whatever the writes,
    merges, deletions and expiries, they find exactly what a walk over every record finds,
    and the counts by kind, and by origin and kind (what the caps of state/schema.py count,
    also when a record of one origin replaces another's), are the records held."""
    clock = Clock(0.0)
    store = Store("gtm-1", clock)
    for key, op, ttl, step in ops:
        value = path_value() if key.startswith("path/") else {"up": True}
        if op == "put":
            store.put(key, value, ttl=ttl)
        elif op == "delete":
            store.delete(key)
        else:
            wall = 1 if op == "merge-old" else int(clock.now * 1000) + 10**9
            store.merge(Record(key, value, Version(wall, 0, "gtm-2"), ttl, clock.now))
        clock.now += step
        store.expire()
        held = list(store.all_records())
        for prefix in PREFIXES:
            walked = {r.key for r in held if r.key.startswith(prefix) and r.value is not None and r.live(clock.now)}
            assert {r.key for r in store.scan(prefix)} == walked, prefix
        kinds: dict[str, int] = {}
        owned: dict[tuple[str, str], int] = {}
        for r in held:
            kind = r.key.partition("/")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
            owned[r.origin, kind] = owned.get((r.origin, kind), 0) + 1
        assert store.kinds() == kinds
        for origin in ("gtm-1", "gtm-2"):
            for kind in {k.partition("/")[0] for k in KEYS}:
                assert store.held_by(origin, kind) == owned.get((origin, kind), 0), (origin, kind)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 30),
            st.sampled_from(["gtm-1", "gtm-2", "gtm-3"]),
            st.one_of(st.none(), st.floats(1, 60)),
            st.floats(0, 20),
        ),
        max_size=60,
    )
)
def test_bucket_listings_match_a_plain_walk(ops: list[tuple[int, str, float | None, float]]) -> None:
    """Anti-entropy lists (key, version) of one origin's records in a few buckets from a
    list of keys per bucket; whatever the writes, expiries and keys added again after
    expiring, a listing holds exactly what a walk over every record finds, once each."""
    clock = Clock(0.0)
    store = Store("gtm-1", clock)
    for n, (i, origin, ttl, step) in enumerate(ops):
        key = f"path/192.0.2.{i}/DC1"
        store.merge(Record(key, {"n": n}, Version(10**6 + n, 0, origin), ttl, clock.now))
        clock.now += step
        store.expire()
    every = list(range(BUCKETS))
    for origin in ("gtm-1", "gtm-2", "gtm-3"):
        walked: dict[int, list[tuple[str, Version]]] = {b: [] for b in every}
        for r in store.all_records():
            if r.origin == origin:
                walked[bucket_of(r.key)].append((r.key, r.version))
        assert store.listing(origin, set(every)) == {b: sorted(entries) for b, entries in walked.items()}
