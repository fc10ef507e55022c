"""Who may hold a connection to the peer port: the caps on connections that have not yet
proven to be a member's, and on the connections a proven member holds.

Anyone who reaches the peer port can open TCP connections to it; each lives until its TLS
handshake and Hello are done, at most `handshake_timeout` (10 s). Until then it is
*unproven*, and the unproven are capped:

- per source, `MAX_UNPROVEN_PER_SOURCE` (8): an IPv4 address, or an IPv6 /64
  (`gtmcluster.runtime.sources`). A member dials each peer once, and again with backoff: it never
  needs more than one or two at a time;
- in all, `MAX_UNPROVEN` (64), counting every source but the members' own peer addresses
  (*reserved*: a connection from one is not counted in all and never made way for; its own
  address still holds at most `MAX_UNPROVEN_PER_SOURCE`).

A connection over its source's cap is turned away. One that finds every slot taken makes
way for itself only when its source holds fewer unproven connections than the source that
holds the most: the oldest of that source's is closed. So an attacker from a few addresses
fills only its own share, and one from more addresses than `MAX_UNPROVEN /
MAX_UNPROVEN_PER_SOURCE` cannot keep a new source out: a member dialling from any address
gets a slot, and a member dialling from its configured peer address always does.

A connection that proves to be a member's (certificate and Hello) no longer counts. Each
member may hold at most `MAX_CHANNELS_PER_MEMBER` (4) proven incoming connections: a newer
one closes its oldest (a member that reconnects after a half-open connection comes back at
once; a leaked certificate opens no more than four).

Pure: the caller builds the connections and closes those it is told to. No Twisted here.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

#: unproven connections (TCP accepted, TLS handshake and Hello not yet done) in all
MAX_UNPROVEN = 64
#: unproven connections from one source (an IPv4 address, an IPv6 /64)
MAX_UNPROVEN_PER_SOURCE = 8
#: proven connections one member holds to this node's peer port at once
MAX_CHANNELS_PER_MEMBER = 4

C = TypeVar("C", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Verdict(Generic[C]):
    """What to do with a new connection: take it (closing *evict* first, when one is
    named), or turn it away for *why*."""

    admit: bool
    evict: C | None = None
    why: str = ""


@dataclass(slots=True)
class _Held:
    source: str
    reserved: bool
    order: int


class Admission(Generic[C]):
    """The unproven connections of a listener, by source (see the module's docstring)."""

    def __init__(self, total: int = MAX_UNPROVEN, per_source: int = MAX_UNPROVEN_PER_SOURCE) -> None:
        self.total = total
        self.per_source = per_source
        self._held: dict[C, _Held] = {}
        self._by_source: dict[str, list[C]] = {}  # oldest first
        self._counted = 0  # unproven connections not from a reserved source
        self._order = 0

    def __len__(self) -> int:
        return len(self._held)

    def of(self, source: str) -> int:
        """Unproven connections from *source* (a key `sources.source_of` made, or a reserved address)."""
        return len(self._by_source.get(source, ()))

    @property
    def counted(self) -> int:
        """Unproven connections counted against `total`."""
        return self._counted

    def consider(self, source: str, reserved: bool = False) -> Verdict[C]:
        """Whether a new connection from *source* is taken (see the module's docstring);
        when it is, the caller builds it and `add`s it, after closing `Verdict.evict`, which
        is released here."""
        held = self.of(source)
        if held >= self.per_source:
            return Verdict(False, why=f"{held} connections from its address still in TLS handshake or Hello")
        if reserved or self._counted < self.total:
            return Verdict(True)
        most, victim = self._most_held()
        if victim is None or held + 1 > most:
            return Verdict(False, why=f"{self._counted} connections still in TLS handshake or Hello")
        self.release(victim)
        return Verdict(True, evict=victim)

    def _most_held(self) -> tuple[int, C | None]:
        """The count of the (unreserved) source holding the most, and the oldest connection
        among the sources holding that many."""
        most = 0
        victim: C | None = None
        for conns in self._by_source.values():
            first = conns[0]
            if self._held[first].reserved:
                continue
            count = len(conns)
            older = victim is not None and self._held[first].order < self._held[victim].order
            if count > most or (count == most and older):
                most, victim = count, first
        return most, victim

    def add(self, conn: C, source: str, reserved: bool = False) -> None:
        """Count *conn*, taken after `consider` said so."""
        self._order += 1
        self._held[conn] = _Held(source, reserved, self._order)
        self._by_source.setdefault(source, []).append(conn)
        if not reserved:
            self._counted += 1

    def release(self, conn: C) -> bool:
        """*conn* proved to be a member's, or ended: it counts no more (False when it did not)."""
        held = self._held.pop(conn, None)
        if held is None:
            return False
        conns = self._by_source[held.source]
        conns.remove(conn)
        if not conns:
            del self._by_source[held.source]
        if not held.reserved:
            self._counted -= 1
        return True


class Channels(Generic[C]):
    """The proven incoming connections of each member, at most `MAX_CHANNELS_PER_MEMBER`."""

    def __init__(self, most: int = MAX_CHANNELS_PER_MEMBER) -> None:
        self.most = most
        self._of: dict[str, list[C]] = {}

    def of(self, member: str) -> int:
        return len(self._of.get(member, ()))

    def add(self, conn: C, member: str) -> list[C]:
        """Count *conn* for *member*; returns the oldest ones it holds beyond the cap (to close)."""
        conns = self._of.setdefault(member, [])
        conns.append(conn)
        beyond = len(conns) - self.most
        if beyond <= 0:
            return []
        oldest, conns[:beyond] = conns[:beyond], []
        return oldest

    def release(self, conn: C, member: str) -> None:
        conns = self._of.get(member)
        if conns is not None and conn in conns:
            conns.remove(conn)
            if not conns:
                del self._of[member]
