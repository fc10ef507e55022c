"""What the API's clients hold, counted: connections, answers in progress and log
followers, in all and per source (`gtmcluster.runtime.sources`: an IPv4 address, an IPv6 /64).
Pure (nothing from Twisted): `gtmcluster.api.connection`, `.server` and `.logs` ask before
one is taken and say when it is given back; the caps come with each request (`Caps`), so a
reload that changes ``api.limits`` applies to what comes next.

A connection cannot be judged when it opens: the token comes with its first request. So
`Connections` keeps them least recently active first, and one past a cap displaces the
least recently active connection that never showed the token (of its own source when that
source is at its cap, else of all); only when every connection there showed the token is
the new one refused. A flood of connections without the token displaces its own, while an
operator's connection, which shows the token in its first request, stays.

Answers and followers are counted in `gtmcluster.runtime.slots.Slots`, one for clients that showed
the token and one for those that did not: those without it never take the slots of those
with it.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

from gtmcluster.runtime.slots import Caps

K = TypeVar("K", bound=Hashable)


class Connections(Generic[K]):
    """The open connections (any hashable handle), each with its source, least recently
    active first; which showed the token (`trust`) is never displaced."""

    def __init__(self) -> None:
        self.source_of: dict[K, str] = {}
        self.by_source: Counter[str] = Counter()
        #: connections that never showed the token, least recently active first: in all,
        #: and by source
        self._untrusted: OrderedDict[K, None] = OrderedDict()
        self._untrusted_of: dict[str, OrderedDict[K, None]] = {}

    def __len__(self) -> int:
        return len(self.source_of)

    @property
    def trusted(self) -> int:
        """Connections that showed the token."""
        return len(self.source_of) - len(self._untrusted)

    def admit(self, conn: K, source: str, caps: Caps) -> tuple[bool, list[K]]:
        """Count *conn*, just opened from *source*: (whether it is admitted, the connections
        it displaces, already forgotten here, to be closed by the caller)."""
        displaced: list[K] = []
        while self.by_source[source] >= caps.per_source:
            victim = self._oldest(source)
            if victim is None:
                return False, displaced
            self.remove(victim)
            displaced.append(victim)
        while len(self.source_of) >= caps.total:
            victim = self._oldest(None)
            if victim is None:
                return False, displaced
            self.remove(victim)
            displaced.append(victim)
        self.source_of[conn] = source
        self.by_source[source] += 1
        self._untrusted[conn] = None
        self._untrusted_of.setdefault(source, OrderedDict())[conn] = None
        return True, displaced

    def touch(self, conn: K) -> None:
        """*conn* began a request: it is now the most recently active."""
        if conn in self._untrusted:
            self._untrusted.move_to_end(conn)
            self._untrusted_of[self.source_of[conn]].move_to_end(conn)

    def trust(self, conn: K) -> None:
        """*conn* showed the token: it is never displaced."""
        if conn in self._untrusted:
            del self._untrusted[conn]
            self._forget_untrusted_of(conn, self.source_of[conn])

    def remove(self, conn: K) -> None:
        """*conn* is closed (nothing when it was not counted, or was displaced)."""
        source = self.source_of.pop(conn, None)
        if source is None:
            return
        self.by_source[source] -= 1
        if not self.by_source[source]:
            del self.by_source[source]
        if conn in self._untrusted:
            del self._untrusted[conn]
            self._forget_untrusted_of(conn, source)

    def _forget_untrusted_of(self, conn: K, source: str) -> None:
        of_source = self._untrusted_of[source]
        del of_source[conn]
        if not of_source:
            del self._untrusted_of[source]

    def _oldest(self, source: str | None) -> K | None:
        """The least recently active connection that never showed the token, of *source*
        (None: of all)."""
        order = self._untrusted if source is None else self._untrusted_of.get(source)
        return next(iter(order)) if order else None
