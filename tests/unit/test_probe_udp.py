"""The udp check in memory: reply, expected bytes, port unreachable, timeout, socket errors."""

from __future__ import annotations

import errno
from ipaddress import ip_address

import pytest
from twisted.internet.error import CannotListenError, MessageLengthError

from gtmcluster.config.monitoring import UdpCheck
from gtmcluster.probe.base import Result, Target
from gtmcluster.probe.kinds import make_check
from tests.support.probeservers import UdpMemoryReactor, monitor, result_of, still_running

VS = Target(ip_address("192.0.2.5"), 5000, "virtual server vs")


@pytest.fixture
def reactor() -> UdpMemoryReactor:
    return UdpMemoryReactor()


def test_any_reply_is_a_success(reactor: UdpMemoryReactor) -> None:
    """The datagram goes from a connected ephemeral IPv4 socket to the target; any reply is
    a success, after which the socket is closed and no timer remains."""
    d = make_check(monitor(UdpCheck(b"ping")), reactor)(VS)
    port = reactor.udp[0]
    assert port.interface == "0.0.0.0"
    assert port.connected_to == ("192.0.2.5", 5000)
    assert port.written == [b"ping"]
    reactor.advance(0.05)
    port.reply(b"whatever")
    assert result_of(d) == Result(True, "reply", 0.05)
    assert port.stopped
    assert reactor.getDelayedCalls() == []


def test_expected_bytes_in_the_reply(reactor: UdpMemoryReactor) -> None:
    """With expect, the reply must contain it."""
    d = make_check(monitor(UdpCheck(b"ping", expect=b"pong")), reactor)(VS)
    reactor.udp[0].reply(b"echo: pong!")
    assert result_of(d) == Result(True, "reply with 'pong'", 0.0)


def test_reply_without_the_expected_bytes_fails(reactor: UdpMemoryReactor) -> None:
    """A reply that lacks the expected bytes fails at once (only the target can answer a
    connected socket)."""
    d = make_check(monitor(UdpCheck(b"ping", expect=b"pong")), reactor)(VS)
    reactor.udp[0].reply(b"ERROR")
    assert result_of(d) == Result(False, "reply lacks 'pong'", 0.0)
    assert reactor.udp[0].stopped


def test_port_unreachable(reactor: UdpMemoryReactor) -> None:
    """An ICMP port unreachable (connectionRefused) fails the check at once."""
    d = make_check(monitor(UdpCheck(b"ping")), reactor)(VS)
    reactor.udp[0].protocol.connectionRefused()
    assert result_of(d) == Result(False, "port unreachable", 0.0)
    assert reactor.udp[0].stopped
    assert reactor.getDelayedCalls() == []


def test_port_closed_by_the_reactor_is_port_unreachable(reactor: UdpMemoryReactor) -> None:
    """Under epoll, Twisted closes a connected UDP port on an ICMP error instead of calling
    connectionRefused; that too is "port unreachable", at once."""
    d = make_check(monitor(UdpCheck(b"ping")), reactor)(VS)
    reactor.udp[0].lose_by_reactor()
    assert result_of(d) == Result(False, "port unreachable", 0.0)


def test_no_reply_times_out(reactor: UdpMemoryReactor) -> None:
    """No reply within the timeout: a failure at the timeout, and the socket is closed."""
    d = make_check(monitor(UdpCheck(b"ping"), timeout=2.0), reactor)(VS)
    reactor.advance(1.5)
    assert still_running(d)
    reactor.advance(0.5)
    assert result_of(d) == Result(False, "no reply within 2s", 2.0)
    assert reactor.udp[0].stopped
    assert reactor.getDelayedCalls() == []


def test_ipv6_target_and_monitor_port(reactor: UdpMemoryReactor) -> None:
    """An IPv6 target gets an IPv6 socket; the monitor's port wins over the target's."""
    make_check(monitor(UdpCheck(b"ping"), port=6000), reactor)(Target(ip_address("2001:db8::5"), 5000, "vs6"))
    port = reactor.udp[0]
    assert port.interface == "::"
    assert port.connected_to == ("2001:db8::5", 6000)


def test_send_error_is_a_failure(reactor: UdpMemoryReactor) -> None:
    """A send the kernel refuses (no route) fails the check with that reason, and closes."""
    reactor.write_error = OSError(errno.ENETUNREACH, "Network is unreachable")
    d = make_check(monitor(UdpCheck(b"ping")), reactor)(VS)
    assert result_of(d) == Result(False, "send failed: network is unreachable", 0.0)
    assert reactor.udp[0].stopped
    assert reactor.getDelayedCalls() == []


def test_oversized_datagram_is_a_failure(reactor: UdpMemoryReactor) -> None:
    """A payload too big for one datagram fails the check instead of raising."""
    reactor.write_error = MessageLengthError()
    d = make_check(monitor(UdpCheck(b"x" * 70000)), reactor)(VS)
    assert result_of(d) == Result(False, "send failed: 70000 bytes do not fit in a datagram", 0.0)
    assert reactor.udp[0].stopped


def test_no_socket_is_a_failure(reactor: UdpMemoryReactor) -> None:
    """A UDP socket that cannot be opened fails the check; nothing is left behind."""
    reactor.listen_error = CannotListenError("", 0, OSError(errno.EMFILE, "Too many open files"))
    d = make_check(monitor(UdpCheck(b"ping")), reactor)(VS)
    assert result_of(d).reason.startswith("cannot open a UDP socket: ")
    assert reactor.getDelayedCalls() == []


def test_up_without_reply_counts_silence_as_up(reactor: UdpMemoryReactor) -> None:
    """With up_without_reply (F5's udp monitor without recv), no reply within the timeout
    is a success; a port unreachable still fails at once, and a reply succeeds at once."""
    d = make_check(monitor(UdpCheck(b"ping", up_without_reply=True), timeout=2.0), reactor)(VS)
    reactor.advance(2.0)
    assert result_of(d) == Result(True, "no reply and no port unreachable within 2s", 2.0)
    assert reactor.udp[0].stopped
    d = make_check(monitor(UdpCheck(b"ping", up_without_reply=True)), reactor)(VS)
    reactor.udp[1].protocol.connectionRefused()
    assert result_of(d) == Result(False, "port unreachable", 0.0)
    d = make_check(monitor(UdpCheck(b"ping", up_without_reply=True)), reactor)(VS)
    reactor.udp[2].reply(b"pong")
    assert result_of(d) == Result(True, "reply", 0.0)
    assert reactor.getDelayedCalls() == []
