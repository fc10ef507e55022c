"""The kinds of monitor, the probe's side: for each ``type:`` of `config.monitorkinds.KINDS`
the checker that runs it and whether it needs the node's ICMP socket (`ProbeKind`), and
`make_check`, the check callable for a monitor, looked up here by its type.

Adding a kind: its settings value in `config.monitoring`, its reader and `MonitorKind` in
`config.monitorkinds`, its checker (a module of this package) and its `ProbeKind` here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from twisted.internet.defer import Deferred

from gtmcluster.config.monitoring import DnsCheck, HttpCheck, IcmpCheck, Monitor, TcpCheck, UdpCheck
from gtmcluster.probe.attempt import Attempt
from gtmcluster.probe.base import Check, Result, Target
from gtmcluster.probe.dnscheck import DnsChecker
from gtmcluster.probe.http import HttpChecker
from gtmcluster.probe.icmp import IcmpPinger
from gtmcluster.probe.tcp import TcpChecker
from gtmcluster.probe.udp import UdpChecker
from gtmcluster.runtime.reactors import Time, TimeFDSetTCP, TimeUDP, as_time

NO_PINGER = "ICMP unavailable on this node (needs root (CAP_NET_RAW) or net.ipv4.ping_group_range)"

#: the check for a monitor, run with a reactor, given the node's pinger (None without one).
#: The reactor is Any here: each kind's maker types what its checker calls (`TimeFDSetTCP`,
#: `TimeUDP`, ...), and a test hands one that has what its kind calls (a memory reactor
#: without ``listenUDP`` for tcp): no one type fits the registry's every kind.
MakeCheck = Callable[[Monitor, Any, IcmpPinger | None], Check]

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class ProbeKind:
    """One kind of monitor as the prober knows it."""

    name: str  # its ``type:``, a key of `config.monitorkinds.KINDS`
    make: MakeCheck
    #: its checks send through the node's ICMP socket (which `tap` opens only if needed)
    uses_pinger: bool = False


def settings_of(monitor: Monitor, kind: type[S]) -> S:
    """*monitor*'s check settings, which its type says are a *kind*."""
    settings = monitor.check
    if not isinstance(settings, kind):
        raise TypeError(f"monitor {monitor.name!r}: no {monitor.type} check for {type(settings).__name__}")
    return settings


def _tcp(monitor: Monitor, reactor: TimeFDSetTCP, pinger: IcmpPinger | None) -> Check:
    return TcpChecker(settings_of(monitor, TcpCheck), reactor, monitor.timeout, monitor.port)


def _http(monitor: Monitor, reactor: TimeFDSetTCP, pinger: IcmpPinger | None) -> Check:
    return HttpChecker(settings_of(monitor, HttpCheck), reactor, monitor.timeout, monitor.port)


def _udp(monitor: Monitor, reactor: TimeUDP, pinger: IcmpPinger | None) -> Check:
    return UdpChecker(settings_of(monitor, UdpCheck), reactor, monitor.timeout, monitor.port)


def _dns(monitor: Monitor, reactor: TimeUDP, pinger: IcmpPinger | None) -> Check:
    return DnsChecker(settings_of(monitor, DnsCheck), reactor, monitor.timeout, monitor.port)


def _icmp(monitor: Monitor, reactor: Time, pinger: IcmpPinger | None) -> Check:
    """Through the node's *pinger*; without one a check fails every time with a reason
    saying why, instead of refusing the config."""
    settings_of(monitor, IcmpCheck)
    if pinger is None:
        return failing(reactor, NO_PINGER)
    active = pinger
    timeout = monitor.timeout

    def icmp(target: Target) -> Deferred[Result]:
        return active.ping(target, timeout)

    return icmp


#: every kind of monitor the prober runs, by its ``type:``
PROBES: dict[str, ProbeKind] = {
    kind.name: kind
    for kind in (
        ProbeKind("tcp", _tcp),
        ProbeKind("http", _http),
        ProbeKind("https", _http),
        ProbeKind("udp", _udp),
        ProbeKind("dns", _dns),
        ProbeKind("icmp", _icmp, uses_pinger=True),
        ProbeKind("metrics", _http),
    )
}


def make_check(monitor: Monitor, reactor: Any, pinger: IcmpPinger | None = None) -> Check:
    """The check for *monitor*, run with *reactor*; icmp monitors use the node's *pinger*.

    The port checked is `Monitor.port` when set, else the target's.
    """
    kind = PROBES.get(monitor.type)
    if kind is None:
        raise TypeError(f"monitor {monitor.name!r}: no check for type {monitor.type!r}")
    return kind.make(monitor, reactor, pinger)


def needs_pinger(monitors: Iterable[Monitor]) -> bool:
    """Whether any of *monitors* sends through the node's ICMP socket."""
    return any(PROBES[m.type].uses_pinger for m in monitors if m.type in PROBES)


def failing(reactor: Time, reason: str) -> Check:
    """A check that fails at once with *reason* (a check that cannot run here)."""

    def check(target: Target) -> Deferred[Result]:
        clock = as_time(reactor)
        attempt = Attempt(clock, 1.0)
        attempt.finish(False, reason)
        return attempt.deferred

    return check
