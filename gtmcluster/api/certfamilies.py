"""The family of GET /metrics that says when the node's certificates expire
(`api.metricfamilies.FAMILIES` lists it): the member's own sync group certificate, the
group CA's, and the one the HTTPS API serves, as the node loaded them (at start, or by the
reload that took renewed files). Read from the parsed certificates the node holds: a scrape
reads no file and parses nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from gtmcluster.api.scrape import Scrape
from gtmcluster.api.tls import expiries


def certificate_expiry(scrape: Scrape) -> Iterator[Metric | None]:
    held = expiries(scrape.service)
    if not held:
        return
    expiry = GaugeMetricFamily(
        "gtm_certificate_expiry_timestamp_seconds",
        "when the certificate expires (unix seconds): node (this member's), ca (the sync group CA), "
        "api (the one the HTTPS API serves)",
        labels=["certificate"],
    )
    for e in held:
        expiry.add_metric([e.certificate], e.timestamp)
    yield expiry
