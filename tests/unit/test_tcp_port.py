"""The TCP port on real sockets (`dns.tcpport`): a read's answers are sent as the read ends,
with no reactor turn and no watching for writing, the general path's bytes in order; what
the socket does not take is left to Twisted, with its back-pressure, and a close or a
client gone go Twisted's way."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from gtmcluster.dns.stream import DNSStreamFactory
from gtmcluster.dns.tcpport import DNSConnection, DNSStreamPort, adopt_tcp
from tests.support.sendbuffer import frames
from tests.support.twins import Twins, make_query

WIDEIP = "gslb.example.test"


def framed(wire: bytes) -> bytes:
    return struct.pack("!H", len(wire)) + wire


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()


class Served:
    """A `DNSStreamPort` on *sock* under a memory reactor, and one client connected to it."""

    def __init__(self, twins: Twins, sock: socket.socket, receive_buffer: int | None = None):
        self.reactor = MemoryReactorClock()
        self.factory = DNSStreamFactory(twins.node.responder, self.reactor, 10, 100)
        self.factory.fast = twins.fast
        self.port = DNSStreamPort._fromListeningDescriptor(self.reactor, sock.fileno(), socket.AF_INET, self.factory)
        self.port.startListening()
        self.client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:
            self.client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.client.settimeout(2)
        self.client.connect(sock.getsockname())
        self.port.doRead()  # (accepts it)
        (self.proto,) = self.factory.connections
        transport: Any = self.proto.transport
        assert isinstance(transport, DNSConnection)
        self.connection: DNSConnection = transport

    def read(self, expected: int) -> bytes:
        """*expected* bytes from the client's socket."""
        data = b""
        while len(data) < expected:
            chunk = self.client.recv(expected - len(data))
            assert chunk, "the connection closed"
            data += chunk
        return data

    def close(self) -> None:
        self.client.close()
        self.port.stopListening()


def test_a_reads_answers_are_sent_as_the_read_ends(tmp_path: Path, listening: socket.socket) -> None:
    """Pipelined queries read at once are answered with the general path's bytes, in order,
    sent before the read returns: the reactor is never asked to watch for writing."""
    twins = Twins(tmp_path)
    served = Served(twins, listening)
    source = "127.0.0.1"
    queries = [
        make_query("www.example.test", qid=1),
        make_query(WIDEIP, qid=2, ecs=(1, 24, bytes([203, 0, 113]))),
        make_query("big.example.test", 16, qid=3),  # (whole over TCP)
        make_query("nothing.example.test", qid=4, edns=True),
    ]
    expected = []
    for query in queries:
        replies = twins.reference.responder.handle_stream(query, source)
        assert isinstance(replies, list)
        expected += replies
    for _ in range(3):  # (first seen, then from the templates and kept decisions)
        served.client.sendall(b"".join(framed(q) for q in queries))
        served.connection.doRead()
        assert served.connection not in served.reactor.getWriters()
        assert frames(served.read(sum(2 + len(r) for r in expected))) == expected
    served.close()


def test_what_the_socket_does_not_take_waits_for_the_reactor(tmp_path: Path, listening: socket.socket) -> None:
    """A client that reads nothing: the socket takes what it can as the read ends, the rest
    waits in Twisted's buffer with the reactor watching for writing, and past the buffer's
    size the connection is not read (back-pressure); the client then gets every answer, in
    order."""
    twins = Twins(tmp_path)
    served = Served(twins, listening, receive_buffer=4096)
    connection = served.connection
    connection.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    connection.bufferSize = 16384  # (Twisted's 64 KiB, smaller: 16 answers of 2.5 KB pass it)
    queries = [make_query("big.example.test", 16, qid=i) for i in range(40)]
    served.client.sendall(b"".join(framed(q) for q in queries))
    connection.doRead()
    assert connection in served.reactor.getWriters()
    assert served.proto._held and connection not in served.reactor.getReaders()
    served.client.setblocking(False)
    data = b""
    for _ in range(1000):
        try:
            while chunk := served.client.recv(65536):
                data += chunk
        except BlockingIOError:
            pass
        if connection in served.reactor.getWriters():
            connection.doWrite()  # (what the reactor does once the socket takes more)
        served.reactor.advance(0)  # (the next turn's requests)
        if len(replies := _complete(data)) == len(queries):
            break
    assert [int.from_bytes(r[:2], "big") for r in replies] == list(range(40))
    assert replies[0] == twins.reference.responder.handle(queries[0], "127.0.0.1", True)
    assert connection in served.reactor.getReaders() and connection not in served.reactor.getWriters()
    served.close()


def _complete(data: bytes) -> list[bytes]:
    """The whole messages at the start of *data*."""
    out = []
    while len(data) >= 2 and len(data) >= 2 + int.from_bytes(data[:2], "big"):
        n = int.from_bytes(data[:2], "big")
        out.append(data[2 : 2 + n])
        data = data[2 + n :]
    return out


def test_a_close_in_the_read_goes_twisteds_way(tmp_path: Path, listening: socket.socket) -> None:
    """A runt message closes the connection after the answers before it are sent."""
    twins = Twins(tmp_path)
    served = Served(twins, listening)
    query = make_query("www.example.test", qid=5)
    served.client.sendall(framed(query) + framed(b"\x00\x01"))
    served.connection.doRead()
    assert served.connection.disconnecting
    why = served.connection.doWrite()  # (the reactor, watching for writing: sends, then closes)
    assert why is not None
    served.connection.connectionLost(Failure(why))
    reply = served.read(2 + len(twins.reference.responder.handle(query, "127.0.0.1", True) or b""))
    assert frames(reply) == [twins.reference.responder.handle(query, "127.0.0.1", True)]
    assert served.client.recv(10) == b""
    served.close()


def test_adopting_on_a_real_reactor_gives_the_dns_stream_port(tmp_path: Path, listening: socket.socket) -> None:
    """The service's TCP sockets are read by a `DNSStreamPort` on a real reactor (the fake
    reactors of other tests get their own port)."""
    from twisted.internet import reactor

    twins = Twins(tmp_path)
    factory = DNSStreamFactory(twins.node.responder, MemoryReactorClock(), 10, 100)
    port = adopt_tcp(reactor, listening.fileno(), socket.AF_INET, factory)
    try:
        assert isinstance(port, DNSStreamPort)
    finally:
        port.stopListening()
