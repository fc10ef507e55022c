"""The keys of one kind of record in version order, cheaply: which record a bound evicts.

A bounded kind (see `Store.bound`) keeps its `limit` records of greatest version, so the
store must find the record of least version of that kind, over and over, among up to
millions. A heap entry per record costs about a hundred bytes; here, as in `expiry`, keys
are kept coarsely by the wall-clock part of their version: a list of bare keys per bin of
`width_ms` milliseconds (8 bytes a key). Only the lowest bin is ever sorted exactly (its
keys with their versions, the "front"), when the first eviction reaches it; evictions then
take the front in order, so each costs about O(log n) however large the kind.

An entry is a reminder of a key, not a copy of its record: a key rewritten since (its
record now of a later version, in a later bin) or removed leaves a stale entry, which is
skipped when met (the current version is asked of the store, `version_of`). The store
says when a record leaves (`dropped`), so that a bin that is half stale entries is
compacted, and the entries stay within about twice the records held.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from dataclasses import dataclass

#: a version as ordered: (wall-clock milliseconds, logical counter, origin)
VersionKey = tuple[int, int, str]

#: bins of the version order, by kind: kinds written slowly (paths: a few a second, kept
#: for weeks) in wide bins, others in narrow ones (a flood of persistence records writes
#: thousands a second, and the lowest bin is sorted whole)
ORDER_WIDTH_MS = {"path": 60_000}
DEFAULT_ORDER_WIDTH_MS = 1000


def order_width(kind: str) -> int:
    return ORDER_WIDTH_MS.get(kind, DEFAULT_ORDER_WIDTH_MS)


class VersionOrder:
    def __init__(self, version_of: Callable[[str], VersionKey | None], width_ms: int):
        self._version_of = version_of  # the version of the record held at a key now
        self._width = width_ms
        self._bins: dict[int, list[str]] = {}  # bin -> keys whose version fell in it when added
        self._heap: list[int] = []  # the bins of _bins (and some no longer there)
        self._dead: dict[int, int] = {}  # bin -> entries known to be stale
        # the lowest bin, taken out of _bins and sorted: (version..., key) from _pos on
        self._front_bin: int | None = None
        self._front: list[tuple[int, int, str, str]] = []
        self._pos = 0

    def add(self, key: str, wall_ms: int) -> None:
        """*key* now holds a record whose version has wall-clock part *wall_ms*."""
        b = wall_ms // self._width
        front = self._front_bin
        if front is not None:
            if b == front:
                version = self._version_of(key)
                if version is not None:
                    bisect.insort(self._front, (*version, key), lo=self._pos)
                return
            if b < front:
                self._unsort_front()  # an older record arrived: its bin comes first now
        keys = self._bins.get(b)
        if keys is None:
            keys = self._bins[b] = []
            heapq.heappush(self._heap, b)
        keys.append(key)

    def dropped(self, wall_ms: int) -> None:
        """A record whose version has wall-clock part *wall_ms* left its key (replaced or
        removed): its entry is stale now."""
        b = wall_ms // self._width
        keys = self._bins.get(b)
        if keys is None:
            return  # the front's bin (stale entries are skipped there) or compacted away
        dead = self._dead.get(b, 0) + 1
        if dead * 2 <= len(keys):
            self._dead[b] = dead
            return
        live = self._live(b, keys)
        self._dead.pop(b, None)
        if live:
            self._bins[b] = live
        else:
            del self._bins[b]  # (its heap entry is skipped when met)

    def least(self) -> str | None:
        """The key of the record of least version, or None when there is none."""
        while True:
            if self._front_bin is None and not self._sort_lowest():
                return None
            front = self._front
            while self._pos < len(front):
                wall_ms, logical, origin, key = front[self._pos]
                if self._version_of(key) == (wall_ms, logical, origin):
                    return key
                self._pos += 1  # rewritten or removed since
            self._front_bin, self._front, self._pos = None, [], 0

    def __len__(self) -> int:
        """Entries held (stale ones too): about the records of the kind, at most twice."""
        return sum(len(keys) for keys in self._bins.values()) + len(self._front) - self._pos

    def _live(self, b: int, keys: list[str]) -> list[str]:
        width = self._width
        out = []
        for key in dict.fromkeys(keys):
            version = self._version_of(key)
            if version is not None and version[0] // width == b:
                out.append(key)
        return out

    def _sort_lowest(self) -> bool:
        """Make the lowest bin with a live key the front; False when there is none."""
        while self._heap:
            b = heapq.heappop(self._heap)
            keys = self._bins.pop(b, None)
            self._dead.pop(b, None)
            if keys is None:
                continue  # compacted away, or a second heap entry of one bin
            entries = []
            for key in self._live(b, keys):
                version = self._version_of(key)
                assert version is not None
                entries.append((*version, key))
            if entries:
                entries.sort()
                self._front_bin, self._front, self._pos = b, entries, 0
                return True
        return False

    def _unsort_front(self) -> None:
        """Put the front's keys back into their bin (a lower bin has come)."""
        b = self._front_bin
        assert b is not None
        keys = [entry[3] for entry in self._front[self._pos :]]
        self._front_bin, self._front, self._pos = None, [], 0
        live = self._live(b, keys)
        if live:
            self._bins[b] = live
            heapq.heappush(self._heap, b)


@dataclass(slots=True)
class Bound:
    """At most `limit` records of one kind; counts of those evicted and refused for it."""

    limit: int
    order: VersionOrder
    evicted: int = 0  # records held, dropped for newer ones
    refused: int = 0  # records offered (merged) that ranked below every record held
