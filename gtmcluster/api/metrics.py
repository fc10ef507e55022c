"""GET /metrics: the node in Prometheus's text format (prometheus_client).

Counters on the answer path are plain integers the node keeps (see `gtmcluster.runtime.stats`);
this collector turns them, and the node's current state, into metric families only when
Prometheus scrapes, so answering a query costs no metrics-library work.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gtmcluster.api.server import Raw
from gtmcluster.health import linkload
from gtmcluster.runtime.objectstats import object_stats_steps
from gtmcluster.runtime.slices import Steps
from gtmcluster.runtime.stats import CheckStats, Histogram
from gtmcluster.state.bounds import Bound

if TYPE_CHECKING:
    from gtmcluster.node import Node
    from gtmcluster.nodeservice import NodeService
    from gtmcluster.sync.service import Gate

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


def _histogram(name: str, documentation: str, h: Histogram, labels: dict[str, str] | None = None) -> Metric:
    family = HistogramMetricFamily(name, documentation, labels=list(labels or {}))
    family.add_metric(list((labels or {}).values()), h.cumulative(), h.total)
    return family


def _bounds(bounds: Mapping[str, Bound]) -> Iterator[Metric]:
    """The bounded kinds of record (what DNS clients cause): limit, evicted, refused."""
    limit = GaugeMetricFamily("gtm_store_limit", "records of the kind kept at most", labels=["kind"])
    evicted = CounterMetricFamily(
        "gtm_store_evicted",
        "records dropped to keep their kind within its limit: the least recently written",
        labels=["kind"],
    )
    refused = CounterMetricFamily(
        "gtm_store_evicted_on_arrival",
        "records a peer offered that ranked below every record held of a full kind (not kept)",
        labels=["kind"],
    )
    for kind, bound in sorted(bounds.items()):
        limit.add_metric([kind], bound.limit)
        evicted.add_metric([kind], bound.evicted)
        refused.add_metric([kind], bound.refused)
    yield from (limit, evicted, refused)


def _object_families(figures: dict[str, Any]) -> Iterator[Metric]:
    """The per-object statistics (`gtmcluster.runtime.objectstats`): answers per wide IP, pool and
    pool member by slot (persistence hits are the ``persistence`` slot; drops and returns
    to the zone are in ``gtm_dns_queries``), and per pool by method."""
    wideips = CounterMetricFamily(
        "gtm_wideip_answers",
        "wide IP answers by where they came from: a pool's preferred, alternate or fallback method, "
        "the last resort pool, the failure response, persistence",
        labels=["wideip", "slot"],
    )
    for name, entry in figures["wideips"].items():
        for slot, n in entry["slots"].items():
            wideips.add_metric([name, slot], n)
    pools = CounterMetricFamily("gtm_pool_answers", "answers from the pool, by slot", labels=["pool", "slot"])
    methods = CounterMetricFamily(
        "gtm_pool_method_answers", "answers from the pool, by method", labels=["pool", "method"]
    )
    members = CounterMetricFamily(
        "gtm_pool_member_answers", "answers naming the pool member, by slot", labels=["pool", "member", "slot"]
    )
    for pool, entry in figures["pools"].items():
        for slot, n in entry["slots"].items():
            pools.add_metric([pool, slot], n)
        for method, n in entry["methods"].items():
            methods.add_metric([pool, method], n)
        for member, m in entry["members"].items():
            for slot, n in m["slots"].items():
                members.add_metric([pool, member, slot], n)
    yield from (wideips, pools, methods, members)


#: samples added to a family between two steps (`NodeCollector.collect` yields None)
ADD_STEP = 500

#: `xfrslots.TransferSlots.refused` keys as the config names the caps (the metric's label)
_TRANSFER_CAPS = {"total": "max_in_flight", "source": "max_per_source"}


class NodeCollector(Collector):
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
        service = self.service
        node = service.node
        now = service.reactor.seconds()
        queries = CounterMetricFamily(
            "gtm_dns_queries", "DNS queries answered", labels=["wideip", "qtype", "rcode", "method"]
        )
        for i, ((wideip, qtype, rcode, method), n) in enumerate(sorted(node.stats.queries.items())):
            if i % ADD_STEP == ADD_STEP - 1:
                yield None
            queries.add_metric([wideip, qtype, rcode, method], n)
        yield queries
        yield from _object_families((yield from object_stats_steps(node.stats)))
        yield _histogram("gtm_decision_seconds", "time to decide a wide IP answer", node.stats.decisions)
        limited = CounterMetricFamily(
            "gtm_dns_rate_limited",
            "UDP queries over their prefix's response rate: dropped, or answered truncated (slip)",
            labels=["action"],
        )
        limited.add_metric(["drop"], node.stats.rate_dropped)
        limited.add_metric(["slip"], node.stats.rate_slipped)
        yield limited
        # the query log (dns_server.query_log; docs/query-log.md): all zero while it is off
        written = node.stats.query_log_written
        yield CounterMetricFamily("gtm_query_log_written", "queries written to the query log", written)
        yield CounterMetricFamily(
            "gtm_query_log_dropped",
            "queries not logged: the query log's queue was full (answering never waits for the log)",
            node.stats.query_log_dropped,
        )
        yield CounterMetricFamily(
            "gtm_query_log_failed", "queries not logged: writing the file failed", node.stats.query_log_failed
        )
        dns = service.dns
        if dns is not None:
            yield GaugeMetricFamily(
                "gtm_dns_tcp_connections", "TCP DNS connections open", value=len(dns.tcp.connections)
            )
            closed = CounterMetricFamily(
                "gtm_dns_tcp_closed",
                "TCP DNS connections the node closed: idle (silent), partial (a message left unfinished), "
                "evicted (its address at tcp_max_clients), source_cap (its source past tcp_max_per_source), "
                "stalled (a zone transfer's client taking nothing)",
                labels=["reason"],
            )
            for reason, n in sorted(dns.tcp.closed_by.items()):
                closed.add_metric([reason], n)
            yield closed
            refused = CounterMetricFamily(
                "gtm_dns_transfers_refused",
                "zone transfers refused (REFUSED) for want of a slot, by the dns_server.transfer cap that was full",
                labels=["cap"],
            )
            for cap, n in sorted(dns.tcp.slots.refused.items()):
                refused.add_metric([_TRANSFER_CAPS.get(cap, cap)], n)
            yield refused

        snapshot = node.health.snapshot
        available = GaugeMetricFamily(
            "gtm_virtual_server_available", "1 when new clients may get it", labels=["virtual_server", "datacenter"]
        )
        serving = GaugeMetricFamily(
            "gtm_virtual_server_serving",
            "1 when it may serve clients held by persistence",
            labels=["virtual_server", "datacenter"],
        )
        for i, (name, vs) in enumerate(sorted(node.config.virtual_servers.items())):
            if i % ADD_STEP == ADD_STEP - 1:
                yield None
            status = snapshot.vs.get(name)
            available.add_metric([name, vs.datacenter], 1.0 if status and status.available else 0.0)
            serving.add_metric([name, vs.datacenter], 1.0 if status and status.serving else 0.0)
        yield available
        yield serving
        links = GaugeMetricFamily("gtm_link_up", "1 up, 0 down, -1 not known yet", labels=["link", "datacenter"])
        for i, (name, link) in enumerate(sorted(node.config.links.items())):
            if i % ADD_STEP == ADD_STEP - 1:
                yield None
            observed = snapshot.links.get(name)
            state = observed.state if observed else "unknown"
            links.add_metric([name, link.datacenter], {"up": 1.0, "down": 0.0}.get(state, -1.0))
        yield links
        yield from _link_traffic(node)

        if service.probes is not None:
            dc = node.member.datacenter
            stats = service.probes.stats
            probes = CounterMetricFamily(
                "gtm_probes", "LDNS probes started from this data center", labels=["datacenter"]
            )
            probes.add_metric([dc], stats.probes)
            yield probes
            failures = CounterMetricFamily("gtm_probe_failures", "LDNS probes that got no reply", labels=["datacenter"])
            failures.add_metric([dc], stats.failures)
            yield failures
            ignored = CounterMetricFamily(
                "gtm_probe_requests_ignored",
                "probe requests ignored because their origin had too many waiting (a flood)",
                labels=["datacenter"],
            )
            ignored.add_metric([dc], stats.ignored)
            yield ignored
            not_kept = CounterMetricFamily(
                "gtm_probe_paths_not_kept",
                "paths to new LDNSes measured but not kept: the node holds the most paths of its own it writes",
                labels=["datacenter"],
            )
            not_kept.add_metric([dc], stats.not_kept)
            yield not_kept
            yield _histogram("gtm_probe_rtt_seconds", "measured LDNS round trips", stats.rtt, {"datacenter": dc})

        if service.checker is not None:
            yield from health_check_metrics(service.checker.stats)

        connected = GaugeMetricFamily("gtm_peer_connected", "1 when connected to the peer", labels=["peer"])
        counted = GaugeMetricFamily(
            "gtm_peer_counted",
            "1 when the peer was heard from within the heartbeat timeout (its health verdicts count)",
            labels=["peer"],
        )
        sent = CounterMetricFamily("gtm_sync_records_sent", "records pushed to the peer", labels=["peer"])
        received = CounterMetricFamily("gtm_sync_records_received", "records received from the peer", labels=["peer"])
        lag = GaugeMetricFamily(
            "gtm_sync_last_contact_seconds", "seconds since the peer was last heard from", labels=["peer"]
        )
        agree = GaugeMetricFamily(
            "gtm_sync_digest_agrees",
            "1 when the peer's last state digest equals ours (over the records its protocol version can hold)",
            labels=["peer"],
        )
        keys_differ = GaugeMetricFamily(
            "gtm_dnssec_keyset_mismatch",
            "signed zones whose DNSKEY set differs between the peer and us (0 when they agree)",
            labels=["peer"],
        )
        for peer in service.replicator.peers.values():
            if peer.dnssec_keys is not None:
                keys_differ.add_metric([peer.name], len(peer.dnssec_mismatch))
            connected.add_metric([peer.name], 1.0 if peer.connected else 0.0)
            counted.add_metric([peer.name], 1.0 if peer.live else 0.0)
            sent.add_metric([peer.name], peer.sent)
            received.add_metric([peer.name], peer.received)
            if peer.last_contact is not None:
                lag.add_metric([peer.name], now - peer.last_contact)
            if peer.digest is not None:
                # (over the records the peer can hold: see `sync.replicator`, mixed versions)
                agree.add_metric(
                    [peer.name], 1.0 if peer.digest == service.replicator.anti_entropy.digest_for(peer.version) else 0.0
                )
        yield from (connected, counted, sent, received, lag, agree, keys_differ)
        yield records_refused(service)
        if service.peers is not None:
            yield from peer_port(service.peers.gate)

        kinds = node.store.kinds()
        records = GaugeMetricFamily("gtm_store_records", "records held, by kind", labels=["kind"])
        for kind, n in sorted(kinds.items()):
            records.add_metric([kind], n)
        yield records
        yield from _bounds(node.store.bounds())
        yield CounterMetricFamily(
            "gtm_probe_requests_unfiled",
            "probe requests queries would have filed, not filed: this node had filed as many as it "
            "can probe (prober.max_per_second; a flood of new source addresses)",
            value=node.probe_budget.unfiled,
        )
        yield GaugeMetricFamily(
            "gtm_store_last_change_seconds", "seconds since a record last changed", value=now - node.store.last_change
        )
        cache = node.cache
        if cache is not None:
            kept = CounterMetricFamily(
                "gtm_kept_decision_lookups", "wide IP answers looked up among kept decisions", labels=["result"]
            )
            kept.add_metric(["hit"], node.stats.kept_hits)
            kept.add_metric(["miss"], node.stats.kept_misses)
            yield kept
            yield GaugeMetricFamily("gtm_kept_decisions", "decisions kept for reuse", value=len(cache))
        workers = service.workers
        if workers is not None:
            yield GaugeMetricFamily(
                "gtm_answering_workers", "answering worker processes running", value=workers.running_workers
            )
            answered = CounterMetricFamily(
                "gtm_worker_queries", "queries answered by each answering worker", labels=["worker"]
            )
            for slot in workers.slots:
                answered.add_metric([str(slot.index)], slot.answered)
            yield answered
        keeper = service.heap
        if keeper is not None:
            yield CounterMetricFamily(
                "gtm_gc_full_collections", "full garbage collections", value=keeper.full_collections
            )
            yield CounterMetricFamily(
                "gtm_gc_freezes", "freezes of long-lived objects after a slow full collection", value=keeper.freezes
            )
            yield GaugeMetricFamily(
                "gtm_gc_frozen_objects",
                "objects frozen, left out of collections, as counted at the last freeze after a slow collection",
                value=keeper.frozen,
            )
            yield GaugeMetricFamily(
                "gtm_gc_longest_full_collection_seconds",
                "the longest full garbage collection since start (the reactor stands still meanwhile)",
                value=keeper.longest,
            )
        if self.api_refused is not None:
            refused = CounterMetricFamily(
                "gtm_api_refused",
                "API requests refused before their body was read: Host not the node's, foreign origin, "
                "no or wrong token, not JSON, body too large, malformed",
                labels=["reason"],
            )
            for reason, n in sorted(self.api_refused.items()):
                refused.add_metric([reason], n)
            yield refused
        if self.api_closed is not None:
            closed = CounterMetricFamily(
                "gtm_api_closed",
                "API connections (or log followers) the node closed: displaced by a newer one past a cap, "
                "no request head in time (idle), a client that stopped reading (stalled), a follower "
                "without the token at its time limit (follow_time)",
                labels=["reason"],
            )
            for reason, n in sorted(self.api_closed.items()):
                closed.add_metric([reason], n)
            yield closed
        probe = service.lag
        if probe is not None:
            yield _histogram(
                "gtm_reactor_lag_seconds",
                "how late the reactor ran a call due every 10 ms: how long answers could have waited",
                probe.lag,
            )
            yield GaugeMetricFamily(
                "gtm_reactor_lag_max_seconds", "the reactor's longest stall since start", value=probe.max
            )
            yield GaugeMetricFamily(
                "gtm_reactor_lag_recent_max_seconds",
                "the reactor's longest stall since the previous scrape of /metrics",
                value=probe.take_recent(),
            )
        yield GaugeMetricFamily("gtm_config_generation", "configs loaded since start", value=node.generation)
        yield from bundle_metrics(service)
        yield GaugeMetricFamily("gtm_ready", "1 once reconciled with peers after a start", value=float(node.ready))


def peer_port(gate: Gate) -> Iterator[Metric]:
    """The peer port's caps on connections still in TLS or Hello (`sync.admission`)."""
    turned_away = CounterMetricFamily(
        "gtm_peer_connections_turned_away",
        "connections to the peer port closed at once: their address, or the port, held the most "
        "connections still in TLS handshake or Hello",
    )
    turned_away.add_metric([], gate.turned_away)
    made_way = CounterMetricFamily(
        "gtm_peer_connections_made_way",
        "connections still in TLS handshake or Hello closed to make way for one from another address",
    )
    made_way.add_metric([], gate.made_way)
    yield from (turned_away, made_way)


def records_refused(service: NodeService) -> Metric:
    """Records refused from peers (the peer is dropped, or for a count cap the record alone
    refused) and skipped in the snapshot at start, by kind and reason (state.schema)."""
    refused = CounterMetricFamily(
        "gtm_records_refused",
        "records not taken, from a peer or from the snapshot at start: an unknown kind, or a key, "
        "value, TTL, size or writer its kind does not allow (the peer is dropped), or beyond "
        "the records of that kind one member may hold (count)",
        labels=["source", "kind", "reason"],
    )
    sources = [("peer", service.replicator.refused)]
    if service.snapshots is not None:
        sources.append(("snapshot", service.snapshots.refused))
    for source, counts in sources:
        for (kind, reason), n in sorted(counts.items()):
            refused.add_metric([source, kind, reason], n)
    return refused


#: samples formatted per slice (a family of 5,000 servers is formatted in several)
SAMPLES_PER_SLICE = 500


def _link_traffic(node: Node) -> Iterator[GaugeMetricFamily]:
    """Each link's measured traffic, its bandwidth and utilisation (those with a bandwidth
    or a figure: a config's few links)."""
    bits = GaugeMetricFamily(
        "gtm_link_bits_per_second", "a link's measured traffic, each way", labels=["link", "direction"]
    )
    bandwidth = GaugeMetricFamily("gtm_link_bandwidth_bits_per_second", "a link's bandwidth_mbps", labels=["link"])
    share = GaugeMetricFamily(
        "gtm_link_utilisation_ratio", "the busier direction over the bandwidth (1 is full)", labels=["link"]
    )
    for name, link in sorted(node.config.links.items()):
        load = linkload.load_held(node.store, name)
        if load is not None:
            bits.add_metric([name, "in"], load.bps_in)
            bits.add_metric([name, "out"], load.bps_out)
        if link.bandwidth_mbps is not None:
            bandwidth.add_metric([name], link.bandwidth_mbps * 1e6)
        ratio = linkload.utilisation(link, load)
        if ratio is not None:
            share.add_metric([name], ratio)
    yield bits
    yield bandwidth
    yield share


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


# -- the health checker (gtmcluster/health/checker.py, schedule.py)


def health_check_metrics(stats: CheckStats) -> Iterator[Metric]:
    """What the health checker did: checks started and skipped, in flight, how late they started."""
    yield CounterMetricFamily(
        "gtm_health_checks_started", "health checks started (one per target)", value=stats.started
    )
    skipped = CounterMetricFamily(
        "gtm_health_checks_skipped",
        "health checks not started: no budget or free slot within half their interval (late), "
        "or their previous round still running (busy)",
        labels=["reason"],
    )
    skipped.add_metric(["late"], stats.skipped_late)
    skipped.add_metric(["busy"], stats.skipped_busy)
    yield skipped
    yield GaugeMetricFamily("gtm_health_checks_in_flight", "health checks running now", value=stats.in_flight)
    yield _histogram("gtm_health_check_lag_seconds", "how late health checks started after they were due", stats.lag)


def bundle_metrics(service: NodeService) -> Iterator[Metric]:
    """The group's shared config: the generation of the bundle each member runs (0: its own
    file) and holds, by what this member knows (its own, its peers' last word)."""
    sync = service.replicator.config
    if sync is None:
        return
    running = GaugeMetricFamily(
        "gtm_config_bundle_generation",
        "the group config generation the member runs (0: its own file)",
        labels=["member"],
    )
    held = GaugeMetricFamily(
        "gtm_config_bundle_held_generation", "the newest group config generation the member holds", labels=["member"]
    )
    refused = GaugeMetricFamily(
        "gtm_config_bundle_refused",
        "1 when the member refused to run the newest generation it holds",
        labels=["member"],
    )
    info = GaugeMetricFamily("gtm_config_bundle_info", "the bundle each member runs", labels=["member", "digest"])
    views = {service.node.member.name: sync.view(), **sync.views}
    for name, view in sorted(views.items()):
        running.add_metric([name], float(view.generation))
        held.add_metric([name], float(view.held.generation if view.held else 0))
        refused.add_metric([name], 1.0 if view.refused is not None and view.refused == view.held else 0.0)
        info.add_metric([name, view.digest[:12]], 1.0)
    yield from (running, held, refused, info)
