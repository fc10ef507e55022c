"""The checks against real servers on loopback, with the real reactor (in a subprocess).

The servers run in threads of this process on ephemeral ports of 127.0.0.1 and ::1; the
checks run in `tests.support.runcheck`, which also reports any timer, socket or reader the
checks left in the reactor after their results (there must be none). ICMP needs root or a
ping_group_range that covers us; without either those tests skip (fail in CI).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import pytest
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.probe.base import IcmpUnavailable
from gtmcluster.probe.icmp import open_pinger
from tests.conftest import IN_CI
from tests.support.probeservers import (
    LOOPBACKS,
    Certificates,
    CheckRun,
    canned,
    closed_port,
    dns_responder,
    http_server,
    job,
    make_certificates,
    run_checks,
    tcp_echo,
    udp_echo,
)

pytestmark = pytest.mark.process


def assert_clean(run: CheckRun) -> None:
    assert run.leftovers == {"delayed_calls": [], "selectables": []}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def listening() -> Iterator[dict[int, int]]:
    """TCP ports on 127.0.0.1 and ::1 that accept connections (the kernel completes them)."""
    socks = {}
    for version, host in LOOPBACKS.items():
        s = socket.socket(socket.AF_INET if version == 4 else socket.AF_INET6, socket.SOCK_STREAM)
        s.bind((host, 0))
        s.listen(8)
        socks[version] = s
    yield {v: s.getsockname()[1] for v, s in socks.items()}
    for s in socks.values():
        s.close()


def test_tcp_connect_and_refused(listening: dict[int, int]) -> None:
    """tcp: a listening port on either family is "connected"; a closed one "connection refused"."""
    run = run_checks(
        job("tcp", "127.0.0.1", listening[4]),
        job("tcp", "::1", listening[6]),
        job("tcp", "127.0.0.1", closed_port(4, socket.SOCK_STREAM)),
        job("tcp", "::1", closed_port(6, socket.SOCK_STREAM)),
    )
    assert run.reasons() == ["connected", "connected", "connection refused", "connection refused"]
    assert [r["ok"] for r in run.results] == [True, True, False, False]
    assert_clean(run)


def test_plain_tcp_on_a_bare_socket_gives_the_verdicts_of_twisteds_client(listening: dict[int, int]) -> None:
    """A plain tcp check uses a bare socket on a real reactor (bare.py); for the same
    targets it gives the same verdicts and reasons as the general path: connected (both
    families), refused (both), black-holed (a listener whose queue is full drops the SYN:
    the timeout), and a network the kernel cannot reach (at once). Nothing is left behind."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    filler = socket.create_connection(full.getsockname())  # the queue's one place is taken
    try:
        targets = [
            ("127.0.0.1", listening[4]),
            ("::1", listening[6]),
            ("127.0.0.1", closed_port(4, socket.SOCK_STREAM)),
            ("::1", closed_port(6, socket.SOCK_STREAM)),
            ("127.0.0.1", full.getsockname()[1]),
            ("224.0.0.1", 80),  # multicast: no TCP route, refused by the kernel itself
        ]
        bare = run_checks(*(job("tcp", a, p) for a, p in targets))
        general = run_checks(*({**job("tcp", a, p), "general": True} for a, p in targets))
    finally:
        filler.close()
        full.close()
    expected = [
        "connected",
        "connected",
        "connection refused",
        "connection refused",
        "no connection within 0.5s",
        "no route to host",
    ]
    assert bare.reasons() == expected
    assert general.reasons() == expected
    assert [r["ok"] for r in bare.results] == [r["ok"] for r in general.results]
    assert_clean(bare)
    assert_clean(general)


def test_stream_checks_on_a_bare_socket_give_the_verdicts_of_twisteds_client(listening: dict[int, int]) -> None:
    """tcp with send/expect and plain http use a bare socket on a real reactor (bare.py);
    for the same servers they give the same verdicts and reasons as Twisted's client: good
    and bad statuses and bodies, a reply that is not HTTP, a connection closed without a
    reply, a reply over max_response_bytes, a server that never replies, echo matches and
    mismatches. Nothing is left behind."""
    big = b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 5000 + b"all ok"
    with (
        http_server(4) as v4,
        http_server(6) as v6,
        tcp_echo(4) as echo,
        canned(b"SSH-2.0-OpenSSH_9.2\r\n") as ssh,
        canned(b"\x16\x03\x01binary") as binary,
        canned(b"") as silent_close,
        canned(big) as large,
    ):
        jobs = [
            job("http", "127.0.0.1", v4.port, path="/", expect_body="all ok"),
            job("http", "::1", v6.port, path="/", expect_body_regex="^all ok$"),
            job("http", "127.0.0.1", v4.port, path="/down"),
            job("http", "::1", v6.port, path="/other", expect_body="all ok"),
            job("http", "127.0.0.1", v4.port, method="HEAD", path="/", expect_status=[501]),
            job("http", "127.0.0.1", ssh.port),
            job("http", "127.0.0.1", binary.port),
            job("http", "127.0.0.1", silent_close.port),
            job("http", "127.0.0.1", large.port, expect_body="all ok", max_response_bytes=1024),
            job("http", "127.0.0.1", listening[4]),
            job("http", "127.0.0.1", closed_port(4, socket.SOCK_STREAM)),
            job("tcp", "127.0.0.1", echo.port, send="hello", expect="echo:hello"),
            job("tcp", "127.0.0.1", echo.port, send="hello", expect="bye"),
            job("tcp", "127.0.0.1", echo.port, send="hello"),
            job("tcp", "127.0.0.1", listening[4], expect="+OK"),
        ]
        bare = run_checks(*jobs)
        general = run_checks(*({**j, "general": True} for j in jobs))
    assert bare.reasons() == [
        "HTTP 200",
        "HTTP 200",
        "HTTP 503 not in [200]",
        "HTTP 200, body lacks 'all ok'",
        "HTTP 501",  # (the test server knows no HEAD)
        "malformed status line 'SSH-2.0-OpenSSH_9.2\\r'",
        "not an HTTP response: '\\x16\\x03\\x01binary'",
        "connection closed without a response",
        "HTTP 200, body lacks 'all ok' (read capped at 1024 bytes)",
        "no response within 0.5s",
        "connection refused",
        "received 'echo:hello'",
        "closed after 10 bytes without 'bye'",
        "connected",
        "no reply within 0.5s",
    ]
    assert general.reasons() == bare.reasons()
    assert [r["ok"] for r in general.results] == [r["ok"] for r in bare.results]
    assert_clean(bare)
    assert_clean(general)


def test_tcp_send_and_expect() -> None:
    """tcp send/expect: the echoed bytes contain what is expected, or the check fails when the
    server closes without it."""
    with tcp_echo(4) as v4, tcp_echo(6) as v6:
        run = run_checks(
            job("tcp", "127.0.0.1", v4.port, send="hello", expect="echo:hello"),
            job("tcp", "::1", v6.port, send="hello", expect="echo:hello"),
            job("tcp", "127.0.0.1", v4.port, send="hello", expect="bye"),
        )
    assert run.reasons() == ["received 'echo:hello'", "received 'echo:hello'", "closed after 10 bytes without 'bye'"]
    assert_clean(run)


def test_http_status_and_body() -> None:
    """http: 200 with the expected body is up; 503 and a body without the text are down; the
    server saw our request line, Host header and User-Agent."""
    with http_server(4) as v4, http_server(6) as v6:
        run = run_checks(
            job("http", "127.0.0.1", v4.port, path="/", expect_body="all ok"),
            job("http", "::1", v6.port, path="/", expect_body_regex="^all ok$"),
            job("http", "127.0.0.1", v4.port, path="/down"),
            job("http", "::1", v6.port, path="/other", expect_body="all ok"),
        )
        requests = sorted(v4.requests + v6.requests)
    assert run.reasons() == ["HTTP 200", "HTTP 200", "HTTP 503 not in [200]", "HTTP 200, body lacks 'all ok'"]
    assert ("GET / HTTP/1.0", f"127.0.0.1:{v4.port}", "gtmcluster-monitor") in requests
    assert ("GET / HTTP/1.0", f"[::1]:{v6.port}", "gtmcluster-monitor") in requests
    assert_clean(run)


def test_https_verification(certificates: Certificates) -> None:
    """https: without verification a server with an unknown CA is fine; with verification it
    fails on the certificate unless ca_file trusts its CA; a name the certificate does not
    carry fails too."""
    ca = str(certificates.ca)
    with http_server(4, certificates.server_context()) as v4, http_server(6, certificates.server_context()) as v6:
        run = run_checks(
            job("https", "127.0.0.1", v4.port, verify_tls=False, expect_body="all ok"),
            job("https", "127.0.0.1", v4.port, verify_tls=True),
            job("https", "127.0.0.1", v4.port, verify_tls=True, ca_file=ca, expect_body="all ok"),
            job("https", "::1", v6.port, verify_tls=True, ca_file=ca),
            job("https", "127.0.0.1", v4.port, verify_tls=True, ca_file=ca, host="localhost"),
            job("https", "127.0.0.1", v4.port, verify_tls=True, ca_file=ca, host="www.example.com"),
        )
    ok, unknown_ca, trusted, trusted6, by_name, wrong_name = run.results
    assert ok["reason"] == "HTTP 200"
    assert not unknown_ca["ok"]
    assert unknown_ca["reason"] == "TLS handshake failed: certificate verify failed"
    assert (trusted["reason"], trusted6["reason"], by_name["reason"]) == ("HTTP 200", "HTTP 200", "HTTP 200")
    assert not wrong_name["ok"]
    assert wrong_name["reason"] == "TLS certificate is not valid for www.example.com"
    assert_clean(run)


def test_https_against_plain_http() -> None:
    """https against a plain HTTP port fails in the handshake, with OpenSSL's reason."""
    with http_server(4) as v4:
        run = run_checks(job("https", "127.0.0.1", v4.port, verify_tls=False))
    assert run.reasons()[0].startswith("TLS handshake failed: ")
    assert_clean(run)


def test_udp_echo_and_closed_port() -> None:
    """udp: an echo server's reply is up (with or without expected bytes); a closed port is
    "port unreachable" at once, long before the timeout."""
    with udp_echo(4) as v4, udp_echo(6) as v6:
        run = run_checks(
            job("udp", "127.0.0.1", v4.port, send="ping"),
            job("udp", "::1", v6.port, send="ping", expect="echo:ping"),
            job("udp", "127.0.0.1", v4.port, send="ping", expect="pong"),
            job("udp", "127.0.0.1", closed_port(4, socket.SOCK_DGRAM), send="ping", timeout=5.0),
            job("udp", "::1", closed_port(6, socket.SOCK_DGRAM), send="ping", timeout=5.0),
        )
    assert run.reasons() == [
        "reply",
        "reply with 'echo:ping'",
        "reply lacks 'pong'",
        "port unreachable",
        "port unreachable",
    ]
    assert all(r["elapsed"] < 1.0 for r in run.results)
    assert_clean(run)


def test_udp_silence_times_out() -> None:
    """udp: a socket that receives but never answers is a timeout."""
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    try:
        run = run_checks(job("udp", "127.0.0.1", silent.getsockname()[1], send="ping", timeout=0.3))
    finally:
        silent.close()
    assert run.reasons() == ["no reply within 0.3s"]
    assert_clean(run)


def test_dns_against_a_responder() -> None:
    """dns: the expected address is up; an NXDOMAIN where NOERROR is expected is down; an
    AAAA question over IPv6 is up; an address the answer lacks is down."""
    with dns_responder(4) as v4, dns_responder(6) as v6:
        run = run_checks(
            job("dns", "127.0.0.1", v4.port, query_name="ok.test", expect_address="192.0.2.10"),
            job("dns", "127.0.0.1", v4.port, query_name="missing.test"),
            job("dns", "::1", v6.port, query_name="ok.test", query_type="AAAA", expect_address="2001:db8::10"),
            job("dns", "127.0.0.1", v4.port, query_name="ok.test", expect_address="192.0.2.99"),
            job("dns", "127.0.0.1", v4.port, query_name="missing.test", expect_rcode="NXDOMAIN"),
        )
    assert run.reasons() == [
        "NOERROR with 192.0.2.10",
        "rcode NXDOMAIN, expected NOERROR",
        "NOERROR with 2001:db8::10",
        "NOERROR but answer lacks 192.0.2.99",
        "NXDOMAIN",
    ]
    assert_clean(run)


@pytest.fixture
def icmp_allowed() -> None:
    try:
        open_pinger(MemoryReactorClock()).close()
    except IcmpUnavailable as e:
        if IN_CI:
            pytest.fail(str(e))
        pytest.skip(str(e))


@pytest.mark.usefixtures("icmp_allowed")
def test_icmp_echo() -> None:
    """icmp: 127.0.0.1 and ::1 answer; an address nobody has fails (a timeout where the
    network drops the request silently, an unreachable where a router says so)."""
    run = run_checks(
        job("icmp", "127.0.0.1"),
        job("icmp", "::1"),
        # a documentation address; 192.0.2.1 itself is the gateway of some test machines
        job("icmp", "192.0.2.200"),
    )
    local4, local6, nobody = run.results
    assert (local4["reason"], local6["reason"]) == ("echo reply", "echo reply")
    assert local4["ok"] and local6["ok"]
    assert not nobody["ok"]
    assert nobody["reason"] == "no echo reply within 0.5s" or "unreachable" in nobody["reason"]
    assert_clean(run)


def test_certificates_chain(certificates: Certificates) -> None:
    """The test CA signs the server certificate (a sanity check of the fixture itself)."""
    context = ssl.create_default_context(cafile=str(certificates.ca))
    with http_server(4, certificates.server_context()) as v4:
        raw = socket.create_connection(("127.0.0.1", v4.port), timeout=5)
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.version() is not None
