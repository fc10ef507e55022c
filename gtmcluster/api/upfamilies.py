"""The families of GET /metrics that say what is up (`api.metricfamilies.FAMILIES` lists
them): each virtual server (healthy, available, serving), each pool (members that may take
new clients), each link. A data center is down when none of its servers is healthy: the
shipped alerts (etc/prometheus/gtmcluster-rules.yml) say so in PromQL, from
``gtm_virtual_server_healthy``'s ``datacenter`` label, so no family of its own is needed.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from gtmcluster.api.scrape import ADD_STEP, Scrape
from gtmcluster.state.admin import ENABLED


def virtual_servers(scrape: Scrape) -> Iterator[Metric | None]:
    """Each virtual server's health (its monitors, link and dependencies, admin state
    aside: what "down" means to an alert), and its availability to new clients and to those
    held by persistence (admin state included)."""
    node = scrape.node
    snapshot = node.health.snapshot
    labels = ["virtual_server", "datacenter"]
    healthy = GaugeMetricFamily(
        "gtm_virtual_server_healthy",
        "1 when its monitors, its link and the servers it depends on say it works (admin state aside)",
        labels=labels,
    )
    available = GaugeMetricFamily("gtm_virtual_server_available", "1 when new clients may get it", labels=labels)
    serving = GaugeMetricFamily(
        "gtm_virtual_server_serving", "1 when it may serve clients held by persistence", labels=labels
    )
    for i, (name, vs) in enumerate(sorted(node.config.virtual_servers.items())):
        if i % ADD_STEP == ADD_STEP - 1:
            yield None
        status = snapshot.vs.get(name)
        healthy.add_metric([name, vs.datacenter], 1.0 if status and status.healthy else 0.0)
        available.add_metric([name, vs.datacenter], 1.0 if status and status.available else 0.0)
        serving.add_metric([name, vs.datacenter], 1.0 if status and status.serving else 0.0)
    yield healthy
    yield available
    yield serving


def pools(scrape: Scrape) -> Iterator[Metric | None]:
    """Each pool's members that may take new clients: the server available and the member
    enabled (an operator's record over the config's state). The pool's own admin state is
    left aside, so 0 means the pool has nothing to answer with, not that it was disabled."""
    node = scrape.node
    snapshot = node.health.snapshot
    held = snapshot.admin
    configured = node.config.admin_defaults
    members = GaugeMetricFamily(
        "gtm_pool_members_available",
        "the pool's members that may take new clients (server available, member enabled; the pool's "
        "own admin state aside): 0 when it has none",
        labels=["pool"],
    )
    added = 0
    for name, pool in sorted(node.config.pools.items()):
        usable = 0
        for member in pool.members:
            added += 1
            if added % ADD_STEP == 0:
                yield None
            status = snapshot.vs.get(member.vs.name)
            if status is None or not status.available:
                continue
            key = f"member/{name}/{member.name}"
            admin = held.get(key) or configured.get(key)
            usable += admin is None or admin.state == ENABLED
        members.add_metric([name], float(usable))
    yield members


def links_up(scrape: Scrape) -> Iterator[Metric | None]:
    """Each link's verdict."""
    node = scrape.node
    snapshot = node.health.snapshot
    links = GaugeMetricFamily("gtm_link_up", "1 up, 0 down, -1 not known yet", labels=["link", "datacenter"])
    for i, (name, link) in enumerate(sorted(node.config.links.items())):
        if i % ADD_STEP == ADD_STEP - 1:
            yield None
        observed = snapshot.links.get(name)
        state = observed.state if observed else "unknown"
        links.add_metric([name, link.datacenter], {"up": 1.0, "down": 0.0}.get(state, -1.0))
    yield links
