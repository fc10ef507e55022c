"""Builds the service tree of one node. Wiring only: the parts live in their modules, the
node's own service (start, stop, reload) in `nodeservice`."""

from __future__ import annotations

import gc
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from twisted.application.internet import TimerService
from twisted.application.service import IService, Service
from twisted.internet import defer
from twisted.logger import Logger

from gtmcluster.alerts.http import HTTPPoster
from gtmcluster.alerts.service import AlertsService
from gtmcluster.api import token as api_token
from gtmcluster.api.routes import api_site
from gtmcluster.api.tls import ApiTLS, expiries, wrap
from gtmcluster.config.model import Config
from gtmcluster.dns.notify import NotifyService
from gtmcluster.dns.server import DNSService
from gtmcluster.dnssec import keyset
from gtmcluster.fanout.supervisor import Workers
from gtmcluster.groupconfig.shared import GroupConfig, Start
from gtmcluster.health.checker import HealthChecker
from gtmcluster.health.linktraffic import traffic_poller
from gtmcluster.history import History
from gtmcluster.node import Node
from gtmcluster.nodelog.audit import AuditFile
from gtmcluster.nodelog.writer import NodeLog
from gtmcluster.nodeparts import (
    AlertsPart,
    ClientProbesPart,
    ConfigSyncPart,
    DNSPart,
    DNSSECKeysPart,
    HealthChecksPart,
    LinkTrafficPart,
    NotifyPart,
    PeersPart,
    ProbesPart,
    Reconfigurable,
    SyncGroupPart,
)
from gtmcluster.nodeservice import NodeService, RumCounts
from gtmcluster.probe.hosts import HostProber
from gtmcluster.probe.icmp import IcmpPinger
from gtmcluster.probe.kinds import make_check
from gtmcluster.probe.paths import PathProber
from gtmcluster.proximity.budget import Budget
from gtmcluster.proximity.clientprobe import SERVICE_NAME as CLIENT_PROBES
from gtmcluster.proximity.clientprobe import ClientProbeScheduler
from gtmcluster.proximity.clientprobe import settings as client_probe_settings
from gtmcluster.proximity.rumjoin import RumJoin
from gtmcluster.proximity.scheduler import ProbeScheduler
from gtmcluster.rum import part as rum_part
from gtmcluster.rum import tls as rum_tls
from gtmcluster.rum.listener import RumSite
from gtmcluster.rum.tls import RumTLS
from gtmcluster.runtime import heap
from gtmcluster.runtime.reactorlag import ReactorLag
from gtmcluster.runtime.reactors import Runtime, Socket
from gtmcluster.runtime.sockets import Listener
from gtmcluster.state import keys
from gtmcluster.state.snapshotter import Snapshotter
from gtmcluster.sync.coldstart import ColdStart
from gtmcluster.sync.configsync import ConfigSync
from gtmcluster.sync.replicator import Replicator
from gtmcluster.sync.service import PeerService
from gtmcluster.sync.tls import CredentialError, Credentials, load_credentials

log = Logger()
T = TypeVar("T")

TICK_INTERVAL = 1.0


@dataclass
class Sockets:
    """What the tap opened for the node while it could still fail cleanly."""

    dns: list[Listener]
    peer: socket.socket | None = None
    credentials: Credentials | None = None
    pinger: IcmpPinger | None = None
    api: socket.socket | None = None
    #: the API's own token (kept in state_dir), for when the config sets none
    api_token: str | None = None
    #: the member's public listener of browsers' beacons (``members[].rum``), and its own
    #: certificate and key (``rum.tls``) read by the tap
    rum: socket.socket | None = None
    rum_tls: tuple[bytes, bytes] | None = None


class CloseOnStop(Service):
    """Runs *close* when the node stops (for resources opened before the reactor ran)."""

    def __init__(self, close: Callable[[], None]):
        self.close = close

    def stopService(self) -> None:
        super().stopService()
        self.close()


def make_service(
    config: Config,
    node_name: str,
    reactor: Any,
    sockets: Sockets,
    config_path: str | None = None,
    node_log: NodeLog | None = None,
    start: Start | None = None,
    audit_log: AuditFile | None = None,
) -> NodeService:
    """The node's services. *config* is what it runs: its own file's (*config_path*), or
    when *start* says so a bundle of the group's (`groupconfig.shared.at_start`); without
    *start* the node keeps no bundles (tests of one member)."""
    config_path = config_path or str(config.path)
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
        heartbeat_interval=settings.heartbeat_interval,
        heartbeat_timeout=settings.heartbeat_timeout,
    )
    replicator.set_dnssec_keys(keyset.digests(config.dnssec))
    runtime = Runtime.of(reactor)
    exchange = None
    if start is not None:
        exchange = ConfigSync(replicator, start.shelf, config.sync_group.settings.config_sync)
        exchange.in_thread = runtime.in_thread
        replicator.config = exchange
    # Health counts this node's verdicts and those of connected peers heard from within the
    # heartbeat timeout only, and evaluates the changes of one reactor turn together, on the next.
    node.health.schedule = lambda flush: reactor.callLater(0, flush)
    node.health.observers = lambda: frozenset([node_name, *replicator.live_names()])
    replicator.peer_listeners.append(node.health.observers_changed)
    # Alerts: webhooks told of what the node notices, sent by one member of those reached
    alerts = AlertsService(
        reactor,
        node_name,
        config.sync_group.name,
        config.alerts,
        HTTPPoster(reactor, lambda: alerts.settings),
        lambda: frozenset([node_name, *replicator.live_names()]),
    )
    alerts.watch_health(node.store, node.health, config)
    replicator.peer_listeners.append(alerts.peers_changed)
    alerts.setName("alerts")
    # Children stop in reverse order: the snapshot is written last, after everything else.
    # Path records (the bulk of a full table) are read after the node starts answering.
    snapshots = Snapshotter(
        node.store,
        config.state_dir_for(node_name),
        reactor,
        time.time,
        settings.snapshot_interval,
        later=keys.PATH,
        settle=heap.collect_and_freeze,
    )
    if snapshots.load():
        # loading is silent (Store.load): evaluate what came in, all of it before the first answer
        node.health.refresh()
        node.health.settle()
        gc.collect()
        heap.freeze_now()  # the loaded state is long-lived: keep it out of later collections
    # anti-entropy compares whole stores: not before the whole snapshot is in; meanwhile
    # each peer that connects is asked for the records health and admin states are made of
    replicator.hold_until(snapshots.when_loaded())
    replicator.catch_up = node.health_keys
    node.before_persisting = replicator.ask_first  # a client's record may be on a peer only
    snapshots.setName("snapshot")
    keeper = heap.HeapKeeper(reactor)
    keeper.setName("heap")
    lag = ReactorLag(reactor)
    lag.setName("reactorlag")
    history = History(node, reactor)
    history.setName("history")
    ticker = TimerService(TICK_INTERVAL, node.tick)
    ticker.clock = reactor
    ticker.setName("tick")
    services: list[IService] = [snapshots, keeper, lag, history, ticker, alerts]
    peers = None
    if sockets.peer is not None and sockets.credentials is not None:
        others = [m for m in config.sync_group.members if m.name != node_name]
        peers = PeerService(replicator, sockets.credentials, sockets.peer, others, reactor, settings.reconcile_interval)
        peers.setName("peers")
        services.append(peers)
    services.append(ColdStart(node, replicator, reactor, settings.cold_start_wait))
    pinger = sockets.pinger
    path_prober = PathProber(
        reactor,
        config.prober.protocols,
        config.prober.timeout,
        pinger,
        config.prober.udp_port,
        source=member.probe_source,
    )
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
    host_prober = HostProber(reactor, config.prober.timeout, pinger, source=member.probe_source)
    client_probes = ClientProbeScheduler(
        node.store,
        lambda: probes.budget,
        host_prober,
        node_name,
        member.datacenter,
        reactor,
        *client_probe_settings(config, node_name),
        live=replicator.live_names,
    )
    client_probes.setName(CLIENT_PROBES)
    checker = HealthChecker(config, node.store, reactor, node_name, lambda m: make_check(m, reactor, pinger))
    checker.setName("health")
    link_traffic = traffic_poller(config, node.store, reactor, node_name, member.datacenter)
    link_traffic.setName("link traffic")
    services += [probes, client_probes, checker, link_traffic]
    if pinger is not None:
        closer = CloseOnStop(pinger.close)
        closer.setName("icmp")
        services.append(closer)
    dns_settings = config.dns_server
    dns = DNSService(
        reactor,
        sockets.dns,
        node.responder,
        dns_settings.tcp_idle_timeout,
        dns_settings.tcp_max_clients,
        dns_settings.tcp_message_timeout,
        dns_settings.rate_limit,
        dns_settings.query_log,
        node_name,
        dns_settings.transfer,
        dns_settings.tcp_max_per_source,
    )
    dns.setName("dns")
    notify = NotifyService(reactor)
    notify.setName("notify")
    services += [dns, notify]
    workers = None
    if config.dns_server.processes > 1:
        workers = Workers(
            node,
            sockets.dns,
            reactor,
            str(config.path),
            start.own_dir if start is not None and start.header is not None else None,
            lambda: dns.udp[0].fast,
            lambda: frozenset([node_name, *replicator.live_names()]),
            snapshots.when_loaded,
            lambda: dns.query_log.queue if dns.query_log is not None else None,
        )
        replicator.peer_listeners.append(workers.send_state)
        workers.setName("workers")
        services.append(workers)
    api_tls = None
    if sockets.api is not None and config.api.tls:
        if sockets.credentials is None:
            raise CredentialError("api.tls is on but no certificate was loaded for the API")
        api_tls = ApiTLS(sockets.credentials, config.api.client_certificates_required, config.api.client_ca_pem)
    # What takes a new config, in the order it switches (after the answer path):
    parts: list[Reconfigurable] = [
        DNSPart(dns),
        HealthChecksPart(checker),
        LinkTrafficPart(link_traffic),
        ProbesPart(probes, reactor),
        ClientProbesPart(client_probes),
        NotifyPart(notify),
        SyncGroupPart(replicator),
        DNSSECKeysPart(replicator),
    ]
    if exchange is not None:
        parts.append(ConfigSyncPart(exchange))
    if peers is not None:
        parts.append(PeersPart(peers, node_name))
    if api_tls is not None:
        parts.append(api_tls)
    if workers is not None:
        parts.append(workers)
    parts.append(AlertsPart(alerts))
    rum, rum_counts = None, None
    if sockets.rum is not None:
        rum, rum_counts = rum_listener(node, sockets.rum, sockets.rum_tls, reactor, parts)

    def read_credentials(new: Config) -> defer.Deferred[Credentials]:
        """This member's TLS files of *new*, read and checked off the reactor thread."""
        return runtime.in_thread(load_credentials, new.tls_for(node_name), node_name)

    group_config = None
    if start is not None and exchange is not None:
        shared = exchange

        def group_config(top: NodeService) -> GroupConfig[ConfigSync]:
            return GroupConfig(top, start, shared)

    top = NodeService(
        node,
        replicator,
        reactor,
        config_path,
        services,
        parts,
        runtime=runtime,
        read_credentials=read_credentials if peers is not None or api_tls is not None else None,
        snapshots=snapshots,
        workers=workers,
        dns=dns,
        checker=checker,
        probes=probes,
        peers=peers,
        heap=keeper,
        lag=lag,
        history=history,
        node_log=node_log,
        group_config=group_config,
        audit_log=audit_log,
        rum=rum_counts,
    )
    top.config_listeners.append(alerts.config_ran)
    alerts.expiries = lambda: [(e.certificate, e.serial, e.timestamp) for e in expiries(top)]
    if sockets.api is not None:
        generated = sockets.api_token or api_token.settle(config.state_dir_for(node_name))
        factory: Any = api_site(top, generated, api_tls)
        what = "HTTP API"
        if api_tls is not None:
            factory = wrap(factory, api_tls, reactor)
            required = api_tls.require_client
            asked = "client certificates asked for" if api_tls.client_ca_pem else "no client certificate"
            what = "HTTPS API (" + ("client certificates required" if required else asked) + ")"
        api = AdoptedPort(reactor, sockets.api, factory, what)
        api.setName("api")
        api.setServiceParent(top)
    if rum is not None:
        rum.setServiceParent(top)
    return top


def rum_listener(
    node: Node, sock: socket.socket, pems: tuple[bytes, bytes] | None, reactor: Any, parts: list[Reconfigurable]
) -> tuple[AdoptedPort, RumCounts]:
    """The member's public RUM listener on *sock* (HTTPS with *pems*, ``rum.tls``): beacons
    kept by the node's join (`proximity.rumjoin`), retuned by a reload (`rum.part.RumPart`)."""
    join = RumJoin(node.store, node.member.name, lambda: node.config.rum, reactor.callLater)
    site = RumSite(rum_part.settings_of(node.config), join.keep, reactor)
    tls = RumTLS(*pems) if pems is not None else None
    factory: Any = site if tls is None else rum_tls.wrap(site, tls, reactor)
    parts.append(rum_part.RumPart(site, tls, rum_part.read_tls))
    port = AdoptedPort(reactor, sock, factory, "HTTPS RUM listener" if tls else "HTTP RUM listener")
    port.setName("rum")
    return port, RumCounts(site.beacons, join.counts, lambda: len(join.pending))


class AdoptedPort(Service):
    """Serves *factory* on a socket bound by the tap; stopping closes it."""

    def __init__(self, reactor: Socket, sock: socket.socket, factory: Any, what: str):
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
