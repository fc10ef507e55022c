"""A link's traffic from its interface counters: the reader interface and the rate logic.

A `TrafficReader` reads a link's two octet counters (received and sent) from wherever
they are kept: `probe.snmp.SnmpReader` (a router's ifHCInOctets/ifHCOutOctets) is the
first; a counter scraped over HTTP can be another. `CounterRate` turns successive readings
into bits a second over the interval between them. The counters are 64-bit and wrap to 0;
one that went backwards by more than a wrap at `MAX_LINE_BPS` could explain was reset (the
agent restarted, the interface was replaced), and one that went up by more than that rate
could count jumped (another counter, not traffic): that round gives no figure, and the next
one counts from the new value. Pure but for the `TrafficReader` protocol's Deferred.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from twisted.internet.defer import Deferred

COUNTER64 = 2**64
#: the fastest an interface counts, bits a second (a 1.6 Tbit/s port, with room): a counter
#: lower than before wrapped if counting up to the wrap and on to its value took no faster
MAX_LINE_BPS = 4e12


@dataclass(frozen=True, slots=True)
class Counters:
    """One reading of an interface's octet counters (each 0 <= n < 2**64)."""

    in_octets: int
    out_octets: int


class TrafficReader(Protocol):
    """Reads a link's counters; the Deferred fails (with a short reason) when it cannot."""

    def read(self) -> Deferred[Counters]: ...

    def describe(self) -> str:
        """Where it reads, for logs ("snmp 10.0.0.1:161 ifIndex 2")."""


@dataclass(frozen=True, slots=True)
class Rate:
    """Bits a second each way over one interval."""

    bps_in: float
    bps_out: float


def delta(old: int, new: int, seconds: float) -> int | None:
    """Octets counted from *old* to *new* over *seconds*: the difference, across a wrap
    when one is plausible; None when the counter was reset."""
    if new >= old:
        return new - old
    wrapped = new + COUNTER64 - old
    if wrapped * 8 <= MAX_LINE_BPS * seconds:
        return wrapped
    return None


def rate(before: Counters, after: Counters, seconds: float) -> Rate | None:
    """The rates between two readings *seconds* apart, or None (no time passed, a counter
    was reset, or one jumped by more than `MAX_LINE_BPS` could count in the time: a
    counter replaced by another, not traffic)."""
    if seconds <= 0:
        return None
    got_in = delta(before.in_octets, after.in_octets, seconds)
    got_out = delta(before.out_octets, after.out_octets, seconds)
    if got_in is None or got_out is None:
        return None
    bps_in, bps_out = got_in * 8 / seconds, got_out * 8 / seconds
    if bps_in > MAX_LINE_BPS or bps_out > MAX_LINE_BPS:
        return None
    return Rate(bps_in, bps_out)


class CounterRate:
    """The rate since the previous reading, reading by reading."""

    def __init__(self) -> None:
        self._last: tuple[Counters, float] | None = None

    def update(self, counters: Counters, at: float) -> Rate | None:
        """Take the reading *counters* made at *at* (seconds); the rate since the previous
        one, or None (the first reading, or a reset: counted from here on)."""
        last = self._last
        self._last = (counters, at)
        if last is None:
            return None
        return rate(last[0], counters, at - last[1])
