"""Which LDNSes this node may probe, and when: reserved ranges, allow/deny/only lists, rate,
in-flight and backoff.

A spoofed query can name any source address; these limits keep a sync group from being
turned into a scanner of networks it has no business with:

- never multicast, broadcast or unspecified addresses, whatever the config says;
- never an address of the IANA special-purpose registries (RFC 6890: loopback, private
  networks, shared address space, link local (169.254.169.254 included), documentation
  and benchmarking networks, unique local and link-local IPv6, IPv4-mapped, ...), unless
  `prober.allow` opens it (a bank's resolvers on 10.0.0.0/8; the demo's on loopback);
- never what `prober.deny` lists (it wins over `allow`);
- when `prober.only` is set, nothing outside it;
- at most `max_per_second` probes started and `max_in_flight` running per node, one
  request per LDNS at a time across the group, and exponential backoff for LDNSes that
  never answer;
- at most `max_per_second` probe requests filed per second by a node (a burst of what it
  probes while a request lives): a node cannot probe more than that, so every further
  request a flood of new source addresses would file is not filed (counted), and the
  request records clients cause stay within that many per member.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable

from gtmcluster.config.model import Prober
from gtmcluster.config.ranges import NEVER, SPECIAL_PURPOSE
from gtmcluster.runtime.tokenbucket import TokenBucket
from gtmcluster.topology.prefixes import PrefixMap

#: a probe request lives this long (or half the probe interval, when shorter): the time for
#: every node to probe once. While it lives no other request for that LDNS is filed, so it
#: must not outlive the interval, or a stale path waits for it rather than for the interval.
REQUEST_TTL = 60.0
#: requests of one origin that may always wait, however slow the prober
MIN_QUEUE = 10


def request_ttl(probe_interval: float) -> float:
    return min(REQUEST_TTL, probe_interval / 2)


def queue_limit(prober: Prober) -> int:
    """Requests of one origin that may wait: what this node probes while one request lives
    (also the most requests a node files at once, `Budget.file`)."""
    return max(MIN_QUEUE, math.ceil(prober.max_per_second * request_ttl(prober.probe_interval)))


class Budget:
    def __init__(self, prober: Prober, clock: Callable[[], float]):
        self.prober = prober
        self.clock = clock
        self.never: PrefixMap[bool] = PrefixMap((ipaddress.ip_network(n), True) for n in NEVER)
        self.special: PrefixMap[bool] = PrefixMap((ipaddress.ip_network(n), True) for n in SPECIAL_PURPOSE)
        self.deny: PrefixMap[bool] = PrefixMap((n, True) for n in prober.deny)
        self.allow: PrefixMap[bool] = PrefixMap((n, True) for n in prober.allow)
        self.only: PrefixMap[bool] | None = PrefixMap((n, True) for n in prober.only) if prober.only else None
        #: probes started: max_per_second, no more saved up than a second's worth
        self.starts = TokenBucket(prober.max_per_second, prober.max_per_second, clock())
        #: probe requests filed: as many a second, a burst of what a request's life holds
        self.filings = TokenBucket(prober.max_per_second, queue_limit(prober), clock())
        #: requests not filed for the filing rate (a flood of new sources)
        self.unfiled = 0
        self.in_flight = 0

    def allowed(self, ldns: str) -> str | None:
        """Why *ldns* may never be probed, or None."""
        try:
            address = ipaddress.ip_address(ldns)
        except ValueError:
            return "not an address"
        if address in self.never:
            return "multicast, broadcast or unspecified: never probed"
        if address in self.deny:
            return "in prober.deny"
        if address in self.special and address not in self.allow:
            return "a special-purpose address (RFC 6890) that prober.allow does not open"
        if self.only is not None and address not in self.only:
            return "not in prober.only"
        return None

    def take(self) -> bool:
        """Start one probe now, if the rate and in-flight limits allow."""
        if self.in_flight >= self.prober.max_in_flight or not self.starts.take(1, self.clock()):
            return False
        self.in_flight += 1
        return True

    def file(self) -> bool:
        """File one probe request now, if the filing rate allows (else count it unfiled)."""
        if self.filings.take(1, self.clock()):
            return True
        self.unfiled += 1
        return False

    def done(self) -> None:
        self.in_flight -= 1

    def next_start(self) -> float:
        """Seconds until a probe may start (as far as the rate goes)."""
        return self.starts.ready_in(1, self.clock())
