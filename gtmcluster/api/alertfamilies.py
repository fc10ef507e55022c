"""The families of GET /metrics about the webhooks (`api.metricfamilies.FAMILIES` lists
them): deliveries by webhook and result (delivered; retried, counting attempts that failed
and were tried again; failed after ``alerts.max_attempts``; dropped beyond
``alerts.max_queue``), the deliveries waiting, and the events this member sent or left to
the member chosen to send them (`gtmcluster.alerts.chooser`)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gtmcluster.alerts.delivery import RESULTS
from gtmcluster.api.scrape import Scrape
from gtmcluster.nodeparts import AlertsPart


def webhooks(scrape: Scrape) -> Iterator[Metric | None]:
    part = next((p for p in scrape.service.parts if isinstance(p, AlertsPart)), None)
    if part is None or not part.alerts.settings.webhooks:
        return
    alerts = part.alerts
    deliveries = CounterMetricFamily(
        "gtm_webhook_deliveries",
        "webhook deliveries by result: delivered (a 2xx answer), retried (attempts that failed and were "
        "tried again), failed (alerts.max_attempts made), dropped (beyond alerts.max_queue)",
        labels=["webhook", "result"],
    )
    labels = sorted(
        {hook.label for hook in alerts.settings.webhooks} | {label for label, _ in alerts.deliveries.counts}
    )
    for label in labels:
        for result in RESULTS:
            deliveries.add_metric([label, result], alerts.deliveries.counts[label, result])
    yield deliveries
    waiting = GaugeMetricFamily("gtm_webhook_queue", "webhook deliveries waiting (for a slot or a retry) or in flight")
    waiting.add_metric([], len(alerts.deliveries))
    yield waiting
    events = CounterMetricFamily(
        "gtm_webhook_events",
        "events webhooks ask for, by who sends them: this member (sent) or the member chosen (left)",
        labels=["sender"],
    )
    events.add_metric(["this member"], alerts.sent)
    events.add_metric(["another member"], alerts.left)
    yield events
