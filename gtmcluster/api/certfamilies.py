"""The family of GET /metrics that says when the node's certificates expire
(`api.metricfamilies.FAMILIES` lists it): the member's own sync group certificate, the
group CA's, and the one the HTTPS API serves, as the node loaded them (at start, or by the
reload that took renewed files). Read from the parsed certificates the node holds: a scrape
reads no file and parses nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from cryptography import x509
from prometheus_client.core import GaugeMetricFamily, Metric

from gtmcluster.api.scrape import Scrape
from gtmcluster.api.tls import ApiTLS

if TYPE_CHECKING:
    from gtmcluster.nodeservice import NodeService


def certificates(service: NodeService) -> dict[str, x509.Certificate]:
    """The certificates in use, by role: ``node`` and ``ca`` (the peers' credentials, or
    the API's in a group of one), ``api`` (with ``api.tls``). Empty for a group of one
    without HTTPS: it loads no certificate."""
    api = next((part.creds for part in service.parts if isinstance(part, ApiTLS)), None)
    group = service.peers.tls.creds if service.peers is not None else api
    found = {}
    if group is not None:
        found["node"] = group.certificate
        found["ca"] = group.ca_certificate
    if api is not None:
        found["api"] = api.certificate
    return found


def certificate_expiry(scrape: Scrape) -> Iterator[Metric | None]:
    held = certificates(scrape.service)
    if not held:
        return
    expiry = GaugeMetricFamily(
        "gtm_certificate_expiry_timestamp_seconds",
        "when the certificate expires (unix seconds): node (this member's), ca (the sync group CA), "
        "api (the one the HTTPS API serves)",
        labels=["certificate"],
    )
    for role, cert in held.items():
        expiry.add_metric([role], cert.not_valid_after_utc.timestamp())
    yield expiry
