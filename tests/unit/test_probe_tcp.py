"""The tcp check in memory: connect, refuse, time out, send/expect; nothing left behind."""

from __future__ import annotations

from ipaddress import ip_address

import pytest
from twisted.internet import defer, error
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from gtmcluster.config.monitoring import TcpCheck
from gtmcluster.probe.base import Result, Target
from gtmcluster.probe.kinds import make_check
from tests.support.probeservers import accept_tcp, monitor, refuse_tcp, result_of, still_running

VS = Target(ip_address("192.0.2.5"), 80, "virtual server vs")


@pytest.fixture
def reactor() -> MemoryReactorClock:
    return MemoryReactorClock()


def test_connecting_is_a_success_and_closes_gracefully(reactor: MemoryReactorClock) -> None:
    """A plain tcp check succeeds once connected, after the reactor's time to connect, and
    closes the connection without a reset and without a timer left."""
    d = make_check(monitor(TcpCheck()), reactor)(VS)
    host, port, _, _, _ = reactor.tcpClients[0]
    assert (host, port) == ("192.0.2.5", 80)
    reactor.advance(0.25)
    assert still_running(d)
    _, transport = accept_tcp(reactor)
    assert result_of(d) == Result(True, "connected", 0.25)
    assert transport.disconnecting and not transport.disconnected
    assert reactor.getDelayedCalls() == []


def test_refused_connection_fails_with_that_reason(reactor: MemoryReactorClock) -> None:
    """A refused connection is a failure result "connection refused", not an error."""
    d = make_check(monitor(TcpCheck()), reactor)(VS)
    refuse_tcp(reactor, error.ConnectionRefusedError())
    assert result_of(d) == Result(False, "connection refused", 0.0)
    assert reactor.getDelayedCalls() == []


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        (error.NoRouteError(), "no route to host"),
        (error.TimeoutError(), "no connection within 2s"),
        (error.ConnectError(string="Network is unreachable"), "connect failed: network is unreachable"),
        (error.ConnectError(), "connect failed"),
    ],
)
def test_other_connect_failures_name_the_cause(reactor: MemoryReactorClock, reason: Exception, text: str) -> None:
    """Each way a connection can fail gives its own short reason."""
    d = make_check(monitor(TcpCheck()), reactor)(VS)
    refuse_tcp(reactor, reason)
    assert result_of(d).reason == text


def test_timeout_while_connecting_cancels_the_attempt(reactor: MemoryReactorClock) -> None:
    """No connection within the timeout: a failure at exactly the timeout, the connection
    attempt is stopped and no timer is left."""
    d = make_check(monitor(TcpCheck(), timeout=2.0), reactor)(VS)
    reactor.advance(1.999)
    assert still_running(d)
    reactor.advance(0.001)
    assert result_of(d) == Result(False, "no connection within 2s", 2.0)
    assert reactor.connectors[0].stoppedConnecting
    assert reactor.getDelayedCalls() == []


def test_timeout_waiting_for_expected_bytes_aborts_the_connection(reactor: MemoryReactorClock) -> None:
    """Connected but the expected bytes never come: "no reply within", and the connection
    is aborted (reset), not left open."""
    d = make_check(monitor(TcpCheck(expect=b"+OK"), timeout=1.5), reactor)(VS)
    _, transport = accept_tcp(reactor)
    reactor.advance(1.5)
    assert result_of(d) == Result(False, "no reply within 1.5s", 1.5)
    assert transport.disconnected
    assert reactor.getDelayedCalls() == []


def test_send_then_expect_across_reads(reactor: MemoryReactorClock) -> None:
    """The send bytes are written on connect; the expected bytes may arrive split over
    several reads; the verdict comes as soon as they are complete."""
    d = make_check(monitor(TcpCheck(send=b"PING\r\n", expect=b"PONG")), reactor)(VS)
    protocol, transport = accept_tcp(reactor)
    assert transport.value() == b"PING\r\n"
    protocol.dataReceived(b"+PO")
    assert still_running(d)
    protocol.dataReceived(b"NG\r\n")
    assert result_of(d) == Result(True, "received 'PONG'", 0.0)
    assert transport.disconnecting and not transport.disconnected


def test_expected_bytes_missing_when_peer_closes(reactor: MemoryReactorClock) -> None:
    """The peer closes without sending the expected bytes: a failure that says how much came."""
    d = make_check(monitor(TcpCheck(send=b"PING\r\n", expect=b"PONG")), reactor)(VS)
    protocol, _ = accept_tcp(reactor)
    protocol.dataReceived(b"-ERR")
    protocol.connectionLost(Failure(error.ConnectionDone()))
    assert result_of(d).reason == "closed after 4 bytes without 'PONG'"


def test_peer_closes_without_a_byte(reactor: MemoryReactorClock) -> None:
    """A peer that accepts and closes at once fails an expect check: "closed without a reply"."""
    d = make_check(monitor(TcpCheck(expect=b"220 ")), reactor)(VS)
    protocol, _ = accept_tcp(reactor)
    protocol.connectionLost(Failure(error.ConnectionDone()))
    assert result_of(d) == Result(False, "closed without a reply", 0.0)


def test_send_without_expect_is_written_then_succeeds(reactor: MemoryReactorClock) -> None:
    """With only send bytes, they are written and the connection closed gracefully so they
    are flushed."""
    d = make_check(monitor(TcpCheck(send=b"QUIT\r\n")), reactor)(VS)
    _, transport = accept_tcp(reactor)
    assert transport.value() == b"QUIT\r\n"
    assert result_of(d).reason == "connected"
    assert transport.disconnecting and not transport.disconnected


def test_reject_fails_as_soon_as_the_reply_holds_it(reactor: MemoryReactorClock) -> None:
    """With reject (F5's reverse), rejected bytes in the reply fail the check at once, even
    split over reads, and the connection is aborted."""
    d = make_check(monitor(TcpCheck(send=b"PING\r\n", reject=b"ERROR")), reactor)(VS)
    protocol, transport = accept_tcp(reactor)
    protocol.dataReceived(b"busy: ERR")
    assert still_running(d)
    protocol.dataReceived(b"OR\r\n")
    assert result_of(d) == Result(False, "reply contains 'ERROR'", 0.0)
    assert transport.disconnected


def test_reject_passes_when_a_reply_ends_without_it(reactor: MemoryReactorClock) -> None:
    """A reply without the rejected bytes passes when the peer closes, or when the timeout
    comes after some bytes came (a server that keeps the connection open)."""
    d = make_check(monitor(TcpCheck(reject=b"ERROR")), reactor)(VS)
    protocol, _ = accept_tcp(reactor)
    protocol.dataReceived(b"+OK ready\r\n")
    protocol.connectionLost(Failure(error.ConnectionDone()))
    assert result_of(d) == Result(True, "closed after 11 bytes without 'ERROR'", 0.0)
    d = make_check(monitor(TcpCheck(reject=b"ERROR"), timeout=1.5), reactor)(VS)
    protocol, transport = accept_tcp(reactor)
    protocol.dataReceived(b"+OK")
    reactor.advance(1.5)
    assert result_of(d) == Result(True, "3 bytes without 'ERROR' within 1.5s", 1.5)
    assert transport.disconnecting and not transport.disconnected
    assert reactor.getDelayedCalls() == []


def test_reject_without_any_reply_fails(reactor: MemoryReactorClock) -> None:
    """No reply at all fails a reject check, as it fails an expect check (F5's reverse
    inverts a match, not silence)."""
    d = make_check(monitor(TcpCheck(reject=b"ERROR"), timeout=1.5), reactor)(VS)
    accept_tcp(reactor)
    reactor.advance(1.5)
    assert result_of(d) == Result(False, "no reply within 1.5s", 1.5)
    d = make_check(monitor(TcpCheck(reject=b"ERROR")), reactor)(VS)
    protocol, _ = accept_tcp(reactor)
    protocol.connectionLost(Failure(error.ConnectionDone()))
    assert result_of(d) == Result(False, "closed without a reply", 0.0)


def test_ipv6_target_and_monitor_port(reactor: MemoryReactorClock) -> None:
    """An IPv6 address is connected to as such, and the monitor's port wins over the target's."""
    make_check(monitor(TcpCheck(), port=8443), reactor)(Target(ip_address("2001:db8::5"), 80, "vs6"))
    host, port, _, _, _ = reactor.tcpClients[0]
    assert (host, port) == ("2001:db8::5", 8443)


def test_cancelling_the_check_releases_everything(reactor: MemoryReactorClock) -> None:
    """A caller that cancels the check gets CancelledError, and the connection attempt and
    the timer are gone."""
    d = make_check(monitor(TcpCheck()), reactor)(VS)
    d.cancel()
    failures: list[Failure] = []
    d.addErrback(failures.append)
    assert failures and failures[0].check(defer.CancelledError)
    assert reactor.connectors[0].stoppedConnecting
    assert reactor.getDelayedCalls() == []


def test_late_events_after_the_verdict_are_ignored(reactor: MemoryReactorClock) -> None:
    """Bytes and a close that arrive after the timeout change nothing (the first verdict wins)."""
    d = make_check(monitor(TcpCheck(expect=b"OK"), timeout=1.0), reactor)(VS)
    protocol, _ = accept_tcp(reactor)
    reactor.advance(1.0)
    protocol.dataReceived(b"OK")
    protocol.connectionLost(Failure(error.ConnectionDone()))
    assert result_of(d).reason == "no reply within 1s"
