"""The http check in memory: the request it writes, and its verdict on every kind of reply."""

from __future__ import annotations

from ipaddress import ip_address
from pathlib import Path

import pytest
from OpenSSL import SSL
from service_identity import VerificationError
from twisted.internet import error
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IProtocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure

from gtmcluster.config.monitoring import HttpCheck, LoadSource, Sample
from gtmcluster.probe import httpframe
from gtmcluster.probe.base import Check, Result, Target
from gtmcluster.probe.http import host_header, server_name
from gtmcluster.probe.kinds import make_check
from gtmcluster.probe.stream import lost_reason
from tests.support.probeservers import accept_tcp, monitor, result_of, still_running

VS = Target(ip_address("192.0.2.5"), 80, "virtual server vs")
OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"


@pytest.fixture
def reactor() -> MemoryReactorClock:
    return MemoryReactorClock()


def start(
    reactor: MemoryReactorClock, settings: HttpCheck, target: Target = VS, timeout: float = 2.0
) -> tuple[Deferred[Result], IProtocol, StringTransport]:
    d = make_check(monitor(settings, timeout=timeout), reactor)(target)
    protocol, transport = accept_tcp(reactor)
    return d, protocol, transport


def close(protocol: IProtocol) -> None:
    protocol.connectionLost(Failure(error.ConnectionDone()))


def test_request_line_and_headers(reactor: MemoryReactorClock) -> None:
    """One HTTP/1.0 request: method and path, Host = the address with a non-default port,
    the monitor's User-Agent, and Connection: close."""
    _, _, transport = start(reactor, HttpCheck(tls=False, path="/health"), Target(VS.address, 8080, "vs"))
    assert transport.value() == (
        b"GET /health HTTP/1.0\r\n"
        b"Host: 192.0.2.5:8080\r\n"
        b"User-Agent: gtmcluster-monitor\r\n"
        b"Accept: */*\r\n"
        b"Connection: close\r\n\r\n"
    )


def test_configured_host_header_and_post(reactor: MemoryReactorClock) -> None:
    """A configured host is sent as given; POST carries an empty body's Content-Length."""
    _, _, transport = start(reactor, HttpCheck(tls=False, method="POST", path="/probe", host="www.example.com"))
    sent = transport.value()
    assert sent.startswith(b"POST /probe HTTP/1.0\r\nHost: www.example.com\r\n")
    assert b"\r\nContent-Length: 0\r\n" in sent


def test_host_header_and_server_name_defaults() -> None:
    """Without a host: the address (IPv6 bracketed), with the port only when not the default;
    the TLS server name drops a port from a configured host."""
    v6 = ip_address("2001:db8::5")
    assert host_header(HttpCheck(tls=False), v6, 80) == "[2001:db8::5]"
    assert host_header(HttpCheck(tls=True), v6, 443) == "[2001:db8::5]"
    assert host_header(HttpCheck(tls=True), v6, 8443) == "[2001:db8::5]:8443"
    assert server_name(HttpCheck(tls=True), v6) == "2001:db8::5"
    assert server_name(HttpCheck(tls=True, host="www.example.com:8443"), v6) == "www.example.com"
    assert server_name(HttpCheck(tls=True, host="[2001:db8::7]:8443"), v6) == "2001:db8::7"


def test_expected_status_succeeds_at_once(reactor: MemoryReactorClock) -> None:
    """Without body conditions the status line decides: success on it, without waiting for
    the body, and the connection is closed gracefully with no timer left."""
    d, protocol, transport = start(reactor, HttpCheck(tls=False))
    reactor.advance(0.125)
    protocol.dataReceived(b"HTTP/1.1 200 OK\r\n")
    assert result_of(d) == Result(True, "HTTP 200", 0.125)
    assert transport.disconnecting and not transport.disconnected
    assert reactor.getDelayedCalls() == []


def test_unexpected_status_fails_with_the_list(reactor: MemoryReactorClock) -> None:
    """A status outside expect_status fails at once and names what was expected."""
    d, protocol, transport = start(reactor, HttpCheck(tls=False, expect_status=(200, 301), expect_body="ok"))
    protocol.dataReceived(b"HTTP/1.0 503 Service Unavailable\r\n")
    assert result_of(d).reason == "HTTP 503 not in [200, 301]"
    assert transport.disconnected


def test_body_substring_missing(reactor: MemoryReactorClock) -> None:
    """A good status with a body that lacks expect_body fails, once the body is complete."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False, expect_body="ok"))
    protocol.dataReceived(OK + b"nothing to see here")
    assert still_running(d)
    close(protocol)
    assert result_of(d) == Result(False, "HTTP 200, body lacks 'ok'", 0.0)


def test_body_substring_present(reactor: MemoryReactorClock) -> None:
    """The body contains expect_body: success when the peer closes."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False, expect_body="all ok"))
    protocol.dataReceived(OK + b"status: all ok\n")
    close(protocol)
    assert result_of(d) == Result(True, "HTTP 200", 0.0)


@pytest.mark.parametrize(
    ("body", "ok", "reason"),
    [
        (b"version: 42\n", True, "HTTP 200"),
        (b"version: x\n", False, r"HTTP 200, body does not match /version: \d+/"),
        (b"\xff\xfeversion: 7", True, "HTTP 200"),  # undecodable bytes are replaced, not fatal
    ],
)
def test_body_regex(reactor: MemoryReactorClock, body: bytes, ok: bool, reason: str) -> None:
    """expect_body_regex is searched in the body decoded as UTF-8 (errors replaced)."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False, expect_body_regex=r"version: \d+"))
    protocol.dataReceived(OK + body)
    close(protocol)
    assert result_of(d) == Result(ok, reason, 0.0)


@pytest.mark.parametrize(
    ("body", "ok", "reason"),
    [
        (b"all ok\n", True, "HTTP 200"),
        (b"down for maintenance\n", False, "HTTP 200, body matches rejected /maintenance/"),
    ],
)
def test_reject_body_regex(reactor: MemoryReactorClock, body: bytes, ok: bool, reason: str) -> None:
    """reject_body_regex (F5's reverse) fails the check when the body matches it."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False, reject_body_regex="maintenance"))
    protocol.dataReceived(OK + body)
    close(protocol)
    assert result_of(d) == Result(ok, reason, 0.0)


def test_status_classes_in_the_reason(reactor: MemoryReactorClock) -> None:
    """A status outside expect_status names the wanted ones, whole classes as 2xx."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False, expect_status=(*range(200, 400), 404)))
    protocol.dataReceived(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
    assert result_of(d) == Result(False, "HTTP 503 not in [2xx, 3xx, 404]", 0.0)


def test_response_split_into_single_bytes(reactor: MemoryReactorClock) -> None:
    """Headers and body arriving a byte at a time are put together; with Content-Length the
    verdict comes when the body is complete, without waiting for the close."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False, expect_body="ok"))
    response = b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nX-Slow: yes\r\n\r\nall ok\nTRAILING"
    for i in range(len(response) - 8):
        assert still_running(d), i
        protocol.dataReceived(response[i : i + 1])
    assert result_of(d) == Result(True, "HTTP 200", 0.0)


def test_content_length_limits_the_body(reactor: MemoryReactorClock) -> None:
    """Bytes beyond Content-Length are not part of the body."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False, expect_body="ok"))
    protocol.dataReceived(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnope ok")
    assert result_of(d).reason == "HTTP 200, body lacks 'ok'"


def test_head_has_no_body(reactor: MemoryReactorClock) -> None:
    """A HEAD response ends with its headers, whatever its Content-Length says."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False, method="HEAD", expect_body_regex="^$"))
    protocol.dataReceived(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n")
    assert result_of(d) == Result(True, "HTTP 200", 0.0)


def test_close_before_any_byte(reactor: MemoryReactorClock) -> None:
    """A peer that accepts and closes without answering fails the check."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False))
    close(protocol)
    assert result_of(d).reason == "connection closed without a response"


def test_close_inside_the_status_line(reactor: MemoryReactorClock) -> None:
    """A close in the middle of the status line is a failure that shows what came."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False))
    protocol.dataReceived(b"HTTP/1.")
    close(protocol)
    assert result_of(d).reason == "connection closed inside the status line 'HTTP/1.'"


def test_close_inside_the_headers(reactor: MemoryReactorClock) -> None:
    """With body conditions, a close before the end of the headers is a failure."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False, expect_body="ok"))
    protocol.dataReceived(b"HTTP/1.1 200 OK\r\nContent-Le")
    close(protocol)
    assert result_of(d).reason == "HTTP 200: no end of headers before the connection closed"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n", "malformed status line 'SSH-2.0-OpenSSH_9.6\\r'"),
        (b"HTTP/1.1 2OO OK\r\n", "malformed status line 'HTTP/1.1 2OO OK\\r'"),
        (b"\x16\x03\x01\x02\x00", "not an HTTP response: '\\x16\\x03\\x01\\x02\\x00'"),
        (b"<html>", "not an HTTP response: '<html>'"),
    ],
)
def test_garbage_instead_of_a_status_line(reactor: MemoryReactorClock, data: bytes, reason: str) -> None:
    """Whatever is not an HTTP status line fails at once, never raises."""
    d, protocol, transport = start(reactor, HttpCheck(tls=False))
    protocol.dataReceived(data)
    assert result_of(d).reason == reason
    assert transport.disconnected


def test_status_line_without_reason_phrase(reactor: MemoryReactorClock) -> None:
    """``HTTP/1.1 204`` with no reason phrase is a valid status line."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False, expect_status=(204,)))
    protocol.dataReceived(b"HTTP/1.1 204\n\n")
    assert result_of(d) == Result(True, "HTTP 204", 0.0)


def test_response_size_cap(reactor: MemoryReactorClock) -> None:
    """At max_response_bytes the check stops reading, closes, and judges on what it has;
    the reason says so."""
    d, protocol, transport = start(reactor, HttpCheck(tls=False, expect_body="needle", max_response_bytes=64))
    protocol.dataReceived(OK + b"x" * 100 + b"needle")
    assert result_of(d).reason == "HTTP 200, body lacks 'needle' (read capped at 64 bytes)"
    assert transport.disconnected


def test_response_size_cap_with_the_body_found(reactor: MemoryReactorClock) -> None:
    """What was read before the cap can still satisfy the check."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False, expect_body="needle", max_response_bytes=64))
    protocol.dataReceived(OK + b"needle")
    protocol.dataReceived(b"y" * 100)
    assert result_of(d) == Result(True, "HTTP 200 (read capped at 64 bytes)", 0.0)


def test_headers_longer_than_the_cap(reactor: MemoryReactorClock) -> None:
    """Headers that do not end within the cap fail the check."""
    d, protocol, _ = start(reactor, HttpCheck(tls=False, expect_body="ok", max_response_bytes=64))
    protocol.dataReceived(b"HTTP/1.1 200 OK\r\n" + b"X-Filler: " + b"z" * 100)
    assert result_of(d).reason == "HTTP 200: no end of headers in 64 bytes"


def test_slow_response_times_out(reactor: MemoryReactorClock) -> None:
    """A response that does not complete in time fails at the timeout, the connection is
    aborted, and no timer remains."""
    d, protocol, transport = start(reactor, HttpCheck(tls=False, expect_body="ok"), timeout=1.0)
    reactor.advance(0.5)
    protocol.dataReceived(b"HTTP/1.1 200 OK\r\n")
    reactor.advance(0.5)
    assert result_of(d) == Result(False, "no complete response within 1s", 1.0)
    assert transport.disconnected
    assert reactor.getDelayedCalls() == []


def test_silent_server_times_out(reactor: MemoryReactorClock) -> None:
    """A server that accepts and says nothing: "no response within"."""
    d, _, _ = start(reactor, HttpCheck(tls=False), timeout=2.0)
    reactor.advance(2.0)
    assert result_of(d).reason == "no response within 2s"


def test_https_speaks_tls_and_reports_handshake_failures(reactor: MemoryReactorClock) -> None:
    """An https check starts a TLS handshake (not plain HTTP); a plain HTTP server's answer
    fails the handshake, and OpenSSL's reason is the check's."""
    d, protocol, transport = start(reactor, HttpCheck(tls=True, verify_tls=False))
    assert transport.value()[:1] == b"\x16"  # a TLS handshake record: the ClientHello
    assert b"GET /" not in transport.value()
    protocol.dataReceived(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    close(protocol)
    assert result_of(d).reason.startswith("TLS handshake failed: ")


def test_tls_error_reasons() -> None:
    """OpenSSL errors and certificate name mismatches are reported by their reason strings."""
    failed = SSL.Error([("SSL routines", "", "certificate verify failed")])
    assert lost_reason(Failure(failed), "www.example.com") == "TLS handshake failed: certificate verify failed"
    mismatch = VerificationError(errors=[])
    assert lost_reason(Failure(mismatch), "www.example.com") == "TLS certificate is not valid for www.example.com"
    assert lost_reason(Failure(error.ConnectionDone()), "www.example.com") is None


def test_https_timeout_during_handshake(reactor: MemoryReactorClock) -> None:
    """A TLS server that never completes the handshake: "no TLS handshake within"."""
    d, _, _ = start(reactor, HttpCheck(tls=True, verify_tls=False), timeout=1.0)
    reactor.advance(1.0)
    assert result_of(d).reason == "no TLS handshake within 1s"
    assert reactor.getDelayedCalls() == []


def test_unreadable_ca_file_fails_without_connecting(reactor: MemoryReactorClock, tmp_path: Path) -> None:
    """A ca_file that cannot be used makes every check fail with that reason; nothing connects."""
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    d = make_check(monitor(HttpCheck(tls=True, ca_file=bad)), reactor)(VS)
    assert result_of(d).reason.startswith(f"cannot use ca_file {bad}:")
    assert reactor.tcpClients == []
    assert reactor.getDelayedCalls() == []


# -- load sources (docs/load-sources.md)

STATS_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n"
STATS_CSV = b"# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout\nweb,FRONTEND,,,7,9,100,40,%d,%d\n"


def chunked(body: bytes, size: int = 16) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def stats_reply(reactor: MemoryReactorClock, check: Check, bytes_in: int, bytes_out: int) -> Result:
    d = check(VS)
    protocol, _ = accept_tcp(reactor)
    protocol.dataReceived(STATS_HEAD + chunked(STATS_CSV % (bytes_in, bytes_out)))
    close(protocol)
    return result_of(d)


def test_load_from_a_chunked_body_and_counter_rates(reactor: MemoryReactorClock) -> None:
    """HAProxy answers HTTP/1.0 with chunks: they are joined before reading. The first check
    gives the gauges, the next the bytes rate as kbps (by the reactor's clock); a counter
    that went down was reset."""
    settings = HttpCheck(tls=False, path="/stats;csv", load=LoadSource("haproxy", proxy="web", server="FRONTEND"))
    check = make_check(monitor(settings), reactor)  # one checker: it keeps the last counters
    first = stats_reply(reactor, check, 1000, 9000)
    assert first.ok and first.data == {"connections": 7, "capacity": 100}
    assert first.reason == "HTTP 200, load connections=7 capacity=100"
    reactor.advance(5)
    second = stats_reply(reactor, check, 3000, 32000)  # 25,000 bytes in 5 s
    assert second.ok and second.data == {"connections": 7, "capacity": 100, "kbps": 40.0}
    reactor.advance(2)
    reset = stats_reply(reactor, check, 100, 400)  # restarted: 500 bytes since
    assert reset.data is not None and reset.data["kbps"] == pytest.approx(2.0)


def test_load_counters_only_first_check_is_up_without_figures(reactor: MemoryReactorClock) -> None:
    """A source of counters alone has no figure on its first check: up, nothing published."""
    source = LoadSource("prometheus", packets=(Sample("pkts_total"),))
    d, protocol, _ = start(reactor, HttpCheck(tls=False, path="/metrics", load=source))
    protocol.dataReceived(OK + b"# TYPE pkts counter\npkts_total 5\n")
    close(protocol)
    result = result_of(d)
    assert result.ok and result.data is None
    assert result.reason == "HTTP 200, load counters read (rates from the next check)"


def test_load_unreadable_or_bad_status_fails(reactor: MemoryReactorClock) -> None:
    settings = HttpCheck(tls=False, path="/nginx_status", load=LoadSource("nginx"))
    d, protocol, _ = start(reactor, settings)
    protocol.dataReceived(OK + b"<html>welcome</html>")
    close(protocol)
    result = result_of(d)
    assert not result.ok and result.data is None
    assert result.reason == "HTTP 200, not nginx stub_status (no 'Active connections: N' first line)"
    d, protocol, _ = start(reactor, settings)
    protocol.dataReceived(b"HTTP/1.1 403 Forbidden\r\n\r\n")
    assert result_of(d).reason == "HTTP 403 not in [200]"


def test_load_of_a_body_over_the_cap_is_not_read(reactor: MemoryReactorClock) -> None:
    """A body cut at max_response_bytes could end in a cut figure: it is refused, saying why."""
    source = LoadSource("prometheus", connections=(Sample("conns"),))
    d, protocol, _ = start(reactor, HttpCheck(tls=False, path="/metrics", load=source, max_response_bytes=100))
    protocol.dataReceived(OK + b"# a long comment\n" * 3 + b"conns 12345\n")
    result = result_of(d)
    assert not result.ok and result.data is None
    assert result.reason == "HTTP 200, load not read: the body is over max_response_bytes (100)"


def dechunk(body: bytes) -> bytes:
    """The data of a chunked body, as far as it is well formed (the rest is dropped)."""
    chunks = httpframe.Chunks()
    chunks.scan(body)
    return chunks.data(body)


def test_dechunk_keeps_what_is_well_formed() -> None:
    assert dechunk(chunked(b"hello world", 3)) == b"hello world"
    assert dechunk(b"5\r\nhello\r\nzz\r\nmore") == b"hello"
    assert dechunk(b"not chunked") == b""


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (
            OK.replace(b"\r\n\r\n", b"\r\nContent-Length: 40\r\n\r\n") + b"conns 12",  # (the figure was 12345)
            "HTTP 200, load not read: the connection closed after 8 of the body's 40 bytes",
        ),
        (
            OK.replace(b"\r\n\r\n", b"\r\nTransfer-Encoding: chunked\r\n\r\n") + b"8\r\nconns 12",
            "HTTP 200, load not read: the connection closed before the chunked body's last chunk",
        ),
        (
            OK.replace(b"\r\n\r\n", b"\r\nTransfer-Encoding: chunked\r\n\r\n") + b"4\r\nconns 12\r\n0\r\n\r\n",
            "HTTP 200, load not read: chunk data not followed by a line end at byte 7 of the body",
        ),
    ],
)
def test_load_of_a_body_cut_short_is_not_read(reactor: MemoryReactorClock, reply: bytes, reason: str) -> None:
    """A body that is not whole (shorter than its Content-Length, chunks without the last
    one, malformed chunks) could end in a cut figure: it is refused, saying why."""
    source = LoadSource("prometheus", connections=(Sample("conns"),))
    d, protocol, _ = start(reactor, HttpCheck(tls=False, path="/metrics", load=source))
    protocol.dataReceived(reply)
    close(protocol)
    result = result_of(d)
    assert not result.ok and result.data is None
    assert result.reason == reason


def test_a_content_length_of_thousands_of_digits_is_an_error(reactor: MemoryReactorClock) -> None:
    """(int() refuses more than 4,300 digits: that must not escape as an exception.)"""
    d, protocol, transport = start(reactor, HttpCheck(tls=False, expect_body="ok"))
    protocol.dataReceived(b"HTTP/1.1 200 OK\r\nContent-Length: 1" + b"0" * 5000 + b"\r\n\r\nok")
    assert result_of(d).reason == "HTTP 200: Content-Length of more than 18 digits"
    assert transport.disconnected


def test_a_whole_chunked_body_is_judged_without_waiting_for_the_close(reactor: MemoryReactorClock) -> None:
    """The last chunk ends the body: the verdict comes at once, and the connection is
    closed (a server that keeps it open costs nothing)."""
    source = LoadSource("prometheus", connections=(Sample("conns"),))
    d, protocol, transport = start(reactor, HttpCheck(tls=False, path="/metrics", load=source))
    protocol.dataReceived(OK.replace(b"\r\n\r\n", b"\r\nTransfer-Encoding: chunked\r\n\r\n") + chunked(b"conns 7\n", 3))
    assert result_of(d) == Result(True, "HTTP 200, load connections=7", 0.0, {"connections": 7.0})
    assert transport.disconnecting
