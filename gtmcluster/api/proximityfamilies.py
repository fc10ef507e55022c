"""The families of GET /metrics about client proximity (issue 36; `api.metricfamilies.FAMILIES`
lists them): the wide IP answers by the proximity source that decided them, and what the
store holds of the client table (client subnets' figures, LDNS populations), from its counts
by kind (no walk over the table)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gtmcluster.api.scrape import Scrape
from gtmcluster.lb.trace import SOURCES
from gtmcluster.node import Node
from gtmcluster.proximity.clientprobe import SERVICE_NAME as CLIENT_PROBES
from gtmcluster.state.keys import CLIENT, POP

#: the metric's label for a decision that no path method made (`Decision.proximity` "")
NONE = "none"


def by_source(counts: Mapping[str, int]) -> dict[str, int]:
    """The node's wide IP answers by source (`QueryStats.proximity`), every source named
    (0 where none), "" as `NONE`."""
    return {source: counts.get(source, 0) for source in SOURCES} | {NONE: counts.get("", 0)}


def held(kinds: Mapping[str, int]) -> dict[str, int]:
    """Client subnet records (one per subnet and data center measured) and LDNS populations
    the store holds (its count by kind: tombstones too, until they end)."""
    return {"subnets": kinds.get(CLIENT[:-1], 0), "populations": kinds.get(POP[:-1], 0)}


def coverage(node: Node) -> dict[str, Any]:
    """What the dashboard shows of client proximity (in /api/v1/status): the table's size,
    the answers by source, and the sources in the config's order."""
    return {
        "sources": list(node.config.proximity.sources),
        **held(node.store.kinds()),
        "decisions": by_source(node.stats.proximity),
    }


def proximity_decisions(scrape: Scrape) -> Iterator[Metric | None]:
    """Answers by the proximity source that decided them."""
    decided = CounterMetricFamily(
        "gtm_proximity_decisions",
        "wide IP answers this node gave (its answering processes' included, answers of a kept decision too), "
        "by the proximity source that decided: client (the ECS client subnet's own RTT, from browsers or probes), "
        "population (the LDNS's measured clients), ldns (the LDNS's own paths), none (a method that reads no paths)",
        labels=["source"],
    )
    for source, n in by_source(scrape.node.stats.proximity).items():
        decided.add_metric([source], n)
    yield decided


def rum_table(scrape: Scrape) -> Iterator[Metric | None]:
    """The client table the store holds."""
    figures = held(scrape.node.store.kinds())
    yield GaugeMetricFamily(
        "gtm_rum_subnets",
        "client subnet figures held: one per client subnet (/24 or /48) and data center measured, "
        "from browsers' beacons or probes",
        value=figures["subnets"],
    )
    yield GaugeMetricFamily(
        "gtm_rum_populations",
        "LDNS populations held: resolvers tied to the client subnets they serve",
        value=figures["populations"],
    )


def rum_listener(scrape: Scrape) -> Iterator[Metric | None]:
    """The member's RUM listener: beacons by result, their ids, the one-use names recorded."""
    stats = scrape.node.stats
    ids = CounterMetricFamily(
        "gtm_rum_ids",
        "one-use names (<id>.rum.<zone>) this node answered, by whether it recorded the LDNS that asked "
        "(recorded) or its LDNS /24 was over its rate (rate)",
        labels=["result"],
    )
    ids.add_metric(["recorded"], stats.rum_ids_recorded)
    ids.add_metric(["rate"], stats.rum_ids_rate)
    yield ids
    rum = scrape.service.rum
    if rum is None:
        return
    beacons = CounterMetricFamily(
        "gtm_rum_beacons",
        "beacons posted to this member's RUM listener, by result: kept, or the reason it was refused "
        "(malformed, too_large, unknown_dc, bad_value, bad_id, refused_source, rate)",
        labels=["result"],
    )
    for result, n in sorted(rum.beacons.items()):
        beacons.add_metric([result], n)
    yield beacons
    ties = CounterMetricFamily(
        "gtm_rum_ties",
        "kept beacons' ids by what became of them: tied to the LDNS that resolved it (tied, tied_later once "
        "its record arrived), spent (used before), expired or dropped unresolved, ecs_differs (tied although "
        "the resolver's client subnet did not hold the beacon's)",
        labels=["result"],
    )
    for result, n in sorted(rum.ties.items()):
        ties.add_metric([result], n)
    yield ties
    yield GaugeMetricFamily(
        "gtm_rum_pending_ids", "kept beacons' ids awaiting the record of who resolved them", value=rum.pending()
    )


def client_probes(scrape: Scrape) -> Iterator[Metric | None]:
    """Client-subnet probing (``proximity.client_probe``): requests filed, and what this
    node's client prober did with the requests its data center's share gave it."""
    requests = CounterMetricFamily(
        "gtm_client_probe_requests",
        "requests to probe a client subnet (an ECS subnet from a trusted resolver with no figure) by whether "
        "this node filed it (filed) or its share of the group's subnets_per_interval was spent (over_share)",
        labels=["result"],
    )
    for result, n in scrape.node.client_requests.counters().items():
        requests.add_metric([result], n)
    yield requests
    try:
        scheduler = scrape.service.getServiceNamed(CLIENT_PROBES)
    except KeyError:
        return
    stats = scheduler.stats
    done = CounterMetricFamily(
        "gtm_client_probes",
        "this node's client-subnet probing: requests taken (its data center's to probe), addresses probed, "
        "subnets measured (a figure written) and silent (no address answered: backed off), requests ignored "
        "(too many subnets waiting)",
        labels=["result"],
    )
    for result in ("requests", "probes", "measured", "silent", "ignored"):
        done.add_metric([result], getattr(stats, result))
    yield done
