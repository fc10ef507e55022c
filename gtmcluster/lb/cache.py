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
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from gtmcluster.lb.trace import Decision
from gtmcluster.state.store import Record
from gtmcluster.stats import QueryStats

#: the longest a decision is reused (seconds of the node's clock): a bound for changes
#: with time that no method noted (there are none known; the notes cover paths,
#: persistence and TTLs), not the usual end of a kept decision
MAX_AGE = 300.0
#: entries kept at most; when full the cache starts again (a flood of new clients costs
#: one decision each, as without a cache)
MAX_ENTRIES = 200_000

Reads = tuple[tuple[str, Record | None], ...]


@dataclass(slots=True)
class _Entry:
    decision: Decision
    until: float
    wideip: str
    health: object
    reads: Reads


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
    ):
        self._held = held  # the record the store holds at a key now (tombstones included)
        self._clock = clock
        self._health = health  # a wide IP's health generation (whether its servers are available)
        self.max_age = max_age
        self.max_entries = max_entries
        self._entries: dict[Hashable, _Entry] = {}
        self.stats = stats or QueryStats()  # (the node's, so the counts outlive a reload)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Decision | None:
        """The decision made for *key*, if it still holds."""
        entry = self._entries.get(key)
        if entry is None:
            self.stats.kept_misses += 1
            return None
        if self._clock() >= entry.until or entry.health != self._health(entry.wideip) or self._changed(entry.reads):
            del self._entries[key]
            self.stats.kept_misses += 1
            return None
        self.stats.kept_hits += 1
        return entry.decision

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
            self._entries.clear()
        self._entries[key] = _Entry(decision, until, wideip, health, reads)

    def alias(self, key: Hashable, kept: Hashable) -> None:
        """Keep under *key* too what is kept under *kept* (a client of a kept class)."""
        entry = self._entries.get(kept)
        if entry is not None:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[key] = entry

    def clear(self) -> None:
        self._entries.clear()
