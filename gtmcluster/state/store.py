"""The node's record store: every piece of shared state is a record here (`state.record`).

The store keeps the newest version per key. This node writes only with its
own origin; the sync group (a later component) merges records from other nodes with
`merge`, the same rule.

Keys are paths: ``obs/vs/<vs>/<observer>`` (one node's health verdict on a virtual
server), ``obs/link/<link>/<observer>``, ``admin/vs/<vs>`` (an operator's admin state),
``held/vs/<vs>`` (a server kept out after going down, for manual resume). A value of
None is a deletion (a tombstone), kept until its TTL ends so that it wins over older
copies of the record arriving later.

For anti-entropy the store keeps, per origin and per bucket of keys, the XOR of a hash of
each record's (key, version): two stores hold the same records exactly when these agree
(up to hash collisions), and a difference narrows down to a bucket whose (key, version)
listing is small. The live-state digest is the count and XOR over all of them.

Kinds of record that DNS clients cause (persistence records, paths to LDNSes) can be
bounded (`bound`): the store keeps at most `limit` of that kind, those of greatest
version, and drops the others locally, without a tombstone. A version is the same on
every member (unlike when a record arrived), so members that have seen the same records
hold the same ones and their digests agree: a record one member evicted ranks below
`limit` records that member holds, so when a peer offers it again (anti-entropy pulls
what differs) it is refused, and the peer evicts it too once it has those newer records.
Listeners hear of an evicted record as of an expired one: the record as it was, but with
its life ended at the eviction (so it is not live, and is not relayed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from twisted.logger import Logger

from gtmcluster.state.bounds import Bound, VersionOrder, order_width
from gtmcluster.state.expiry import ExpiryQueue
from gtmcluster.state.record import (
    BUCKETS,
    MAX_LOGICAL,
    TOMBSTONE_TTL,
    OriginSummary,
    Record,
    Version,
    bucket_of,
    canonical,
    fingerprint_of,
    kind_of,
)
from gtmcluster.state.values import compact, numerous

log = Logger()

#: the record table is split in this many dicts (a power of two), by key hash
SHARDS = 64


class _Records:
    """Records by key, in `SHARDS` dicts: a dict grows by copying itself whole, which at
    millions of records stops the reactor for hundreds of milliseconds (650 ms at 2.8M keys
    under load); a shard grows by a sixty-fourth of that."""

    __slots__ = ("shards",)

    def __init__(self) -> None:
        self.shards: list[dict[str, Record]] = [{} for _ in range(SHARDS)]

    def get(self, key: str) -> Record | None:
        return self.shards[hash(key) & (SHARDS - 1)].get(key)

    def __setitem__(self, key: str, record: Record) -> None:
        self.shards[hash(key) & (SHARDS - 1)][key] = record

    def __delitem__(self, key: str) -> None:
        del self.shards[hash(key) & (SHARDS - 1)][key]

    def __contains__(self, key: str) -> bool:
        return key in self.shards[hash(key) & (SHARDS - 1)]

    def __len__(self) -> int:
        return sum(len(shard) for shard in self.shards)

    def values(self) -> Iterator[Record]:
        """Every record (the store must not change meanwhile)."""
        for shard in self.shards:
            yield from shard.values()


Listener = Callable[[Record], None]


class Store:
    """Records by key, newest version wins; listeners hear of every change."""

    def __init__(self, origin: str, clock: Callable[[], float]):
        self.origin = origin
        self.clock = clock
        self._records = _Records()
        self._shards = self._records.shards  # (read directly where every nanosecond counts)
        self._count = 0
        self._last = Version(0, 0, origin)
        self._listeners: list[Listener] = []
        #: told the keys `load` changed (its records are told to no record listener)
        self.bulk_listeners: list[Callable[[list[str]], object]] = []
        self.last_change = clock()  # when a record last changed (for the digest's age)
        # origin -> bucket -> XOR of fingerprints; origin -> record count
        self._buckets: dict[str, list[int]] = {}
        self._counts: dict[str, int] = {}
        self._xor = 0
        #: kind (a key's first segment: "path", "obs", ...) -> records held, tombstones too
        self._kinds: dict[str, int] = {}
        #: (origin, kind) -> records held, tombstones too (see `held_by`)
        self._owned: dict[tuple[str, str], int] = {}
        #: kind -> key -> record, for every kind but the numerous ones (paths, persistence),
        #: so that scanning a few health verdicts does not walk a million paths
        self._index: dict[str, dict[str, Record]] = {}
        #: parent (a key up to its last "/": "obs/vs/www1/") -> key -> record, for the same
        #: kinds: one subject's records (every observer's verdict on one server) are read
        #: without looking at any other subject's (see `children`)
        self._children: dict[str, dict[str, Record]] = {}
        #: bucket -> the keys held in it (and a few no longer held: `_remove` counts those
        #: and drops them when they are half the list; a key removed and added again may
        #: be there twice), so a listing of a few buckets need not walk every record
        self._bucket_keys: list[list[str]] = [[] for _ in range(BUCKETS)]
        self._bucket_dead = [0] * BUCKETS
        #: every key whose record has a TTL, by when it ends (see `_replace` and `expire`)
        self._expiries = ExpiryQueue(self._expiry_of)
        #: while a list, every `get` notes the key and the record held (the decision cache
        #: learns what a decision read)
        self.reads: list[tuple[str, Record | None]] | None = None
        #: while set (a snapshot still loading, see `state.loading`), called with a key the
        #: store does not hold before `get` or `merge` looks at it, so that the part of the
        #: state not yet loaded is brought in (with `load`) before anything reads or
        #: overwrites it; it must not raise
        self.missing: Callable[[str], None] | None = None
        #: kind -> its bound (see `bound`)
        self._bounds: dict[str, Bound] = {}

    def _account(self, record: Record, sign: int, bucket: int) -> None:
        """Add (sign=1) or remove (sign=-1) a record from the digests."""
        origin = record.origin
        fp = fingerprint_of(record.key, record.wall_ms, record.logical, origin)
        buckets = self._buckets.get(origin)
        if buckets is None:
            buckets = self._buckets[origin] = [0] * BUCKETS
        buckets[bucket] ^= fp
        self._xor ^= fp
        count = self._counts.get(origin, 0) + sign
        if count:
            self._counts[origin] = count
        else:
            del self._counts[origin]
            del self._buckets[origin]

    def _replace(self, record: Record) -> None:
        key = record.key
        bucket = bucket_of(key)
        old = self._records.get(key)
        if old is not None:
            self._account(old, -1, bucket)
        self._records[key] = record
        self._account(record, 1, bucket)
        kind = kind_of(key)
        if old is None:
            self._count += 1
            self._kinds[kind] = self._kinds.get(kind, 0) + 1
            self._bucket_keys[bucket].append(key)
            owned = self._owned  # (inline `_own`: a full table loads millions this way)
            pair = (record.origin, kind)
            owned[pair] = owned.get(pair, 0) + 1
        elif old.origin != record.origin:
            self._own(old.origin, kind, -1)
            self._own(record.origin, kind, 1)
        bound = self._bounds.get(kind)
        if bound is not None:
            if old is not None:
                bound.order.dropped(old.wall_ms)
            bound.order.add(key, record.wall_ms)
        if not numerous(kind):
            index = self._index.get(kind)
            if index is None:
                index = self._index[kind] = {}
            if old is not None:  # (to the end: the index is in the order of writes, see `newest`)
                del index[key]
            index[key] = record
            parent = key[: key.rfind("/") + 1]
            siblings = self._children.get(parent)
            if siblings is None:
                siblings = self._children[parent] = {}
            siblings[key] = record
        # A key whose record has a TTL is always in the expiry queue, at or before its end.
        # The queue already holds the key when the record replaced ends no later than this one.
        expires = record.expires()
        if expires is not None:
            held = None if old is None else old.expires()
            if held is None or expires < held:
                self._expiries.add(record.key, expires)

    def _own(self, origin: str, kind: str, change: int) -> None:
        owned = self._owned
        pair = (origin, kind)
        count = owned.get(pair, 0) + change
        if count:
            owned[pair] = count
        else:
            del owned[pair]

    def held_by(self, origin: str, kind: str) -> int:
        """Records of *kind* written by *origin* held (tombstones too): what the per-origin
        caps of `state.schema` count."""
        return self._owned.get((origin, kind), 0)

    def _expiry_of(self, key: str) -> float | None:
        record = self._records.get(key)
        return None if record is None else record.expires()

    def _next_version(self) -> Version:
        wall = max(int(self.clock() * 1000), self._last.wall_ms)
        logical = self._last.logical + 1 if wall == self._last.wall_ms else 0
        if logical > MAX_LOGICAL:
            # The counter is full (a peer's version at the limit moved our clock there):
            # the next millisecond instead, so no version of ours goes beyond the limit.
            wall, logical = wall + 1, 0
        self._last = Version(wall, logical, self.origin)
        return self._last

    def put(self, key: str, value: Any, ttl: float | None = None) -> Record:
        """Write *key* as this node, with a version newer than anything seen (so, in a
        bounded kind, it stays and the record of least version goes when over the bound)."""
        record = Record(key, compact(key, value), self._next_version(), ttl, self.clock())
        self._replace(record)
        self._notify(record)
        self._evict_over(kind_of(key))
        return record

    def delete(self, key: str) -> Record | None:
        """Delete *key* (a tombstone that wins over older copies), if it is present."""
        if self.get(key) is None:
            return None
        return self.put(key, None, TOMBSTONE_TTL)

    def merge(self, record: Record) -> bool:
        """Keep *record* if it is newer than ours; True if it changed the store.

        Versions are unique per write, so equal versions normally mean the same record.
        Should two differ in value anyway (a node that lost its state and its clock went
        back), the larger value (in canonical JSON) wins, so merging stays commutative.
        """
        taken = self._take(record, self.missing)
        if taken is None:
            return False
        self._notify(taken)
        self._evict_over(kind_of(taken.key))
        return True

    def load(self, records: Iterable[Record]) -> int:
        """Merge *records* as `merge` does, in bulk and silently: no listener hears of them
        (they are the node's own saved state, read back at start: not news to relay, save
        or react to one by one). Returns how many changed the store."""
        keys = []
        for record in records:
            taken = self._take(record, None)
            if taken is not None:
                keys.append(taken.key)
                self._evict_over(kind_of(taken.key))  # (evictions are told: they are endings)
        if keys:
            self.last_change = self.clock()
            for listener in self.bulk_listeners:
                listener(keys)
        return len(keys)

    def witness(self, wall_ms: int, logical: int) -> None:
        """Move this node's clock past the version (*wall_ms*, *logical*), as merging a
        record of that version would (a snapshot's versions, before all of it is loaded)."""
        if wall_ms > self._last.wall_ms or (wall_ms == self._last.wall_ms and logical > self._last.logical):
            self._last = Version(wall_ms, logical, self.origin)

    def _take(self, record: Record, missing: Callable[[str], None] | None) -> Record | None:
        """Hold *record* if it is newer than ours (the rule of `merge`): the record held
        now (its value in compact form), or None when ours stays. *missing* is asked first
        when no record is held at its key (see `missing`)."""
        mine = self._records.get(record.key)
        if mine is None and missing is not None:
            missing(record.key)
            mine = self._records.get(record.key)
        if mine is not None:
            if mine.newer_than(record):
                return None
            if mine.same_version(record) and (
                mine.value == record.value or canonical(mine.value) >= canonical(record.value)
            ):
                return None
        kind = kind_of(record.key)
        bound = self._bounds.get(kind)
        if bound is not None and mine is None and not self._admits(bound, kind, record):
            bound.refused += 1
            return None
        if record.wall_ms > self._last.wall_ms or (
            record.wall_ms == self._last.wall_ms and record.logical > self._last.logical
        ):
            self._last = Version(record.wall_ms, record.logical, self.origin)
        value = compact(record.key, record.value)
        if value is not record.value:
            record = Record(record.key, value, record.version, record.ttl, record.born)
        self._replace(record)
        return record

    # --- bounds on kinds of record -------------------------------------------------------

    def bound(self, kind: str, limit: int | None) -> list[Record]:
        """Keep at most *limit* records of *kind* (None: no bound), those of greatest
        version; returns the records evicted now to meet it (listeners hear of each)."""
        if limit is None:
            self._bounds.pop(kind, None)
            return []
        bound = self._bounds.get(kind)
        if bound is None:
            bound = self._bounds[kind] = Bound(limit, VersionOrder(self._version_key, order_width(kind)))
            prefix = kind + "/"
            for record in self._records.values():
                if record.key.startswith(prefix):
                    bound.order.add(record.key, record.wall_ms)
        bound.limit = limit
        return self._evict_over(kind)

    def bounds(self) -> dict[str, Bound]:
        """The bounded kinds and their bounds (for metrics)."""
        return dict(self._bounds)

    def _version_key(self, key: str) -> tuple[int, int, str] | None:
        record = self._records.get(key)
        return None if record is None else (record.wall_ms, record.logical, record.origin)

    def _admits(self, bound: Bound, kind: str, record: Record) -> bool:
        """Whether a record new to the store ranks among the *limit* of greatest version."""
        if self._kinds.get(kind, 0) < bound.limit:
            return True
        least = bound.order.least()
        if least is None:
            return True
        other = self._records.get(least)
        assert other is not None  # (least() names a key held)
        # by version, then key: two keys of one version (a node whose clock went back)
        # still rank the same way on every member
        return (record.wall_ms, record.logical, record.origin, record.key) > (
            other.wall_ms,
            other.logical,
            other.origin,
            other.key,
        )

    def _evict_over(self, kind: str) -> list[Record]:
        """Drop records of *kind* of least version while it holds more than its bound."""
        bound = self._bounds.get(kind)
        if bound is None:
            return []
        evicted = []
        while self._kinds.get(kind, 0) > bound.limit:
            key = bound.order.least()
            if key is None:
                break
            record = self._records.get(key)
            assert record is not None
            self._remove(record)
            expires = record.expires()
            if expires is not None:
                self._expiries.forget(expires)
            bound.evicted += 1
            evicted.append(record)
        if evicted:
            now = self.clock()
            for record in evicted:
                # told as ended now, as an expired record is told: not live, not relayed
                ended = Record(record.key, record.value, record.version, 0.0, now)
                self._notify(ended)
        return evicted

    def version_of(self, key: str) -> Version | None:
        """The version held at *key* (live or not, deleted or not)."""
        record = self._records.get(key)
        return None if record is None else record.version

    def raw(self, key: str) -> Record | None:
        """The record held at *key*, tombstones included (for replication)."""
        return self._shards[hash(key) & (SHARDS - 1)].get(key)

    def get(self, key: str) -> Record | None:
        """The live, non-deleted record at *key*."""
        record = self._shards[hash(key) & (SHARDS - 1)].get(key)
        if record is None and self.missing is not None:
            self.missing(key)
            record = self._records.get(key)
        if self.reads is not None:
            self.reads.append((key, record))
        if record is None or record.value is None or not record.live(self.clock()):
            return None
        return record

    def children(self, parent: str) -> list[Record]:
        """Live, non-deleted records directly under *parent* (which ends with "/"): the keys
        ``parent + NAME`` with no further "/" in NAME, such as every observer's verdict on
        one server under "obs/vs/www1/". The cost is the number of such records, whatever
        else the store holds. Only for kinds that are not numerous (see `scan`)."""
        held = self._children.get(parent)
        if not held:
            return []
        now = self.clock()
        return [r for r in held.values() if r.value is not None and (r.ttl is None or now < r.born + r.ttl)]

    def scan(self, prefix: str) -> Iterator[Record]:
        """Live, non-deleted records whose key starts with *prefix*.

        A prefix within one kind ("admin/vs/") looks at that kind's records only, unless the
        kind is a numerous one: then, as for a prefix of no kind, at every record (and the
        store must not change while the scan runs)."""
        now = self.clock()
        kind, slash, _ = prefix.partition("/")
        held: Iterable[Record]
        if slash and not numerous(kind):
            held = list(self._index.get(kind, {}).values())
        else:
            held = self._records.values()  # millions: a caller takes what it needs (islice)
        for record in held:
            if record.key.startswith(prefix) and record.value is not None and record.live(now):
                yield record

    def newest(self, kind: str, limit: int, skip: Callable[[Record], bool] | None = None) -> list[Record]:
        """Up to *limit* live, non-deleted records of *kind* (one the store indexes: not a
        numerous one, see `scan`), the most recently written on this node first, passing
        over those *skip* says. The cost is the records looked at (those returned, skipped,
        deleted or ended), not what the kind holds."""
        out: list[Record] = []
        index = self._index.get(kind)
        if not index or limit <= 0:
            return out
        now = self.clock()
        for record in reversed(index.values()):
            if record.value is None or not record.live(now) or (skip is not None and skip(record)):
                continue
            out.append(record)
            if len(out) >= limit:
                break
        return out

    def kinds(self) -> dict[str, int]:
        """Records held (tombstones too) by kind, the key's first segment."""
        return dict(self._kinds)

    def expire(self) -> list[Record]:
        """Drop records whose TTL has ended; listeners hear of each (as it was)."""
        now = self.clock()
        dead = []
        for key in self._expiries.due(now):
            record = self._records.get(key)
            expires = None if record is None else record.expires()
            if record is None or expires is None:
                continue  # gone, or rewritten without a TTL
            if expires > now:
                self._expiries.add(key, expires)  # rewritten since with a later end
                continue
            self._remove(record)
            dead.append(record)
        dead.sort(key=lambda r: (r.expires(), r.key))
        for record in dead:
            if record.value is not None:
                self._notify(record)
        return dead

    def _remove(self, record: Record) -> None:
        key = record.key
        bucket = bucket_of(key)
        del self._records[key]
        self._count -= 1
        self._account(record, -1, bucket)
        # The key stays in its bucket's list until the list is mostly keys no longer held.
        self._bucket_dead[bucket] += 1
        if self._bucket_dead[bucket] * 2 > len(self._bucket_keys[bucket]):
            self._bucket_keys[bucket] = list(dict.fromkeys(k for k in self._bucket_keys[bucket] if k in self._records))
            self._bucket_dead[bucket] = 0
        kind = kind_of(key)
        self._own(record.origin, kind, -1)
        bound = self._bounds.get(kind)
        if bound is not None:
            bound.order.dropped(record.wall_ms)
        count = self._kinds[kind] - 1
        if count:
            self._kinds[kind] = count
        else:
            del self._kinds[kind]
        index = self._index.get(kind)
        if index is not None:
            index.pop(key, None)
            if not index:
                del self._index[kind]
            parent = key[: key.rfind("/") + 1]
            siblings = self._children.get(parent)
            if siblings is not None:
                siblings.pop(key, None)
                if not siblings:
                    del self._children[parent]

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _notify(self, record: Record) -> None:
        self.last_change = self.clock()
        for listener in self._listeners:
            try:
                listener(record)
            except Exception:
                log.failure("a store listener failed on {key}", key=record.key)

    # --- anti-entropy and digests -------------------------------------------------------

    def digest(self) -> str:
        """The held state in one word: equal on two nodes that hold the same records."""
        return f"{self._count}-{self._xor:016x}"

    def summaries(self) -> dict[str, OriginSummary]:
        out: dict[str, OriginSummary] = {}
        for origin, count in self._counts.items():
            xor = 0
            for value in self._buckets[origin]:
                xor ^= value
            out[origin] = OriginSummary(count, xor)
        return out

    def buckets(self, origin: str) -> list[int]:
        return list(self._buckets.get(origin, [0] * BUCKETS))

    def listing(self, origin: str, buckets: set[int]) -> dict[int, list[tuple[str, Version]]]:
        """(key, version) of every record of *origin* in each of *buckets*, by key."""
        out: dict[int, list[tuple[str, Version]]] = {}
        records = self._records
        for bucket in buckets:
            entries = out[bucket] = []
            if not 0 <= bucket < BUCKETS:
                continue
            for key in dict.fromkeys(self._bucket_keys[bucket]):
                record = records.get(key)
                if record is not None and record.origin == origin:
                    entries.append((key, record.version))
            entries.sort()
        return out

    def records_of(self, origin: str) -> Iterator[Record]:
        """Every record (tombstones too) written by *origin*, bucket by bucket: a caller may
        take them a few at a time while the store changes (each record as it is when reached;
        one added meanwhile may or may not come)."""
        records = self._records
        for keys in self._bucket_keys:
            for key in dict.fromkeys(keys):  # a copy, without the doubles
                record = records.get(key)
                if record is not None and record.origin == origin:
                    yield record

    def held_of_kind(self, kind: str) -> list[Record]:
        """Every record of *kind*, one that is not numerous (see `scan`), as the digests
        count them: tombstones, and records expired but not yet dropped, included."""
        return list(self._index.get(kind, {}).values())

    def all_records(self) -> Iterator[Record]:
        return iter(list(self._records.values()))

    def __len__(self) -> int:
        return self._count
