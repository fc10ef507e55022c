"""The DNS connections read from an epoll of their own (`dns.tcpport.ConnectionReads`), on
real sockets under a memory reactor: one wakeup reads every connection with bytes and
answers with the general path's bytes; what Twisted did per connection still holds (a
message left half sent is closed by its timeout, a client that reads nothing stops being
read until it takes its answers, a client gone or reset ends its connection, the caps close
connections of a flood, the reactor stopping ends them all)."""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.dns import tcpport
from gtmcluster.dns.stream import DNSStreamFactory, DNSStreamProtocol
from gtmcluster.dns.tcpport import ConnectionReads, PolledConnection, PolledStreamPort, adopt_tcp
from tests.support.sendbuffer import frames
from tests.support.twins import Twins, make_query

WIDEIP = "gslb.example.test"
SOURCE = "127.0.0.1"


def framed(wire: bytes) -> bytes:
    return struct.pack("!H", len(wire)) + wire


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((SOURCE, 0))
    sock.listen(256)
    sock.setblocking(False)
    yield sock
    sock.close()


class Served:
    """A `PolledStreamPort` on *sock* under a memory reactor, and the clients connected."""

    def __init__(self, twins: Twins, sock: socket.socket, max_per_source: int = 64):
        self.twins = twins
        self.sock = sock
        self.reactor = MemoryReactorClock()
        self.factory = DNSStreamFactory(twins.node.responder, self.reactor, 10, 1000, max_per_source=max_per_source)
        self.factory.fast = twins.fast
        self.port = PolledStreamPort._fromListeningDescriptor(self.reactor, sock.fileno(), socket.AF_INET, self.factory)
        self.port.startListening()
        self.reads: ConnectionReads = self.port.reads
        self.clients: list[socket.socket] = []

    def connect(self, n: int = 1, receive_buffer: int | None = None) -> list[socket.socket]:
        """*n* clients more, accepted."""
        made = []
        for _ in range(n):
            client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if receive_buffer is not None:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            client.settimeout(2)
            client.connect(self.sock.getsockname())
            made.append(client)
        self.port.doRead()  # (accepts them)
        self.clients += made
        return made

    def connection(self, proto: DNSStreamProtocol) -> PolledConnection:
        transport: Any = proto.transport
        assert isinstance(transport, PolledConnection)
        return transport

    def expected(self, queries: list[bytes]) -> list[bytes]:
        out: list[bytes] = []
        for query in queries:
            replies = self.twins.reference.responder.handle_stream(query, SOURCE)
            assert isinstance(replies, list)
            out += replies
        return out

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.port.stopListening()


def read(client: socket.socket, expected: int) -> bytes:
    data = b""
    while len(data) < expected:
        chunk = client.recv(expected - len(data))
        assert chunk, "the connection closed"
        data += chunk
    return data


def test_one_wakeup_reads_every_connection_with_the_general_paths_bytes(
    tmp_path: Path, listening: socket.socket
) -> None:
    """Twenty clients each send pipelined queries; one read of the epoll answers all of
    them, each with the general path's bytes in order, sent before it returns: the reactor
    watches the one epoll, never a connection (for reading or writing)."""
    served = Served(Twins(tmp_path), listening)
    clients = served.connect(20)
    assert set(served.reactor.getReaders()) == {served.port, served.reads}  # (the port: accepting)
    assert len(served.reads) == 20
    queries = [
        make_query("www.example.test", qid=1),
        make_query(WIDEIP, qid=2, ecs=(1, 24, bytes([203, 0, 113]))),
        make_query("big.example.test", 16, qid=3),  # (whole over TCP)
        make_query("nothing.example.test", qid=4, edns=True),
    ]
    expected = served.expected(queries)
    size = sum(2 + len(r) for r in expected)
    for _ in range(3):  # (first seen, then kept)
        for client in clients:
            client.sendall(b"".join(framed(q) for q in queries))
        served.reads.doRead()
        assert not served.reactor.getWriters()
        for client in clients:
            assert frames(read(client, size)) == expected
    served.close()


def test_a_half_message_waits_then_its_timeout_closes_it(tmp_path: Path, listening: socket.socket) -> None:
    """Half a message is not answered; its other half is; a message left half sent is
    closed by the message timeout and no longer read, other connections unharmed."""
    served = Served(Twins(tmp_path), listening)
    slow, other = served.connect(2)
    query = make_query("www.example.test", qid=7)
    (reply,) = served.expected([query])
    whole = framed(query)
    slow.sendall(whole[:5])
    served.reads.doRead()
    slow.sendall(whole[5:] + whole[:1])  # (the rest, then the first byte of the next)
    served.reads.doRead()
    assert frames(read(slow, 2 + len(reply))) == [reply]
    served.reactor.advance(served.factory.message_timeout)
    assert served.factory.closed_by["partial"] == 1
    served.reactor.advance(0)  # (the abort's connectionLost)
    assert len(served.reads) == 1 and len(served.factory.connections) == 1
    assert ended(slow)
    other.sendall(whole)
    served.reads.doRead()
    assert frames(read(other, 2 + len(reply))) == [reply]
    served.close()


def test_a_client_that_reads_nothing_is_not_read_until_it_takes_its_answers(
    tmp_path: Path, listening: socket.socket
) -> None:
    """Past Twisted's send buffer the connection leaves the epoll (back-pressure: nothing
    more is read or answered for it), the reactor watching it for writing; once the client
    reads, it gets every answer in order and is read again."""
    served = Served(Twins(tmp_path), listening)
    (client,) = served.connect(receive_buffer=4096)
    (proto,) = served.factory.connections
    connection = served.connection(proto)
    connection.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    connection.bufferSize = 16384
    queries = [make_query("big.example.test", 16, qid=i) for i in range(40)]
    client.sendall(b"".join(framed(q) for q in queries))
    served.reads.doRead()
    assert proto._held and not served.reads.reading(connection)
    assert connection in served.reactor.getWriters()
    served.reads.doRead()  # (the rest of the queries wait unread)
    client.setblocking(False)
    data = b""
    for _ in range(1000):
        try:
            while chunk := client.recv(65536):
                data += chunk
        except BlockingIOError:
            pass
        if connection in served.reactor.getWriters():
            connection.doWrite()  # (what the reactor does once the socket takes more)
        served.reactor.advance(0)  # (the next turn's requests)
        served.reads.doRead()
        if len(replies := frames_prefix(data)) == len(queries):
            break
    assert [int.from_bytes(r[:2], "big") for r in replies] == list(range(40))
    assert replies == served.expected(queries)
    assert served.reads.reading(connection) and connection not in served.reactor.getWriters()
    served.close()


def frames_prefix(data: bytes) -> list[bytes]:
    """The whole messages at the start of *data*."""
    out = []
    while len(data) >= 2 and len(data) >= 2 + int.from_bytes(data[:2], "big"):
        n = int.from_bytes(data[:2], "big")
        out.append(data[2 : 2 + n])
        data = data[2 + n :]
    return out


def ended(client: socket.socket) -> bool:
    """Whether the server ended *client*'s connection (closed, or aborted: reset)."""
    try:
        return client.recv(10) == b""
    except ConnectionResetError:
        return True


def test_a_client_gone_or_reset_ends_its_connection(tmp_path: Path, listening: socket.socket) -> None:
    """A client that closes (a clean end) or resets (an error) is ended as the reactor
    would end it: forgotten by the epoll and by the caps' table."""
    served = Served(Twins(tmp_path), listening)
    gone, reset, stays = served.connect(3)
    gone.close()
    reset.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    reset.close()
    served.clients = [stays]
    served.reads.doRead()
    assert len(served.reads) == 1 and len(served.factory.connections) == 1
    query = make_query("www.example.test", qid=9)
    stays.sendall(framed(query))
    served.reads.doRead()
    assert frames(read(stays, 2 + len(served.expected([query])[0]))) == served.expected([query])
    served.close()


def test_a_flood_of_connections_keeps_the_caps_and_reads_per_poll(
    tmp_path: Path, listening: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One source opening more than its cap: its connections idle the longest are closed
    and leave the epoll (it holds the cap's worth); with more ready than `PER_POLL`, a wakeup
    reads that many and the next the rest."""
    monkeypatch.setattr(tcpport, "PER_POLL", 8)
    served = Served(Twins(tmp_path), listening, max_per_source=20)
    clients = served.connect(30)
    served.reactor.advance(0)  # (the aborted ones' connectionLost)
    assert len(served.reads) == 20 and served.factory.closed_by["source_cap"] == 10
    kept = clients[10:]
    query = make_query("www.example.test", qid=3)
    for client in kept:
        client.sendall(framed(query))
    answered = 0
    for _ in range(3):
        served.reads.doRead()
        got = 0
        for client in kept:
            client.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                got += len(frames_prefix(client.recv(65536)))
        assert got == min(8, 20 - answered)
        answered += got
    assert answered == 20
    served.close()


def test_the_reactor_stopping_ends_every_connection(tmp_path: Path, listening: socket.socket) -> None:
    """The reactor letting go of its descriptors (`disconnectAll`: the epoll's
    connectionLost) ends every connection it reads."""
    served = Served(Twins(tmp_path), listening)
    clients = served.connect(3)
    from twisted.internet.main import CONNECTION_LOST
    from twisted.python.failure import Failure

    served.reads.connectionLost(Failure(CONNECTION_LOST))
    assert len(served.reads) == 0 and len(served.factory.connections) == 0
    assert all(ended(client) for client in clients)
    served.close()


def test_a_reused_descriptor_is_read_as_the_new_connection(tmp_path: Path, listening: socket.socket) -> None:
    """A connection closed without being forgotten (its descriptor given to a new one) does
    not stop the new one being read."""
    served = Served(Twins(tmp_path), listening)
    served.connect(1)
    (old,) = served.factory.connections
    stale = served.connection(old)
    fd = stale.fileno()
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.settimeout(2)
    stale.socket.close()  # (behind Twisted's back: the kernel drops it from the epoll)
    client.connect(listening.getsockname())
    served.port.doRead()  # (accepted on the lowest descriptor free: the stale one's)
    served.clients.append(client)
    new = [p for p in served.factory.connections if p is not old]
    assert new and served.connection(new[0]).fileno() == fd
    assert served.reads.reading(served.connection(new[0])) and not served.reads.reading(stale)
    query = make_query("www.example.test", qid=4)
    client.sendall(framed(query))
    served.reads.doRead()
    assert frames(read(client, 2 + len(served.expected([query])[0]))) == served.expected([query])
    served.close()


def test_adopting_on_a_real_reactor_gives_the_polled_port(tmp_path: Path, listening: socket.socket) -> None:
    """The service's TCP sockets are read by a `PolledStreamPort` on a real reactor, every
    port's connections by the reactor's one `ConnectionReads`."""
    from twisted.internet import reactor

    twins = Twins(tmp_path)
    factory = DNSStreamFactory(twins.node.responder, MemoryReactorClock(), 10, 100)
    port = adopt_tcp(reactor, listening.fileno(), socket.AF_INET, factory)
    try:
        assert isinstance(port, PolledStreamPort)
        assert port.reads is tcpport.reads_for(reactor)
    finally:
        port.stopListening()
