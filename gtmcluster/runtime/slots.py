"""Slots of one resource, held per source: taken for a source against a cap in all and a cap
per source (`Caps`), and given back exactly once however their holder ends (`Held`).

The API counts its answers in progress and its log followers so (`api.server`, `api.logs`,
apart for clients with and without the token), and the DNS listener its zone transfers
being sent (`dns.xfrslots`, which also counts its refusals). A source is what
`gtmcluster.runtime.sources` makes of an address. Pure: nothing from Twisted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

#: why a slot was not given (`Slots.take`)
IN_ALL = "in all"
FROM_SOURCE = "from this address"


@dataclass(frozen=True)
class Caps:
    """At most *total* held in all, and *per_source* by one source."""

    total: int
    per_source: int


class Slots:
    """One resource, held by sources."""

    def __init__(self) -> None:
        self.held = 0
        self.by_source: Counter[str] = Counter()

    def take(self, source: str, caps: Caps) -> str | None:
        """Take one for *source*: None when taken, else why not (`IN_ALL`, checked first;
        `FROM_SOURCE`)."""
        if self.held >= caps.total:
            return IN_ALL
        if self.by_source[source] >= caps.per_source:
            return FROM_SOURCE
        self.held += 1
        self.by_source[source] += 1
        return None

    def give_back(self, source: str) -> None:
        if self.by_source[source] <= 0:
            raise ValueError(f"{source} holds no slot to give back")
        self.held -= 1
        self.by_source[source] -= 1
        if not self.by_source[source]:
            del self.by_source[source]


class Held:
    """One slot taken from *slots* for *source*, given back once (`release`), however many
    ways its holder ends."""

    def __init__(self, slots: Slots, source: str):
        self.slots = slots
        self.source = source
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.slots.give_back(self.source)
