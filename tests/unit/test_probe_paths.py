"""LDNS path probes: in memory (fake sockets, fake clocks) and over real loopback sockets.

In memory, the prober is given a `FakeNetwork` for its sockets and clocks that follow the
`MemoryReactorClock`, so each test says exactly when a reply or an ICMP error arrives and
what TTL and kernel stamp it carries. The tests marked ``process`` run real probes with the
real reactor in a subprocess (`tests.support.runpath`), which also reports any timer or
reader the probes left behind.
"""

from __future__ import annotations

import errno
import random
import socket
import struct
from collections.abc import Callable, Iterator
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Any

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from gtmcluster.probe import icmpwire, pathwire
from gtmcluster.probe.base import IcmpUnavailable
from gtmcluster.probe.icmp import Channel, IcmpPinger, open_pinger
from gtmcluster.probe.kinds import NO_PINGER
from gtmcluster.probe.paths import PathProber, Sample
from gtmcluster.probe.pathsockets import TCP_INFO, TCPI_RTT_OFFSET, Measure
from tests.conftest import IN_CI
from tests.support.probeservers import FakeIcmpSocket, SocketLoop, bound, closed_port, dns_responder, udp_echo
from tests.support.runpath import PathRun, path_job, run_paths

LDNS = ip_address("198.51.100.53")
LDNS6 = ip_address("2001:db8::53")
ROUTER = ip_address("203.0.113.1")
WALL0 = 1_700_000_000 * 10**9  # the fake wall clock's reading at reactor time 0

Ancdata = list[tuple[int, int, bytes]]


# --------------------------------------------------------------------------- fakes


class FakeUdpSocket:
    """A UDP socket: records options, connect and sends; serves `inbox` and `errors` (the
    error queue) to ``recvmsg``."""

    def __init__(self, family: int, fd: int) -> None:
        self.family = family
        self.fd = fd
        self.options: set[tuple[int, int]] = set()
        self.blocking = True
        self.connected_to: tuple[Any, ...] | None = None
        self.sent: list[bytes] = []
        self.inbox: list[tuple[bytes, Ancdata] | OSError] = []
        self.errors: list[tuple[bytes, Ancdata]] = []
        self.closed = False
        self.connect_error: OSError | None = None
        self.send_error: OSError | None = None

    def fileno(self) -> int:
        return -1 if self.closed else self.fd

    def setblocking(self, flag: bool) -> None:
        self.blocking = flag

    def setsockopt(self, level: int, option: int, value: int) -> None:
        self.options.add((level, option))

    def connect(self, address: tuple[Any, ...]) -> None:
        if self.connect_error is not None:
            raise self.connect_error
        self.connected_to = address

    def send(self, data: bytes) -> int:
        if self.send_error is not None:
            raise self.send_error
        self.sent.append(data)
        return len(data)

    def recvmsg(self, bufsize: int, ancbufsize: int = 0, flags: int = 0) -> tuple[bytes, Ancdata, int, Any]:
        assert not self.closed
        if flags & pathwire.MSG_ERRQUEUE:
            if not self.errors:
                raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
            data, ancdata = self.errors.pop(0)
            return data, ancdata, pathwire.MSG_ERRQUEUE, self.connected_to
        if not self.inbox:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        item = self.inbox.pop(0)
        if isinstance(item, OSError):
            raise item
        data, ancdata = item
        return data, ancdata, 0, self.connected_to

    def close(self) -> None:
        self.closed = True

    # the LDNS's side

    def query(self) -> dns.message.Message:
        assert len(self.sent) == 1
        return dns.message.from_wire(self.sent[0])

    def reply(self, data: bytes, *ancdata: tuple[int, int, bytes]) -> None:
        self.inbox.append((data, list(ancdata)))

    def answer(self, rcode: dns.rcode.Rcode, *ancdata: tuple[int, int, bytes], id_offset: int = 0) -> None:
        """The LDNS's DNS response to our query (its ID shifted by *id_offset*)."""
        response = dns.message.make_response(self.query())
        response.set_rcode(rcode)
        response.id = (response.id + id_offset) % 65536
        self.reply(response.to_wire(), *ancdata)

    def icmp_error(self, *ancdata: tuple[int, int, bytes]) -> None:
        self.errors.append((self.sent[0], list(ancdata)))


class FakeTcpSocket:
    """A TCP socket whose connect answers with `connect_result`, then `so_error`."""

    def __init__(self, family: int, fd: int, connect_result: int) -> None:
        self.family = family
        self.fd = fd
        self.connect_result = connect_result
        self.connected_to: tuple[Any, ...] | None = None
        self.so_error: int | None = None  # None: no answer yet
        self.tcp_info_rtt_us: int | None = None
        self.blocking = True
        self.closed = False

    def fileno(self) -> int:
        return -1 if self.closed else self.fd

    def setblocking(self, flag: bool) -> None:
        self.blocking = flag

    def connect_ex(self, address: tuple[Any, ...]) -> int:
        self.connected_to = address
        return self.connect_result

    def getsockopt(self, level: int, option: int, buflen: int = 0) -> int | bytes:
        if (level, option) == (socket.SOL_SOCKET, socket.SO_ERROR):
            return self.so_error or 0
        if (level, option) == (socket.IPPROTO_TCP, TCP_INFO) and self.tcp_info_rtt_us is not None:
            info = bytearray(buflen)
            struct.pack_into("=I", info, TCPI_RTT_OFFSET, self.tcp_info_rtt_us)
            return bytes(info)
        raise OSError(errno.ENOPROTOOPT, "Protocol not available")

    def getpeername(self) -> tuple[Any, ...]:
        if self.so_error != 0 or self.connected_to is None:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return self.connected_to

    def close(self) -> None:
        self.closed = True


class FakeNetwork:
    """The socket factory of a prober in memory: hands out and records fake sockets."""

    def __init__(self) -> None:
        self.sockets: list[FakeUdpSocket | FakeTcpSocket] = []
        self.open_error: OSError | None = None
        self.connect_result = errno.EINPROGRESS
        self.on_open: Callable[[FakeUdpSocket | FakeTcpSocket], None] | None = None  # sees each new socket

    def __call__(self, family: int, kind: int, proto: int = 0) -> FakeUdpSocket | FakeTcpSocket:
        if self.open_error is not None:
            raise self.open_error
        fd = 50 + len(self.sockets)
        sock: FakeUdpSocket | FakeTcpSocket
        if kind == socket.SOCK_DGRAM:
            sock = FakeUdpSocket(family, fd)
        else:
            sock = FakeTcpSocket(family, fd, self.connect_result)
        if self.on_open is not None:
            self.on_open(sock)
        self.sockets.append(sock)
        return sock

    @property
    def udp(self) -> FakeUdpSocket:
        """The last UDP socket opened."""
        sock = self.sockets[-1]
        assert isinstance(sock, FakeUdpSocket)
        return sock

    @property
    def tcp(self) -> FakeTcpSocket:
        """The last TCP socket opened."""
        sock = self.sockets[-1]
        assert isinstance(sock, FakeTcpSocket)
        return sock


def ttl(value: int, version: int = 4) -> tuple[int, int, bytes]:
    """The control message of a received TTL (IPv4) or hop limit (IPv6)."""
    if version == 4:
        return (pathwire.SOL_IP, pathwire.IP_TTL, struct.pack("=i", value))
    return (pathwire.SOL_IPV6, pathwire.IPV6_HOPLIMIT, struct.pack("=i", value))


def stamp(wall_ns: int) -> tuple[int, int, bytes]:
    """The control message of a kernel receive timestamp (SO_TIMESTAMPNS)."""
    return (socket.SOL_SOCKET, pathwire.SCM_TIMESTAMPNS, struct.pack("=qq", *divmod(wall_ns, 10**9)))


def extended_error(
    offender: IPv4Address | IPv6Address | None, kind: int, code: int, errno_: int = errno.ECONNREFUSED, origin: int = 0
) -> tuple[int, int, bytes]:
    """The control message of a queued ICMP error (struct sock_extended_err + offender)."""
    version = offender.version if offender is not None else 4
    origin = origin or (pathwire.SO_EE_ORIGIN_ICMP6 if version == 6 else pathwire.SO_EE_ORIGIN_ICMP)
    data = struct.pack("=IBBBBII", errno_, origin, kind, code, 0, 0, 0)
    if offender is None:
        data += struct.pack("=H", 0) + bytes(14)
    elif version == 4:
        data += struct.pack("=HH", socket.AF_INET, 0) + offender.packed + bytes(8)
    else:
        data += struct.pack("=HHI", socket.AF_INET6, 0, 0) + offender.packed + bytes(4)
    level, kind_ = (
        (pathwire.SOL_IP, pathwire.IP_RECVERR) if version == 4 else (pathwire.SOL_IPV6, pathwire.IPV6_RECVERR)
    )
    return (level, kind_, data)


def port_unreachable(offender: IPv4Address | IPv6Address) -> tuple[int, int, bytes]:
    code = 3 if offender.version == 4 else 4
    return extended_error(offender, icmpwire.UNREACHABLE[offender.version], code)


def host_unreachable(offender: IPv4Address | IPv6Address) -> tuple[int, int, bytes]:
    code = 1 if offender.version == 4 else 3
    return extended_error(offender, icmpwire.UNREACHABLE[offender.version], code, errno.EHOSTUNREACH)


class Rig:
    """A prober on a `MemoryReactorClock` with a `FakeNetwork`; its clocks follow the reactor."""

    def __init__(
        self,
        protocols: tuple[str, ...],
        timeout: float = 1.0,
        pinger: IcmpPinger | None = None,
        reactor: MemoryReactorClock | None = None,
    ) -> None:
        self.reactor = reactor or MemoryReactorClock()
        self.network = FakeNetwork()
        self.pinger = pinger
        self.protocols = protocols
        self.timeout = timeout
        self._prober: PathProber | None = None

    @property
    def prober(self) -> PathProber:
        if self._prober is None:
            self._prober = PathProber(
                self.reactor,
                self.protocols,
                self.timeout,
                self.pinger,
                sockets=self.network,
                monotonic_ns=self.monotonic_ns,
                wall_ns=lambda: WALL0 + self.monotonic_ns(),
                ids=random.Random(7),
            )
        return self._prober

    def monotonic_ns(self) -> int:
        return round(self.reactor.seconds() * 10**9)

    def probe(self, ldns: IPv4Address | IPv6Address = LDNS) -> Deferred[Sample]:
        return self.prober.probe(ldns)

    def wake(self) -> None:
        """What the reactor does when the sockets are ready: read the readers, write the writers."""
        for reader in list(self.reactor.readers):
            reader.doRead()
        for writer in list(self.reactor.writers):
            writer.doWrite()

    def assert_released(self) -> None:
        """No timer, reader or writer left, every socket closed, no probe in flight."""
        assert self.reactor.getDelayedCalls() == []
        pinger_readers = set(self.pinger._readers) if self.pinger is not None else set()
        assert set(self.reactor.readers) == pinger_readers
        assert not self.reactor.writers
        assert all(s.closed for s in self.network.sockets)
        assert self.prober.in_flight == 0
        if self.pinger is not None:
            assert self.pinger.in_flight == 0


def sample_of(d: Deferred[Sample]) -> Sample:
    """The sample *d* has fired with (fails the test if it has not fired yet)."""
    out: list[object] = []
    d.addBoth(out.append)
    assert out, "the probe has no sample yet"
    assert isinstance(out[0], Sample), out[0]
    return out[0]


# --------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("received", "hops"),
    [(57, 7), (250, 5), (120, 8), (1, 31), (64, 0), (255, 0), (32, 0), (33, 31), (65, 63), (129, 126), (None, 0)],
)
def test_hops_from_the_received_ttl(received: int | None, hops: int) -> None:
    """Hops are the nearest initial TTL (32, 64, 128, 255) at or above the received TTL,
    minus it; an unknown TTL is 0 hops."""
    assert pathwire.hops_from_ttl(received) == hops


def test_reverse_names() -> None:
    """The PTR name of an IPv4 address reverses its octets under in-addr.arpa; of an IPv6
    address, its 32 nibbles under ip6.arpa."""
    assert pathwire.reverse_name(ip_address("1.2.3.4")) == "4.3.2.1.in-addr.arpa."
    assert pathwire.reverse_name(ip_address("2001:db8::53")) == (
        "3.5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa."
    )


def test_ancillary_data_parsed() -> None:
    """TTL, hop limit, receive stamp and queued errors (with their offender) are read from
    the control messages; unknown ones are ignored."""
    got = pathwire.parse_ancillary([ttl(57), stamp(WALL0 + 5), port_unreachable(LDNS), (1, 99, b"x")])
    assert got.ttl == 57
    assert got.stamp_ns == WALL0 + 5
    assert got.error == pathwire.QueuedError(errno.ECONNREFUSED, pathwire.SO_EE_ORIGIN_ICMP, 3, 3, LDNS)
    assert got.error.describe() == "port unreachable"
    six = pathwire.parse_ancillary([ttl(120, 6), host_unreachable(ip_address("2001:db8::1"))])
    assert six.ttl == 120
    assert six.error is not None
    assert six.error.offender == ip_address("2001:db8::1")
    assert six.error.describe() == "address unreachable"
    local = pathwire.parse_ancillary([extended_error(None, 0, 0, errno.EMSGSIZE, pathwire.SO_EE_ORIGIN_LOCAL)])
    assert local.error is not None
    assert local.error.offender is None
    assert local.error.describe() == "message too long"


def test_kernel_figures_used_only_when_plausible() -> None:
    """The round trip is the kernel's figure (TCP_INFO, then the receive stamp) when it is
    positive and not longer than our own clock's; microseconds round up, at least 1."""
    m = Measure(sent_ns=1_000, sent_wall_ns=WALL0, received_ns=901_000)
    assert m.rtt_us() == 900
    m.stamp_ns = WALL0 + 400_500
    assert m.rtt_us() == 401
    m.kernel_rtt_ns = 250_000
    assert m.rtt_us() == 250
    m.kernel_rtt_ns = 2_000_000  # longer than we waited: not believed
    assert m.rtt_us() == 401
    m.stamp_ns = WALL0 - 5  # the wall clock was stepped: not believed
    assert m.rtt_us() == 900
    assert Measure(sent_ns=5, received_ns=5).rtt_us() == 1


def test_bad_settings_are_refused() -> None:
    """Unknown or no protocols, a timeout that is not positive and impossible ports are
    programming errors (the config loader rejects them first)."""
    reactor = MemoryReactorClock()
    with pytest.raises(ValueError, match="smoke"):
        PathProber(reactor, ("dns_dot", "smoke"), 1.0)
    with pytest.raises(ValueError, match="protocols"):
        PathProber(reactor, (), 1.0)
    with pytest.raises(ValueError, match="timeout"):
        PathProber(reactor, ("udp",), 0)
    with pytest.raises(ValueError, match="udp_port"):
        PathProber(reactor, ("udp",), 1.0, udp_port=70000)


# --------------------------------------------------------------------------- dns_dot, dns_rev


def test_dns_dot_query_and_any_rcode_counts() -> None:
    """dns_dot sends `. NS` with RD off from a non-blocking socket connected to LDNS:53 that
    asks for TTL, errors and stamps; a REFUSED response is a sample, with the RTT by the
    monotonic clock, hops from the TTL, and everything released."""
    rig = Rig(("dns_dot",))
    d = rig.probe()
    sock = rig.network.udp
    assert sock.connected_to == ("198.51.100.53", 53)
    assert not sock.blocking
    assert {
        (pathwire.SOL_IP, pathwire.IP_RECVERR),
        (pathwire.SOL_IP, pathwire.IP_RECVTTL),
        (socket.SOL_SOCKET, pathwire.SO_TIMESTAMPNS),
    } <= sock.options
    query = sock.query()
    assert (query.question[0].name.to_text(), query.question[0].rdtype) == (".", dns.rdatatype.NS)
    assert not query.flags & dns.flags.RD
    rig.reactor.advance(0.0125)
    sock.answer(dns.rcode.REFUSED, ttl(57))
    rig.wake()
    assert sample_of(d) == Sample(True, 12500, 7, "dns_dot", "dns_dot: reply rcode REFUSED")
    rig.assert_released()


def test_dns_rev_asks_for_the_ldns_own_ptr_over_ipv6() -> None:
    """dns_rev asks for the PTR of the LDNS's own address; an IPv6 LDNS gets an IPv6
    socket asking for the hop limit; NXDOMAIN counts like any answer."""
    rig = Rig(("dns_rev",))
    d = rig.probe(LDNS6)
    sock = rig.network.udp
    assert sock.family == socket.AF_INET6
    assert sock.connected_to == ("2001:db8::53", 53, 0, 0)
    assert {(pathwire.SOL_IPV6, pathwire.IPV6_RECVERR), (pathwire.SOL_IPV6, pathwire.IPV6_RECVHOPLIMIT)} <= sock.options
    question = sock.query().question[0]
    assert question.name.to_text() == pathwire.reverse_name(LDNS6)
    assert question.rdtype == dns.rdatatype.PTR
    rig.reactor.advance(0.002)
    sock.answer(dns.rcode.NXDOMAIN, ttl(120, 6))
    rig.wake()
    assert sample_of(d) == Sample(True, 2000, 8, "dns_rev", "dns_rev: reply rcode NXDOMAIN")
    rig.assert_released()


def test_ipv4_reverse_name_in_the_query() -> None:
    """The PTR question for an IPv4 LDNS is its in-addr.arpa name."""
    rig = Rig(("dns_rev",))
    rig.probe(ip_address("192.0.2.4"))
    assert rig.network.udp.query().question[0].name.to_text() == "4.2.0.192.in-addr.arpa."


def test_reply_with_another_id_is_ignored() -> None:
    """A response whose ID is not our query's (late or spoofed) and garbage are ignored; the
    attempt then times out and the next protocol is tried."""
    rig = Rig(("dns_dot", "udp"), timeout=1.0)
    d = rig.probe()
    dns_sock = rig.network.udp
    dns_sock.answer(dns.rcode.NOERROR, id_offset=1)
    dns_sock.reply(b"\x00garbage")
    rig.wake()
    assert not d.called
    rig.reactor.advance(1.0)
    assert dns_sock.closed
    udp_sock = rig.network.udp
    assert udp_sock is not dns_sock
    rig.reactor.advance(0.25)
    udp_sock.reply(b"anything")
    rig.wake()
    assert sample_of(d) == Sample(True, 250000, 0, "udp", "udp: reply")
    rig.assert_released()


def test_kernel_receive_stamp_preferred() -> None:
    """With a kernel receive stamp, the RTT leaves out the time the reply waited for the
    reactor."""
    rig = Rig(("dns_dot",))
    d = rig.probe()
    sock = rig.network.udp
    sock.answer(dns.rcode.NOERROR, ttl(64), stamp(WALL0 + 3_000_000))
    rig.reactor.advance(0.010)  # the reactor got to it 10 ms after the send
    rig.wake()
    assert sample_of(d) == Sample(True, 3000, 0, "dns_dot", "dns_dot: reply rcode NOERROR")


def test_port_unreachable_is_not_a_dns_reply() -> None:
    """For dns_dot only a DNS response counts: a port unreachable fails it at once (no wait
    for the timeout) and the next protocol runs."""
    rig = Rig(("dns_dot", "udp"), timeout=2.0)
    d = rig.probe()
    dns_sock = rig.network.udp
    dns_sock.icmp_error(port_unreachable(LDNS), ttl(64))
    rig.wake()
    assert dns_sock.closed
    udp_sock = rig.network.udp
    assert udp_sock.connected_to == ("198.51.100.53", 33434)
    udp_sock.icmp_error(port_unreachable(LDNS), ttl(60))
    rig.wake()
    assert sample_of(d) == Sample(True, 1, 4, "udp", "udp: port unreachable")
    rig.assert_released()


# --------------------------------------------------------------------------- udp


def test_udp_port_unreachable_from_the_ldns_counts() -> None:
    """udp: the LDNS's port unreachable is a reply; its TTL gives the hops and the kernel
    stamp of the ICMP error the RTT."""
    rig = Rig(("udp",))
    d = rig.probe()
    sock = rig.network.udp
    assert sock.sent == [b"gtmcluster path probe"]
    sock.icmp_error(port_unreachable(LDNS), ttl(250), stamp(WALL0 + 40_000_000))
    rig.reactor.advance(0.041)
    rig.wake()
    assert sample_of(d) == Sample(True, 40000, 5, "udp", "udp: port unreachable")
    rig.assert_released()


def test_udp_error_from_a_router_fails_and_moves_on() -> None:
    """An ICMP error from someone other than the LDNS (a router's host unreachable) is not a
    reply: udp fails at once, naming who said it, and the next protocol runs."""
    rig = Rig(("udp", "dns_dot"), timeout=1.0)
    d = rig.probe()
    rig.network.udp.icmp_error(host_unreachable(ROUTER))
    rig.wake()
    rig.reactor.advance(1.0)
    assert sample_of(d) == Sample(
        False,
        0,
        0,
        "",
        "all protocols failed: udp: host unreachable (from 203.0.113.1); dns_dot: no DNS reply within 1s",
    )
    rig.assert_released()


def test_udp_refused_without_details_counts() -> None:
    """Where the error queue is unavailable, a connected socket's bare "connection refused"
    is still the LDNS's port unreachable."""
    rig = Rig(("udp",))
    d = rig.probe()
    rig.network.udp.inbox.append(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
    rig.wake()
    assert sample_of(d) == Sample(True, 1, 0, "udp", "udp: port unreachable")
    rig.assert_released()


def test_error_reported_by_closing_the_descriptor() -> None:
    """Under epoll an ICMP error comes as EPOLLERR: the reactor drops the reader and calls
    connectionLost, which still reads the error queue."""
    rig = Rig(("udp",))
    d = rig.probe()
    rig.network.udp.icmp_error(port_unreachable(LDNS), ttl(64))
    (reader,) = rig.reactor.readers
    rig.reactor.removeReader(reader)
    reader.connectionLost(Failure(ConnectionDone()))
    assert sample_of(d).reason == "udp: port unreachable"
    rig.assert_released()


def test_socket_that_cannot_be_opened() -> None:
    """A socket the kernel will not give fails its protocol at once, saying why."""
    rig = Rig(("udp", "tcp"))
    rig.network.open_error = OSError(errno.EMFILE, "Too many open files")
    assert sample_of(rig.probe()).reason == (
        "all protocols failed: udp: cannot open a UDP socket: too many open files; "
        "tcp: cannot open a TCP socket: too many open files"
    )
    rig.assert_released()


def test_connect_and_send_errors() -> None:
    """A connect or send the kernel refuses fails its protocol at once with the kernel's
    reason, and closes the socket."""
    rig = Rig(("dns_dot", "udp"))

    def spoil(sock: FakeUdpSocket | FakeTcpSocket) -> None:
        assert isinstance(sock, FakeUdpSocket)
        if not rig.network.sockets:
            sock.connect_error = OSError(errno.ENETUNREACH, "Network is unreachable")
        else:
            sock.send_error = OSError(errno.EPERM, "Operation not permitted")

    rig.network.on_open = spoil
    assert sample_of(rig.probe()).reason == (
        "all protocols failed: dns_dot: network is unreachable; udp: send failed: operation not permitted"
    )
    rig.assert_released()


# --------------------------------------------------------------------------- tcp


def test_tcp_syn_ack() -> None:
    """tcp connects to LDNS:53 without blocking; a completed handshake is a sample, timed by
    the kernel's handshake RTT when it has one, and the socket is closed."""
    rig = Rig(("tcp",))
    d = rig.probe()
    sock = rig.network.tcp
    assert sock.connected_to == ("198.51.100.53", 53)
    assert not sock.blocking
    rig.wake()  # a spurious wake-up: still connecting
    assert not d.called
    rig.reactor.advance(0.030)
    sock.so_error = 0
    sock.tcp_info_rtt_us = 28_000
    rig.wake()
    assert sample_of(d) == Sample(True, 28000, 0, "tcp", "tcp: SYN-ACK")
    rig.assert_released()


def test_tcp_rst_counts() -> None:
    """A refused connection (RST) is a reply; under epoll it arrives as connectionLost."""
    rig = Rig(("tcp",))
    d = rig.probe(LDNS6)
    sock = rig.network.tcp
    assert sock.connected_to == ("2001:db8::53", 53, 0, 0)
    rig.reactor.advance(0.015)
    sock.so_error = errno.ECONNREFUSED
    (writer,) = rig.reactor.writers
    rig.reactor.removeWriter(writer)
    writer.connectionLost(Failure(ConnectionLost()))
    assert sample_of(d) == Sample(True, 15000, 0, "tcp", "tcp: RST")
    rig.assert_released()


def test_tcp_answered_at_once() -> None:
    """A connect that is answered within the call (loopback) needs no wait."""
    rig = Rig(("tcp",))
    rig.network.connect_result = errno.ECONNREFUSED
    assert sample_of(rig.probe()) == Sample(True, 1, 0, "tcp", "tcp: RST")
    rig.assert_released()


def test_tcp_unreachable_and_timeout() -> None:
    """A router's unreachable fails tcp with the kernel's reason; no answer at all is a
    timeout; both move on."""
    rig = Rig(("tcp", "tcp"), timeout=0.5)
    d = rig.probe()
    rig.network.tcp.so_error = errno.EHOSTUNREACH
    rig.wake()
    rig.reactor.advance(0.5)
    assert sample_of(d).reason == "all protocols failed: tcp: no route to host; tcp: no SYN-ACK or RST within 0.5s"
    rig.assert_released()


# --------------------------------------------------------------------------- icmp


def ipv4_reply(request: bytes, source: str) -> bytes:
    """The echo reply of *source* to *request*, behind an IPv4 header (a raw socket's view)."""
    ident, seq = struct.unpack("!HH", request[4:8])
    body = struct.pack("!BBHHH", 0, 0, 0, ident, seq) + request[8:]
    body = body[:2] + struct.pack("!H", icmpwire.checksum(body)) + body[4:]
    header = struct.pack("!BBHHHBBH", 0x45, 0, 20 + len(body), 0, 0, 64, 1, 0)
    return header + socket.inet_aton(source) + socket.inet_aton("192.0.2.1") + body


def test_icmp_through_the_shared_pinger() -> None:
    """icmp sends an echo request through the node's pinger; the reply is a sample (hops
    unknown); the pinger stays open and has nothing pending."""
    reactor = MemoryReactorClock()
    raw = FakeIcmpSocket(10)
    pinger = IcmpPinger(reactor, {4: Channel(4, raw, raw=True)}, random.Random(3))
    rig = Rig(("icmp",), pinger=pinger, reactor=reactor)
    d = rig.probe()
    request, address = raw.sent[0]
    assert address == ("198.51.100.53", 0)
    reactor.advance(0.07)
    raw.inbox.append((ipv4_reply(request, "198.51.100.53"), ("198.51.100.53", 0)))
    rig.wake()
    assert sample_of(d) == Sample(True, 70000, 0, "icmp", "icmp: echo reply")
    assert not raw.closed
    rig.assert_released()


def test_icmp_without_a_pinger_fails_and_moves_on() -> None:
    """Without a pinger (no root, no ping sockets) icmp fails at once saying why, and the
    next protocol is tried."""
    rig = Rig(("icmp", "tcp"))
    rig.network.connect_result = 0
    assert sample_of(rig.probe()) == Sample(True, 1, 0, "tcp", "tcp: SYN-ACK")
    rig = Rig(("icmp",))
    assert sample_of(rig.probe()).reason == f"all protocols failed: icmp: {NO_PINGER}"
    rig.assert_released()


# --------------------------------------------------------------------------- the order


def test_protocols_in_order_first_reply_wins() -> None:
    """Protocols run one after the other in the configured order; each gets the whole
    timeout; the first reply ends the probe and later protocols never start."""
    rig = Rig(("udp", "dns_rev", "tcp", "icmp"), timeout=1.0)
    d = rig.probe()
    assert len(rig.network.sockets) == 1
    assert rig.network.udp.connected_to == ("198.51.100.53", 33434)
    rig.reactor.advance(0.999)
    assert len(rig.network.sockets) == 1
    rig.reactor.advance(0.001)
    assert rig.network.sockets[0].closed
    assert rig.network.udp.query().question[0].rdtype == dns.rdatatype.PTR
    rig.reactor.advance(0.5)
    rig.network.udp.answer(dns.rcode.SERVFAIL, ttl(52))
    rig.wake()
    assert sample_of(d) == Sample(True, 500000, 12, "dns_rev", "dns_rev: reply rcode SERVFAIL")
    assert len(rig.network.sockets) == 2  # neither tcp nor icmp started
    rig.assert_released()


def test_all_protocols_fail() -> None:
    """When no protocol gets a reply, the sample fails after len(protocols) timeouts with
    each protocol's reason, in order."""
    rig = Rig(("dns_dot", "dns_rev", "udp", "tcp"), timeout=2.0)
    d = rig.probe(LDNS6)
    for _ in range(3):
        rig.reactor.advance(2.0)
        assert not d.called
    rig.reactor.advance(2.0)
    assert rig.reactor.seconds() == 8.0
    assert sample_of(d) == Sample(
        False,
        0,
        0,
        "",
        "all protocols failed: dns_dot: no DNS reply within 2s; dns_rev: no DNS reply within 2s; "
        "udp: no reply within 2s; tcp: no SYN-ACK or RST within 2s",
    )
    assert len(rig.network.sockets) == 4
    rig.assert_released()


def test_ipv4_mapped_ldns_probed_as_ipv4() -> None:
    """An LDNS seen as ::ffff:a.b.c.d (a dual-stack listener) is probed over IPv4."""
    rig = Rig(("dns_rev",))
    rig.probe(ip_address("::ffff:198.51.100.53"))
    sock = rig.network.udp
    assert sock.family == socket.AF_INET
    assert sock.connected_to == ("198.51.100.53", 53)
    assert sock.query().question[0].name.to_text() == "53.100.51.198.in-addr.arpa."


def test_concurrent_probes_are_independent() -> None:
    """Probes of several LDNSes run at once, each on its own sockets."""
    rig = Rig(("dns_dot",))
    first, second = rig.probe(LDNS), rig.probe(LDNS6)
    assert rig.prober.in_flight == 2
    six = rig.network.udp
    six.answer(dns.rcode.NOERROR, ttl(64, 6))
    rig.wake()
    assert sample_of(second).ok
    assert not first.called
    rig.reactor.advance(1.0)
    assert not sample_of(first).ok
    rig.assert_released()


# --------------------------------------------------------------------------- ending early


def test_close_ends_running_probes() -> None:
    """close() ends the probes in flight with "prober closed", releases their sockets and
    timers, and later probes fail at once."""
    rig = Rig(("dns_dot", "tcp"))
    running = rig.probe()
    rig.prober.close()
    assert sample_of(running) == Sample(False, 0, 0, "", "prober closed")
    rig.assert_released()
    assert sample_of(rig.probe()) == Sample(False, 0, 0, "", "prober closed")
    assert len(rig.network.sockets) == 1


def test_close_releases_a_pending_echo() -> None:
    """Closing the prober during an icmp attempt forgets the echo request in the pinger."""
    reactor = MemoryReactorClock()
    pinger = IcmpPinger(reactor, {4: Channel(4, FakeIcmpSocket(10), raw=True)}, random.Random(3))
    rig = Rig(("icmp",), pinger=pinger, reactor=reactor)
    d = rig.probe()
    assert pinger.in_flight == 1
    rig.prober.close()
    assert sample_of(d).reason == "prober closed"
    rig.assert_released()


def test_cancel_releases_everything() -> None:
    """A caller that cancels the probe gets CancelledError, and nothing is left open."""
    rig = Rig(("tcp", "udp"))
    d = rig.probe()
    d.cancel()
    failures: list[Any] = []
    d.addErrback(failures.append)
    assert failures[0].check(CancelledError)
    rig.assert_released()
    assert len(rig.network.sockets) == 1


# --------------------------------------------------------------------------- real sockets


def assert_clean(run: PathRun) -> None:
    assert run.leftovers == {"delayed_calls": [], "selectables": []}


def assert_fast_sample(result: dict[str, Any], protocol: str, reason: str, hops: int = 0) -> None:
    """A sample over loopback: ok by *protocol*, a small RTT, the expected hops."""
    assert (result["ok"], result["protocol"], result["reason"], result["hops"]) == (True, protocol, reason, hops)
    assert 0 < result["rtt_us"] < 200_000
    assert result["rtt_us"] <= result["elapsed"] * 1e6 + 1


@pytest.mark.process
def test_real_dns_responder() -> None:
    """dns_dot and dns_rev against a DNS responder on 127.0.0.1 and ::1: a sample with a
    small RTT and 0 hops (loopback TTL 64); a responder sending with TTL 57 / hop limit
    120 is 7 / 8 hops away."""
    with dns_responder(4) as v4, dns_responder(6) as v6, dns_responder(4) as far4, dns_responder(6) as far6:
        far4.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 57)
        far6.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 120)
        run = run_paths(
            path_job("127.0.0.1", "dns_dot", dns_port=v4.port),
            path_job("::1", "dns_dot", dns_port=v6.port),
            path_job("127.0.0.1", "dns_rev", dns_port=v4.port),
            path_job("::1", "dns_rev", dns_port=v6.port),
            path_job("127.0.0.1", "dns_dot", dns_port=far4.port),
            path_job("::1", "dns_dot", dns_port=far6.port),
        )
    dot4, dot6, rev4, rev6, far_4, far_6 = run.results
    assert_fast_sample(dot4, "dns_dot", "dns_dot: reply rcode NXDOMAIN")
    assert_fast_sample(dot6, "dns_dot", "dns_dot: reply rcode NXDOMAIN")
    assert_fast_sample(rev4, "dns_rev", "dns_rev: reply rcode NXDOMAIN")
    assert_fast_sample(rev6, "dns_rev", "dns_rev: reply rcode NXDOMAIN")
    assert_fast_sample(far_4, "dns_dot", "dns_dot: reply rcode NXDOMAIN", hops=7)
    assert_fast_sample(far_6, "dns_dot", "dns_dot: reply rcode NXDOMAIN", hops=8)
    assert_clean(run)


@pytest.mark.process
def test_real_udp_port_unreachable_and_reply() -> None:
    """udp to a closed port on 127.0.0.1 and ::1 is a sample by the port unreachable, long
    before the timeout; a UDP echo server's reply is one too."""
    with udp_echo(4) as echo:
        run = run_paths(
            path_job("127.0.0.1", "udp", udp_port=closed_port(4, socket.SOCK_DGRAM), timeout=5.0),
            path_job("::1", "udp", udp_port=closed_port(6, socket.SOCK_DGRAM), timeout=5.0),
            path_job("127.0.0.1", "udp", udp_port=echo.port),
        )
    closed4, closed6, replied = run.results
    assert_fast_sample(closed4, "udp", "udp: port unreachable")
    assert_fast_sample(closed6, "udp", "udp: port unreachable")
    assert_fast_sample(replied, "udp", "udp: reply")
    assert closed4["elapsed"] < 1.0 and closed6["elapsed"] < 1.0
    assert_clean(run)


@pytest.fixture
def listening() -> Iterator[dict[int, int]]:
    """TCP ports on 127.0.0.1 and ::1 that accept connections (the kernel completes them)."""
    socks = {}
    for version, host in ((4, "127.0.0.1"), (6, "::1")):
        s = socket.socket(socket.AF_INET if version == 4 else socket.AF_INET6, socket.SOCK_STREAM)
        s.bind((host, 0))
        s.listen(8)
        socks[version] = s
    yield {v: s.getsockname()[1] for v, s in socks.items()}
    for s in socks.values():
        s.close()


@pytest.mark.process
def test_real_tcp_syn_ack_and_rst(listening: dict[int, int]) -> None:
    """tcp: a listening port answers with SYN-ACK and a closed one with RST, on both
    families; both are samples."""
    run = run_paths(
        path_job("127.0.0.1", "tcp", dns_port=listening[4]),
        path_job("::1", "tcp", dns_port=listening[6]),
        path_job("127.0.0.1", "tcp", dns_port=closed_port(4, socket.SOCK_STREAM)),
        path_job("::1", "tcp", dns_port=closed_port(6, socket.SOCK_STREAM)),
    )
    syn4, syn6, rst4, rst6 = run.results
    assert_fast_sample(syn4, "tcp", "tcp: SYN-ACK")
    assert_fast_sample(syn6, "tcp", "tcp: SYN-ACK")
    assert_fast_sample(rst4, "tcp", "tcp: RST")
    assert_fast_sample(rst6, "tcp", "tcp: RST")
    assert_clean(run)


@pytest.mark.process
def test_real_order_dns_fails_then_tcp(listening: dict[int, int]) -> None:
    """With (dns_dot, tcp) and no DNS responder, dns_dot fails at once on the port
    unreachable (not a DNS reply) and tcp answers: RST on a closed port, SYN-ACK where a
    TCP listener has the port; IPv4-mapped addresses go over IPv4."""
    port = closed_port(4, socket.SOCK_STREAM)
    run = run_paths(
        path_job("127.0.0.1", "dns_dot", "tcp", dns_port=port, timeout=5.0),
        path_job("::ffff:127.0.0.1", "dns_dot", "tcp", dns_port=listening[4], timeout=5.0),
    )
    closed, served = run.results
    assert_fast_sample(closed, "tcp", "tcp: RST")
    assert_fast_sample(served, "tcp", "tcp: SYN-ACK")
    assert closed["elapsed"] < 1.0 and served["elapsed"] < 1.0
    assert_clean(run)


@pytest.mark.process
def test_real_probes_leave_from_the_configured_source() -> None:
    """With a probe source (a member's probe_source) the UDP and TCP probes leave from that
    address, not from the one the routing table picks: the LDNS sees the data center's own
    address, which is what the answer's delay depends on in the demo and in a real WAN."""
    seen: list[str] = []

    def record(sock: socket.socket) -> None:
        data, peer = sock.recvfrom(65535)
        seen.append(peer[0])
        sock.sendto(data, peer)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    loop = SocketLoop(bound(4, socket.SOCK_DGRAM), record)
    try:
        run = run_paths(
            path_job("127.0.0.1", "udp", udp_port=loop.port, source="127.0.0.77"),
            path_job("127.0.0.1", "tcp", dns_port=listener.getsockname()[1], source="127.0.0.78"),
        )
        conn, peer = listener.accept()
        conn.close()
    finally:
        loop.stop()
        listener.close()
    assert_fast_sample(run.results[0], "udp", "udp: reply")
    assert_fast_sample(run.results[1], "tcp", "tcp: SYN-ACK")
    assert seen == ["127.0.0.77"]
    assert peer[0] == "127.0.0.78"
    assert_clean(run)


@pytest.fixture
def icmp_allowed() -> None:
    try:
        open_pinger(MemoryReactorClock()).close()
    except IcmpUnavailable as e:
        if IN_CI:
            pytest.fail(str(e))
        pytest.skip(str(e))


@pytest.mark.process
@pytest.mark.usefixtures("icmp_allowed")
def test_real_icmp_echo() -> None:
    """icmp to 127.0.0.1 and ::1 through the node's pinger is a sample."""
    run = run_paths(path_job("127.0.0.1", "icmp"), path_job("::1", "icmp"))
    v4, v6 = run.results
    assert_fast_sample(v4, "icmp", "icmp: echo reply")
    assert_fast_sample(v6, "icmp", "icmp: echo reply")
    assert_clean(run)


@pytest.mark.process
def test_real_unroutable_address_fails_every_protocol() -> None:
    """An address nobody has (192.0.2.200) fails every protocol, one after the other, within
    len(protocols) x timeout; nothing is left behind."""
    protocols = ("dns_dot", "dns_rev", "udp", "tcp", "icmp")
    run = run_paths(path_job("192.0.2.200", *protocols, timeout=0.3))
    (result,) = run.results
    assert (result["ok"], result["rtt_us"], result["hops"], result["protocol"]) == (False, 0, 0, "")
    reasons = result["reason"].removeprefix("all protocols failed: ").split("; ")
    assert [r.split(":")[0] for r in reasons] == list(protocols)
    assert result["elapsed"] <= len(protocols) * 0.3 + 0.5
    assert_clean(run)


@pytest.mark.process
@pytest.mark.parametrize("reactor", ["poll", "select"])
def test_real_probes_under_other_reactors(reactor: str, listening: dict[int, int]) -> None:
    """The poll and select reactors report an ICMP error or a refused connect as a read or
    write event rather than a lost descriptor; the samples are the same."""
    with dns_responder(4) as v4:
        run = run_paths(
            path_job("127.0.0.1", "dns_dot", dns_port=v4.port),
            path_job("::1", "udp", udp_port=closed_port(6, socket.SOCK_DGRAM), timeout=5.0),
            path_job("127.0.0.1", "dns_dot", "tcp", dns_port=closed_port(4, socket.SOCK_STREAM), timeout=5.0),
            path_job("127.0.0.1", "tcp", dns_port=listening[4]),
            reactor=reactor,
        )
    assert run.reactor.lower().startswith(reactor)
    assert run.reasons() == ["dns_dot: reply rcode NXDOMAIN", "udp: port unreachable", "tcp: RST", "tcp: SYN-ACK"]
    assert all(r["ok"] and r["elapsed"] < 1.0 for r in run.results)
    assert_clean(run)
