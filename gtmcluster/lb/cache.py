"""Reusing wide IP decisions while nothing they depend on has changed.

A decision is a function of the wide IP, the query type, who asks (the LDNS address and
the client subnet), the health snapshot, the records it read from the store (paths,
persistence, load figures) and the time. So the same query from the same client gets the
same decision while the wide IP's health generation is the same (whether the servers of
its pools are available and serving has not changed: a server flapping elsewhere in a
large config ends no decision of other wide IPs), every record read is still the one
held, and its time has not come: the methods note when what they read changes with
time alone (a path going stale, a persistence record due for refresh), the records read
end at their TTL, and `MAX_AGE` bounds the rest. A decision that took a
turn of a rotation or a random draw (round robin, ratio, random, ties taken in turn) is
never reused: the next query must get the next answer. Nor is one that writes a record
(persistence): the write is the change that ends it.

Checking all that costs a microsecond or two per query, most of it the records read. So an
entry found to hold is also marked *fresh*, and indexed by its wide IP and by the keys it
read: the node tells the cache of every store change (`changed`: records merged one by one,
and the keys of those loaded in bulk, `Store.bulk_listeners`) and of the wide IPs whose
health generation grew (`stale`); each ends the fresh mark of exactly the entries it
concerns (a clear ends them all: `stale_all`). A fresh entry
whose time is not up holds while the health tracker has nothing pending (`settled`: a
change not yet evaluated may yet grow a generation), so the fast path's check is a flag
and a clock reading; otherwise it asks `holds`, the full check. The indexes keep entries
that went (replaced, or timed out while fresh) until their wide IP's next change; past
`INDEX_FACTOR` times `max_entries` registrations they are rebuilt from the entries held.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from gtmcluster.lb.trace import Decision
from gtmcluster.runtime.stats import QueryStats
from gtmcluster.state.record import Record

#: the longest a decision is reused (seconds of the node's clock): a bound for changes
#: with time that no method noted (there are none known; the notes cover paths,
#: persistence and TTLs), not the usual end of a kept decision
MAX_AGE = 300.0
#: entries kept at most; when full the cache starts again (a flood of new clients costs
#: one decision each, as without a cache)
MAX_ENTRIES = 500_000
#: the fresh indexes are rebuilt when they hold this many times `max_entries` registrations
INDEX_FACTOR = 4

Reads = tuple[tuple[str, Record | None], ...]


@dataclass(slots=True)
class Entry:
    decision: Decision
    until: float
    wideip: str
    health: object
    reads: Reads
    epoch: int  # the cache's epoch when it was kept (a clear ends every entry before it)
    #: found to hold, and nothing it depends on changed since (see the module's doc)
    fresh: bool = False


class DecisionCache:
    """Decisions by (wide IP, query type, client key), checked against what they read."""

    def __init__(
        self,
        held: Callable[[str], Record | None],
        clock: Callable[[], float],
        health: Callable[[str], object],
        max_age: float = MAX_AGE,
        max_entries: int = MAX_ENTRIES,
        stats: QueryStats | None = None,
        settled: Callable[[], bool] = lambda: True,
    ):
        self._held = held  # the record the store holds at a key now (tombstones included)
        self._clock = self.clock = clock
        self._health = health  # a wide IP's health generation (whether its servers are available)
        self.max_age = max_age
        self.max_entries = max_entries
        self._entries: dict[Hashable, Entry] = {}
        self.stats = stats or QueryStats()  # (the node's, so the counts outlive a reload)
        #: grows at every clear: an entry of an earlier epoch no longer holds
        self.epoch = 0
        #: whether no health change waits to be evaluated (a fresh entry holds only then)
        self.settled = settled
        #: the fresh entries, by the store keys they read and by wide IP (with entries that
        #: went, until rebuilt: see the module's doc); and how many registrations they hold
        self._readers: dict[str, list[Entry]] = {}
        self._of_wideip: dict[str, list[Entry]] = {}
        self._indexed = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Decision | None:
        """The decision made for *key*, if it still holds."""
        entry = self.entry(key)
        return None if entry is None else entry.decision

    def entry(self, key: Hashable) -> Entry | None:
        """The entry kept for *key*, if it still holds: the fast path keeps its reply bytes
        with it, and asks `holds` of it before sending them again."""
        entry = self._entries.get(key)
        if entry is None:
            self.stats.kept_misses += 1
            return None
        if self._clock() >= entry.until or entry.health != self._health(entry.wideip) or self._changed(entry.reads):
            del self._entries[key]
            self.stats.kept_misses += 1
            return None
        self.stats.kept_hits += 1
        if not entry.fresh:
            self._arm(entry)
        return entry

    def holds(self, entry: Entry) -> bool:
        """Whether *entry* (found by `entry` earlier, its time not yet up: the caller checks
        `Entry.until` against its own clock reading) still holds, as `get` would find it;
        a yes counts as a hit."""
        if entry.epoch != self.epoch or entry.health != self._health(entry.wideip) or self._changed(entry.reads):
            return False
        self.stats.kept_hits += 1
        if not entry.fresh:
            self._arm(entry)
        return True

    # -- the fresh marks -------------------------------------------------------------------

    def _arm(self, entry: Entry) -> None:
        """Mark *entry* fresh (it was just found to hold) and index it."""
        entry.fresh = True
        self._of_wideip.setdefault(entry.wideip, []).append(entry)
        readers = self._readers
        for key, _ in entry.reads:
            readers.setdefault(key, []).append(entry)
        self._indexed += 1 + len(entry.reads)
        if self._indexed > INDEX_FACTOR * self.max_entries:
            self._reindex()

    def _reindex(self) -> None:
        """Rebuild the indexes from the fresh entries held; those that went are fresh no more."""
        held = {id(entry): entry for entry in self._entries.values() if entry.fresh}
        for entries in self._of_wideip.values():
            for entry in entries:
                if id(entry) not in held:
                    entry.fresh = False
        self._of_wideip.clear()
        self._readers.clear()
        self._indexed = 0
        for entry in held.values():
            self._arm(entry)

    def changed(self, key: str) -> None:
        """The store's record at *key* changed: the entries that read it are fresh no more."""
        entries = self._readers.pop(key, None)
        if entries is not None:
            for entry in entries:
                entry.fresh = False

    def stale(self, wideips: Iterable[str]) -> None:
        """The health generation of *wideips* grew: their entries are fresh no more."""
        of_wideip = self._of_wideip
        for wideip in wideips:
            for entry in of_wideip.pop(wideip, ()):
                entry.fresh = False

    def stale_all(self) -> None:
        """No entry is fresh any more (the cache is cleared)."""
        for entries in self._of_wideip.values():
            for entry in entries:
                entry.fresh = False
        self._of_wideip.clear()
        self._readers.clear()
        self._indexed = 0

    def _changed(self, reads: Reads) -> bool:
        held = self._held
        for key, record in reads:  # noqa: SIM110 - a plain loop is the faster here
            if held(key) is not record:
                return True
        return False

    def put(
        self, key: Hashable, wideip: str, decision: Decision, reads: Reads, health: object, decided_at: float
    ) -> None:
        """Keep *decision* for *wideip* (made at *decided_at* from its *health* generation and
        *reads*) if it may be reused."""
        if decision.varies or decision.persist is not None:
            return
        until = min(decided_at + self.max_age, decision.until)
        for _, record in reads:
            if record is not None and record.ttl is not None:
                until = min(until, record.born + record.ttl)
        if len(self._entries) >= self.max_entries:
            self.clear()
        self._entries[key] = Entry(decision, until, wideip, health, reads, self.epoch)

    def alias(self, key: Hashable, kept: Hashable) -> None:
        """Keep under *key* too what is kept under *kept* (a client of a kept class)."""
        entry = self._entries.get(kept)
        if entry is not None:
            if len(self._entries) >= self.max_entries:
                self.clear()
                return  # (*kept* went with the rest)
            self._entries[key] = entry

    def clear(self) -> None:
        self._entries.clear()
        self.epoch += 1
        self.stale_all()
