"""ICMP echo in memory: the packets, reply matching in the shared pinger, opening its sockets."""

from __future__ import annotations

import errno
import random
import socket
import struct
from ipaddress import ip_address
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.config.monitoring import IcmpCheck
from gtmcluster.probe import icmpwire
from gtmcluster.probe.base import IcmpUnavailable, Result, Target
from gtmcluster.probe.icmp import Channel, IcmpPinger, open_pinger
from gtmcluster.probe.kinds import make_check
from tests.support.probeservers import FakeIcmpSocket, monitor, result_of, still_running

V4 = Target(ip_address("192.0.2.7"), 0, "link uplink target 192.0.2.7")
V6 = Target(ip_address("2001:db8::7"), 0, "link uplink target 2001:db8::7")


def ipv4_packet(source: str, destination: str, payload: bytes, protocol: int = 1) -> bytes:
    """An IPv4 header (20 bytes, checksum not checked by the parser) before *payload*."""
    return (
        struct.pack("!BBHHHBBH", 0x45, 0, 20 + len(payload), 0, 0, 64, protocol, 0)
        + socket.inet_aton(source)
        + socket.inet_aton(destination)
        + payload
    )


def reply_to(request: bytes, version: int = 4, identifier: int | None = None) -> bytes:
    """The echo reply a host sends for *request* (same id, sequence and payload)."""
    kind = icmpwire.ECHO_REPLY[version]
    ident, seq = struct.unpack("!HH", request[4:8])
    body = struct.pack("!BBHHH", kind, 0, 0, ident if identifier is None else identifier, seq) + request[8:]
    return body[:2] + struct.pack("!H", icmpwire.checksum(body)) + body[4:] if version == 4 else body


# --------------------------------------------------------------------------- wire


def test_checksum_of_a_known_packet() -> None:
    """The RFC 1071 checksum: a message carrying its checksum sums to zero; odd lengths pad."""
    packet = icmpwire.echo_request(4, 0x1234, 1, b"abc")
    assert icmpwire.checksum(packet) == 0
    assert packet[:2] == b"\x08\x00"
    assert icmpwire.checksum(b"\x00\x01\xf2\x03\xf4\xf5\xf6\xf7") == 0x220D  # RFC 1071's example


def test_icmpv6_request_leaves_the_checksum_to_the_kernel() -> None:
    """ICMPv6 echo requests are type 128 with a zero checksum (the kernel fills it in)."""
    packet = icmpwire.echo_request(6, 7, 9, b"tok")
    assert packet == b"\x80\x00\x00\x00\x00\x07\x00\x09tok"


def test_parse_reply_after_an_ipv4_header() -> None:
    """A raw IPv4 socket delivers the IP header first; the parser skips IHL words."""
    reply = reply_to(icmpwire.echo_request(4, 77, 5, b"token"))
    parsed = icmpwire.parse(4, ipv4_packet("192.0.2.7", "192.0.2.1", reply), ip_header=True)
    assert parsed == icmpwire.Echo(77, 5, b"token")


def test_parse_ignores_requests_and_other_types() -> None:
    """Our own request (seen on loopback) and unrelated ICMP types are not replies."""
    request = icmpwire.echo_request(4, 77, 5, b"token")
    assert icmpwire.parse(4, request) is None
    assert icmpwire.parse(6, b"\x87\x00\x00\x00" + bytes(20)) is None  # neighbour solicitation
    assert icmpwire.parse(4, b"\x00\x00") is None


def test_parse_destination_unreachable_quoting_our_request() -> None:
    """An ICMP error quotes our request; the parser finds its id, sequence and destination."""
    request = icmpwire.echo_request(4, 77, 5, b"token")
    quoted = ipv4_packet("192.0.2.1", "192.0.2.7", request)[:28]
    error = struct.pack("!BBHI", 3, 1, 0, 0) + quoted
    parsed = icmpwire.parse(4, ipv4_packet("198.51.100.1", "192.0.2.1", error), ip_header=True)
    assert parsed == icmpwire.Undeliverable(77, 5, ip_address("192.0.2.7"), "host unreachable")


def test_parse_icmpv6_unreachable() -> None:
    """An ICMPv6 destination unreachable quotes the IPv6 header and our echo request."""
    request = icmpwire.echo_request(6, 77, 5, b"token")
    inner = struct.pack("!IHBB", 6 << 28, len(request), 58, 64)
    inner += ip_address("2001:db8::1").packed + ip_address("2001:db8::7").packed + request
    parsed = icmpwire.parse(6, struct.pack("!BBHI", 1, 3, 0, 0) + inner)
    assert parsed == icmpwire.Undeliverable(77, 5, ip_address("2001:db8::7"), "address unreachable")


# --------------------------------------------------------------------------- the pinger


@pytest.fixture
def reactor() -> MemoryReactorClock:
    return MemoryReactorClock()


def raw_pinger(reactor: MemoryReactorClock) -> tuple[IcmpPinger, FakeIcmpSocket, FakeIcmpSocket]:
    s4, s6 = FakeIcmpSocket(10), FakeIcmpSocket(11)
    channels = {4: Channel(4, s4, raw=True), 6: Channel(6, s6, raw=True)}
    return IcmpPinger(reactor, channels, random.Random(3)), s4, s6


def deliver(reactor: MemoryReactorClock) -> None:
    """What the reactor does when the sockets are readable."""
    for reader in list(reactor.readers):
        reader.doRead()


def test_echo_reply_is_a_success(reactor: MemoryReactorClock) -> None:
    """A request goes to the target; its reply from the target (after the IP header) is a
    success, and nothing stays pending or scheduled."""
    pinger, s4, _ = raw_pinger(reactor)
    d = make_check(monitor(IcmpCheck()), reactor, pinger)(V4)
    request, address = s4.sent[0]
    assert address == ("192.0.2.7", 0)
    assert struct.unpack("!H", request[4:6])[0] == pinger.identifier
    reactor.advance(0.02)
    s4.inbox.append((ipv4_packet("192.0.2.7", "192.0.2.1", reply_to(request)), ("192.0.2.7", 0)))
    deliver(reactor)
    assert result_of(d) == Result(True, "echo reply", 0.02)
    assert pinger.in_flight == 0
    assert reactor.getDelayedCalls() == []


def test_icmpv6_echo(reactor: MemoryReactorClock) -> None:
    """IPv6 targets use the ICMPv6 socket, whose replies carry no IP header."""
    pinger, _, s6 = raw_pinger(reactor)
    d = pinger.ping(V6, 1.0)
    request, address = s6.sent[0]
    assert address == ("2001:db8::7", 0, 0, 0)
    s6.inbox.append((reply_to(request, version=6), ("2001:db8::7", 0, 0, 0)))
    deliver(reactor)
    assert result_of(d) == Result(True, "echo reply", 0.0)


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda r: (r, "192.0.2.8"), id="another source"),
        pytest.param(lambda r: (r[:-1] + bytes([r[-1] ^ 1]), "192.0.2.7"), id="another token"),
        pytest.param(lambda r: (r[:4] + struct.pack("!H", 1) + r[6:], "192.0.2.7"), id="another identifier"),
    ],
)
def test_replies_that_are_not_ours_are_ignored(reactor: MemoryReactorClock, spoil: Any) -> None:
    """A reply from another address, with another payload token or (raw socket) another
    identifier does not answer this request; the check then times out."""
    pinger, s4, _ = raw_pinger(reactor)
    d = pinger.ping(V4, 1.0)
    reply, source = spoil(reply_to(s4.sent[0][0]))
    s4.inbox.append((ipv4_packet(source, "192.0.2.1", reply), (source, 0)))
    deliver(reactor)
    assert still_running(d)
    reactor.advance(1.0)
    assert result_of(d) == Result(False, "no echo reply within 1s", 1.0)
    assert pinger.in_flight == 0
    assert reactor.getDelayedCalls() == []


def test_concurrent_pings_are_told_apart(reactor: MemoryReactorClock) -> None:
    """Several checks share the pinger: each reply ends only its own request."""
    pinger, s4, _ = raw_pinger(reactor)
    first = pinger.ping(V4, 1.0)
    second = pinger.ping(Target(ip_address("192.0.2.8"), 0, "other"), 1.0)
    request = s4.sent[1][0]
    s4.inbox.append((ipv4_packet("192.0.2.8", "192.0.2.1", reply_to(request)), ("192.0.2.8", 0)))
    deliver(reactor)
    assert still_running(first)
    assert result_of(second).ok


def test_ping_socket_rewrites_the_identifier(reactor: MemoryReactorClock) -> None:
    """On an unprivileged ping socket the kernel sets the identifier and strips the IP
    header: the reply matches on sequence and token alone."""
    sock = FakeIcmpSocket()
    pinger = IcmpPinger(reactor, {4: Channel(4, sock, raw=False)}, random.Random(3))
    d = pinger.ping(V4, 1.0)
    sock.inbox.append((reply_to(sock.sent[0][0], identifier=4321), ("192.0.2.7", 0)))
    deliver(reactor)
    assert result_of(d).ok


def test_unreachable_fails_at_once(reactor: MemoryReactorClock) -> None:
    """A destination unreachable about our request fails the check at once, naming the
    router that sent it."""
    pinger, s4, _ = raw_pinger(reactor)
    d = pinger.ping(V4, 1.0)
    quoted = ipv4_packet("192.0.2.1", "192.0.2.7", s4.sent[0][0])[:28]
    error = struct.pack("!BBHI", 3, 0, 0, 0) + quoted
    s4.inbox.append((ipv4_packet("198.51.100.1", "192.0.2.1", error), ("198.51.100.1", 0)))
    deliver(reactor)
    assert result_of(d) == Result(False, "network unreachable (from 198.51.100.1)", 0.0)


def test_send_error_fails_at_once(reactor: MemoryReactorClock) -> None:
    """A send the kernel refuses (no route) fails the check with that reason."""
    pinger, s4, _ = raw_pinger(reactor)
    s4.send_error = OSError(errno.ENETUNREACH, "Network is unreachable")
    d = pinger.ping(V4, 1.0)
    assert result_of(d) == Result(False, "send failed: network is unreachable", 0.0)
    assert pinger.in_flight == 0
    assert reactor.getDelayedCalls() == []


def test_missing_family(reactor: MemoryReactorClock) -> None:
    """Without an ICMPv6 socket (a host without IPv6), IPv6 checks fail and say why."""
    pinger = IcmpPinger(
        reactor, {4: Channel(4, FakeIcmpSocket(), raw=True)}, missing={6: "address family not supported"}
    )
    assert result_of(pinger.ping(V6, 1.0)).reason == "no ICMPv6 socket: address family not supported"


def test_close_removes_readers_closes_sockets_and_fails_pending(reactor: MemoryReactorClock) -> None:
    """close() stops reading, closes both sockets, ends waiting checks, and refuses new ones."""
    pinger, s4, s6 = raw_pinger(reactor)
    assert len(reactor.readers) == 2
    d = pinger.ping(V4, 1.0)
    pinger.close()
    assert reactor.readers == set()
    assert s4.closed and s6.closed
    assert result_of(d) == Result(False, "pinger closed", 0.0)
    assert result_of(pinger.ping(V4, 1.0)).reason == "pinger closed"
    assert reactor.getDelayedCalls() == []


# --------------------------------------------------------------------------- opening


class Sockets:
    """A socket factory: raw sockets allowed or not, ping sockets allowed or not."""

    def __init__(self, raw: bool, ping: bool, no_ipv6: bool = False) -> None:
        self.raw, self.ping, self.no_ipv6 = raw, ping, no_ipv6
        self.made: list[tuple[int, int, int, FakeIcmpSocket]] = []

    def __call__(self, family: int, kind: int, protocol: int) -> FakeIcmpSocket:
        if self.no_ipv6 and family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        if kind == socket.SOCK_RAW and not self.raw:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        if kind == socket.SOCK_DGRAM and not self.ping:
            raise PermissionError(errno.EACCES, "Permission denied")
        sock = FakeIcmpSocket(20 + len(self.made))
        self.made.append((family, kind, protocol, sock))
        return sock


def test_open_prefers_raw_sockets(reactor: MemoryReactorClock) -> None:
    """As root: raw ICMP and ICMPv6 sockets, non-blocking, read through the reactor."""
    sockets = Sockets(raw=True, ping=True)
    pinger = open_pinger(reactor, sockets)
    assert [(f, k, p) for f, k, p, _ in sockets.made] == [
        (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
        (socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6),
    ]
    assert all(not s.blocking for *_, s in sockets.made)
    assert pinger.description == "ICMP raw socket, ICMPv6 raw socket"
    assert len(reactor.readers) == 2
    pinger.close()


def test_open_falls_back_to_ping_sockets(reactor: MemoryReactorClock) -> None:
    """Without CAP_NET_RAW but inside ping_group_range: unprivileged ping sockets."""
    sockets = Sockets(raw=False, ping=True)
    pinger = open_pinger(reactor, sockets)
    assert [k for _, k, _, _ in sockets.made] == [socket.SOCK_DGRAM, socket.SOCK_DGRAM]
    assert pinger.description == "ICMP ping socket, ICMPv6 ping socket"
    pinger.close()


def test_open_without_permission_names_both_ways(reactor: MemoryReactorClock) -> None:
    """Neither way allowed: IcmpUnavailable saying what would allow it, with our gid."""
    with pytest.raises(IcmpUnavailable) as raised:
        open_pinger(reactor, Sockets(raw=False, ping=False))
    message = str(raised.value)
    assert "root (CAP_NET_RAW)" in message
    assert "net.ipv4.ping_group_range including gid " in message
    assert reactor.readers == set()


def test_open_on_a_host_without_ipv6(reactor: MemoryReactorClock) -> None:
    """A host without IPv6 still gets a pinger; IPv6 checks fail with the reason."""
    pinger = open_pinger(reactor, Sockets(raw=True, ping=False, no_ipv6=True))
    assert pinger.description == "ICMP raw socket"
    assert result_of(pinger.ping(V6, 1.0)).reason == "no ICMPv6 socket: address family not supported by protocol"
    pinger.close()


def test_icmp_check_without_a_pinger_fails_with_the_reason(reactor: MemoryReactorClock) -> None:
    """A node that could not open ICMP sockets still builds icmp checks; they fail, saying why."""
    d = make_check(monitor(IcmpCheck()), reactor, None)(V4)
    result = result_of(d)
    assert not result.ok and "CAP_NET_RAW" in result.reason
    assert reactor.getDelayedCalls() == []
