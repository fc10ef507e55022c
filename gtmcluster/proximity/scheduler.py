"""Probing on request: every node probes each requested LDNS from its own data center.

A probe request is a record ``probe/<ldns>`` (one at a time per LDNS across the group: a
node does not publish one while another is live). Every node that sees it probes the LDNS
unless its own path is fresh (younger than half the probe interval) or backing off after
failures, within the node's rate and in-flight limits, and writes what it measured as its
data center's path record.

Requests wait in one queue per origin (the node that filed them), and the queues take
turns: a member that floods the group with requests (a bug, or a stolen certificate) gets
its turn like every other member, so the requests of the others are still probed at once,
and at most as many of its requests wait as this node can probe while a request lives
(`queue_limit`: older ones would be stale by their turn); the rest are ignored (counted,
and logged once per flood). The node's own `max_per_second` and `max_in_flight` bound the
probes all origins together start.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from typing import Any, Protocol

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from gtmcluster.proximity.budget import Budget, queue_limit, request_ttl
from gtmcluster.proximity.table import Measurements, from_record, updated
from gtmcluster.runtime.stats import ProbeStats
from gtmcluster.state import keys
from gtmcluster.state.record import Record
from gtmcluster.state.schema import KINDS
from gtmcluster.state.store import Store

log = Logger()

#: paths of its own a node keeps at most (a full table of 1,000,000 LDNSes fits)
PATH_LIMIT = KINDS["path"].writer_limit


class Sample(Protocol):
    ok: bool
    rtt_us: int
    hops: int
    protocol: str
    reason: str


class Prober(Protocol):
    def probe(self, ldns: ipaddress.IPv4Address | ipaddress.IPv6Address) -> Deferred[Any]: ...

    def close(self) -> None: ...


def request(store: Store, budget: Budget, ldns: str, node: str) -> bool:
    """Ask the group to probe *ldns*, unless a request is live, it may not be probed, or
    this node has filed as many requests as it can probe (`Budget.file`: then the request
    is dropped and counted in `Budget.unfiled`; the LDNS asks again later)."""
    if store.get(keys.probe_request(ldns)) is not None or budget.allowed(ldns) is not None:
        return False  # (the cheaper test first: a client that keeps asking finds its request)
    if not budget.file():
        return False
    store.put(keys.probe_request(ldns), {"by": node}, ttl=request_ttl(budget.prober.probe_interval))
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
        reactor: IReactorTime,
    ):
        self.store = store
        self.measurements = measurements
        self.budget = budget
        self.prober = prober
        self.node = node
        self.datacenter = datacenter
        self.reactor = reactor
        #: per origin, the LDNSes waiting; the dict's order is the order of turns
        self.pending: dict[str, deque[str]] = {}
        self.queued: set[str] = set()
        self._flooding: set[str] = set()  # origins whose queue is full (logged once)
        self._full = False  # this node holds `PATH_LIMIT` paths of its own (logged once)
        self._wake: Any = None
        #: requests heard this turn, taken on the next (see `_changed`)
        self._incoming: list[tuple[str, str]] = []
        self._taking: Any = None
        self.stats = ProbeStats()
        store.subscribe(self._changed)

    def _changed(self, record: Record) -> None:
        """A request record: noted, and taken on the next reactor turn. The record may have
        been written while answering a query (an unknown LDNS asked): the probe's sockets
        are not opened inside the datagram handler."""
        fresh = record.key.startswith(keys.PROBE) and record.value is not None and record.live(self.store.clock())
        if fresh and self.running:
            self._incoming.append((record.key[len(keys.PROBE) :], record.origin))
            if self._taking is None:
                self._taking = self.reactor.callLater(0, self._take)

    def _take(self) -> None:
        self._taking = None
        incoming, self._incoming = self._incoming, []
        for ldns, origin in incoming:
            self.want(ldns, origin)

    def want(self, ldns: str, origin: str | None = None) -> None:
        """Probe *ldns* soon, unless there is no need or no permission. *origin* is the
        member that asked (default: this node); each has its own queue."""
        origin = origin or self.node
        if ldns in self.queued:
            return
        if self.budget.allowed(ldns) is not None:
            return
        mine = self._mine(ldns)
        if mine is not None:
            if mine.failures == 0 and mine.age < self.measurements.prober.probe_interval / 2:
                return  # measured lately
            if mine.failures and mine.age < mine.backoff():
                return  # it does not answer: wait longer each time
        queue = self.pending.get(origin)
        limit = queue_limit(self.budget.prober)
        if queue is not None and len(queue) >= limit:
            self.stats.ignored += 1
            if origin not in self._flooding:
                self._flooding.add(origin)
                log.warn(
                    "{origin} asks for more than {limit} probes at once: ignoring its further requests "
                    "until they are done",
                    origin=origin,
                    limit=limit,
                    event="probe_flood",
                )
            return
        self.queued.add(ldns)
        if queue is None:
            queue = self.pending[origin] = deque()
        queue.append(ldns)
        self._drain()

    def _next(self) -> str:
        """The first LDNS of the origin whose turn it is; that origin goes to the back."""
        origin = next(iter(self.pending))
        queue = self.pending.pop(origin)
        ldns = queue.popleft()
        if queue:
            self.pending[origin] = queue
        else:
            self._flooding.discard(origin)
        return ldns

    def _mine(self, ldns: str) -> Any:
        record = self.store.get(keys.path(ldns, self.datacenter))
        return None if record is None else from_record(record, self.store.clock())

    def _drain(self) -> None:
        self._wake = None
        while self.pending and self.running and self.budget.take():
            self._start(self._next())
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
        key = keys.path(ldns, self.datacenter)
        if self._table_full(key):
            return
        self.store.put(key, path.value(), ttl=self.measurements.prober.inactive_ldns_ttl)

    def _table_full(self, key: str) -> bool:
        """Whether this node holds as many paths of its own as it writes (a new LDNS's path
        is then not kept, until older ones expire): its peers take at most a cap of them
        from one member (state.schema), and this keeps the node well under it."""
        if self.store.held_by(self.node, "path") < PATH_LIMIT:
            self._full = False
            return False
        held = self.store.raw(key)
        if held is not None and held.origin == self.node:
            return False  # an update of one it holds
        self.stats.not_kept += 1
        if not self._full:
            self._full = True
            log.warn(
                "this node holds {limit} paths of its own, the most it writes: paths to new LDNSes are not "
                "kept until older ones expire (prober.inactive_ldns_ttl)",
                limit=PATH_LIMIT,
                event="path_table_full",
            )
        return True

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
        if self._taking is not None and self._taking.active():
            self._taking.cancel()
        self._taking = None
        self._incoming = []
        self.prober.close()
