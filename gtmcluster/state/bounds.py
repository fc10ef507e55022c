"""The keys of one kind of record in version order, cheaply: which record a bound evicts.

A bounded kind (see `Store.bound`) keeps its `limit` records of greatest version, so the
store must find the record of least version of that kind, over and over, among up to
millions. A heap entry per record costs about a hundred bytes; here, as in `expiry`, keys
are kept coarsely by the wall-clock part of their version: a list of bare keys per bin of
`width_ms` milliseconds (8 bytes a key), a bin that grows past `SPLIT_AT` keys split into
narrower ones. Only the lowest bin is ever sorted exactly (its keys with their versions,
the "front"), when the first eviction reaches it; evictions then take the front in order,
so each costs about O(log n) however large the kind, and no sort more than about
`SPLIT_AT` keys however fast the records were written.

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


#: a bin holding more keys than this is split into `FANOUT` narrower bins (when it is at
#: least `FANOUT` milliseconds wide), so sorting the lowest bin never costs more than about
#: this many keys: a table written at thousands of records a second (a benchmark's, a bulk
#: import) holds a million versions in one minute, and sorting them took 4.2 s of reactor
SPLIT_AT = 2048
FANOUT = 16

#: a bin: the index of its base bin (wall_ms // width), then its index within each split
#: bin above it; tuples compare in version order, and the bins held never overlap
BinKey = tuple[int, ...]


class VersionOrder:
    def __init__(self, version_of: Callable[[str], VersionKey | None], width_ms: int, split_at: int = SPLIT_AT):
        self._version_of = version_of  # the version of the record held at a key now
        self._width = width_ms
        self._split_at = split_at
        self._bins: dict[BinKey, list[str]] = {}  # bin -> keys whose version fell in it when added
        self._heap: list[BinKey] = []  # the bins of _bins (and some no longer there)
        self._dead: dict[BinKey, int] = {}  # bin -> entries known to be stale
        self._split: set[BinKey] = set()  # bins split into narrower ones
        # the lowest bin, taken out of _bins and sorted: (version..., key) from _pos on
        self._front_bin: BinKey | None = None
        self._front: list[tuple[int, int, str, str]] = []
        self._pos = 0

    def _bin(self, wall_ms: int) -> tuple[BinKey, int]:
        """The bin holding versions of wall-clock part *wall_ms*, and its width (ms)."""
        width = self._width
        base = wall_ms // width
        b: BinKey = (base,)
        if not self._split:
            return b, width
        start = base * width
        while b in self._split:
            j = (wall_ms - start) * FANOUT // width
            low, high = start + j * width // FANOUT, start + (j + 1) * width // FANOUT
            b, start, width = (*b, j), low, high - low
        return b, width

    def add(self, key: str, wall_ms: int) -> None:
        """*key* now holds a record whose version has wall-clock part *wall_ms*."""
        b, width = self._bin(wall_ms)
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
        if len(keys) > self._split_at and width >= FANOUT:
            self._split_bin(b)

    def _split_bin(self, b: BinKey) -> None:
        """Spread the live keys of bin *b* over `FANOUT` narrower bins (a cost of its size,
        once per `split_at` keys added to it)."""
        keys = self._live(b, self._bins.pop(b))
        self._dead.pop(b, None)
        self._split.add(b)
        for key in keys:
            version = self._version_of(key)
            assert version is not None
            sub, _ = self._bin(version[0])
            held = self._bins.get(sub)
            if held is None:
                held = self._bins[sub] = []
                heapq.heappush(self._heap, sub)
            held.append(key)

    def dropped(self, wall_ms: int) -> None:
        """A record whose version has wall-clock part *wall_ms* left its key (replaced or
        removed): its entry is stale now."""
        b, _ = self._bin(wall_ms)
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

    def _live(self, b: BinKey, keys: list[str]) -> list[str]:
        out = []
        for key in dict.fromkeys(keys):
            version = self._version_of(key)
            if version is not None and self._bin(version[0])[0] == b:
                out.append(key)
        return out

    def _sort_lowest(self) -> bool:
        """Make the lowest bin with a live key the front; False when there is none."""
        while self._heap:
            b = heapq.heappop(self._heap)
            keys = self._bins.pop(b, None)
            self._dead.pop(b, None)
            if keys is None:
                continue  # compacted away, split, or a second heap entry of one bin
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
