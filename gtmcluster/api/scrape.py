"""What one scrape of GET /metrics reads (`Scrape`), the shape of a family collector
(`Families`) and how many samples one adds between two steps (`ADD_STEP`): shared by the
modules of families (`api.metricfamilies`, `api.upfamilies`, `api.certfamilies`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

if TYPE_CHECKING:
    from gtmcluster.node import Node
    from gtmcluster.nodeservice import NodeService

#: samples added to a family between two steps (a collector yields None)
ADD_STEP = 500


@dataclass(frozen=True, slots=True)
class Scrape:
    """What one scrape's families are read from: the node's service, the time of the scrape,
    and the API's counts of refused requests and closed connections (None: not counted)."""

    service: NodeService
    now: float
    api_refused: Mapping[str, int] | None = None
    api_closed: Mapping[str, int] | None = None

    @property
    def node(self) -> Node:
        return self.service.node


#: a family collector: one family, or several of one part of the node, from a scrape; None
#: between parts of a big one (a step: `metrics_steps`)
Families = Callable[[Scrape], Iterator[Metric | None]]
