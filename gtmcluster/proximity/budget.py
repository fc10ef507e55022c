"""Which LDNSes this node may probe, and when: allow/deny lists, rate, in-flight and backoff.

A spoofed query can name any source address; these limits keep a sync group from being
turned into a scanner: only allowed networks (never multicast, broadcast or unspecified
addresses), at most `max_per_second` probes started and `max_in_flight` running per node,
one request per LDNS at a time across the group, and exponential backoff for LDNSes that
never answer.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from gtmcluster.config.model import Prober
from gtmcluster.topology.prefixes import PrefixMap

NEVER = (
    "0.0.0.0/8",
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, and the limited broadcast
    "::/128",
    "ff00::/8",
)


class Budget:
    def __init__(self, prober: Prober, clock: Callable[[], float]):
        self.prober = prober
        self.clock = clock
        self.deny: PrefixMap[bool] = PrefixMap((ipaddress.ip_network(n), True) for n in NEVER)
        for network in prober.deny:
            self.deny.add(network, True)
        self.allow: PrefixMap[bool] | None = PrefixMap((n, True) for n in prober.allow) if prober.allow else None
        self.tokens = prober.max_per_second
        self.tokens_at = clock()
        self.in_flight = 0

    def allowed(self, ldns: str) -> str | None:
        """Why *ldns* may never be probed, or None."""
        try:
            address = ipaddress.ip_address(ldns)
        except ValueError:
            return "not an address"
        if address in self.deny:
            return "denied (prober.deny or a reserved range)"
        if self.allow is not None and address not in self.allow:
            return "not in prober.allow"
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
