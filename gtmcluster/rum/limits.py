"""How many beacons a node takes: per client subnet and in all, per second.

Each source subnet (the /24 or /48 a beacon counts for, `beacon.subnet_of`) has a token
bucket (`runtime.tokenbucket.TokenBucket`): ``rum.beacons_per_second`` flow in, up to
``rum.burst`` kept. At most `Rates.sources` buckets are tracked, the least recently
used forgotten beyond (a forgotten subnet starts full again); a bucket in all
(`BeaconRate.total`) still bounds what many subnets send together, so rotating sources buys
no more than the total. Every beacon POST takes its token before its body is read, whatever
the body turns out to be. Pure: the clock is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gtmcluster.proximity.clients import IPNetwork
from gtmcluster.rum.beacon import RATE, Rejected
from gtmcluster.runtime.tokenbucket import Buckets, TokenBucket


@dataclass(frozen=True)
class Rates:
    """*per_second* beacons a source subnet (up to *burst* at once), at most *sources*
    subnets tracked, and *total_per_second* (up to *total_burst*) from all of them."""

    per_second: float = 1.0
    burst: float = 10.0
    sources: int = 50_000
    total_per_second: float = 500.0
    total_burst: float = 1_000.0

    def __post_init__(self) -> None:
        if min(self.per_second, self.burst, self.total_per_second, self.total_burst) <= 0 or self.sources < 1:
            raise ValueError("beacon rates, bursts and the sources tracked must be positive")


class BeaconRate:
    """The beacons taken per source subnet and in all (`take`)."""

    def __init__(self, rates: Rates, clock: Callable[[], float]):
        self.rates = rates
        self.clock = clock
        self.buckets: Buckets[IPNetwork] = Buckets(rates.per_second, rates.burst, rates.sources)
        self.total = TokenBucket(rates.total_per_second, rates.total_burst, clock())

    def __len__(self) -> int:
        return len(self.buckets)

    @property
    def forgotten(self) -> int:
        """Buckets forgotten for the bound."""
        return self.buckets.forgotten

    def take(self, subnet: IPNetwork) -> Rejected | None:
        """One beacon from *subnet*: None when it may come in, else why not (429)."""
        now = self.clock()
        bucket = self.buckets.bucket(subnet, now)
        if not bucket.take(1, now):
            wait = bucket.ready_in(1, now)
            return Rejected(429, RATE, f"over {self.rates.per_second:g} beacons a second from {subnet}", wait)
        if not self.total.take(1, now):
            wait = self.total.ready_in(1, now)
            return Rejected(429, RATE, "this node takes no more beacons just now, from anyone", wait)
        return None

    def configure(self, rates: Rates) -> None:
        """New rates (a reload): the buckets kept take them, the bound applies at once."""
        self.rates = rates
        self.buckets.configure(rates.per_second, rates.burst, rates.sources)
        self.total.configure(rates.total_per_second, rates.total_burst)
