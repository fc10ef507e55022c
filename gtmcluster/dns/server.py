"""Twisted transports for the responder: UDP and TCP listeners on every DNS address.

TCP follows RFC 7766: two-byte length framing, several queries per connection answered in
order, an idle timeout, a timeout for finishing a message once begun, and a cap on
concurrent connections per listener (the connection idle the longest makes way for a new
one). UDP answers go through the fast path, which also applies response rate limiting; the port
answers the replies it keeps in its read loop (`udpport`). TCP answers go through the same
fast path's templates and kept decisions (`FastPath.handle_stream`).

With ``dns_server.query_log`` on, each query read and its answer is queued for the query
log (`querylog.writer`), here where the addresses are known; off, that costs a None check.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.interfaces import IAddress, IListeningPort, IPushProducer, IReactorSocket, IReactorTime
from twisted.internet.protocol import DatagramProtocol, Protocol, ServerFactory, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gtmcluster.config.model import DNSServer, QueryLog, RateLimit
from gtmcluster.dns import ratelimit
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dns.responder import Responder
from gtmcluster.dns.udpport import adopt_udp
from gtmcluster.querylog import dnstap
from gtmcluster.querylog.writer import QueryLogWriter, QueryQueue, in_pool
from gtmcluster.sockets import Listener

log = Logger()

_LENGTH = struct.Struct("!H")


#: the largest query read over UDP: a query is a question and an OPT record, far below it
#: (a bigger datagram is cut and then refused as malformed); each read allocates this much
MAX_UDP_QUERY = 4096


class DNSDatagramProtocol(DatagramProtocol):
    """Answers UDP queries (through the fast path)."""

    noisy = False

    def __init__(self, fast: FastPath, local: tuple[str, int] = ("", 0)):
        self.fast = fast
        self._sendto: Any = None
        #: the query log's queue, None when it is off; and our address, for its entries
        self.log: QueryQueue | None = None
        self.local = local

    def startProtocol(self) -> None:
        # The port's own write checks the address and the errors on every reply; the
        # address is the one a datagram came from, so send straight on the socket.
        self._sendto = self.transport.socket.sendto  # type: ignore[union-attr]

    def datagramReceived(self, datagram: bytes, addr: Any) -> None:
        reply = self.fast.handle(datagram, addr[0])
        log = self.log
        if log is not None:
            log.add(addr, self.local, dnstap.UDP, datagram, reply)
        if reply is not None:
            try:  # noqa: SIM105 - cheaper than contextlib.suppress on the answer path
                self._sendto(reply, addr)
            except OSError:
                pass  # a full send buffer or a client gone: UDP replies may be lost

    def answer_new(self, datagram: bytes, addr: Any) -> None:
        """Answer *datagram*, known not to be a kept reply, with rate limiting off
        (`udpport.DNSPort` looked it up already)."""
        reply = self.fast.answer(datagram, addr[0])
        log = self.log
        if log is not None:
            log.add(addr, self.local, dnstap.UDP, datagram, reply)
        if reply is not None:
            self._sendto(reply, addr)  # (the port's loop takes an OSError)


@implementer(IPushProducer)
class DNSStreamProtocol(Protocol):
    """Answers length-prefixed queries over one TCP connection.

    Three clocks keep a connection from holding a slot for free: the idle timeout (reset by
    every byte), the message timeout (started by the first byte of a message and stopped
    only by its last, so trickling bytes does not extend it), and the factory's cap, which
    evicts the connection idle the longest. A client that does not read its answers stops
    being read once Twisted's send buffer is full (the protocol is the transport's
    producer), so it cannot make the node buffer answers without bound; the idle timeout
    then closes it.
    """

    factory: DNSStreamFactory

    def __init__(self) -> None:
        self._buffer = b""
        self._timer: Any = None
        self._message_timer: Any = None
        self.peer = ""
        #: a reply being made (a big zone transfer): the connection waits for it
        self._pending: defer.Deferred[list[bytes]] | None = None
        #: whether Twisted has paused us (the client is not reading its answers)
        self._held = False
        self._lost = False
        self.addresses: tuple[tuple[str, int], tuple[str, int]] = (("", 0), ("", 0))

    def connectionMade(self) -> None:
        peer: Any = self.transport.getPeer()  # type: ignore[union-attr]
        self.peer = peer.host
        host: Any = self.transport.getHost()  # type: ignore[union-attr]
        self.addresses = ((peer.host, peer.port), (host.host, host.port))  # for the query log
        self.factory.opened(self)
        self.transport.registerProducer(self, True)  # type: ignore[union-attr]
        self._reset_timer()

    def _reset_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = self.factory.clock.callLater(self.factory.idle_timeout, self._expired, "idle")

    def _expired(self, why: str) -> None:
        if why == "idle":
            self._timer = None
        else:
            self._message_timer = None
        self.factory.closed_by[why] += 1
        self.transport.abortConnection()  # type: ignore[union-attr]

    def dataReceived(self, data: bytes) -> None:
        self._buffer += data
        self.factory.touched(self)
        self._reset_timer()
        self._process()

    def _process(self) -> None:
        """Answer the whole messages buffered, in order. A reply still being made (a big
        zone transfer, `Responder.handle_stream` gives a Deferred) holds the rest: the
        connection is not read until it is written."""
        completed = False
        while self._pending is None and len(self._buffer) >= 2:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if len(self._buffer) < 2 + length:
                break
            message = self._buffer[2 : 2 + length]
            self._buffer = self._buffer[2 + length :]
            completed = True
            if length < 12:
                self.transport.loseConnection()  # type: ignore[union-attr]
                return
            replies = self.factory.fast.handle_stream(message, self.peer)
            log = self.factory.log
            if isinstance(replies, defer.Deferred):
                if log is not None:  # (a big zone transfer, being made: the request alone)
                    log.add(self.addresses[0], self.addresses[1], dnstap.TCP, message, None)
                self._pending = replies
                self.transport.pauseProducing()  # type: ignore[union-attr]
                replies.addCallbacks(self._answered, self._not_answered)
                break
            if log is not None:  # (a zone transfer: with its first message)
                log.add(self.addresses[0], self.addresses[1], dnstap.TCP, message, replies[0] if replies else None)
            self._write(replies)
        timer = self._message_timer
        if timer is not None and (completed or not self._buffer):
            timer.cancel()
            timer = self._message_timer = None
        if self._buffer and timer is None and self._pending is None:
            self._message_timer = self.factory.clock.callLater(self.factory.message_timeout, self._expired, "partial")

    def _write(self, replies: list[bytes]) -> None:
        for reply in replies:
            self.transport.write(_LENGTH.pack(len(reply)) + reply)  # type: ignore[union-attr]

    def _answered(self, replies: list[bytes]) -> None:
        self._pending = None
        if self._lost:
            return
        self._write(replies)
        if not self._held:
            self.transport.resumeProducing()  # type: ignore[union-attr]
        self._reset_timer()
        self._process()

    def _not_answered(self, failure: Failure) -> None:
        self._pending = None
        log.failure("internal error answering a query from {peer}", failure, peer=self.peer)
        if not self._lost:
            self.transport.abortConnection()  # type: ignore[union-attr]

    # IPushProducer: Twisted pauses us while the answers it buffers for this client pile up
    def pauseProducing(self) -> None:
        self._held = True
        self.transport.pauseProducing()  # type: ignore[union-attr]

    def resumeProducing(self) -> None:
        self._held = False
        if self._pending is None:  # (else read again once the pending reply is written)
            self.transport.resumeProducing()  # type: ignore[union-attr]

    def stopProducing(self) -> None:
        pass  # the connection is going: connectionLost cleans up

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._lost = True
        for timer in (self._timer, self._message_timer):
            if timer is not None and timer.active():
                timer.cancel()
        self._timer = self._message_timer = None
        self.factory.closed(self)


class DNSStreamFactory(ServerFactory[DNSStreamProtocol]):
    noisy = False

    def __init__(
        self,
        responder: Responder,
        clock: IReactorTime,
        idle_timeout: float,
        max_clients: int,
        message_timeout: float = 5.0,
    ):
        self.responder = responder
        #: answers as over UDP, from the same templates and kept decisions (the service
        #: gives its own; by itself, one of its own without rate limiting)
        self.fast = FastPath(responder)
        self.clock = clock
        self.idle_timeout = idle_timeout
        self.max_clients = max_clients
        self.message_timeout = message_timeout
        #: the query log's queue, None when it is off
        self.log: QueryQueue | None = None
        #: open connections, least recently active first
        self.connections: OrderedDict[DNSStreamProtocol, None] = OrderedDict()
        #: connections closed by the node, by why: silent, a message unfinished, evicted
        self.closed_by = {"idle": 0, "partial": 0, "evicted": 0}

    def buildProtocol(self, addr: IAddress | None) -> DNSStreamProtocol:
        proto = DNSStreamProtocol()
        proto.factory = self
        return proto

    def opened(self, proto: DNSStreamProtocol) -> None:
        self.connections[proto] = None
        while len(self.connections) > self.max_clients:
            oldest = next(iter(self.connections))
            del self.connections[oldest]
            self.closed_by["evicted"] += 1
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
        message_timeout: float = 5.0,
        rate_limit: RateLimit | None = None,
        query_log: QueryLog | None = None,
        identity: str = "",
    ):
        self.reactor = reactor
        self.listeners = listeners
        self.responder = responder
        self.limiter = ratelimit.make(rate_limit or RateLimit(), reactor.seconds, responder.stats)
        #: the query log (`dns_server.query_log`), None when it is off; *identity* names this
        #: node in its records
        self.identity = identity
        self.query_log = self._query_log(query_log, None, responder)
        responder.query_log = self.query_log.queue if self.query_log is not None else None
        fast = FastPath(responder, self.limiter)
        self.udp = [DNSDatagramProtocol(fast, (str(lst.address.host), lst.address.port)) for lst in listeners]
        self.tcp = DNSStreamFactory(responder, reactor, idle_timeout, max_clients, message_timeout)
        self.tcp.fast = fast
        self._logging(self.query_log)
        self.ports: list[IListeningPort] = []

    def _query_log(
        self, settings: QueryLog | None, current: QueryLogWriter | None, responder: Responder
    ) -> QueryLogWriter | None:
        """The query log writer for *settings* (None when off): *current* when it writes the
        same file (it takes the new sizes at the switch), else a new one."""
        if settings is None:
            return None
        if current is not None and current.settings.path == settings.path:
            return current
        return QueryLogWriter(settings, responder.stats, self.reactor, in_pool(self.reactor), self.identity)

    def _logging(self, writer: QueryLogWriter | None) -> None:
        """Queue the queries of every transport to *writer* (None: to none)."""
        queue = writer.queue if writer is not None else None
        for proto in self.udp:
            proto.log = queue
        self.tcp.log = queue

    def configure(self, settings: DNSServer) -> None:
        """Take the TCP limits and the rate limits of a new config."""
        self.prepare(settings, self.responder)()

    def set_responder(self, responder: Responder) -> None:
        """Answer from now on with *responder* (a new config); no query is lost."""
        self.responder = responder
        responder.query_log = self.query_log.queue if self.query_log is not None else None
        fast = FastPath(responder, self.limiter)  # templates of the old zones go with them
        for proto in self.udp:
            proto.fast = fast
        self.tcp.responder = responder
        self.tcp.fast = fast

    def prepare(self, settings: DNSServer, responder: Responder) -> Callable[[], None]:
        """What answering with *responder* under *settings* (a new config) needs, built now
        (raising if it cannot be); the switch it returns puts it in use in one step."""
        limiter = ratelimit.update(self.limiter, settings.rate_limit, self.reactor.seconds, responder.stats)
        writer = self._query_log(settings.query_log, self.query_log, responder)
        responder.query_log = writer.queue if writer is not None else None
        fast = FastPath(responder, limiter)  # templates of the old zones go with them

        def switch() -> None:
            self.tcp.idle_timeout = settings.tcp_idle_timeout
            self.tcp.message_timeout = settings.tcp_message_timeout
            self.tcp.max_clients = settings.tcp_max_clients
            self.limiter = limiter
            self.responder = responder
            for proto in self.udp:
                proto.fast = fast
            self.tcp.responder = responder
            self.tcp.fast = fast
            if writer is not None and writer is self.query_log:
                assert settings.query_log is not None
                writer.reconfigure(settings.query_log)
            if writer is not self.query_log:  # (turned on or off, or to another file)
                old, self.query_log = self.query_log, writer
                self._logging(writer)
                if old is not None:
                    old.stop().addErrback(lambda f: log.failure("closing the query log", f))
                if writer is not None and self.running:
                    writer.start()

        return switch

    def startService(self) -> None:
        super().startService()
        if self.query_log is not None:
            self.query_log.start()
        socket_reactor: IReactorSocket = self.reactor
        for listener, proto in zip(self.listeners, self.udp, strict=True):
            self.ports.append(adopt_udp(self.reactor, listener.udp.fileno(), listener.family, proto, MAX_UDP_QUERY))
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
        stopping = [defer.maybeDeferred(p.stopListening) for p in ports]
        if self.query_log is not None:
            stopping.append(self.query_log.stop())  # what is queued is written, the file closed
        return defer.gatherResults(stopping).addCallback(lambda _: None)
