"""The families of GET /metrics (`api.metrics`), one collector per part of the node: each
takes the `Scrape` and yields its families, with None between parts of a big one (a
step). `FAMILIES` lists them in the order of the text; adding a metric is one function here
(or in `api.upfamilies`, what is up, `api.proximityfamilies`, client proximity,
`api.certfamilies`, certificate expiry, or `api.alertfamilies`, webhooks) and its place in
that list.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from gtmcluster.api import upfamilies
from gtmcluster.api.alertfamilies import webhooks
from gtmcluster.api.certfamilies import certificate_expiry
from gtmcluster.api.proximityfamilies import client_probes, proximity_decisions, rum_listener, rum_table
from gtmcluster.api.scrape import ADD_STEP, Families, Scrape
from gtmcluster.lb import linkload
from gtmcluster.runtime.objectstats import object_stats_steps
from gtmcluster.runtime.stats import CheckStats, Histogram
from gtmcluster.state.bounds import Bound

if TYPE_CHECKING:
    from gtmcluster.nodeservice import NodeService
    from gtmcluster.sync.service import Gate


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


#: `xfrslots.TransferSlots.refused` keys as the config names the caps (the metric's label)
_TRANSFER_CAPS = {"total": "max_in_flight", "source": "max_per_source"}


def dns_queries(scrape: Scrape) -> Iterator[Metric | None]:
    """The queries answered, by wide IP, type, rcode and method."""
    queries = CounterMetricFamily(
        "gtm_dns_queries", "DNS queries answered", labels=["wideip", "qtype", "rcode", "method"]
    )
    for i, ((wideip, qtype, rcode, method), n) in enumerate(sorted(scrape.node.stats.queries.items())):
        if i % ADD_STEP == ADD_STEP - 1:
            yield None
        queries.add_metric([wideip, qtype, rcode, method], n)
    yield queries


def object_answers(scrape: Scrape) -> Iterator[Metric | None]:
    """Answers per wide IP, pool and pool member (`_object_families`)."""
    yield from _object_families((yield from object_stats_steps(scrape.node.stats)))


def decisions(scrape: Scrape) -> Iterator[Metric | None]:
    yield _histogram("gtm_decision_seconds", "time to decide a wide IP answer", scrape.node.stats.decisions)


def rate_limited(scrape: Scrape) -> Iterator[Metric | None]:
    """UDP queries over their prefix's response rate."""
    limited = CounterMetricFamily(
        "gtm_dns_rate_limited",
        "UDP queries over their prefix's response rate: dropped, or answered truncated (slip)",
        labels=["action"],
    )
    limited.add_metric(["drop"], scrape.node.stats.rate_dropped)
    limited.add_metric(["slip"], scrape.node.stats.rate_slipped)
    yield limited


def query_log(scrape: Scrape) -> Iterator[Metric | None]:
    """The query log (dns_server.query_log; docs/query-log.md): all zero while it is off."""
    stats = scrape.node.stats
    yield CounterMetricFamily("gtm_query_log_written", "queries written to the query log", stats.query_log_written)
    yield CounterMetricFamily(
        "gtm_query_log_dropped",
        "queries not logged: the query log's queue was full (answering never waits for the log)",
        stats.query_log_dropped,
    )
    yield CounterMetricFamily(
        "gtm_query_log_failed", "queries not logged: writing the file failed", stats.query_log_failed
    )


def dns_tcp(scrape: Scrape) -> Iterator[Metric | None]:
    """DNS over TCP: connections open and closed, zone transfers refused."""
    dns = scrape.service.dns
    if dns is None:
        return
    yield GaugeMetricFamily("gtm_dns_tcp_connections", "TCP DNS connections open", value=len(dns.tcp.connections))
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


def link_traffic(scrape: Scrape) -> Iterator[Metric | None]:
    """Each link's measured traffic, its bandwidth and utilisation (those with a bandwidth
    or a figure: a config's few links)."""
    node = scrape.node
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


def ldns_probes(scrape: Scrape) -> Iterator[Metric | None]:
    """The LDNS probes of this data center (none without a prober)."""
    service = scrape.service
    if service.probes is None:
        return
    dc = service.node.member.datacenter
    stats = service.probes.stats
    probes = CounterMetricFamily("gtm_probes", "LDNS probes started from this data center", labels=["datacenter"])
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


def health_checks(scrape: Scrape) -> Iterator[Metric | None]:
    """The health checker's work (`health_check_metrics`), when the node runs one."""
    if scrape.service.checker is not None:
        yield from health_check_metrics(scrape.service.checker.stats)


def peers(scrape: Scrape) -> Iterator[Metric | None]:
    """Each peer: connected, counted, records sent and received, last contact, whether its
    digest and its DNSSEC keys agree with ours."""
    replicator = scrape.service.replicator
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
    for peer in replicator.peers.values():
        if peer.dnssec_keys is not None:
            keys_differ.add_metric([peer.name], len(peer.dnssec_mismatch))
        connected.add_metric([peer.name], 1.0 if peer.connected else 0.0)
        counted.add_metric([peer.name], 1.0 if peer.live else 0.0)
        sent.add_metric([peer.name], peer.sent)
        received.add_metric([peer.name], peer.received)
        if peer.last_contact is not None:
            lag.add_metric([peer.name], scrape.now - peer.last_contact)
        if peer.digest is not None:
            # (over the records the peer can hold: see `sync.replicator`, mixed versions)
            agree.add_metric(
                [peer.name], 1.0 if peer.digest == replicator.anti_entropy.digest_for(peer.version) else 0.0
            )
    yield from (connected, counted, sent, received, lag, agree, keys_differ)


def refused_records(scrape: Scrape) -> Iterator[Metric | None]:
    yield records_refused(scrape.service)


def peer_admission(scrape: Scrape) -> Iterator[Metric | None]:
    """The peer port's caps (`peer_port`), when the node has a peer port."""
    if scrape.service.peers is not None:
        yield from peer_port(scrape.service.peers.gate)


def store(scrape: Scrape) -> Iterator[Metric | None]:
    """The record store: records by kind, the bounded kinds, probe requests not filed, the
    last change."""
    node = scrape.node
    records = GaugeMetricFamily("gtm_store_records", "records held, by kind", labels=["kind"])
    for kind, n in sorted(node.store.kinds().items()):
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
        "gtm_store_last_change_seconds",
        "seconds since a record last changed",
        value=scrape.now - node.store.last_change,
    )


def kept_decisions(scrape: Scrape) -> Iterator[Metric | None]:
    """The decisions kept for reuse and their lookups (none without the cache)."""
    node = scrape.node
    cache = node.cache
    if cache is None:
        return
    kept = CounterMetricFamily(
        "gtm_kept_decision_lookups", "wide IP answers looked up among kept decisions", labels=["result"]
    )
    kept.add_metric(["hit"], node.stats.kept_hits)
    kept.add_metric(["miss"], node.stats.kept_misses)
    yield kept
    yield GaugeMetricFamily("gtm_kept_decisions", "decisions kept for reuse", value=len(cache))


def health_evaluation(scrape: Scrape) -> Iterator[Metric | None]:
    """Health changes waiting to be evaluated, and the longest an urgent one waited (the
    bound is `health.tracker.STALE`)."""
    health = scrape.node.health
    yield GaugeMetricFamily("gtm_health_pending", "servers and links waiting to be evaluated", value=health.pending)
    yield GaugeMetricFamily(
        "gtm_health_urgent", "servers waiting to be evaluated that may go out (urgent)", value=health.urgent
    )
    yield GaugeMetricFamily(
        "gtm_health_urgent_longest_wait_seconds",
        "the longest an urgent change waited for its evaluation since the start (answers use what is evaluated)",
        value=health.longest_wait,
    )


def answering_workers(scrape: Scrape) -> Iterator[Metric | None]:
    """The answering worker processes (none without them)."""
    workers = scrape.service.workers
    if workers is None:
        return
    yield GaugeMetricFamily(
        "gtm_answering_workers", "answering worker processes running", value=workers.running_workers
    )
    answered = CounterMetricFamily("gtm_worker_queries", "queries answered by each answering worker", labels=["worker"])
    for slot in workers.slots:
        answered.add_metric([str(slot.index)], slot.answered)
    yield answered


def garbage_collection(scrape: Scrape) -> Iterator[Metric | None]:
    """The heap keeper's full collections and freezes (none without it)."""
    keeper = scrape.service.heap
    if keeper is None:
        return
    yield CounterMetricFamily("gtm_gc_full_collections", "full garbage collections", value=keeper.full_collections)
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


def api(scrape: Scrape) -> Iterator[Metric | None]:
    """The API's refused requests and closed connections (when counted)."""
    if scrape.api_refused is not None:
        refused = CounterMetricFamily(
            "gtm_api_refused",
            "API requests refused before their body was read: Host not the node's, foreign origin, "
            "no or wrong token, not JSON, body too large, malformed",
            labels=["reason"],
        )
        for reason, n in sorted(scrape.api_refused.items()):
            refused.add_metric([reason], n)
        yield refused
    if scrape.api_closed is not None:
        closed = CounterMetricFamily(
            "gtm_api_closed",
            "API connections (or log followers) the node closed: displaced by a newer one past a cap, "
            "no request head in time (idle), a client that stopped reading (stalled), a follower "
            "without the token at its time limit (follow_time)",
            labels=["reason"],
        )
        for reason, n in sorted(scrape.api_closed.items()):
            closed.add_metric([reason], n)
        yield closed


def audit_log(scrape: Scrape) -> Iterator[Metric | None]:
    """The audit log's entries written and writes that failed (none without an audit log)."""
    audit = scrape.service.audit_log
    if audit is None:
        return
    writes = CounterMetricFamily(
        "gtm_audit_writes",
        "audit log entries written (ok) and writes that failed (failed: a full disk, a read-only file "
        "system; the write through the API was refused, a change taken from a peer went unrecorded)",
        labels=["outcome"],
    )
    writes.add_metric(["ok"], audit.counts["written"])
    writes.add_metric(["failed"], audit.counts["failed"])
    yield writes


def reactor_lag(scrape: Scrape) -> Iterator[Metric | None]:
    """How late the reactor runs (none without the lag probe)."""
    probe = scrape.service.lag
    if probe is None:
        return
    yield _histogram(
        "gtm_reactor_lag_seconds",
        "how late the reactor ran a call due every 10 ms: how long answers could have waited",
        probe.lag,
    )
    yield GaugeMetricFamily("gtm_reactor_lag_max_seconds", "the reactor's longest stall since start", value=probe.max)
    yield GaugeMetricFamily(
        "gtm_reactor_lag_recent_max_seconds",
        "the reactor's longest stall since the previous scrape of /metrics",
        value=probe.take_recent(),
    )


def config_generation(scrape: Scrape) -> Iterator[Metric | None]:
    yield GaugeMetricFamily("gtm_config_generation", "configs loaded since start", value=scrape.node.generation)


def config_bundles(scrape: Scrape) -> Iterator[Metric | None]:
    yield from bundle_metrics(scrape.service)


def ready(scrape: Scrape) -> Iterator[Metric | None]:
    yield GaugeMetricFamily("gtm_ready", "1 once reconciled with peers after a start", value=float(scrape.node.ready))


#: every family of /metrics, in the order of the text
FAMILIES: tuple[Families, ...] = (
    dns_queries,
    object_answers,
    decisions,
    proximity_decisions,
    rate_limited,
    query_log,
    dns_tcp,
    upfamilies.virtual_servers,
    upfamilies.pools,
    upfamilies.links_up,
    link_traffic,
    ldns_probes,
    rum_table,
    rum_listener,
    client_probes,
    health_checks,
    peers,
    refused_records,
    peer_admission,
    store,
    kept_decisions,
    health_evaluation,
    answering_workers,
    garbage_collection,
    api,
    audit_log,
    reactor_lag,
    config_generation,
    config_bundles,
    certificate_expiry,
    webhooks,
    ready,
)


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
