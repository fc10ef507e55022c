"""The peer service: the TLS listener, a connection to every other member, anti-entropy.

Outgoing connections are Twisted `ClientService`s: they reconnect with capped exponential
backoff (0.5 s doubling to 30 s, with jitter), counting connections refused at TLS or Hello,
or dropped within `peer.STABLE` seconds of getting through, as failed attempts too. Both
members of a pair dial each other; two connections between the same pair are harmless (one
carries the pushes).

Every new connection, accepted or dialled, is built from the credentials in use at that
moment (`TLSContexts`), so `use_credentials` (a reload that found renewed files) changes
the certificate without a restart; open connections keep theirs until they reconnect,
unless the CA changed: then every open connection is closed, so that each peer is checked
against the new CA when it reconnects (a member whose key leaked, left out of the new CA,
is cut off at once: see README, "Trust model and limits").

The listener takes a connection only while `Gate` lets it: connections still in their TLS
handshake or Hello are capped per source (`gtmcluster.runtime.sources`) and in all, and each
member's proven incoming connections are capped (`sync.admission`). Connections turned
away are logged once, then counted in one line every `TURNED_AWAY_LOG_INTERVAL` seconds
while it goes on: by source for the first `TURNED_AWAY_SOURCES` sources of the interval,
and together for the rest (a flood from many addresses costs that count no more).
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterable
from typing import Any, cast

from twisted.application.internet import ClientService, backoffPolicy
from twisted.application.service import MultiService
from twisted.internet import defer, task
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP6ClientEndpoint
from twisted.internet.interfaces import (
    IAddress,
    IDelayedCall,
    IListeningPort,
    IOpenSSLServerConnectionCreator,
    IReactorTime,
)
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.protocols.tls import TLSMemoryBIOProtocol

from gtmcluster.config.model import Member
from gtmcluster.runtime.reactors import TimeTCPSocket, as_time
from gtmcluster.runtime.sources import plain, source_of
from gtmcluster.sync.admission import (
    MAX_CHANNELS_PER_MEMBER,
    MAX_UNPROVEN,
    MAX_UNPROVEN_PER_SOURCE,
    Admission,
    Channels,
)
from gtmcluster.sync.certs import describe
from gtmcluster.sync.peer import PeerProtocol
from gtmcluster.sync.replicator import Replicator
from gtmcluster.sync.tls import Credentials, PeerTLSEndpoint, PeerTLSFactory, TLSContexts

log = Logger()

CONNECT_TIMEOUT = 10.0
#: seconds peer connections get to close when the node stops, before they are aborted
CLOSE_GRACE = 1.0
#: while connections are being turned away, one line says how many every this many seconds
TURNED_AWAY_LOG_INTERVAL = 10.0
#: sources that line counts apart within an interval; connections from further sources are
#: counted together (one number), so the count's memory is bounded whatever the flood
TURNED_AWAY_SOURCES = 16


class Gate:
    """The caps of `sync.admission` on the peer port, with the log lines about them.

    *reserved*: the members' peer addresses (`PeerService.reconfigure` keeps them current).
    """

    def __init__(self, clock: IReactorTime, reserved: Iterable[str] = ()) -> None:
        self.clock = clock
        self.reserved = frozenset(plain(host) for host in reserved)
        self.unproven: Admission[PeerProtocol] = Admission()
        self.channels: Channels[PeerProtocol] = Channels()
        #: connections turned away, and made way for newer sources, since the node started
        self.turned_away = 0
        self.made_way = 0
        self._told: IDelayedCall | None = None  # a summary line is due
        #: turned away since the last line: by source (at most `TURNED_AWAY_SOURCES`), and
        #: from further sources together
        self._untold: dict[str, int] = {}
        self._untold_others = 0
        self._untold_why = ""

    def _source(self, host: str) -> tuple[str, bool]:
        """The source *host* counts as (a member's own peer address: itself, reserved)."""
        address = plain(host)
        if address in self.reserved:
            return address, True
        return source_of(host), False

    def consider(self, host: str) -> bool:
        """Whether a new connection from *host* is taken (closing one that makes way for it)."""
        source, reserved = self._source(host)
        verdict = self.unproven.consider(source, reserved)
        if not verdict.admit:
            self.turned_away += 1
            self._tell(host, source, verdict.why)
            return False
        if verdict.evict is not None:
            self.made_way += 1
            self._tell(host, source, "")
            verdict.evict.violation("made way for a connection from another address", logged=False)
        return True

    def add(self, proto: PeerProtocol, host: str) -> None:
        source, reserved = self._source(host)
        self.unproven.add(proto, source, reserved)

    def proven(self, proto: PeerProtocol) -> None:
        """*proto* is a member's: it counts no more among the unproven, and its member's
        oldest incoming connections beyond `MAX_CHANNELS_PER_MEMBER` are closed."""
        if not self.unproven.release(proto) or proto.peer is None:
            return
        for old in self.channels.add(proto, proto.peer):
            old.violation(
                f"replaced by a newer connection from {proto.peer} (at most {MAX_CHANNELS_PER_MEMBER} at once)"
            )

    def gone(self, proto: PeerProtocol) -> None:
        self.unproven.release(proto)
        self.channels.release(proto, proto.peer or "")

    def _tell(self, host: str, source: str, why: str) -> None:
        """Log the first connection turned away at once; then one line per interval while
        more are (a flood of connections is not a flood of log lines)."""
        if self._told is None:
            self._told = self.clock.callLater(TURNED_AWAY_LOG_INTERVAL, self._tell_since)
            if why:
                log.warn(
                    "peer port: turned away a connection from {host}: {why} (at most {per_source} from one "
                    "source, an IPv4 address or IPv6 /64; {total} in all)",
                    host=host,
                    source=source,
                    why=why,
                    per_source=MAX_UNPROVEN_PER_SOURCE,
                    total=MAX_UNPROVEN,
                    event="peer_turned_away",
                )
                return
        held = self._untold.get(source)
        if held is not None:
            self._untold[source] = held + 1
        elif len(self._untold) < TURNED_AWAY_SOURCES:
            self._untold[source] = 1
        else:
            self._untold_others += 1
        if why:
            self._untold_why = why

    def _tell_since(self) -> None:
        self._told = None
        untold, self._untold = self._untold, {}
        others, self._untold_others = self._untold_others, 0
        if not untold:
            return
        log.warn(
            "peer port: turned away or closed {count} connections in the last {seconds:g}s, connections that "
            "had not finished their TLS handshake and Hello (the last reason: {why}); {counted} from {sources} "
            "sources, the most from {top}, and {others} from further sources",
            count=sum(untold.values()) + others,
            counted=sum(untold.values()),
            sources=len(untold),
            others=others,
            seconds=TURNED_AWAY_LOG_INTERVAL,
            why=self._untold_why or "made way for connections from other addresses",
            top=max(untold, key=lambda source: untold[source]),
            event="peer_turned_away",
        )
        self._untold_why = ""
        self._told = self.clock.callLater(TURNED_AWAY_LOG_INTERVAL, self._tell_since)

    def reconfigure(self, reserved: Iterable[str]) -> None:
        self.reserved = frozenset(plain(host) for host in reserved)

    def stop(self) -> None:
        """No more summary lines (the node stops)."""
        if self._told is not None and self._told.active():
            self._told.cancel()
        self._told = None


class PeerFactory(Factory[Protocol]):
    noisy = False

    def __init__(self, replicator: Replicator, expected: str | None = None, gate: Gate | None = None):
        self.replicator = replicator
        self.expected = expected
        #: the listener's caps (accepted connections only)
        self.gate = gate
        #: (dialling) connections in a row that ended before their Hello was done: the
        #: peer refused us, or we it. ClientService counts only failed TCP connects, so
        #: without this a refused peer would be dialled again after the first delay each time.
        self.refused = 0

    def buildProtocol(self, addr: IAddress | None) -> Protocol:
        proto = PeerProtocol(self.replicator, self.expected)
        proto.factory = self
        return proto

    def proven(self, proto: PeerProtocol) -> None:
        """*proto* got through TLS and Hello."""
        if self.gate is not None:
            self.gate.proven(proto)

    def gone(self, proto: PeerProtocol) -> None:
        """*proto* ended."""
        if self.gate is not None:
            self.gate.gone(proto)


class ListenerFactory(PeerTLSFactory):
    """The peer port: TLS around a `PeerFactory`, for the connections `Gate` takes."""

    noisy = False

    def __init__(
        self, creator: IOpenSSLServerConnectionCreator, replicator: Replicator, gate: Gate, clock: IReactorTime
    ) -> None:
        super().__init__(creator, False, PeerFactory(replicator, gate=gate), clock)
        self.gate = gate

    def buildProtocol(self, addr: IAddress | None) -> TLSMemoryBIOProtocol | None:  # type: ignore[override]
        """None (Twisted closes the socket at once) for a connection the gate turns away."""
        host = str(getattr(addr, "host", "unknown"))
        if not self.gate.consider(host):
            return None
        tls = super().buildProtocol(addr)
        self.gate.add(cast(PeerProtocol, tls.wrappedProtocol), host)
        return tls


def server_factory(replicator: Replicator, tls: TLSContexts, gate: Gate | None = None) -> ListenerFactory:
    return ListenerFactory(tls.server_creator(), replicator, gate or Gate(replicator.clock), replicator.clock)


class PeerService(MultiService):
    def __init__(
        self,
        replicator: Replicator,
        creds: Credentials,
        listener: socket.socket,
        others: list[Member],
        reactor: TimeTCPSocket,
        reconcile_interval: float = 60.0,
    ):
        super().__init__()
        self.replicator = replicator
        self.tls = TLSContexts(creds)
        self.listener = listener
        self.reactor = reactor
        self.reconcile_interval = reconcile_interval
        self.port: IListeningPort | None = None
        self._loop: task.LoopingCall | None = None
        self.dialled: dict[str, tuple[Member, ClientService]] = {}
        self.gate = Gate(as_time(reactor), [str(m.peer.host) for m in others])
        for member in others:
            self._dial(member)

    def _dial(self, member: Member) -> None:
        host = str(member.peer.host)
        if member.peer.host.version == 6:
            tcp: Any = TCP6ClientEndpoint(self.reactor, host, member.peer.port, timeout=CONNECT_TIMEOUT)
        else:
            tcp = TCP4ClientEndpoint(self.reactor, host, member.peer.port, timeout=CONNECT_TIMEOUT)
        endpoint = PeerTLSEndpoint(self.tls.client_creator(member.name), tcp, as_time(self.reactor))
        factory = PeerFactory(self.replicator, member.name)
        backoff = backoffPolicy(initialDelay=0.5, maxDelay=30.0, factor=2.0, jitter=random.random)
        client = ClientService(
            endpoint,
            factory,
            retryPolicy=lambda attempts: backoff(attempts + factory.refused),
            clock=as_time(self.reactor),
        )
        client.setName(f"peer {member.name}")
        client.setServiceParent(self)
        self.dialled[member.name] = (member, client)

    def reconfigure(self, others: list[Member]) -> None:
        """Dial added members (and members whose address changed); stop dialling removed ones."""
        self.gate.reconfigure(str(m.peer.host) for m in others)
        wanted = {m.name: m for m in others}
        for name, (member, client) in list(self.dialled.items()):
            if wanted.get(name) != member:
                client.disownServiceParent()
                del self.dialled[name]
        for name, member in wanted.items():
            if name not in self.dialled:
                self._dial(member)

    def use_credentials(self, creds: Credentials) -> None:
        """New connections use *creds* from now on (logged when they differ from before)."""
        before = self.tls.creds
        if not self.tls.use(creds):
            return
        log.info(
            "sync group TLS: new connections use certificate serial {serial} ({certificate}), "
            "was serial {old}; open connections keep theirs until they reconnect",
            serial=creds.serial,
            certificate=self.tls.summary(),
            old=before.serial,
            event="tls_rotated",
        )
        if creds.ca_certificate != before.ca_certificate:
            open_channels = [proto for peer in self.replicator.peers.values() for proto in peer.channels]
            log.info(
                "sync group TLS: peers must now chain to the CA {ca}; the {count} open peer connections are "
                "closed, and each peer is checked against the new CA when it reconnects",
                ca=describe(creds.ca_certificate),
                count=len(open_channels),
                event="tls_ca_changed",
            )
            for proto in open_channels:
                proto.close()

    def startService(self) -> None:
        family = self.listener.family
        self.port = self.reactor.adoptStreamPort(
            self.listener.fileno(), family, server_factory(self.replicator, self.tls, self.gate)
        )
        address = self.listener.getsockname()
        self.listener.close()  # the reactor holds its own duplicate
        log.info("sync group listener on {host}:{port} (mutual TLS)", host=address[0], port=address[1])
        self._loop = task.LoopingCall(self.replicator.anti_entropy.reconcile_all)
        self._loop.clock = as_time(self.reactor)
        self._loop.start(self.reconcile_interval, now=False)
        super().startService()

    def stopService(self) -> defer.Deferred[Any]:
        """Stop listening and dialling, and close every peer connection: each is asked to
        close (TLS close_notify), and those still open `CLOSE_GRACE` seconds later (a peer
        that stopped reading: its links cut, its process stopped) are aborted. Fires when
        all are gone, so within about `CLOSE_GRACE` whatever the peers do."""
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self.gate.stop()
        stopped = super().stopService()  # the dialling ClientServices close their connections
        connections = list(self.replicator.connections)
        for proto in connections:
            proto.close()
        port, self.port = self.port, None
        waits: list[defer.Deferred[Any]] = [defer.maybeDeferred(lambda: stopped)]
        waits += [proto.when_closed() for proto in connections]
        if port is not None:
            waits.append(defer.maybeDeferred(port.stopListening))
        abort = self.reactor.callLater(CLOSE_GRACE, self._abort_open)
        done = defer.gatherResults(waits, consumeErrors=True)

        def finished(result: Any) -> Any:
            if abort.active():
                abort.cancel()
            return result

        return done.addBoth(finished)

    def _abort_open(self) -> None:
        left = [proto for proto in self.replicator.connections if proto.transport is not None]
        if not left:
            return
        log.warn(
            "stopping: aborting {count} peer connections that did not close within {grace:g}s ({peers})",
            count=len(left),
            grace=CLOSE_GRACE,
            peers=", ".join(sorted(proto.peer or proto.expected or "?" for proto in left)),
            event="peer_aborted",
        )
        for proto in left:
            cast(Any, proto.transport).abortConnection()
