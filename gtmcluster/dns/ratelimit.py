"""Response rate limiting (RRL) for UDP answers, per client prefix.

A spoofed source address turns any UDP server into a reflector: the victim gets our
answers. Limiting what one client prefix (a /24 IPv4 or /56 IPv6 by default, like BIND,
NSD and Knot) may get per second caps what we reflect towards anyone, and what one flooding
source costs the others. Only UDP is limited: a TCP client has shown its address is real.

Each prefix has a token bucket: `responses_per_second` tokens a second, holding at most
`responses_per_second x window` (so a prefix quiet for a while may burst that much, and the
rate is averaged over `window` seconds). A query that finds no token is limited, and a
limited query costs no token (unlike BIND's debt, a resolver slightly over the rate keeps
getting the rate, as with Knot). Of a prefix's limited queries every `slip`-th gets a
truncated empty reply (TC=1, the question, no records: never larger than the query), so a
real resolver behind a spoofed flood retries over TCP and is answered there; the others are
dropped. `slip: 0` drops them all, `slip: 1` truncates them all.

The table of prefixes is bounded (`table_size`): when it is full, prefixes not heard from
for a whole window are forgotten (their bucket is full again, so nothing changes), and if
that frees too little, the oldest entries go (they start again with a full bucket).

This module is pure: the clock is injected, and nothing here imports Twisted. Each
answering process (`dns_server.processes`) limits on its own; the kernel hashes a client's
address and port to one of them, so a prefix spread over many ports may get up to N times
the rate from N processes.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable

from gtmcluster.config.dnsserver import RateLimit
from gtmcluster.runtime.stats import QueryStats

#: what `RateLimiter.check` says about a query
ANSWER = 0
DROP = 1
SLIP = 2

_INET = socket.AF_INET
_INET6 = socket.AF_INET6
_pton = socket.inet_pton
_from_bytes = int.from_bytes
#: IPv6 prefixes are kept apart from IPv4 ones by this offset (IPv4 keys stay below 2**32)
_V6 = 1 << 128

_OPT_TYPE = b"\x00\x29"


class RateLimiter:
    """The per-prefix token buckets of one answering process."""

    __slots__ = (
        "_clock",
        "_exempt",
        "_keys",
        "_table",
        "_v4",
        "_v6",
        "capacity",
        "rate",
        "settings",
        "slip",
        "stats",
        "table_size",
    )

    def __init__(self, settings: RateLimit, clock: Callable[[], float], stats: QueryStats):
        if settings.responses_per_second <= 0:
            raise ValueError("rate limiting is off (responses_per_second 0): make no limiter")
        self.settings = settings
        self.rate = float(settings.responses_per_second)
        self.capacity = self.rate * settings.window
        self.slip = settings.slip
        self.table_size = settings.table_size
        self.stats = stats
        self._clock = clock
        #: prefix key -> [tokens, last refill time, limited queries so far]
        self._table: dict[int, list[float]] = {}
        #: source address as received -> its prefix key (parsing costs more than a lookup);
        #: as bounded as the table, emptied when full
        self._keys: dict[str, int] = {}
        self._v4 = 32 - settings.ipv4_prefix
        self._v6 = 128 - settings.ipv6_prefix
        self._exempt = settings.exempt

    def __len__(self) -> int:
        return len(self._table)

    def key(self, source: str) -> int:
        """The prefix *source* (an address as received) is counted under."""
        try:
            if ":" not in source:
                return _from_bytes(_pton(_INET, source), "big") >> self._v4
            source = source.split("%", 1)[0]
            if source.startswith("::ffff:") and "." in source:
                return _from_bytes(_pton(_INET, source[7:]), "big") >> self._v4
            return _V6 | (_from_bytes(_pton(_INET6, source), "big") >> self._v6)
        except OSError:
            return -1  # not an address (cannot happen on an IP socket): one shared bucket

    def check(self, source: str) -> int:
        """ANSWER, DROP or SLIP for a query from *source*, now."""
        keys = self._keys
        key = keys.get(source)
        if key is None:
            if len(keys) >= self.table_size:
                keys.clear()
            key = keys[source] = self.key(source)
        now = self._clock()
        table = self._table
        entry = table.get(key)
        if entry is None:
            if len(table) >= self.table_size:
                self._shrink(now)
            table[key] = [self.capacity - 1.0, now, 0.0]
            return ANSWER
        tokens = entry[0] + (now - entry[1]) * self.rate
        tokens = min(tokens, self.capacity)
        entry[1] = now
        if tokens >= 1.0:
            entry[0] = tokens - 1.0
            return ANSWER
        entry[0] = tokens
        if self._exempt and self.exempt(source):
            return ANSWER
        entry[2] += 1.0
        slip = self.slip
        if slip and entry[2] % slip == 0:
            self.stats.rate_slipped += 1
            return SLIP
        self.stats.rate_dropped += 1
        return DROP

    def exempt(self, source: str) -> bool:
        """Whether *source* is in one of the exempt networks (never limited)."""
        try:
            address = ipaddress.ip_address(source.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self._exempt)

    def _shrink(self, now: float) -> None:
        """Make room: forget prefixes idle for a window (their bucket is full again anyway),
        then, if that freed less than a quarter, the oldest entries. Each pass frees at
        least a quarter of the table, so the cost per new prefix stays constant."""
        table = self._table
        horizon = now - self.settings.window
        for key in [k for k, e in table.items() if e[1] <= horizon]:
            del table[key]
        excess = len(table) - (self.table_size * 3) // 4
        if excess > 0:
            for key in list(table)[:excess]:
                del table[key]


def make(settings: RateLimit, clock: Callable[[], float], stats: QueryStats) -> RateLimiter | None:
    """A limiter for *settings*, or None when rate limiting is off."""
    if settings.responses_per_second <= 0:
        return None
    return RateLimiter(settings, clock, stats)


def update(
    old: RateLimiter | None, settings: RateLimit, clock: Callable[[], float], stats: QueryStats
) -> RateLimiter | None:
    """The limiter after a reload: *old* (its table kept) if the settings are the same."""
    if old is not None and old.settings == settings:
        return old
    return make(settings, clock, stats)


def truncated(query: bytes, payload_size: int) -> bytes | None:
    """The slip reply to *query*: its header with QR and TC set, its question and, if it had
    one, a bare OPT record; no records. None when *query* is not a well-formed plain query
    (a limited client gets nothing for that)."""
    size = len(query)
    if size < 17 or query[2] & 0xF8 or query[4:6] != b"\x00\x01":
        return None  # a response, another opcode, or not one question
    offset = 12
    length = query[offset]
    while length:
        if length > 63:
            return None
        offset += 1 + length
        if offset >= size:
            return None
        length = query[offset]
    end = offset + 5
    if end > size:
        return None
    byte2 = 0x80 | 0x02 | (query[2] & 0x01)  # QR, TC, RD copied
    byte3 = query[3] & 0x10  # CD copied, rcode NOERROR
    opt = b""
    arcount = b"\x00\x00"
    rest = query[end:]
    if query[10:12] == b"\x00\x01" and len(rest) >= 11 and rest[0] == 0 and rest[1:3] == _OPT_TYPE:
        do = rest[7] & 0x80
        opt = b"\x00" + _OPT_TYPE + payload_size.to_bytes(2, "big") + bytes([0, 0, do, 0, 0, 0])
        arcount = b"\x00\x01"
    header = query[:2] + bytes([byte2, byte3]) + b"\x00\x01\x00\x00\x00\x00" + arcount
    return header + query[12:end] + opt
