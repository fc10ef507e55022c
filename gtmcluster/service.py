"""Builds the service tree of one node. Wiring only: the parts live in their modules."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.application.internet import TimerService
from twisted.application.service import MultiService, Service
from twisted.logger import Logger

from gtmcluster.api import proximity
from gtmcluster.api.server import site
from gtmcluster.api.status import status
from gtmcluster.config.model import Config
from gtmcluster.dns.server import DNSService
from gtmcluster.health.checker import HealthChecker
from gtmcluster.node import Node
from gtmcluster.probe.checks import make_check
from gtmcluster.probe.icmp import IcmpPinger
from gtmcluster.probe.paths import PathProber
from gtmcluster.proximity.budget import Budget
from gtmcluster.proximity.scheduler import ProbeScheduler
from gtmcluster.sockets import Listener
from gtmcluster.state.snapshot import Snapshotter
from gtmcluster.sync.replicator import Replicator
from gtmcluster.sync.service import PeerService
from gtmcluster.sync.tls import Credentials

log = Logger()

TICK_INTERVAL = 1.0


@dataclass
class Sockets:
    """What the tap opened for the node while it could still fail cleanly."""

    dns: list[Listener]
    peer: socket.socket | None = None
    credentials: Credentials | None = None
    pinger: IcmpPinger | None = None
    api: socket.socket | None = None


class NodeService(MultiService):
    def __init__(self, node: Node, replicator: Replicator):
        super().__init__()
        self.node = node
        self.replicator = replicator

    def startService(self) -> None:
        c = self.node.config
        log.info(
            "gtmcluster node {node} (data center {datacenter}) of sync group {group}: "
            "{zones} zones, {wideips} wide IPs, config digest {digest}",
            node=self.node.member.name,
            datacenter=self.node.member.datacenter,
            group=c.sync_group.name,
            zones=len(list(c.zones)),
            wideips=len(c.wideips),
            digest=c.digest,
        )
        super().startService()


class CloseOnStop(Service):
    """Runs *close* when the node stops (for resources opened before the reactor ran)."""

    def __init__(self, close: Callable[[], None]):
        self.close = close

    def stopService(self) -> None:
        super().stopService()
        self.close()


class ColdStart(Service):
    """Marks the node ready for measured methods once peers are reconciled, or after a wait."""

    def __init__(self, node: Node, replicator: Replicator, reactor: Any, wait: float):
        self.node = node
        self.replicator = replicator
        self.reactor = reactor
        self.wait = wait
        self._deadline = 0.0
        self._call: Any = None

    def startService(self) -> None:
        super().startService()
        self._deadline = self.reactor.seconds() + self.wait
        self._check()

    def _check(self) -> None:
        self._call = None
        connected = any(p.connected for p in self.replicator.peers.values())
        if (connected and self.replicator.synced) or self.reactor.seconds() >= self._deadline:
            self.node.ready = True
            log.info(
                "ready: {how}; state digest {digest}",
                how="reconciled with the reachable peers" if connected else "no peer answered in time",
                digest=self.node.store.digest(),
            )
            return
        self._call = self.reactor.callLater(0.2, self._check)

    def stopService(self) -> None:
        super().stopService()
        if self._call is not None and self._call.active():
            self._call.cancel()


def make_service(config: Config, node_name: str, reactor: Any, sockets: Sockets) -> NodeService:
    node = Node(config, node_name, reactor.seconds)
    member = node.member
    settings = config.sync_group.settings
    replicator = Replicator(
        node.store,
        reactor,
        node=node_name,
        group=config.sync_group.name,
        datacenter=member.datacenter,
        members=[m.name for m in config.sync_group.members],
        config_digest=config.digest,
        idle_timeout=settings.idle_timeout,
        handshake_timeout=settings.handshake_timeout,
    )
    top = NodeService(node, replicator)
    # Health counts this node's verdicts and those of connected peers only.
    node.health.observers = lambda: frozenset([node_name, *replicator.connected_names()])
    replicator.peer_listeners.append(node.health.refresh)
    # Children stop in reverse order: the snapshot is written last, after everything else.
    snapshots = Snapshotter(node.store, config.state_dir_for(node_name), reactor, time.time, settings.snapshot_interval)
    snapshots.load()
    snapshots.setName("snapshot")
    snapshots.setServiceParent(top)
    ticker = TimerService(TICK_INTERVAL, node.tick)
    ticker.clock = reactor
    ticker.setName("tick")
    ticker.setServiceParent(top)
    if sockets.peer is not None and sockets.credentials is not None:
        others = [m for m in config.sync_group.members if m.name != node_name]
        peers = PeerService(replicator, sockets.credentials, sockets.peer, others, reactor, settings.reconcile_interval)
        peers.setName("peers")
        peers.setServiceParent(top)
    ColdStart(node, replicator, reactor, settings.cold_start_wait).setServiceParent(top)
    pinger = sockets.pinger
    path_prober = PathProber(reactor, config.prober.protocols, config.prober.timeout, pinger, config.prober.udp_port)
    probes = ProbeScheduler(
        node.store,
        node.measurements,
        Budget(config.prober, reactor.seconds),
        path_prober,
        node_name,
        member.datacenter,
        reactor,
    )
    probes.setName("probes")
    probes.setServiceParent(top)
    checker = HealthChecker(config, node.store, reactor, node_name, lambda m: make_check(m, reactor, pinger))
    checker.setName("health")
    checker.setServiceParent(top)
    if pinger is not None:
        closer = CloseOnStop(pinger.close)
        closer.setName("icmp")
        closer.setServiceParent(top)
    dns = DNSService(
        reactor, sockets.dns, node.responder, config.dns_server.tcp_idle_timeout, config.dns_server.tcp_max_clients
    )
    dns.setName("dns")
    dns.setServiceParent(top)
    if sockets.api is not None:
        routes: dict[str, Any] = {
            "/api/v1/status": (lambda args: status(node, replicator, reactor.seconds()), ()),
            "/api/v1/ldns": (lambda args: proximity.ldns_table(node, args), ("address",)),
            "/api/v1/explain": (lambda args: proximity.explain(node, args), ("wideip", "ldns", "subnet", "type")),
        }
        api = AdoptedPort(reactor, sockets.api, site(routes), "HTTP API")
        api.setName("api")
        api.setServiceParent(top)
    return top


class AdoptedPort(Service):
    """Serves *factory* on a socket bound by the tap; stopping closes it."""

    def __init__(self, reactor: Any, sock: socket.socket, factory: Any, what: str):
        self.reactor = reactor
        self.sock = sock
        self.factory = factory
        self.what = what
        self.port: Any = None

    def startService(self) -> None:
        super().startService()
        host, port = self.sock.getsockname()[:2]
        self.port = self.reactor.adoptStreamPort(self.sock.fileno(), self.sock.family, self.factory)
        self.sock.close()
        log.info("{what} on {host}:{port}", what=self.what, host=host, port=port)

    def stopService(self) -> Any:
        super().stopService()
        port, self.port = self.port, None
        return port.stopListening() if port is not None else None
