"""The node's alerts: the events its sources notice (`sources`), each either sent by this
member (`chooser.sender`) through the delivery queue (`delivery`), or left to the member
chosen and kept for a handover (`chooser.Handover`); and a reload's new ``alerts`` section.

The wiring (`service.make_service`) gives it the members this node reaches, tells it when
they change (`peers_changed`), hands it the health tracker's changes and the config runs,
and how to read the certificates' ends (`expiries`, checked every `CERT_CHECK` seconds
and after each config run).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from twisted.application.service import Service
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gtmcluster.alerts.chooser import HANDOVER, Handover, sender
from gtmcluster.alerts.delivery import Deliveries, Poster
from gtmcluster.alerts.events import Event
from gtmcluster.alerts.sources import CertificateEvents, HealthEvents, PeerEvents, Where, config_event
from gtmcluster.config.alerts import Alerts
from gtmcluster.config.model import Config
from gtmcluster.health.tracker import HealthTracker
from gtmcluster.state.store import Store

log = Logger()

#: seconds between two readings of the certificates' ends
CERT_CHECK = 3600.0

Expiries = Callable[[], Iterable[tuple[str, str, float]]]


class AlertsService(Service):
    """Events in, deliveries out (a Twisted service: its timers stop with the node)."""

    def __init__(
        self,
        clock: IReactorTime,
        node: str,
        group: str,
        settings: Alerts,
        poster: Poster,
        reached: Callable[[], frozenset[str]],
    ):
        self.clock = clock
        self.node = node
        self.settings = settings
        self.poster = poster
        self.reached = reached
        self.where = Where(node, group, clock.seconds)
        self.deliveries = Deliveries(clock, poster, settings)
        self.handover = Handover(node, clock.seconds, settings.max_queue)
        self.peers = PeerEvents(self.where, reached, self.emit)
        self.certs = CertificateEvents(self.where, self.emit)
        self.health: HealthEvents | None = None
        self.expiries: Expiries | None = None
        self._loop: LoopingCall | None = None
        self._soon: IDelayedCall | None = None
        #: events this node sent (queued for a webhook), and left to another member
        self.sent = 0
        self.left = 0

    def watch_health(self, store: Store, tracker: HealthTracker, config: Config) -> None:
        """Take the events of *tracker*'s changes (servers, pools, data centers, links)."""
        self.health = HealthEvents(self.where, store, lambda: tracker.evaluated, self.emit)
        self.health.configure(config)
        tracker.vs_listeners.append(self.health.vs_changed)
        tracker.link_listeners.append(self.health.link_changed)

    def wanted(self, kind: str) -> bool:
        return any(kind in hook.events for hook in self.settings.webhooks)

    def emit(self, event: Event) -> None:
        """Send *event*, if a webhook asks for its kind and this member is the one to."""
        if not self.wanted(event.kind):
            return
        to = sender(event, self.reached() | {self.node})
        if to == self.node:
            self.sent += 1
            self.deliveries.add(event)
        else:
            self.left += 1
            self.handover.keep(event, to)
            log.info(
                "{kind} {id} left to {to}, the member that sends it (kept {hold:g}s, to send should {to} go)",
                kind=event.kind,
                id=event.id,
                to=to,
                hold=HANDOVER,
                event="webhook_left",
            )

    def peers_changed(self) -> None:
        """The members this node reaches may have changed."""
        self.peers.changed()
        for event in self.handover.reached(self.reached() | {self.node}):
            log.info(
                "{kind} {id}: its sender is out of reach, {node} sends it",
                kind=event.kind,
                id=event.id,
                node=self.node,
                event="webhook_handover",
            )
            self.sent += 1
            self.deliveries.add(event)

    def config_ran(self, generation: int, digest: str, publisher: str, problems: list[str]) -> None:
        """This member ran (no *problems*) or refused a config."""
        self.emit(config_event(self.where, generation, digest, publisher, problems))
        if not problems and self.running:
            self._soon = self.clock.callLater(0, self.check_certificates)

    def check_certificates(self) -> None:
        self._soon = None
        if self.expiries is not None:
            self.certs.check(self.expiries(), self.settings.cert_expiring_days)

    def prepare(self, config: Config) -> Callable[[], None]:
        """The commit that takes *config*'s ``alerts`` section (nothing can fail)."""
        settings = config.alerts

        def commit() -> None:
            self.settings = settings
            self.deliveries.configure(settings)
            self.handover.cap = settings.max_queue
            if self.health is not None:
                self.health.configure(config)

        return commit

    def startService(self) -> None:
        super().startService()
        self._loop = LoopingCall(self.check_certificates)
        self._loop.clock = self.clock
        self._loop.start(CERT_CHECK, now=True)

    def stopService(self) -> None:
        super().stopService()
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self._soon is not None and self._soon.active():
            self._soon.cancel()
        self.deliveries.stop()
