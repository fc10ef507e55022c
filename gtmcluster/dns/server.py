"""Twisted transports for the responder: UDP and TCP listeners on every DNS address.

TCP follows RFC 7766: two-byte length framing, several queries per connection answered in
order, an idle timeout, and a cap on concurrent connections per listener (the oldest idle
connection makes way for a new one).
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.interfaces import IAddress, IListeningPort, IReactorSocket, IReactorTime
from twisted.internet.protocol import DatagramProtocol, Protocol, ServerFactory, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure

from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dns.responder import Responder
from gtmcluster.sockets import Listener

log = Logger()

_LENGTH = struct.Struct("!H")


#: the largest query read over UDP: a query is a question and an OPT record, far below it
#: (a bigger datagram is cut and then refused as malformed); each read allocates this much
MAX_UDP_QUERY = 4096


class DNSDatagramProtocol(DatagramProtocol):
    """Answers UDP queries (through the fast path)."""

    noisy = False

    def __init__(self, fast: FastPath):
        self.fast = fast
        self._sendto: Any = None

    def startProtocol(self) -> None:
        # The port's own write checks the address and the errors on every reply; the
        # address is the one a datagram came from, so send straight on the socket.
        self._sendto = self.transport.socket.sendto  # type: ignore[union-attr]

    def datagramReceived(self, datagram: bytes, addr: Any) -> None:
        reply = self.fast.handle(datagram, addr[0])
        if reply is not None:
            try:  # noqa: SIM105 - cheaper than contextlib.suppress on the answer path
                self._sendto(reply, addr)
            except OSError:
                pass  # a full send buffer or a client gone: UDP replies may be lost


class DNSStreamProtocol(Protocol):
    """Answers length-prefixed queries over one TCP connection."""

    factory: DNSStreamFactory

    def __init__(self) -> None:
        self._buffer = b""
        self._timer: Any = None
        self.peer = ""

    def connectionMade(self) -> None:
        self.peer = self.transport.getPeer().host  # type: ignore[union-attr]
        self.factory.opened(self)
        self._reset_timer()

    def _reset_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = self.factory.clock.callLater(self.factory.idle_timeout, self._idle)

    def _idle(self) -> None:
        self._timer = None
        self.transport.abortConnection()  # type: ignore[union-attr]

    def dataReceived(self, data: bytes) -> None:
        self._buffer += data
        self.factory.touched(self)
        self._reset_timer()
        while len(self._buffer) >= 2:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if len(self._buffer) < 2 + length:
                return
            message = self._buffer[2 : 2 + length]
            self._buffer = self._buffer[2 + length :]
            if length < 12:
                self.transport.loseConnection()  # type: ignore[union-attr]
                return
            reply = self.factory.responder.handle(message, self.peer, tcp=True)
            if reply is not None:
                self.transport.write(_LENGTH.pack(len(reply)) + reply)  # type: ignore[union-attr]

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        self.factory.closed(self)


class DNSStreamFactory(ServerFactory[DNSStreamProtocol]):
    noisy = False

    def __init__(self, responder: Responder, clock: IReactorTime, idle_timeout: float, max_clients: int):
        self.responder = responder
        self.clock = clock
        self.idle_timeout = idle_timeout
        self.max_clients = max_clients
        #: open connections, least recently active first
        self.connections: OrderedDict[DNSStreamProtocol, None] = OrderedDict()

    def buildProtocol(self, addr: IAddress | None) -> DNSStreamProtocol:
        proto = DNSStreamProtocol()
        proto.factory = self
        return proto

    def opened(self, proto: DNSStreamProtocol) -> None:
        self.connections[proto] = None
        while len(self.connections) > self.max_clients:
            oldest = next(iter(self.connections))
            del self.connections[oldest]
            oldest.transport.abortConnection()  # type: ignore[union-attr]

    def touched(self, proto: DNSStreamProtocol) -> None:
        if proto in self.connections:
            self.connections.move_to_end(proto)

    def closed(self, proto: DNSStreamProtocol) -> None:
        self.connections.pop(proto, None)


class DNSService(Service):
    """Answers DNS on already bound sockets (see `sockets.bind`); stopping closes them all."""

    def __init__(
        self,
        reactor: Any,
        listeners: list[Listener],
        responder: Responder,
        idle_timeout: float,
        max_clients: int,
    ):
        self.reactor = reactor
        self.listeners = listeners
        self.responder = responder
        fast = FastPath(responder)
        self.udp = [DNSDatagramProtocol(fast) for _ in listeners]
        self.tcp = DNSStreamFactory(responder, reactor, idle_timeout, max_clients)
        self.ports: list[IListeningPort] = []

    def set_responder(self, responder: Responder) -> None:
        """Answer from now on with *responder* (a new config); no query is lost."""
        self.responder = responder
        fast = FastPath(responder)  # templates of the old zones go with them
        for proto in self.udp:
            proto.fast = fast
        self.tcp.responder = responder

    def startService(self) -> None:
        super().startService()
        socket_reactor: IReactorSocket = self.reactor
        for listener, proto in zip(self.listeners, self.udp, strict=True):
            self.ports.append(
                socket_reactor.adoptDatagramPort(
                    listener.udp.fileno(), listener.family, proto, maxPacketSize=MAX_UDP_QUERY
                )
            )
            # (the stub's factory type variable wants `factory: Factory | None` on the protocol)
            tcp_port = socket_reactor.adoptStreamPort(listener.tcp.fileno(), listener.family, self.tcp)  # type: ignore[arg-type]
            self.ports.append(tcp_port)
            listener.udp.close()  # the reactor holds its own duplicates now (the workers'
            listener.tcp.close()  # sockets stay open for them)
            log.info("answering DNS on {address} (UDP and TCP)", address=str(listener.address))

    def stopService(self) -> defer.Deferred[None]:
        super().stopService()
        for proto in list(self.tcp.connections):
            proto.transport.abortConnection()  # type: ignore[union-attr]
        ports, self.ports = self.ports, []
        return defer.gatherResults([defer.maybeDeferred(p.stopListening) for p in ports]).addCallback(lambda _: None)
