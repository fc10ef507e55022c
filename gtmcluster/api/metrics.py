"""GET /metrics: the node in Prometheus's text format (prometheus_client).

Counters on the answer path are plain integers the node keeps (see `gtmcluster.runtime.stats`);
this collector turns them, and the node's current state, into metric families only when
Prometheus scrapes, so answering a query costs no metrics-library work. The families are
collected per part of the node (`api.metricfamilies.FAMILIES`); here they are formatted,
a step at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from gtmcluster.api.metricfamilies import FAMILIES
from gtmcluster.api.scrape import Scrape
from gtmcluster.api.server import Raw
from gtmcluster.runtime.slices import Steps

if TYPE_CHECKING:
    from gtmcluster.nodeservice import NodeService

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


class NodeCollector(Collector):
    """The node's families (`FAMILIES`), read when Prometheus scrapes."""

    def __init__(
        self,
        service: NodeService,
        api_refused: Mapping[str, int] | None = None,
        api_closed: Mapping[str, int] | None = None,
    ):
        self.service = service
        self.api_refused = api_refused
        self.api_closed = api_closed

    def collect(self) -> Iterator[Metric | None]:  # type: ignore[override]
        """The families; None between parts of a big one (a step: `metrics_steps`). At
        5,000 servers and 2,000 wide IPs a family is built from thousands of samples, 40 ms
        in one go, which held the reactor in every scrape."""
        scrape = Scrape(self.service, self.service.reactor.seconds(), self.api_refused, self.api_closed)
        for families in FAMILIES:
            yield from families(scrape)


#: samples formatted per slice (a family of 5,000 servers is formatted in several)
SAMPLES_PER_SLICE = 500


def metrics_steps(
    service: NodeService, api_refused: Mapping[str, int] | None = None, api_closed: Mapping[str, int] | None = None
) -> Steps[Raw]:
    """The whole text, a family (or a part of a large one) per step."""
    parts: list[bytes] = []
    for family in NodeCollector(service, api_refused, api_closed).collect():
        if family is None:
            yield None
            continue
        for start in range(0, max(1, len(family.samples)), SAMPLES_PER_SLICE):
            part = Metric(family.name, family.documentation, family.type, family.unit)
            part.samples = family.samples[start : start + SAMPLES_PER_SLICE]
            text = generate_latest(_One(part))
            if start:  # a family's HELP and TYPE come once, before its first sample
                text = b"".join(line for line in text.splitlines(keepends=True) if not line.startswith(b"# "))
            parts.append(text)
            yield None
    return Raw(CONTENT_TYPE, b"".join(parts))


class _One(CollectorRegistry):
    """A registry of one metric family, to format it alone."""

    def __init__(self, family: Metric):
        super().__init__(auto_describe=False)
        self.family = family

    def collect(self) -> Iterator[Metric]:
        yield self.family
