"""The DNS service: UDP and TCP listeners for the responder on every DNS address.

TCP follows RFC 7766 (`stream`): two-byte length framing, several queries per connection
answered in order, an idle timeout, a timeout for finishing a message once begun, caps on
concurrent connections per DNS address and per source (`tcpclients`: a connection idle the
longest makes way for a new one, the source's own past its cap, the heaviest source's on a
full address), and zone transfers sent with back-pressure within caps
(``dns_server.transfer``).
UDP answers go through the fast path, which also applies response rate limiting: the
protocol and its port, which answers the replies it keeps in its read loop, are `udpport`.
TCP answers go through the same fast path's templates and kept decisions
(`FastPath.answer_stream`), on Twisted's TCP port whose connections send a read's answers
as the read ends (`tcpport`).

With ``dns_server.query_log`` on, each query read, its answer and what decided it (the
answer path's `Answered`) is queued for the query log (`querylog.writer`) by the transports,
at the edge of the path where the addresses are known; off, that costs a None check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.interfaces import IListeningPort
from twisted.logger import Logger

from gtmcluster.config.dnsserver import TCP_MAX_PER_SOURCE, DNSServer, QueryLog, RateLimit, TransferLimits
from gtmcluster.dns import ratelimit
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dns.responder import Responder
from gtmcluster.dns.stream import DEFAULT_TRANSFER_LIMITS, DNSStreamFactory
from gtmcluster.dns.tcpport import adopt_tcp
from gtmcluster.dns.udpport import MAX_UDP_QUERY, DNSDatagramProtocol, adopt_udp
from gtmcluster.querylog.writer import QueryLogWriter, in_pool
from gtmcluster.runtime.sockets import Listener

log = Logger()


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
        transfer: TransferLimits = DEFAULT_TRANSFER_LIMITS,
        max_per_source: int = TCP_MAX_PER_SOURCE,
    ):
        self.reactor = reactor
        self.listeners = listeners
        self.responder = responder
        self.limiter = ratelimit.make(rate_limit or RateLimit(), reactor.seconds, responder.stats)
        #: the query log (`dns_server.query_log`), None when it is off; *identity* names this
        #: node in its records
        self.identity = identity
        self.query_log = self._query_log(query_log, None, responder)
        fast = FastPath(responder, self.limiter)
        self.udp = [DNSDatagramProtocol(fast, (str(lst.address.host), lst.address.port)) for lst in listeners]
        self.tcp = DNSStreamFactory(
            responder, reactor, idle_timeout, max_clients, message_timeout, transfer, max_per_source
        )
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
        """Take the TCP limits (zone transfers' too) and the rate limits of a new config."""
        self.prepare(settings, self.responder)()

    def set_responder(self, responder: Responder) -> None:
        """Answer from now on with *responder* (a new config); no query is lost."""
        self.responder = responder
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
        fast = FastPath(responder, limiter)  # templates of the old zones go with them

        def switch() -> None:
            self.tcp.idle_timeout = settings.tcp_idle_timeout
            self.tcp.message_timeout = settings.tcp_message_timeout
            self.tcp.configure_clients(settings.tcp_max_clients, settings.tcp_max_per_source)
            self.tcp.configure_transfers(settings.transfer)
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
        for listener, proto in zip(self.listeners, self.udp, strict=True):
            self.ports.append(adopt_udp(self.reactor, listener.udp.fileno(), listener.family, proto, MAX_UDP_QUERY))
            tcp = self.tcp.on(str(listener.address))  # (its own tcp_max_clients)
            self.ports.append(adopt_tcp(self.reactor, listener.tcp.fileno(), listener.family, tcp))
            listener.udp.close()  # the reactor holds its own duplicates now (the workers'
            listener.tcp.close()  # sockets stay open for them)
            log.info("answering DNS on {address} (UDP and TCP)", address=str(listener.address))

    def stopService(self) -> defer.Deferred[None]:
        super().stopService()
        for proto in list(self.tcp.connections):
            proto._close(abort=True)
        ports, self.ports = self.ports, []
        stopping = [defer.maybeDeferred(p.stopListening) for p in ports]
        if self.query_log is not None:
            stopping.append(self.query_log.stop())  # what is queued is written, the file closed
        return defer.gatherResults(stopping).addCallback(lambda _: None)
