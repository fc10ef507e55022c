"""`make_check`: the check callable for a monitor, chosen by the type of its settings."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from gtmcluster.config.monitoring import DnsCheck, HttpCheck, IcmpCheck, Monitor, TcpCheck, UdpCheck
from gtmcluster.probe.attempt import Attempt
from gtmcluster.probe.base import Check, Result, Target
from gtmcluster.probe.dnscheck import DnsChecker
from gtmcluster.probe.http import HttpChecker
from gtmcluster.probe.icmp import IcmpPinger
from gtmcluster.probe.tcp import TcpChecker
from gtmcluster.probe.udp import UdpChecker

NO_PINGER = "ICMP unavailable on this node (needs root (CAP_NET_RAW) or net.ipv4.ping_group_range)"


def make_check(monitor: Monitor, reactor: Any, pinger: IcmpPinger | None = None) -> Check:
    """The check for *monitor*, run with *reactor*; icmp monitors use the node's *pinger*.

    The port checked is `Monitor.port` when set, else the target's. Without a pinger an
    icmp check fails every time with a reason saying why, instead of refusing the config.
    """
    settings = monitor.check
    timeout = monitor.timeout
    if isinstance(settings, TcpCheck):
        return TcpChecker(settings, reactor, timeout, monitor.port)
    if isinstance(settings, HttpCheck):
        return HttpChecker(settings, reactor, timeout, monitor.port)
    if isinstance(settings, UdpCheck):
        return UdpChecker(settings, reactor, timeout, monitor.port)
    if isinstance(settings, DnsCheck):
        return DnsChecker(settings, reactor, timeout, monitor.port)
    if isinstance(settings, IcmpCheck):
        if pinger is None:
            return failing(reactor, NO_PINGER)
        active = pinger

        def icmp(target: Target) -> Deferred[Result]:
            return active.ping(target, timeout)

        return icmp
    raise TypeError(f"monitor {monitor.name!r}: no check for {type(settings).__name__}")


def failing(reactor: Any, reason: str) -> Check:
    """A check that fails at once with *reason* (a check that cannot run here)."""

    def check(target: Target) -> Deferred[Result]:
        clock: IReactorTime = reactor
        attempt = Attempt(clock, 1.0)
        attempt.finish(False, reason)
        return attempt.deferred

    return check
