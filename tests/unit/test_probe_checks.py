"""make_check: one check per kind of monitor settings, and the verdict machinery they share."""

from __future__ import annotations

import random
from ipaddress import ip_address

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock

from gtmcluster.config.monitoring import Check, DnsCheck, HttpCheck, IcmpCheck, TcpCheck, UdpCheck
from gtmcluster.probe.attempt import Attempt, seconds, show
from gtmcluster.probe.base import Result, Target
from gtmcluster.probe.dnscheck import DnsChecker
from gtmcluster.probe.http import HttpChecker
from gtmcluster.probe.icmp import Channel, IcmpPinger
from gtmcluster.probe.kinds import make_check
from gtmcluster.probe.tcp import TcpChecker
from gtmcluster.probe.udp import UdpChecker
from tests.support.probeservers import FakeIcmpSocket, UdpMemoryReactor, monitor, result_of


@pytest.mark.parametrize(
    ("settings", "kind"),
    [
        (TcpCheck(), TcpChecker),
        (HttpCheck(tls=False), HttpChecker),
        (HttpCheck(tls=True, verify_tls=False), HttpChecker),
        (UdpCheck(b"x"), UdpChecker),
        (DnsCheck("example.com"), DnsChecker),
    ],
)
def test_dispatch_on_the_settings_type(settings: Check, kind: type) -> None:
    """Each kind of settings gets its checker."""
    assert isinstance(make_check(monitor(settings), UdpMemoryReactor()), kind)


def test_icmp_checks_use_the_nodes_pinger_with_the_monitor_timeout() -> None:
    """An icmp check sends through the shared pinger and times out after monitor.timeout."""
    reactor = UdpMemoryReactor()
    sock = FakeIcmpSocket()
    pinger = IcmpPinger(reactor, {4: Channel(4, sock, raw=True)}, random.Random(1))
    d = make_check(monitor(IcmpCheck(), timeout=0.75), reactor, pinger)(Target(ip_address("192.0.2.1"), 0, "t"))
    assert len(sock.sent) == 1
    reactor.advance(0.75)
    assert result_of(d) == Result(False, "no echo reply within 0.75s", 0.75)


def test_first_verdict_wins_and_cleanups_run_once_before_it() -> None:
    """An attempt delivers one result; clean-ups run (last registered first) before the
    result is delivered; a clean-up registered afterwards runs at once; the timer is gone."""
    clock = Clock()
    attempt = Attempt(clock, 2.0)
    events: list[str] = []
    attempt.closing(lambda: events.append("first"))
    attempt.closing(lambda: events.append("second"))

    def record(result: Result) -> Result:
        events.append(f"result {result.reason}")
        return result

    attempt.deferred.addCallback(record)
    clock.advance(0.5)
    attempt.finish(True, "done")
    attempt.finish(False, "too late")
    attempt.closing(lambda: events.append("late"))
    assert events == ["second", "first", "result done", "late"]
    assert result_of(attempt.deferred) == Result(True, "done", 0.5)
    assert clock.getDelayedCalls() == []


def test_failing_cleanup_does_not_lose_the_result() -> None:
    """A clean-up that raises is logged; the result is still delivered."""
    clock = Clock()
    attempt = Attempt(clock, 2.0)

    def broken() -> None:
        raise RuntimeError("boom")

    attempt.closing(broken)
    attempt.finish(False, "refused")
    assert result_of(attempt.deferred).reason == "refused"


def test_cancel_runs_cleanups() -> None:
    """Cancelling an attempt's Deferred releases its resources and its timer."""
    clock = Clock()
    attempt = Attempt(clock, 2.0)
    closed: list[bool] = []
    attempt.closing(lambda: closed.append(True))
    attempt.deferred.cancel()
    assert closed == [True]
    assert clock.getDelayedCalls() == []
    attempt.deferred.addErrback(lambda f: f.trap(defer.CancelledError))


def test_reason_formatting() -> None:
    """Durations read "2s"/"0.5s"; shown bytes are short and printable."""
    assert seconds(2.0) == "2s"
    assert seconds(0.5) == "0.5s"
    assert show(b"ok") == "'ok'"
    assert show(b"\x00" + b"a" * 40, limit=4) == "'\\x00aaa'…"
