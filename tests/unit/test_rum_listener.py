"""The public RUM listener (`gtmcluster.rum.listener`) on real twisted.web connections
(bytes in, bytes out, no socket) and a fake clock: its routes and headers, a beacon kept
(204, handed to `keep` with the source's subnet) or refused (4xx JSON naming the reason,
counted, nothing handed to `keep`), judged before its body is read; connections capped;
a request dribbled in cut at the read deadline. Over real sockets: `test_rum_listener_real.py`."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import replace
from typing import Any

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.task import Clock

from gtmcluster.rum.beacon import Beacon
from gtmcluster.rum.limits import Rates
from gtmcluster.rum.listener import OBJECT_BODY, Limits, RumSite, rum_site
from tests.unit.test_api_server import Transport, parse

TARGETS = {"dc1": "https://dc1.example.net/rum/v1/object", "dc2": "https://dc2.example.net/o.gif"}
CLIENT = "203.0.114.9"
GOOD = b'{"samples": {"dc1": 21.5, "dc2": 118}, "id": "abcdefghij0123456789"}'


class Listener:
    """A RUM listener on fake connections and a fake clock, recording what it kept."""

    def __init__(self, **kwargs: Any):
        self.clock = Clock()
        self.kept: list[tuple[Any, Beacon]] = []
        self.site: RumSite = rum_site(TARGETS, lambda s, b: self.kept.append((s, b)), reactor=self.clock, **kwargs)

    def connect(self, host: str = CLIENT) -> tuple[Any, Transport]:
        peer = IPv6Address("TCP", host, 40000) if ":" in host else IPv4Address("TCP", host, 40000)
        proto = self.site.buildProtocol(peer)
        transport = Transport(IPv4Address("TCP", "192.0.2.1", 443), peer)
        proto.makeConnection(transport)
        return proto, transport

    def ask(self, raw: bytes, host: str = CLIENT) -> tuple[int, dict[str, str], Any]:
        proto, transport = self.connect(host)
        proto.dataReceived(raw)
        return parse(transport.value())


def post(body: bytes, extra: str = "") -> bytes:
    head = f"POST /rum/v1/beacon HTTP/1.1\r\nHost: rum.example.net\r\nContent-Type: text/plain\r\n{extra}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def test_a_good_beacon_is_kept_for_the_subnet_of_its_source() -> None:
    node = Listener()
    code, headers, _ = node.ask(post(GOOD))
    assert code == 204 and headers["access-control-allow-origin"] == "*"
    assert node.kept == [
        (ipaddress.ip_network("203.0.114.0/24"), Beacon({"dc1": 21.5, "dc2": 118.0}, "abcdefghij0123456789"))
    ]
    code, _, _ = node.ask(post(b'{"samples": {"dc2": 40}}'), host="2a00:1450:4001:81a::200e")
    assert code == 204 and node.kept[-1][0] == ipaddress.ip_network("2a00:1450:4001::/48")
    assert node.site.beacons == {"kept": 2}


def test_refused_beacons_say_why_and_reach_nothing() -> None:
    node = Listener(rates=Rates(per_second=1.0, burst=100.0))
    cases = [
        (post(b'{"samples": {"dc9": 3}}'), 400, "unknown_dc"),
        (post(b'{"samples": {"dc1": NaN}}'), 400, "malformed"),
        (post(b'{"samples": {"dc1": 1e999}}'), 400, "bad_value"),
        (post(b'{"samples": {"dc1": 3}, "id": "x"}'), 400, "bad_id"),
        (post(b"\x00\xff" * 10), 400, "malformed"),
        (post(b"x" * 5000), 413, "too_large"),
    ]
    for raw, status, reason in cases:
        code, headers, body = node.ask(raw)
        assert (code, body["error"]) == (status, reason), raw[:80]
        assert headers["content-type"] == "application/json" and body["message"]
        assert headers["access-control-allow-origin"] == "*"
    code, _, body = node.ask(post(GOOD), host="10.0.0.7")
    assert (code, body["error"]) == (403, "refused_source")
    assert node.kept == []
    assert node.site.beacons == {
        "unknown_dc": 1,
        "malformed": 2,
        "bad_value": 1,
        "bad_id": 1,
        "too_large": 1,
        "refused_source": 1,
    }


def test_a_body_over_the_bound_is_refused_before_it_is_read() -> None:
    node = Listener(max_body=100)
    proto, transport = node.connect()
    proto.dataReceived(b"POST /rum/v1/beacon HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
    code, headers, body = parse(transport.value())
    assert (code, body["error"]) == (413, "too_large") and headers["connection"] == "close"
    assert transport.write_closed
    proto.dataReceived(b"y" * 100_000)  # (dropped)
    node.clock.advance(2.0)
    assert transport.aborted and node.kept == []
    # chunked: cut at the bound
    proto, transport = node.connect()
    proto.dataReceived(b"POST /rum/v1/beacon HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    proto.dataReceived(b"40\r\n" + b"z" * 64 + b"\r\n" + b"40\r\n" + b"z" * 64 + b"\r\n")
    code, _, body = parse(transport.value())
    assert (code, body["error"]) == (413, "too_large") and node.kept == []


def test_a_source_over_its_rate_gets_429_before_its_body_is_read() -> None:
    node = Listener(rates=Rates(per_second=1.0, burst=3.0))
    assert [node.ask(post(GOOD))[0] for _ in range(3)] == [204] * 3
    proto, transport = node.connect()
    proto.dataReceived(b"POST /rum/v1/beacon HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
    code, headers, body = parse(transport.value())
    assert (code, body["error"]) == (429, "rate") and headers["retry-after"] == "1"
    assert node.ask(post(GOOD), host="203.0.115.1")[0] == 204  # (another /24)
    node.clock.advance(1.0)
    assert node.ask(post(GOOD))[0] == 204
    assert len(node.kept) == 5 and node.site.beacons == {"kept": 5, "rate": 1}


def test_the_other_routes() -> None:
    node = Listener(zone="example.com", zones={"gslb.example.com", "example.com"})
    code, _, script = node.ask(b"GET /rum/v1/snippet.js HTTP/1.1\r\nHost: x\r\n\r\n")
    assert code == 200 and b'"zone": "example.com"' in script
    code, headers, script = node.ask(b"GET /rum/v1/snippet.js?zone=GSLB.example.com HTTP/1.1\r\nHost: x\r\n\r\n")
    assert code == 200 and headers["content-type"].startswith("application/javascript")
    assert "max-age" in headers["cache-control"]
    assert b'"zone": "gslb.example.com"' in script and TARGETS["dc1"].encode() in script
    code, _, body = node.ask(b"GET /rum/v1/snippet.js?zone=other.example HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (code, body["error"]) == (400, "zone")
    code, _, body = node.ask(b"GET /rum/v1/snippet.js?zone=%3C/script%3E HTTP/1.1\r\nHost: x\r\n\r\n")
    assert code == 400
    code, headers, body = node.ask(b"GET /rum/v1/object?r=123 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (code, body) == (200, OBJECT_BODY)
    assert headers["timing-allow-origin"] == "*" and headers["access-control-allow-origin"] == "*"
    code, headers, _ = node.ask(b"OPTIONS /rum/v1/beacon HTTP/1.1\r\nHost: x\r\nOrigin: https://shop.example\r\n\r\n")
    assert code == 204 and headers["access-control-allow-methods"] == "POST"
    assert "access-control-allow-credentials" not in headers
    code, headers, body = node.ask(b"GET /rum/v1/beacon HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (code, body["error"]) == (405, "method") and headers["allow"] == "POST, OPTIONS"
    for path in (b"/", b"/api/v1/status", b"/rum/v1/beacon/x", b"/rum/v1/snippet.js/.."):
        code, _, body = node.ask(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (code, body["error"]) == (404, "not_found"), path
    assert node.site.beacons == {} and node.kept == []


def test_a_request_dribbled_in_is_cut_at_the_read_deadline() -> None:
    """Slowloris: a byte of header now and then never buys more than read_timeout, counted
    from the connection's opening; after an answer the next request has it again."""
    node = Listener(limits=Limits(read_timeout=5.0))
    proto, transport = node.connect()
    for byte in b"POST /rum/v1/beacon HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaa":
        node.clock.advance(0.1)
        if transport.aborted:
            break
        proto.dataReceived(bytes([byte]))
    node.clock.advance(5.0)
    assert transport.aborted and node.site.closed["deadline"] == 1
    # a kept-alive connection has read_timeout for each request
    proto, transport = node.connect()
    node.clock.advance(4.0)
    proto.dataReceived(post(GOOD))
    assert parse(transport.value())[0] == 204
    node.clock.advance(4.0)
    assert not transport.aborted
    node.clock.advance(1.5)
    assert transport.aborted and node.site.closed["deadline"] == 2


def test_connections_are_capped_in_all_and_per_source() -> None:
    node = Listener(limits=Limits(connections=4, connections_per_source=2))
    held = [node.connect("203.0.114.1"), node.connect("203.0.114.1")]
    _, transport = node.connect("203.0.114.1")
    code, _, body = parse(transport.value())
    assert (code, body["error"]) == (503, "connections")
    held += [node.connect("203.0.114.2"), node.connect("203.0.114.3")]
    _, transport = node.connect("203.0.114.4")
    assert parse(transport.value())[0] == 503
    held[0][0].connectionLost(None)
    _, transport = node.connect("203.0.114.4")
    assert transport.value() == b""
    assert node.site.closed["connections"] == 2


def test_oversized_heads_are_refused_as_json() -> None:
    node = Listener(limits=Limits(head_bytes=1024, headers=8))
    code, _, body = node.ask(b"GET /" + b"a" * 2000 + b" HTTP/1.1\r\n\r\n")
    assert (code, body["error"]) == (414, "bad_request")
    code, _, _ = node.ask(b"GET / HTTP/1.1\r\nX-A: " + b"a" * 2000 + b"\r\n\r\n")
    assert code == 431
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(20))
    code, _, _ = node.ask(b"GET / HTTP/1.1\r\n" + many + b"\r\n")
    assert code == 400


def test_a_reload_takes_new_targets_and_rates() -> None:
    node = Listener(rates=Rates(per_second=1.0, burst=1.0))
    assert node.ask(post(GOOD))[0] == 204
    assert node.ask(post(GOOD))[0] == 429
    node.site.configure(replace(node.site.settings, targets={"dc3": "https://x/"}, rates=Rates(1.0, 5.0)))
    node.clock.advance(2.0)
    code, _, body = node.ask(post(GOOD))
    assert (code, body["error"]) == (400, "unknown_dc")
    assert node.ask(post(b'{"samples": {"dc3": 5}}'))[0] == 204


def test_keep_failing_is_a_503_not_a_traceback_to_the_client() -> None:
    def keep(subnet: Any, beacon: Beacon) -> None:
        raise RuntimeError("store full")

    clock = Clock()
    site = rum_site(TARGETS, keep, reactor=clock)
    proto = site.buildProtocol(IPv4Address("TCP", CLIENT, 1))
    transport = Transport(IPv4Address("TCP", "192.0.2.1", 443), IPv4Address("TCP", CLIENT, 1))
    proto.makeConnection(transport)
    proto.dataReceived(post(GOOD))
    code, _, body = parse(transport.value())
    assert (code, body["error"]) == (503, "not_kept")
    assert json.dumps(body).find("store full") == -1


def test_behind_the_operators_proxy_a_beacon_counts_for_the_client_it_names() -> None:
    """From a `trusted_proxies` address the beacon counts for the last X-Forwarded-For address
    that is not a proxy's (what the client itself wrote left of it is never read); from any
    other source the header is ignored; a proxy that names nobody counts for no subnet."""
    proxy = "198.18.0.8"
    node = Listener(proxies=(ipaddress.ip_network("198.18.0.0/28"),), rates=Rates(per_second=1.0, burst=100.0))
    forwarded = "X-Forwarded-For: 10.1.1.1, 203.0.114.9\r\nX-Forwarded-For: 198.18.0.9\r\n"
    code, _, _ = node.ask(post(GOOD, forwarded), host=proxy)
    assert code == 204 and node.kept[-1][0] == ipaddress.ip_network("203.0.114.0/24")
    code, _, _ = node.ask(post(GOOD, "X-Forwarded-For: 1.2.3.4\r\n"), host="8.8.8.8")  # not a proxy
    assert code == 204 and node.kept[-1][0] == ipaddress.ip_network("8.8.8.0/24")
    for header in ("", "X-Forwarded-For: 198.18.0.2\r\n", "X-Forwarded-For: nonsense\r\n"):
        code, _, body = node.ask(post(GOOD, header), host=proxy)
        assert (code, body["error"]) == (403, "refused_source"), header
    assert len(node.kept) == 2
