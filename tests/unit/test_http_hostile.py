"""The node's HTTP clients against hostile servers, in memory: a link's counters over HTTP
(`probe.httpcounters`) and an http monitor reading a load source (`probe.http`). Whatever
the server sends (an error with an endless body, ``Content-Length: 10**12``, a body dripped
a byte a second, headers without end, a chunk of 2**48 bytes, a status line and then
nothing), each reading ends with a declared error within its deadline, having taken at
most its cap, and its connection is aborted before the result is delivered."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Any

import pytest
from twisted.internet import error
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IProtocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure

from gtmcluster.config.monitoring import HttpCheck, HttpCounterSource, LoadSource, Sample
from gtmcluster.probe.base import Result, Target
from gtmcluster.probe.httpcounters import CounterError, HttpCounterReader, request_of
from gtmcluster.probe.kinds import make_check
from gtmcluster.probe.linkrate import Counters
from tests.support.probeservers import accept_tcp, monitor

BLOCK = 64 * 1024
COUNTERS_CAP = 256 * 1024
MONITOR_CAP = 65536
TIMEOUT = 2.0
SOURCE = HttpCounterSource(
    "http://192.0.2.7:9100/metrics",
    LoadSource("prometheus"),
    (Sample("rx_bytes_total"),),
    (Sample("tx_bytes_total"),),
    COUNTERS_CAP,
)
PAGE = b"# TYPE rx_bytes_total counter\nrx_bytes_total 1000\n# TYPE tx_bytes_total counter\ntx_bytes_total 2000\n"
VS = Target(ip_address("192.0.2.5"), 80, "virtual server vs")


@dataclass(frozen=True)
class Hostile:
    """A server's answer: *head*, then *block* again and again (endless), or one byte of
    it a second (*drip*)."""

    head: bytes
    block: bytes
    drip: bool = False


ENDLESS = {
    "error_endless": Hostile(b"HTTP/1.1 500 Internal Server Error\r\n\r\n", b"e" * BLOCK),
    "huge_length": Hostile(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % 10**12, b"#" * (BLOCK - 1) + b"\n"),
    "endless_headers": Hostile(b"HTTP/1.1 200 OK\r\n", b"X-Pad: " + b"p" * 100 + b"\r\n"),
    "huge_chunk": Hostile(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffff\r\n", b"#" * (BLOCK - 1) + b"\n"
    ),
}
SLOW = {
    "drip": Hostile(b"HTTP/1.1 200 OK\r\nContent-Length: 4096\r\n\r\n", b"#", drip=True),
    "slow_headers": Hostile(b"HTTP/1.1 200 OK\r\n", b"X", drip=True),
}


@dataclass
class Reading:
    """One reading under way: its outcome when it comes, the server's end of the connection."""

    outcome: list[Any]
    protocol: IProtocol
    transport: StringTransport


def counters_reading(reactor: MemoryReactorClock, reader: HttpCounterReader) -> Reading:
    outcome: list[Any] = []
    reader.read().addBoth(outcome.append)
    protocol, transport = accept_tcp(reactor)
    return Reading(outcome, protocol, transport)


def monitor_reading(reactor: MemoryReactorClock, check: Callable[[Target], Deferred[Result]]) -> Reading:
    outcome: list[Any] = []
    check(VS).addBoth(outcome.append)
    protocol, transport = accept_tcp(reactor)
    return Reading(outcome, protocol, transport)


def serve(reactor: MemoryReactorClock, reading: Reading, hostile: Hostile, cap: int) -> int:
    """Play *hostile* until the client closes the connection; the bytes it was given."""
    given = 0
    reading.protocol.dataReceived(hostile.head)
    given += len(hostile.head)
    while not reading.transport.disconnecting:
        if hostile.drip:
            reactor.advance(1)
            if reading.transport.disconnecting:
                break
        reading.protocol.dataReceived(hostile.block)
        given += len(hostile.block)
        assert given <= cap + 2 * BLOCK + len(hostile.head), "the client read past its cap"
        assert reactor.seconds() <= TIMEOUT, "the client waited past its deadline"
    return given


def reason(outcome: list[Any]) -> str:
    assert outcome, "the reading has no outcome yet"
    got = outcome[0]
    if isinstance(got, Result):
        assert not got.ok and got.data is None, got
        return got.reason
    assert isinstance(got, Failure) and got.check(CounterError), got
    return str(got.value)


EXPECTED = {
    "error_endless": "HTTP 500 not in [200]",
    "huge_length": "HTTP 200, load not read: the body is over max_response_bytes ({cap})",
    "endless_headers": "HTTP 200: no end of headers in {cap} bytes",
    "huge_chunk": "HTTP 200, load not read: the body is over max_response_bytes ({cap})",
    "drip": "no complete response within 2s",
    "slow_headers": "no complete response within 2s",
}


@pytest.mark.parametrize("kind", [*ENDLESS, *SLOW])
def test_a_link_counters_reading_ends_at_its_cap_or_deadline_and_aborts(kind: str) -> None:
    """The counters reader: a declared error, at most its cap read (an error's body not at
    all), within its timeout, the connection aborted before the outcome is delivered; the
    next reading then starts afresh."""
    reactor = MemoryReactorClock()
    reader = HttpCounterReader(reactor, SOURCE, TIMEOUT)
    reading = counters_reading(reactor, reader)
    hostile = {**ENDLESS, **SLOW}[kind]
    given = serve(reactor, reading, hostile, COUNTERS_CAP)
    assert reason(reading.outcome) == EXPECTED[kind].format(cap=COUNTERS_CAP)
    assert reading.transport.disconnected  # aborted (a reset), not closed gracefully
    assert not reader.in_flight and reactor.getDelayedCalls() == []
    if kind == "error_endless":
        assert given == len(hostile.head)  # the status line decided: no byte of the body read
    if kind in SLOW:
        assert reactor.seconds() == TIMEOUT
    # (the outcome came after the abort, and a fresh reading is a fresh connection)
    good = counters_reading(reactor, reader)
    good.protocol.dataReceived(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(PAGE), PAGE))
    assert good.outcome == [Counters(1000, 2000)]
    assert good.transport.disconnecting


@pytest.mark.parametrize("kind", [*ENDLESS, *SLOW])
def test_a_load_source_check_ends_at_its_cap_or_deadline_and_aborts(kind: str) -> None:
    """The http monitor reading a load source: the same, with its max_response_bytes."""
    reactor = MemoryReactorClock()
    source = LoadSource("prometheus", connections=(Sample("conns"),))
    check = make_check(monitor(HttpCheck(tls=False, path="/metrics", load=source), timeout=TIMEOUT), reactor)
    reading = monitor_reading(reactor, check)
    hostile = {**ENDLESS, **SLOW}[kind]
    given = serve(reactor, reading, hostile, MONITOR_CAP)
    assert reason(reading.outcome) == EXPECTED[kind].format(cap=MONITOR_CAP)
    assert reading.transport.disconnected
    assert reactor.getDelayedCalls() == []
    if kind == "error_endless":
        assert given == len(hostile.head)


def test_one_counters_reading_in_flight_at_a_time() -> None:
    """A reading asked for while the last is under way fails at once, opening nothing:
    a slow server cannot stack connections reading after reading."""
    reactor = MemoryReactorClock()
    reader = HttpCounterReader(reactor, SOURCE, TIMEOUT)
    first = counters_reading(reactor, reader)
    second: list[Any] = []
    reader.read().addBoth(second.append)
    assert reason(second) == "the last reading is still in flight"
    assert len(reactor.tcpClients) == 1 and reader.in_flight
    reactor.advance(TIMEOUT)
    assert reason(first.outcome) == "no response within 2s" and first.transport.disconnected
    assert not reader.in_flight


def test_a_cancelled_reading_aborts_its_connection() -> None:
    reactor = MemoryReactorClock()
    reader = HttpCounterReader(reactor, SOURCE, TIMEOUT)
    outcome: list[Any] = []
    d = reader.read()
    d.addBoth(outcome.append)
    _, transport = accept_tcp(reactor)
    d.cancel()
    assert reason(outcome) == "the reading was cancelled"
    assert transport.disconnected and not reader.in_flight and reactor.getDelayedCalls() == []


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        # a page cut short: its last line could be a cut figure
        (b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + PAGE, "the connection closed after 100 of the body's 500"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n63\r\n" + PAGE,
            "the connection closed before the chunked body's last chunk",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "HTTP 200, load not read: a malformed chunk size line b'zz'",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1" + b"0" * 5000 + b"\r\n\r\n", "Content-Length of more than 18 digits"),
    ],
)
def test_a_page_not_whole_gives_no_counters(reply: bytes, expected: str) -> None:
    reactor = MemoryReactorClock()
    reading = counters_reading(reactor, HttpCounterReader(reactor, SOURCE, TIMEOUT))
    reading.protocol.dataReceived(reply)
    if not reading.outcome:
        reading.protocol.connectionLost(Failure(error.ConnectionDone()))
    assert expected in reason(reading.outcome)
    assert reading.transport.disconnecting


def test_a_whole_chunked_page_is_read_without_waiting_for_the_close() -> None:
    """The last chunk ends the body: the counters come at once (a server that keeps the
    connection open costs nothing), and the connection is closed."""
    reactor = MemoryReactorClock()
    reading = counters_reading(reactor, HttpCounterReader(reactor, SOURCE, TIMEOUT))
    half = len(PAGE) // 2
    body = b"%x\r\n%s\r\n%x;ext=1\r\n%s\r\n0\r\n\r\n" % (half, PAGE[:half], len(PAGE) - half, PAGE[half:])
    for i in range(0, len(body), 7):  # (split anywhere)
        reading.protocol.dataReceived(
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" if i == 0 else b"") + body[i : i + 7]
        )
    assert reading.outcome == [Counters(1000, 2000)]
    assert reading.transport.disconnecting


def test_the_request_of_a_counters_url() -> None:
    settings, target = request_of(
        HttpCounterSource("https://[2001:db8::1]:8443/stats;csv?x=1", LoadSource("haproxy", proxy="p"))
    )
    assert (settings.tls, settings.path, settings.host, settings.max_response_bytes) == (
        True,
        "/stats;csv?x=1",
        "[2001:db8::1]:8443",
        4 * 1024 * 1024,
    )
    assert (target.address, target.port) == (ip_address("2001:db8::1"), 8443)
    settings, target = request_of(SOURCE)
    assert (settings.tls, settings.path, settings.host, target.port) == (False, "/metrics", "192.0.2.7:9100", 9100)
