"""One-use names (issue 36, docs/client-proximity.md): ``<id>.rum.<zone>``, which the RUM
snippet resolves once per page view so that the group learns which resolver (LDNS) serves
the browser that then posts a beacon with the same id.

The zones are ``rum.zone`` (default: the first wide IP's zone) and every zone with a wide IP
(the snippet may be asked for any of them: ``snippet.js?zone=``). While ``rum`` is on, every
node answers such a name itself, whatever the zone holds there:
A or AAAA of ``rum.answer`` when set, else of the member's own ``rum`` listener (of the
query's family; none of it: NODATA), TTL 0 (a resolver must not reuse it), authoritative.
Only a name of exactly one label of 16 to 32 of ``[a-z0-9]`` (the id, `ID`) directly under
``rum.<zone>`` is one; any other name there is answered from the zone as before (NXDOMAIN).

The responder answers it by the general path only and never keeps the reply: not as a
template, not by the query's bytes, not as a negative answer, and no decision is made or
kept for it (`dns.fastpath` sends every name of that shape to the general path first).

What each answer tells (`Seen`: the id, the query's source address, the trusted client
subnet or ``""``) is handed to the node (`node.Node.rum_id_seen`), which records it as
``rumid/<id>``, in each answering worker through the feed as a persistence record is. A
flood of one-use names costs a token per answer: each LDNS /24 (/48) has a bucket
(`IDS_PER_SECOND`, `IDS_BURST`, per answering process as rate limiting is); past it the
name is still answered but nothing is told (counted: `runtime.stats.QueryStats.rum_ids_rate`).
The table of buckets is bounded (`MAX_PREFIXES`, the least recently used forgotten: a
forgotten prefix starts again with a full bucket); a flood from many prefixes is bounded by
the store's bound on ``rumid`` records.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable

from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_AAAA, TYPE_ANY
from gtmcluster.runtime.stats import QueryStats
from gtmcluster.runtime.tokenbucket import Buckets
from gtmcluster.state import keys

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: a one-use name's id (`state.keys.RUM_ID`), matched on the wire name's bytes
ID = re.compile(keys.RUM_ID.pattern.encode())
#: the label under the zone the one-use names are below
LABEL = b"rum"
#: ids recorded per LDNS /24 (/48) and second, on average, and at once
IDS_PER_SECOND = 20.0
IDS_BURST = 100
#: LDNS prefixes whose buckets an answering process remembers
MAX_PREFIXES = 4096

#: told of each one-use name answered within its LDNS's bucket: (id, the query's source
#: address, the client subnet a trusted resolver named, as ``10.1.2.0_24``, or "")
Seen = Callable[[str, str, str], object]


class IdLimiter:
    """A token bucket per LDNS /24 (/48), at most `MAX_PREFIXES` of them (least recently
    used forgotten). Kept by the node across reloads."""

    def __init__(
        self,
        clock: Callable[[], float],
        rate: float = IDS_PER_SECOND,
        burst: int = IDS_BURST,
        size: int = MAX_PREFIXES,
    ):
        self.clock = clock
        self.buckets: Buckets[IPNetwork] = Buckets(rate, burst, size)

    def __len__(self) -> int:
        return len(self.buckets)

    def take(self, ldns: IPAddress) -> bool:
        """Whether *ldns*'s prefix has a token now (one is spent if so)."""
        return self.buckets.take(keys.client_subnet(ldns), self.clock())


class OneUseNames:
    """The one-use names of one config: which names are, what they answer, who is told.

    *zones*: the keys of the zones they are under (``rum.<zone>``); *answer*: the addresses
    they answer with; *seen*: told of each within the bucket (`Seen`); *limiter*: the
    buckets (the node's, kept across reloads); *stats*: where the counts go.
    """

    def __init__(
        self,
        zones: Iterable[Name],
        answer: Iterable[IPAddress],
        seen: Seen,
        limiter: IdLimiter,
        stats: QueryStats,
    ):
        #: ``rum.<zone>`` of each zone, as keys
        self.suffixes: frozenset[Name] = frozenset((LABEL, *(label.lower() for label in zone)) for zone in zones)
        addresses = tuple(answer)
        #: the answer's rdatas per type (empty: NODATA)
        self.rdatas: dict[int, tuple[tuple[bytes], ...]] = {
            TYPE_A: tuple((a.packed,) for a in addresses if a.version == 4),
            TYPE_AAAA: tuple((a.packed,) for a in addresses if a.version == 6),
        }
        #: the types answered (for a signed NODATA's denial)
        self.types = frozenset(t for t, r in self.rdatas.items() if r)
        #: the same in wire form: what the fast path sends to the general path
        self.wire_suffixes = frozenset(
            b"".join(bytes([len(label)]) + label for label in suffix) + b"\x00" for suffix in self.suffixes
        )
        self.seen = seen
        self.limiter = limiter
        self.stats = stats

    def ident(self, key: Name) -> str | None:
        """The id of the name *key* (lowercased) when it is a one-use name, else None."""
        if key[1:] not in self.suffixes or not ID.fullmatch(key[0]):
            return None
        return key[0].decode("ascii")

    def may_be_one(self, qname: bytes) -> bool:
        """Whether the lowercased wire name *qname* may be a one-use name (cheap: one label
        of an id's length before a ``rum.<zone>``); `ident` says exactly."""
        size = qname[0]
        return 16 <= size <= 32 and qname[1 + size :] in self.wire_suffixes

    def answer(self, qtype: int) -> tuple[int, tuple[tuple[bytes], ...]]:
        """The type and rdatas a *qtype* query is answered with (none: NODATA)."""
        if qtype == TYPE_ANY:  # (RFC 8482: one RRset is a complete answer)
            qtype = TYPE_A if self.rdatas[TYPE_A] else TYPE_AAAA
        return qtype, self.rdatas.get(qtype, ())

    def asked(self, ident: str, ldns: IPAddress, client: IPAddress | None, prefix: int) -> bool:
        """*ldns* asked for *ident* (for the client subnet *client*/*prefix* when a trusted
        resolver named one): told on when its bucket has a token; whether it had."""
        stats = self.stats
        if not self.limiter.take(ldns):
            stats.rum_ids_rate += 1
            return False
        ecs = "" if client is None else keys.subnet_text(str(keys.client_subnet(client, prefix)))
        stats.rum_ids_recorded += 1
        self.seen(ident, str(ldns), ecs)
        return True
