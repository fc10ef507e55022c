"""The node's record store: every piece of shared state is a record here.

A record has a key, a JSON-able value, the node that wrote it (origin), a version and an
optional TTL. Versions are hybrid logical clock stamps (wall-clock milliseconds, a logical
counter, the origin), so they order writes made on different nodes and never go backwards
on one node. The store keeps the newest version per key. This node writes only with its
own origin; the sync group (a later component) merges records from other nodes with
`merge`, the same rule.

Keys are paths: ``obs/vs/<vs>/<observer>`` (one node's health verdict on a virtual
server), ``obs/link/<link>/<observer>``, ``admin/vs/<vs>`` (an operator's admin state),
``held/vs/<vs>`` (a server kept out after going down, for manual resume). A value of
None is a deletion (a tombstone), kept until its TTL ends so that it wins over older
copies of the record arriving later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from twisted.logger import Logger

log = Logger()

TOMBSTONE_TTL = 3600.0


@dataclass(frozen=True, slots=True, order=True)
class Version:
    wall_ms: int
    logical: int
    origin: str


@dataclass(frozen=True, slots=True)
class Record:
    key: str
    value: Any  # JSON-able; None marks a deletion
    version: Version
    ttl: float | None  # seconds of life, counted from `born`
    born: float  # this node's clock when the record's life began

    @property
    def origin(self) -> str:
        return self.version.origin

    def live(self, now: float) -> bool:
        return self.ttl is None or now < self.born + self.ttl

    def expires(self) -> float | None:
        return None if self.ttl is None else self.born + self.ttl


Listener = Callable[[Record], None]


class Store:
    """Records by key, newest version wins; listeners hear of every change."""

    def __init__(self, origin: str, clock: Callable[[], float]):
        self.origin = origin
        self.clock = clock
        self._records: dict[str, Record] = {}
        self._last = Version(0, 0, origin)
        self._listeners: list[Listener] = []

    def _next_version(self) -> Version:
        wall = max(int(self.clock() * 1000), self._last.wall_ms)
        logical = self._last.logical + 1 if wall == self._last.wall_ms else 0
        self._last = Version(wall, logical, self.origin)
        return self._last

    def put(self, key: str, value: Any, ttl: float | None = None) -> Record:
        """Write *key* as this node, with a version newer than anything seen."""
        record = Record(key, value, self._next_version(), ttl, self.clock())
        self._records[key] = record
        self._notify(record)
        return record

    def delete(self, key: str) -> Record | None:
        """Delete *key* (a tombstone that wins over older copies), if it is present."""
        if self.get(key) is None:
            return None
        return self.put(key, None, TOMBSTONE_TTL)

    def merge(self, record: Record) -> bool:
        """Keep *record* if it is newer than ours; True if it changed the store."""
        mine = self._records.get(record.key)
        if mine is not None and mine.version >= record.version:
            return False
        if record.version.wall_ms > self._last.wall_ms or (
            record.version.wall_ms == self._last.wall_ms and record.version.logical > self._last.logical
        ):
            self._last = Version(record.version.wall_ms, record.version.logical, self.origin)
        self._records[record.key] = record
        self._notify(record)
        return True

    def get(self, key: str) -> Record | None:
        """The live, non-deleted record at *key*."""
        record = self._records.get(key)
        if record is None or record.value is None or not record.live(self.clock()):
            return None
        return record

    def scan(self, prefix: str) -> Iterator[Record]:
        """Live, non-deleted records whose key starts with *prefix*."""
        now = self.clock()
        for key, record in self._records.items():
            if key.startswith(prefix) and record.value is not None and record.live(now):
                yield record

    def expire(self) -> list[Record]:
        """Drop records whose TTL has ended; listeners hear of each (as it was)."""
        now = self.clock()
        dead = [r for r in self._records.values() if not r.live(now)]
        for record in dead:
            del self._records[record.key]
        for record in dead:
            if record.value is not None:
                self._notify(record)
        return dead

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _notify(self, record: Record) -> None:
        for listener in self._listeners:
            try:
                listener(record)
            except Exception:
                log.failure("a store listener failed on {key}", key=record.key)

    def __len__(self) -> int:
        return len(self._records)
