"""The queue of deliveries to webhooks: retries with exponential back-off, caps on attempts,
on deliveries waiting and on those in flight, and the counts ``/metrics`` shows.

An event goes to each webhook that asks for its kind, as one delivery. An attempt that
does not end in a 2xx answer within ``alerts.timeout`` (a refused address, no connection
within ``connect_timeout``, another status, a deadline passed) is tried again after
``backoff`` seconds, doubled for each next one up to ``backoff_max``, until
``max_attempts`` were made: the delivery has then failed. At most ``max_queue``
deliveries wait (for their turn or their retry, all webhooks together): beyond it the
oldest is dropped, and counted. At most `MAX_IN_FLIGHT` attempts run at once. The body is
the same bytes on every attempt; the signature's time is the attempt's.

How one attempt is made is a `Poster`'s (`gtmcluster.alerts.http`); tests give a fake and
a `Clock`.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Protocol

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from gtmcluster.alerts.events import SIGNATURE_HEADER, Event, signature
from gtmcluster.config.alerts import Alerts, Webhook

log = Logger()

#: attempts running at once, all webhooks together
MAX_IN_FLIGHT = 4
#: results counted: ``gtm_webhook_deliveries_total{result}``
RESULTS = ("delivered", "retried", "failed", "dropped")


class Poster(Protocol):
    """Makes one attempt: POST *body* with *headers* to *webhook*, firing with the answer's
    status (failing when there is none: refused, no connection, deadline)."""

    def post(self, webhook: Webhook, body: bytes, headers: dict[str, str]) -> defer.Deferred[int]: ...


@dataclass(eq=False)
class Delivery:
    """One event to one webhook."""

    webhook: Webhook
    event: Event
    body: bytes
    attempts: int = 0
    #: the retry's timer while it waits for it; None when due (waiting for a slot) or in flight
    timer: IDelayedCall | None = None
    in_flight: bool = False


def backoff(settings: Alerts, attempts: int) -> float:
    """Seconds before the next attempt after *attempts* failed ones (1 or more)."""
    return float(min(settings.backoff * 2 ** min(attempts - 1, 40), settings.backoff_max))


class Deliveries:
    """The node's deliveries, waiting and in flight."""

    def __init__(self, clock: IReactorTime, poster: Poster, settings: Alerts):
        self.clock = clock
        self.poster = poster
        self.settings = settings
        #: every delivery not yet done, oldest first (by when its event came)
        self._queued: OrderedDict[int, Delivery] = OrderedDict()
        self._seq = 0
        self.in_flight = 0
        #: (webhook label, one of `RESULTS`) -> deliveries (attempts, for "retried")
        self.counts: Counter[tuple[str, str]] = Counter()

    def __len__(self) -> int:
        return len(self._queued)

    def configure(self, settings: Alerts) -> None:
        """Use *settings* from now on; deliveries to a webhook no longer configured (by URL
        and secret) are forgotten."""
        self.settings = settings
        kept = {(h.url, h.secret) for h in settings.webhooks}
        for key, delivery in list(self._queued.items()):
            if (delivery.webhook.url, delivery.webhook.secret) not in kept and not delivery.in_flight:
                self._forget(key)

    def add(self, event: Event) -> int:
        """Queue *event* for each webhook that asks for its kind; how many it was queued for."""
        body = event.body()
        queued = 0
        for webhook in self.settings.webhooks:
            if event.kind not in webhook.events:
                continue
            self._seq += 1
            self._queued[self._seq] = Delivery(webhook, event, body)
            queued += 1
            while len(self._queued) > self.settings.max_queue:
                self._drop_oldest()
        self._pump()
        return queued

    def stop(self) -> None:
        """Cancel every retry's timer (the node stops: what waits is not sent)."""
        for delivery in self._queued.values():
            if delivery.timer is not None and delivery.timer.active():
                delivery.timer.cancel()
            delivery.timer = None

    def _drop_oldest(self) -> None:
        for key, delivery in self._queued.items():
            if not delivery.in_flight:
                self._forget(key)
                self.counts[delivery.webhook.label, "dropped"] += 1
                log.warn(
                    "webhook {url}: {kind} {id} dropped, more than alerts.max_queue ({cap}) deliveries wait",
                    url=delivery.webhook.label,
                    kind=delivery.event.kind,
                    id=delivery.event.id,
                    cap=self.settings.max_queue,
                    event="webhook_dropped",
                )
                return
        # every one is in flight (max_queue below MAX_IN_FLIGHT): the newest goes
        key = next(reversed(self._queued))
        self.counts[self._queued[key].webhook.label, "dropped"] += 1
        del self._queued[key]

    def _forget(self, key: int) -> None:
        delivery = self._queued.pop(key)
        if delivery.timer is not None and delivery.timer.active():
            delivery.timer.cancel()

    def _pump(self) -> None:
        """Start the due deliveries, oldest first, while slots are free."""
        if self.in_flight >= MAX_IN_FLIGHT:
            return
        for key, delivery in list(self._queued.items()):
            if self.in_flight >= MAX_IN_FLIGHT:
                return
            if delivery.in_flight or delivery.timer is not None:
                continue
            self._attempt(key, delivery)

    def _attempt(self, key: int, delivery: Delivery) -> None:
        delivery.in_flight = True
        delivery.attempts += 1
        self.in_flight += 1
        now = int(self.clock.seconds())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "gtmcluster-webhook",
            SIGNATURE_HEADER: signature(delivery.webhook.secret, now, delivery.body),
            "X-Gtmcluster-Event": delivery.event.kind,
            "X-Gtmcluster-Delivery": delivery.event.id,
        }
        try:
            d = self.poster.post(delivery.webhook, delivery.body, headers)
        except Exception:
            d = defer.fail()
        d.addCallbacks(self._answered, self._failed, callbackArgs=(key, delivery), errbackArgs=(key, delivery))

    def _answered(self, status: int, key: int, delivery: Delivery) -> None:
        if 200 <= status < 300:
            self._done(key, delivery)
            self.counts[delivery.webhook.label, "delivered"] += 1
            log.info(
                "webhook {url}: {kind} {id} delivered (HTTP {status}, attempt {attempt})",
                url=delivery.webhook.label,
                kind=delivery.event.kind,
                id=delivery.event.id,
                status=status,
                attempt=delivery.attempts,
                event="webhook_delivered",
            )
        else:
            self._retry(key, delivery, f"HTTP {status}")

    def _failed(self, failure: Failure, key: int, delivery: Delivery) -> None:
        self._retry(key, delivery, failure.getErrorMessage() or repr(failure.value))

    def _done(self, key: int, delivery: Delivery) -> None:
        delivery.in_flight = False
        self.in_flight -= 1
        self._queued.pop(key, None)
        self.clock.callLater(0, self._pump)

    def _retry(self, key: int, delivery: Delivery, why: str) -> None:
        if key not in self._queued:  # dropped meanwhile (and counted so)
            self._done(key, delivery)
            return
        if delivery.attempts >= self.settings.max_attempts:
            self._done(key, delivery)
            self.counts[delivery.webhook.label, "failed"] += 1
            log.warn(
                "webhook {url}: {kind} {id} not delivered after {attempts} attempts, the last: {why}",
                url=delivery.webhook.label,
                kind=delivery.event.kind,
                id=delivery.event.id,
                attempts=delivery.attempts,
                why=why,
                event="webhook_failed",
            )
            return
        delivery.in_flight = False
        self.in_flight -= 1
        self.counts[delivery.webhook.label, "retried"] += 1
        wait = backoff(self.settings, delivery.attempts)
        log.info(
            "webhook {url}: {kind} {id} attempt {attempt} failed ({why}), again in {wait:g}s",
            url=delivery.webhook.label,
            kind=delivery.event.kind,
            id=delivery.event.id,
            attempt=delivery.attempts,
            why=why,
            wait=wait,
            event="webhook_retry",
        )
        delivery.timer = self.clock.callLater(wait, self._due, key)
        self.clock.callLater(0, self._pump)

    def _due(self, key: int) -> None:
        delivery = self._queued.get(key)
        if delivery is not None:
            delivery.timer = None
            self._pump()
