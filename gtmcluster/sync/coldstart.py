"""A node's cold start: measured methods wait until the group has been heard."""

from __future__ import annotations

from typing import Any, Protocol

from twisted.application.service import Service
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from gtmcluster.state.store import Store
from gtmcluster.sync.replicator import Replicator

log = Logger()


class NodeSide(Protocol):
    """The node, as its cold start sees it (`node.Node` is one): whether measured methods
    may decide, and the store whose digest the ready line tells."""

    ready: bool

    @property
    def store(self) -> Store: ...


class ColdStart(Service):
    """Marks the node ready for measured methods once peers are reconciled and the group's
    newest config is run here (or refused), or after a wait."""

    def __init__(self, node: NodeSide, replicator: Replicator, reactor: IReactorTime, wait: float):
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
        config = self.replicator.config
        settled = config is None or config.settled  # the group's newest config runs (or is refused)
        if (connected and self.replicator.anti_entropy.synced and settled) or self.reactor.seconds() >= self._deadline:
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
