"""Who holds a node's TCP DNS connections, and who makes way for a new one.

Two caps, both kept by closing a connection idle the longest (least recently active: a byte
read, or the client taking its answers), never by refusing the new one:

- per source (``dns_server.tcp_max_per_source``, 64; `gtmcluster.runtime.sources`: an IPv4
  address, or an IPv6 /64, the least a host is given). A source past its cap loses
  its **own** connection idle the longest, on whichever address it is, never another
  source's.
- per listening address (``dns_server.tcp_max_clients``, 1,000 on each of the member's DNS
  addresses): past it, the source holding the **most** connections on that address loses
  its own idle the longest there (among sources holding as many, the one whose connections
  there were active, or opened or closed, the longest ago). A client holding one connection
  is closed only once every source holds one; a flood on one address (one ISP's link)
  never closes the clients of another.

Closing an idle connection rather than refusing the new one keeps a busy resolver answered
(its new query gets through), and an idle connection is the cheapest to lose (RFC 7766
6.2.3 lets a server close idle connections when it needs to). Every step is O(1), whatever
the caps. Pure bookkeeping, no Twisted: `dns.stream` closes what `Clients.add` returns.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

#: why a connection was closed to make way (`Clients.add`): its address's cap (the name
#: the counter had before per-source caps), or its own source's cap
EVICTED = "evicted"
SOURCE_CAP = "source_cap"

C = TypeVar("C", bound=Hashable)


class _Address(Generic[C]):
    """One listening address's connections, per source (least recently active first), and
    its sources bucketed by how many they hold there, so the heaviest is found at once."""

    def __init__(self) -> None:
        self.size = 0
        self.by_source: dict[str, OrderedDict[C, None]] = {}
        #: n -> the sources holding n connections here, the least recently changed first
        self.holding: dict[int, OrderedDict[str, None]] = {}
        #: the most any source holds here (0 when empty)
        self.most = 0

    def add(self, connection: C, source: str) -> None:
        table = self.by_source.setdefault(source, OrderedDict())
        table[connection] = None
        self.size += 1
        self._count(source, len(table) - 1, len(table))

    def remove(self, connection: C, source: str) -> None:
        table = self.by_source[source]
        del table[connection]
        self.size -= 1
        held = len(table)
        if not held:
            del self.by_source[source]
        self._count(source, held + 1, held)

    def touch(self, connection: C, source: str) -> None:
        self.by_source[source].move_to_end(connection)
        self.holding[len(self.by_source[source])].move_to_end(source)

    def heaviest_oldest(self) -> C:
        """The connection idle the longest of the source holding the most here."""
        source = next(iter(self.holding[self.most]))
        return next(iter(self.by_source[source]))

    def _count(self, source: str, before: int, after: int) -> None:
        if before:
            bucket = self.holding[before]
            del bucket[source]
            if not bucket:
                del self.holding[before]
        if after:
            self.holding.setdefault(after, OrderedDict())[source] = None
        if after > self.most:
            self.most = after
        elif before == self.most and before not in self.holding:
            self.most = after  # (one less: the source that held the most now holds that)


class Clients(Generic[C]):
    """The open connections, per listening address and per source, against
    *max_per_listener* and *max_per_source* (set in place by a reload: connections already
    open stay, the next one to arrive meets the new caps)."""

    def __init__(self, max_per_listener: int, max_per_source: int) -> None:
        self.max_per_listener = max_per_listener
        self.max_per_source = max_per_source
        #: connection -> (listening address, source)
        self._where: dict[C, tuple[str, str]] = {}
        #: by listening address; by source on all addresses, least recently active first
        #: (keys with no connection are absent: the tables hold only what is open)
        self._listeners: dict[str, _Address[C]] = {}
        self._sources: dict[str, OrderedDict[C, None]] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __iter__(self) -> Iterator[C]:
        return iter(list(self._where))

    def __contains__(self, connection: object) -> bool:
        return connection in self._where

    def on(self, listener: str) -> int:
        """The connections open on *listener*."""
        address = self._listeners.get(listener)
        return address.size if address is not None else 0

    def held_by(self, source: str) -> int:
        """The connections *source* (`sources.source_of`) holds, on all addresses."""
        return len(self._sources.get(source, ()))

    def add(self, connection: C, listener: str, source: str) -> list[tuple[C, str]]:
        """Note *connection* (the most recently active now); the connections to close so
        that both caps hold, each with why (`SOURCE_CAP`, `EVICTED`), already forgotten.
        The source's own cap is kept first: a source at its cap on a full address makes
        room from its own connections, so no other source's is closed."""
        self._where[connection] = (listener, source)
        address = self._listeners.get(listener)
        if address is None:
            address = self._listeners[listener] = _Address()
        address.add(connection, source)
        self._sources.setdefault(source, OrderedDict())[connection] = None
        closing: list[tuple[C, str]] = []
        while self.held_by(source) > self.max_per_source:
            oldest = next(iter(self._sources[source]))
            self.remove(oldest)
            closing.append((oldest, SOURCE_CAP))
        while address.size > self.max_per_listener:
            oldest = address.heaviest_oldest()
            self.remove(oldest)
            closing.append((oldest, EVICTED))
        return closing

    def touch(self, connection: C) -> None:
        """*connection* was active: the last of its source to make way now."""
        where = self._where.get(connection)
        if where is not None:
            self._listeners[where[0]].touch(connection, where[1])
            self._sources[where[1]].move_to_end(connection)

    def remove(self, connection: C) -> None:
        """Forget *connection* (closed); nothing if it is not held."""
        where = self._where.pop(connection, None)
        if where is None:
            return
        listener, source = where
        address = self._listeners[listener]
        address.remove(connection, source)
        if not address.size:
            del self._listeners[listener]
        table = self._sources[source]
        del table[connection]
        if not table:
            del self._sources[source]
