"""Probing on request: every node probes each requested LDNS from its own data center.

A probe request is a record ``probe/<ldns>`` (one at a time per LDNS across the group: a
node does not publish one while another is live). Every node that sees it probes the LDNS
unless its own path is fresh (younger than half the probe interval) or backing off after
failures, within the node's rate and in-flight limits, and writes what it measured as its
data center's path record.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from typing import Any, Protocol

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gtmcluster.proximity.budget import Budget
from gtmcluster.proximity.table import REQUEST, Measurements, from_record, path_key, request_key, updated
from gtmcluster.state.store import Record, Store
from gtmcluster.stats import ProbeStats

log = Logger()

#: a probe request lives this long (or half the probe interval, when shorter): the time for
#: every node to probe once. While it lives no other request for that LDNS is filed, so it
#: must not outlive the interval, or a stale path waits for it rather than for the interval.
REQUEST_TTL = 60.0
MAX_PENDING = 10_000


class Sample(Protocol):
    ok: bool
    rtt_us: int
    hops: int
    protocol: str
    reason: str


class Prober(Protocol):
    def probe(self, ldns: ipaddress.IPv4Address | ipaddress.IPv6Address) -> Deferred[Any]: ...

    def close(self) -> None: ...


def request_ttl(probe_interval: float) -> float:
    return min(REQUEST_TTL, probe_interval / 2)


def request(store: Store, budget: Budget, ldns: str, node: str) -> bool:
    """Ask the group to probe *ldns*, unless a request is live or it may not be probed."""
    if store.get(request_key(ldns)) is not None or budget.allowed(ldns) is not None:
        return False  # (the cheaper test first: a client that keeps asking finds its request)
    store.put(request_key(ldns), {"by": node}, ttl=request_ttl(budget.prober.probe_interval))
    return True


class ProbeScheduler(Service):
    def __init__(
        self,
        store: Store,
        measurements: Measurements,
        budget: Budget,
        prober: Prober,
        node: str,
        datacenter: str,
        reactor: Any,
    ):
        self.store = store
        self.measurements = measurements
        self.budget = budget
        self.prober = prober
        self.node = node
        self.datacenter = datacenter
        self.reactor = reactor
        self.pending: deque[str] = deque()
        self.queued: set[str] = set()
        self._wake: Any = None
        self.stats = ProbeStats()
        store.subscribe(self._changed)

    def _changed(self, record: Record) -> None:
        fresh = record.key.startswith(REQUEST) and record.value is not None and record.live(self.store.clock())
        if fresh and self.running:
            self.want(record.key[len(REQUEST) :])

    def want(self, ldns: str) -> None:
        """Probe *ldns* soon, unless there is no need or no permission."""
        if ldns in self.queued or len(self.queued) >= MAX_PENDING:
            return
        if self.budget.allowed(ldns) is not None:
            return
        mine = self._mine(ldns)
        if mine is not None:
            if mine.failures == 0 and mine.age < self.measurements.prober.probe_interval / 2:
                return  # measured lately
            if mine.failures and mine.age < mine.backoff():
                return  # it does not answer: wait longer each time
        self.queued.add(ldns)
        self.pending.append(ldns)
        self._drain()

    def _mine(self, ldns: str) -> Any:
        record = self.store.get(path_key(ldns, self.datacenter))
        return None if record is None else from_record(record, self.store.clock())

    def _drain(self) -> None:
        self._wake = None
        while self.pending and self.running and self.budget.take():
            ldns = self.pending.popleft()
            self._start(ldns)
        if self.pending and self.running and self._wake is None:
            self._wake = self.reactor.callLater(max(0.01, self.budget.next_start()), self._drain)

    def _start(self, ldns: str) -> None:
        self.stats.probes += 1
        d = self.prober.probe(ipaddress.ip_address(ldns))

        def measured(sample: Sample) -> None:
            self._record(ldns, sample)

        def finished(result: Any) -> None:
            self.queued.discard(ldns)
            self.budget.done()
            if self.pending:
                self._drain()

        d.addCallback(measured)
        d.addErrback(lambda f: log.failure("probing {ldns} failed", f, ldns=ldns))
        d.addBoth(finished)

    def _record(self, ldns: str, sample: Sample) -> None:
        previous = self._mine(ldns)
        path = updated(
            previous, sample.ok, sample.rtt_us, sample.hops, sample.protocol, self.node, ldns, self.datacenter
        )
        if sample.ok:
            self.stats.rtt.observe(sample.rtt_us / 1e6)
        else:
            self.stats.failures += 1
        self.store.put(path_key(ldns, self.datacenter), path.value(), ttl=self.measurements.prober.inactive_ldns_ttl)

    def reconfigure(self, measurements: Measurements, budget: Budget) -> None:
        """New prober settings (a reload); probes in flight finish under the old budget."""
        in_flight = self.budget.in_flight
        self.measurements = measurements
        self.budget = budget
        self.budget.in_flight = in_flight

    def stopService(self) -> None:
        super().stopService()
        if self._wake is not None and self._wake.active():
            self._wake.cancel()
        self._wake = None
        self.prober.close()
