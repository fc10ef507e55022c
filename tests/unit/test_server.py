"""The Twisted transports: UDP replies, TCP framing, pipelining, idle timeout, client cap."""

from __future__ import annotations

import errno
import random
import socket
import struct
from ipaddress import ip_address
from pathlib import Path

import dns.message
import pytest
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.testing import MemoryReactorClock, StringTransportWithDisconnection
from twisted.logger import capturedLogs, formatEvent

from gtmcluster.config.addresses import HostPort
from gtmcluster.config.dnsserver import DNSServer, RateLimit, TransferLimits
from gtmcluster.config.load import load
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dns.server import DNSService
from gtmcluster.dns.stream import DNSStreamFactory, DNSStreamProtocol, ListenerFactory
from gtmcluster.dns.udpport import DNSDatagramProtocol
from gtmcluster.node import Node
from gtmcluster.runtime import sockets
from tests.support import configs
from tests.support.dnsclient import addresses, query


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(load(configs.write(tmp_path, configs.base())), "n1", clock=lambda: 0.0, rng=random.Random(1))


def framed(wire: bytes) -> bytes:
    return struct.pack("!H", len(wire)) + wire


def replies(data: bytes) -> list[dns.message.Message]:
    out = []
    while data:
        (n,) = struct.unpack("!H", data[:2])
        out.append(dns.message.from_wire(data[2 : 2 + n]))
        data = data[2 + n :]
    return out


def connect(
    factory: DNSStreamFactory | ListenerFactory, host: str = "127.0.1.5"
) -> tuple[DNSStreamProtocol, StringTransportWithDisconnection]:
    peer = IPv6Address("TCP", host, 40000) if ":" in host else IPv4Address("TCP", host, 40000)
    proto = factory.buildProtocol(peer)
    transport = StringTransportWithDisconnection(peerAddress=peer)
    transport.protocol = proto
    proto.makeConnection(transport)
    return proto, transport


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_reply_that_cannot_be_sent_is_dropped_quietly(node: Node) -> None:
    """A full send buffer (EAGAIN) or a vanished client loses that reply, nothing more."""

    class Full:
        def __init__(self) -> None:
            self.socket = self
            self.tries = 0

        def sendto(self, data: bytes, addr: tuple[str, int]) -> None:
            self.tries += 1
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    proto = DNSDatagramProtocol(FastPath(node.responder))
    port = Full()
    proto.transport = port  # type: ignore[assignment]
    proto.startProtocol()
    for _ in range(2):
        proto.datagramReceived(query("gslb.example.test"), ("127.0.2.3", 5000))
    assert port.tries == 2


def test_udp_reply_goes_back_to_the_sender(node: Node) -> None:
    """A datagram is answered to the address it came from; a response packet is ignored."""

    class Recorder:
        """A port whose socket records what is sent on it."""

        def __init__(self) -> None:
            self.sent: list[tuple[bytes, tuple[str, int]]] = []
            self.socket = self

        def sendto(self, data: bytes, addr: tuple[str, int]) -> None:
            self.sent.append((data, addr))

    proto = DNSDatagramProtocol(FastPath(node.responder))
    recorder = Recorder()
    proto.transport = recorder  # type: ignore[assignment]
    proto.startProtocol()
    proto.datagramReceived(query("gslb.example.test"), ("127.0.2.3", 5000))
    assert recorder.sent[0][1] == ("127.0.2.3", 5000)
    assert addresses(dns.message.from_wire(recorder.sent[0][0])) == ["10.0.2.1"]
    response = bytearray(query("gslb.example.test"))
    response[2] |= 0x80
    proto.datagramReceived(bytes(response), ("127.0.2.3", 5000))
    assert len(recorder.sent) == 1


def test_tcp_messages_split_and_pipelined(node: Node) -> None:
    """Length-prefixed queries arriving in pieces and back to back are answered in order."""
    factory = DNSStreamFactory(node.responder, MemoryReactorClock(), 10, 100)
    proto, transport = connect(factory)
    stream = framed(query("gslb.example.test", qid=1)) + framed(query("www.example.test", qid=2))
    for i in range(0, len(stream), 7):
        proto.dataReceived(stream[i : i + 7])
    got = replies(transport.value())
    assert [m.id for m in got] == [1, 2]
    assert addresses(got[0]) == ["10.0.1.1"]  # topology saw the TCP peer's address


def test_tcp_idle_connection_closes_after_the_timeout(node: Node) -> None:
    """A silent connection is closed after tcp_idle_timeout; a query resets it."""
    clock = MemoryReactorClock()
    factory = DNSStreamFactory(node.responder, clock, 10, 100)
    proto, transport = connect(factory)
    clock.advance(9)
    proto.dataReceived(framed(query("www.example.test")))
    clock.advance(9)
    assert transport.connected
    clock.advance(1.5)
    assert not transport.connected
    assert proto not in factory.connections
    assert factory.closed_by == {"idle": 1, "partial": 0, "evicted": 0, "source_cap": 0, "stalled": 0}


def test_tcp_idle_timeout_counts_from_the_last_read_and_follows_a_reload(node: Node) -> None:
    """A connection read every 4 s is never idle for 10 s; once silent it is closed 10 s
    after its last read, and a reload that shortens the timeout applies from its next read."""
    clock = MemoryReactorClock()
    factory = DNSStreamFactory(node.responder, clock, 10, 100)
    proto, transport = connect(factory)
    for _ in range(6):
        clock.advance(4)
        proto.dataReceived(framed(query("www.example.test")))
    assert transport.connected  # (24 s open)
    clock.advance(9.9)
    assert transport.connected
    clock.advance(0.2)
    assert not transport.connected and factory.closed_by["idle"] == 1
    proto, transport = connect(factory)
    clock.advance(1)
    factory.idle_timeout = 2  # (a reload)
    proto.dataReceived(framed(query("www.example.test")))
    clock.advance(1.9)
    assert transport.connected
    clock.advance(0.2)
    assert not transport.connected and factory.closed_by["idle"] == 2


def test_tcp_half_sent_message_closes_after_the_message_timeout(node: Node) -> None:
    """A connection that began a message must finish it within tcp_message_timeout, however
    it trickles bytes (each byte resets the idle timeout, not this one)."""
    clock = MemoryReactorClock()
    factory = DNSStreamFactory(node.responder, clock, 10, 100, message_timeout=3)
    proto, transport = connect(factory)
    message = framed(query("www.example.test"))
    for i in range(4):  # a byte every 0.7 s: never idle for 10 s
        proto.dataReceived(message[i : i + 1])
        clock.advance(0.7)
    assert transport.connected  # 2.8 s after the first byte
    clock.advance(0.3)
    assert not transport.connected
    assert factory.closed_by["partial"] == 1 and factory.closed_by["idle"] == 0


def test_tcp_message_timeout_runs_per_message(node: Node) -> None:
    """Each message gets the whole timeout: one finished in time stops the clock, and the
    next one (even begun in the same read) starts its own."""
    clock = MemoryReactorClock()
    factory = DNSStreamFactory(node.responder, clock, 10, 100, message_timeout=3)
    proto, transport = connect(factory)
    first, second = framed(query("www.example.test", qid=1)), framed(query("www.example.test", qid=2))
    proto.dataReceived(first[:5])
    clock.advance(2.5)
    proto.dataReceived(first[5:] + second[:3])  # first done, second begun
    clock.advance(2.5)
    assert transport.connected  # 5 s since the first byte of the first message
    proto.dataReceived(second[3:])
    clock.advance(5)
    assert transport.connected  # nothing pending: only the idle timeout runs now
    assert [m.id for m in replies(transport.value())] == [1, 2]


def test_tcp_client_that_does_not_read_stops_being_read(node: Node) -> None:
    """When Twisted's send buffer for a client fills (it does not read its answers), the
    client is no longer read from until it drains; the idle timeout then closes it."""
    clock = MemoryReactorClock()
    factory = DNSStreamFactory(node.responder, clock, 10, 100)
    proto, transport = connect(factory)
    assert transport.producer is proto and transport.streaming
    proto.pauseProducing()  # what the transport does when its buffer is full
    assert transport.producerState == "paused"
    proto.resumeProducing()
    assert transport.producerState == "producing"
    proto.pauseProducing()
    clock.advance(10.5)
    assert not transport.connected


def test_tcp_runt_message_closes_the_connection(node: Node) -> None:
    """A framed message shorter than a DNS header ends the connection."""
    factory = DNSStreamFactory(node.responder, MemoryReactorClock(), 10, 100)
    proto, transport = connect(factory)
    proto.dataReceived(framed(b"\x00\x01"))
    assert not transport.connected


def test_tcp_client_cap_evicts_the_longest_idle(node: Node) -> None:
    """Past tcp_max_clients, the connection idle the longest makes way."""
    factory = DNSStreamFactory(node.responder, MemoryReactorClock(), 10, 2)
    first, t1 = connect(factory)
    _second, t2 = connect(factory)
    first.dataReceived(framed(query("www.example.test")))  # first is now the most recent
    _, t3 = connect(factory)
    assert t1.connected and not t2.connected and t3.connected
    assert len(factory.connections) == 2
    assert factory.closed_by["evicted"] == 1


def test_tcp_a_source_past_its_cap_closes_its_own_longest_idle_never_anothers(node: Node) -> None:
    """One source opening 50 connections past tcp_max_per_source (64 by default) on an
    address with room (tcp_max_clients 100): each time its own connection idle the longest
    is closed; the other source's connection, idle the longest of all, stays and is
    answered. (Before, one cap for everyone: the flood evicted it at its 100th.)"""
    factory = DNSStreamFactory(node.responder, MemoryReactorClock(), 10, 100)
    other, other_transport = connect(factory, "127.0.1.9")
    flood = [connect(factory, "127.0.1.66") for _ in range(64 + 50)]
    assert other_transport.connected
    other.dataReceived(framed(query("www.example.test")))
    assert addresses(replies(other_transport.value())[0]) == ["192.0.2.80"]
    assert [t.connected for _, t in flood] == [False] * 50 + [True] * 64  # its oldest went
    assert factory.closed_by["source_cap"] == 50 and factory.closed_by["evicted"] == 0
    assert len(factory.connections) == 65


def test_tcp_a_source_at_its_cap_on_a_full_address_makes_room_from_its_own(node: Node) -> None:
    """On a full address (tcp_max_clients 4), a source at its cap (3) opening 50 more
    closes its own longest idle each time, never the other source's connection."""
    factory = DNSStreamFactory(node.responder, MemoryReactorClock(), 10, 4, max_per_source=3)
    other, other_transport = connect(factory, "127.0.1.9")
    flood = [connect(factory, "127.0.1.66") for _ in range(3 + 50)]
    assert other_transport.connected
    assert [t.connected for _, t in flood] == [False] * 50 + [True] * 3
    assert factory.closed_by["source_cap"] == 50 and factory.closed_by["evicted"] == 0
    other.dataReceived(framed(query("www.example.test")))
    assert addresses(replies(other_transport.value())[0]) == ["192.0.2.80"]


def test_tcp_source_cap_closes_the_sources_least_recently_active(node: Node) -> None:
    """Within its source, the connection that makes way is the one idle the longest: a
    connection that sent a query, or took its answers (Twisted resumed it), is kept."""
    factory = DNSStreamFactory(node.responder, MemoryReactorClock(), 10, 100, max_per_source=2)
    asking, t1 = connect(factory, "192.0.2.7")
    reading, t2 = connect(factory, "192.0.2.7")
    asking.dataReceived(framed(query("www.example.test")))  # active now: `reading` is the oldest
    reading.pauseProducing()
    reading.resumeProducing()  # it took its answers: `asking` is the oldest
    _, t3 = connect(factory, "192.0.2.7")
    assert not t1.connected and t2.connected and t3.connected


def test_tcp_an_ipv6_source_is_its_64(node: Node) -> None:
    """IPv6 clients count per /64 (a host has a whole /64 to take addresses from): two
    addresses in one /64 share its cap, an address in the next /64 has its own."""
    factory = DNSStreamFactory(node.responder, MemoryReactorClock(), 10, 100, max_per_source=2)
    _, first = connect(factory, "2001:db8:1:2::1")
    _, second = connect(factory, "2001:db8:1:2::ffff")
    _, neighbour = connect(factory, "2001:db8:1:3::1")
    _, third = connect(factory, "2001:db8:1:2:aaaa::9")
    assert not first.connected and second.connected and third.connected and neighbour.connected
    assert factory.closed_by["source_cap"] == 1


def test_tcp_each_dns_address_has_its_own_cap(node: Node) -> None:
    """tcp_max_clients holds on each DNS address: many sources filling one address evict
    the longest idle there, never a client of another address."""
    factory = DNSStreamFactory(node.responder, MemoryReactorClock(), 10, 5, max_per_source=2)
    first, second = factory.on("192.0.2.1:53"), factory.on("192.0.2.2:53")
    other, other_transport = connect(second, "127.0.1.9")
    flood = [connect(first, f"127.0.2.{i}") for i in range(20)]  # 20 sources, one each
    assert other_transport.connected
    assert [t.connected for _, t in flood] == [False] * 15 + [True] * 5
    assert (factory.connections.on("192.0.2.1:53"), factory.connections.on("192.0.2.2:53")) == (5, 1)
    assert factory.closed_by["evicted"] == 15 and factory.closed_by["source_cap"] == 0
    other.dataReceived(framed(query("www.example.test")))
    assert addresses(replies(other_transport.value())[0]) == ["192.0.2.80"]


def test_tcp_closing_for_the_source_cap_is_logged_once_a_minute(node: Node) -> None:
    """A connection closed for its source's cap is logged, then at most once a minute with
    the count since the last line (a flood of connections is not a flood of log lines)."""
    clock = MemoryReactorClock()
    factory = DNSStreamFactory(node.responder, clock, 100, 100, max_per_source=1)  # (idle 100 s)
    with capturedLogs() as events:
        for _ in range(30):
            connect(factory, "192.0.2.66")
        clock.advance(61)
        connect(factory, "192.0.2.66")
    lines = [e for e in events if e.get("event") == "dns_tcp_source_cap"]
    assert [(e["source"], e["cap"], e["count"]) for e in lines] == [("192.0.2.66", 1, 1), ("192.0.2.66", 1, 29)]
    assert "opened more than tcp_max_per_source (1) connections" in formatEvent(lines[0])


def test_service_adopts_bound_sockets_and_stops_them(node: Node) -> None:
    """The service hands the pre-bound sockets to the reactor and releases them on stop."""
    listeners = sockets.bind([HostPort(ip_address("127.0.0.1"), free_port())])
    reactor = MemoryReactorClock()
    service = DNSService(reactor, listeners, node.responder, 10, 100)
    service.startService()
    assert [type(entry[2]) for entry in reactor.adoptedPorts] == [DNSDatagramProtocol, ListenerFactory]
    assert listeners[0].udp.fileno() == -1  # our copies are closed; the reactor owns duplicates
    service.stopService()
    assert not service.running


def test_a_reload_retunes_the_tcp_caps_for_the_next_connection(node: Node) -> None:
    """After a reload lowers tcp_max_per_source, connections already open stay; the next one
    from a source over the new cap closes its own oldest until the source is within it."""
    listeners = sockets.bind([HostPort(ip_address("127.0.0.1"), free_port())])
    service = DNSService(MemoryReactorClock(), listeners, node.responder, 10, 100)
    try:
        assert service.tcp.max_per_source == 64  # the default
        held = [connect(service.tcp, "192.0.2.8")[1] for _ in range(5)]
        service.configure(DNSServer(1232, 10.0, 100, tcp_max_per_source=2))
        assert all(t.connected for t in held)
        _, newest = connect(service.tcp, "192.0.2.8")
        assert [t.connected for t in held] == [False] * 4 + [True] and newest.connected
        assert service.tcp.closed_by["source_cap"] == 4
    finally:
        for listener in listeners:
            listener.close()


def test_bind_reports_the_address_in_use() -> None:
    """Binding an address already taken names it and the protocol."""
    taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    taken.bind(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        with pytest.raises(sockets.ListenError, match=rf"127\.0\.0\.1:{port} \(UDP\): Address already in use"):
            sockets.bind([HostPort(ip_address("127.0.0.1"), port)])
    finally:
        taken.close()


def test_a_reload_retunes_tcp_limits_and_rate_limiting(node: Node) -> None:
    """configure() takes a new config's TCP timeouts, caps (zone transfers' too) and rate
    limits: the UDP fast path limits from then on (keeping its buckets while the settings
    stay), and stops when off."""
    listeners = sockets.bind([HostPort(ip_address("127.0.0.1"), free_port())])
    service = DNSService(MemoryReactorClock(), listeners, node.responder, 10, 100)
    try:
        assert service.udp[0].fast.limiter is None
        limited = DNSServer(
            1232,
            3.0,
            50,
            tcp_message_timeout=1.5,
            rate_limit=RateLimit(responses_per_second=1),
            transfer=TransferLimits(max_in_flight=3, max_per_source=1, stall_timeout=7.0),
            tcp_max_per_source=5,
        )
        service.configure(limited)
        assert (service.tcp.idle_timeout, service.tcp.message_timeout, service.tcp.max_clients) == (3.0, 1.5, 50)
        assert service.tcp.max_per_source == 5
        slots = service.tcp.slots
        assert (slots.max_in_flight, slots.max_per_source, service.tcp.stall_timeout) == (3, 1, 7.0)
        limiter = service.udp[0].fast.limiter
        assert limiter is not None
        got = [service.udp[0].fast.handle(query("www.example.test"), "192.0.2.1") for _ in range(7)]
        assert got.count(None) == 1  # a burst of 5 (window 5 s), then drop, slip
        service.configure(limited)
        service.set_responder(node.responder)
        assert service.udp[0].fast.limiter is limiter
        service.configure(DNSServer(1232, 10.0, 100))
        assert service.udp[0].fast.limiter is None
    finally:
        for listener in listeners:
            listener.close()
