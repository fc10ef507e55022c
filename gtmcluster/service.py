"""Builds the service tree of one node. Wiring only: the parts live in their modules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.application.internet import TimerService
from twisted.application.service import MultiService, Service
from twisted.logger import Logger

from gtmcluster.config.model import Config
from gtmcluster.dns.server import DNSService
from gtmcluster.dns.sockets import Listener
from gtmcluster.health.checker import HealthChecker
from gtmcluster.node import Node
from gtmcluster.probe.checks import make_check
from gtmcluster.probe.icmp import IcmpPinger

log = Logger()

TICK_INTERVAL = 1.0


class NodeService(MultiService):
    def __init__(self, node: Node):
        super().__init__()
        self.node = node

    def startService(self) -> None:
        c = self.node.config
        log.info(
            "gtmcluster node {node} (data center {datacenter}) of sync group {group}: "
            "{zones} zones, {wideips} wide IPs",
            node=self.node.member.name,
            datacenter=self.node.member.datacenter,
            group=c.sync_group.name,
            zones=len(list(c.zones)),
            wideips=len(c.wideips),
        )
        super().startService()


class CloseOnStop(Service):
    """Runs *close* when the node stops (for resources opened before the reactor ran)."""

    def __init__(self, close: Callable[[], None]):
        self.close = close

    def stopService(self) -> None:
        super().stopService()
        self.close()


def make_service(
    config: Config, node_name: str, listeners: list[Listener], reactor: Any, pinger: IcmpPinger | None = None
) -> NodeService:
    node = Node(config, node_name, reactor.seconds)
    top = NodeService(node)
    dns = DNSService(
        reactor,
        listeners,
        node.responder,
        config.dns_server.tcp_idle_timeout,
        config.dns_server.tcp_max_clients,
    )
    dns.setName("dns")
    dns.setServiceParent(top)
    ticker = TimerService(TICK_INTERVAL, node.tick)
    ticker.clock = reactor
    ticker.setName("tick")
    ticker.setServiceParent(top)
    checker = HealthChecker(config, node.store, reactor, node_name, lambda m: make_check(m, reactor, pinger))
    checker.setName("health")
    checker.setServiceParent(top)
    if pinger is not None:
        closer = CloseOnStop(pinger.close)
        closer.setName("icmp")
        closer.setServiceParent(top)
    return top
