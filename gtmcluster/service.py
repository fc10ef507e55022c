"""Builds the service tree of one node. Wiring only: the parts live in their modules."""

from __future__ import annotations

from typing import Any

from twisted.application.internet import TimerService
from twisted.application.service import MultiService
from twisted.logger import Logger

from gtmcluster.config.model import Config
from gtmcluster.dns.server import DNSService
from gtmcluster.dns.sockets import Listener
from gtmcluster.node import Node

log = Logger()

SWEEP_INTERVAL = 60.0


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


def make_service(config: Config, node_name: str, listeners: list[Listener], reactor: Any) -> NodeService:
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
    sweeper = TimerService(SWEEP_INTERVAL, node.sweep)
    sweeper.clock = reactor
    sweeper.setName("persistence-sweep")
    sweeper.setServiceParent(top)
    return top
