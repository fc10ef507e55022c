"""What every health check is: a target in, a result out, never an exception.

A check is a callable ``check(target) -> Deferred[Result]`` built from a `Monitor` by
`gtmcluster.probe.kinds.make_check`. The Deferred always fires with a `Result` (a failure
to connect, a timeout or a bad reply are results, not errors), within the monitor's
timeout, and leaves no connection, socket or timer behind. Checks use only the reactor
they are given, so tests drive them with a fake clock and in-memory transports.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from twisted.internet.defer import Deferred

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class Target:
    """One thing to check: an address and port (0 where the check needs none)."""

    address: IPAddress
    port: int
    label: str  # for logs: "virtual server vs-cnc", "link cnc-uplink target 192.0.2.1"


@dataclass(frozen=True, slots=True)
class Result:
    ok: bool
    reason: str  # short and specific: "HTTP 200", "connection refused", "no reply within 2s"
    elapsed: float  # seconds from start to verdict, by the reactor's clock
    #: the load figures a check read (`probe.loadread`): connections, packets_per_second, kbps, capacity
    data: Mapping[str, float] | None = None


Check = Callable[[Target], "Deferred[Result]"]


class IcmpUnavailable(Exception):
    """Neither a raw ICMP socket (root) nor an unprivileged ping socket can be opened."""
