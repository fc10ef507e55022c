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
  never answer.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from gtmcluster.config.model import Prober
from gtmcluster.proximity.ranges import NEVER, SPECIAL_PURPOSE
from gtmcluster.topology.prefixes import PrefixMap


class Budget:
    def __init__(self, prober: Prober, clock: Callable[[], float]):
        self.prober = prober
        self.clock = clock
        self.never: PrefixMap[bool] = PrefixMap((ipaddress.ip_network(n), True) for n in NEVER)
        self.special: PrefixMap[bool] = PrefixMap((ipaddress.ip_network(n), True) for n in SPECIAL_PURPOSE)
        self.deny: PrefixMap[bool] = PrefixMap((n, True) for n in prober.deny)
        self.allow: PrefixMap[bool] = PrefixMap((n, True) for n in prober.allow)
        self.only: PrefixMap[bool] | None = PrefixMap((n, True) for n in prober.only) if prober.only else None
        self.tokens = prober.max_per_second
        self.tokens_at = clock()
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
        now = self.clock()
        rate = self.prober.max_per_second
        self.tokens = min(rate, self.tokens + (now - self.tokens_at) * rate)
        self.tokens_at = now
        if self.tokens < 1 or self.in_flight >= self.prober.max_in_flight:
            return False
        self.tokens -= 1
        self.in_flight += 1
        return True

    def done(self) -> None:
        self.in_flight -= 1

    def next_start(self) -> float:
        """Seconds until a token is available."""
        return max(0.0, (1 - self.tokens) / self.prober.max_per_second)
