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
"""

from __future__ import annotations

import random
import socket
from typing import Any, cast

from twisted.application.internet import ClientService, backoffPolicy
from twisted.application.service import MultiService
from twisted.internet import defer, task
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP6ClientEndpoint, wrapClientTLS
from twisted.internet.interfaces import IAddress, IListeningPort
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.protocols.tls import TLSMemoryBIOFactory

from gtmcluster.config.model import Member
from gtmcluster.sync.certs import describe
from gtmcluster.sync.peer import PeerProtocol
from gtmcluster.sync.replicator import Replicator
from gtmcluster.sync.tls import Credentials, TLSContexts

log = Logger()

CONNECT_TIMEOUT = 10.0
#: seconds peer connections get to close when the node stops, before they are aborted
CLOSE_GRACE = 1.0


class PeerFactory(Factory[Protocol]):
    noisy = False

    def __init__(self, replicator: Replicator, expected: str | None = None):
        self.replicator = replicator
        self.expected = expected
        #: (dialling) connections in a row that ended before their Hello was done: the
        #: peer refused us, or we it. ClientService counts only failed TCP connects, so
        #: without this a refused peer would be dialled again after the first delay each time.
        self.refused = 0

    def buildProtocol(self, addr: IAddress | None) -> Protocol:
        proto = PeerProtocol(self.replicator, self.expected)
        proto.factory = self
        return proto


def server_factory(replicator: Replicator, tls: TLSContexts) -> TLSMemoryBIOFactory:
    factory = TLSMemoryBIOFactory(tls.server_creator(), False, PeerFactory(replicator), replicator.clock)
    factory.noisy = False
    return factory


class PeerService(MultiService):
    def __init__(
        self,
        replicator: Replicator,
        creds: Credentials,
        listener: socket.socket,
        others: list[Member],
        reactor: Any,
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
        for member in others:
            self._dial(member)

    def _dial(self, member: Member) -> None:
        host = str(member.peer.host)
        if member.peer.host.version == 6:
            tcp: Any = TCP6ClientEndpoint(self.reactor, host, member.peer.port, timeout=CONNECT_TIMEOUT)
        else:
            tcp = TCP4ClientEndpoint(self.reactor, host, member.peer.port, timeout=CONNECT_TIMEOUT)
        endpoint = wrapClientTLS(self.tls.client_creator(member.name), tcp)
        factory = PeerFactory(self.replicator, member.name)
        backoff = backoffPolicy(initialDelay=0.5, maxDelay=30.0, factor=2.0, jitter=random.random)
        client = ClientService(
            endpoint,
            factory,
            retryPolicy=lambda attempts: backoff(attempts + factory.refused),
            clock=self.reactor,
        )
        client.setName(f"peer {member.name}")
        client.setServiceParent(self)
        self.dialled[member.name] = (member, client)

    def reconfigure(self, others: list[Member]) -> None:
        """Dial added members (and members whose address changed); stop dialling removed ones."""
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
                if proto.transport is not None:
                    proto.transport.loseConnection()

    def startService(self) -> None:
        family = self.listener.family
        self.port = self.reactor.adoptStreamPort(
            self.listener.fileno(), family, server_factory(self.replicator, self.tls)
        )
        address = self.listener.getsockname()
        self.listener.close()  # the reactor holds its own duplicate
        log.info("sync group listener on {host}:{port} (mutual TLS)", host=address[0], port=address[1])
        self._loop = task.LoopingCall(self.replicator.reconcile_all)
        self._loop.clock = self.reactor
        self._loop.start(self.reconcile_interval, now=False)
        super().startService()

    def stopService(self) -> defer.Deferred[Any]:
        """Stop listening and dialling, and close every peer connection: each is asked to
        close (TLS close_notify), and those still open `CLOSE_GRACE` seconds later (a peer
        that stopped reading: its links cut, its process stopped) are aborted. Fires when
        all are gone, so within about `CLOSE_GRACE` whatever the peers do."""
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        stopped = super().stopService()  # the dialling ClientServices close their connections
        connections = list(self.replicator.connections)
        for proto in connections:
            if proto.transport is not None:
                proto.transport.loseConnection()
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
