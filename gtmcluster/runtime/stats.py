"""Counters the answer path and the probers keep, cheaply (plain integers and lists), for
the Prometheus exporter to read at scrape time."""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

#: decision latency buckets (seconds): a decision takes tens of microseconds
DECISION_BUCKETS = (0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05)
#: probe RTT buckets (seconds)
RTT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        """Prometheus buckets: (upper bound, count of observations at or below it)."""
        out = []
        running = 0
        for bound, n in zip(self.buckets, self.counts, strict=False):
            running += n
            out.append((repr(bound), float(running)))
        out.append(("+Inf", float(self.count)))
        return out


#: a wide IP answer as the per-object statistics count it: (wide IP, pool or "", slot,
#: method, the virtual servers named); see `gtmcluster.runtime.objectstats`
Tally = tuple[str, str, str, str, tuple[str, ...]]


class QueryStats:
    def __init__(self) -> None:
        #: (wide IP or "", qtype, rcode, deciding method or "static"/"") -> queries
        self.queries: defaultdict[tuple[str, str, str, str], int] = defaultdict(int)
        #: wide IP answers by wide IP, pool, slot, method and the virtual servers they hold
        #: (a `Tally`): the per-object statistics (gtmcluster.runtime.objectstats) and the
        #: dashboard's answers per data center (gtmcluster.history)
        self.answered: defaultdict[Tally, int] = defaultdict(int)
        self.decisions = Histogram(DECISION_BUCKETS)
        #: wide IP answers (those of a kept decision too, as `answered`) by the
        #: proximity source that decided them: "client", "population", "ldns", or "" for a
        #: method that reads no paths (`lb.trace.Decision.proximity`)
        self.proximity: defaultdict[str, int] = defaultdict(int)
        #: wide IP answers looked up among the kept decisions (lb.cache), found or not
        self.kept_hits = 0
        self.kept_misses = 0
        #: UDP queries the rate limiter dropped, and those it answered truncated (slipped)
        self.rate_dropped = 0
        self.rate_slipped = 0
        #: queries the query log wrote, dropped (its queue was full) and lost to write errors
        self.query_log_written = 0
        self.query_log_dropped = 0
        self.query_log_failed = 0
        #: one-use names (``<id>.rum.<zone>``, `dns.rumnames`) answered and told to the node
        #: to record, and those answered past their LDNS's bucket (nothing recorded)
        self.rum_ids_recorded = 0
        self.rum_ids_rate = 0

    def query(self, wideip: str, qtype: str, rcode: str, method: str) -> None:
        self.queries[(wideip, qtype, rcode, method)] += 1


class ProbeStats:
    def __init__(self) -> None:
        self.probes = 0
        self.failures = 0
        self.ignored = 0  # probe requests ignored: their origin had too many waiting
        #: paths to new LDNSes measured but not kept: this node holds as many paths as it
        #: writes at most (state.schema: `writer_limit` of the path kind)
        self.not_kept = 0
        self.rtt = Histogram(RTT_BUCKETS)


#: health check lag buckets (seconds): how late a check started after it was due
LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


@dataclass
class CheckStats:
    """What the health checker did, in checks (one per target per round)."""

    started: int = 0
    #: not started: no budget (health.max_checks_per_second) or no free slot
    #: (health.max_in_flight) until half an interval after it was due
    skipped_late: int = 0
    #: not started: the subject's previous round was still running
    skipped_busy: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    lag: Histogram = field(default_factory=lambda: Histogram(LAG_BUCKETS))
    lag_max: float = 0.0

    @property
    def skipped(self) -> int:
        return self.skipped_late + self.skipped_busy

    def lag_quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the *q* quantile of lags (inf beyond the
        last bucket: then `lag_max` says more), or None before any check."""
        if not self.lag.count:
            return None
        wanted = q * self.lag.count
        running = 0
        for bound, n in zip(self.lag.buckets, self.lag.counts, strict=False):
            running += n
            if running >= wanted:
                return bound
        return float("inf")
