"""The feed between a node and its answering workers (AMP over a Unix socket pair).

The node owns the state; a worker holds a copy to decide from, and answers UDP queries on
its own sockets. So the node sends:

    Records     a batch of records (all of them when a worker connects, then every change)
    State       whose health verdicts count (the node and its connected peers), and
                whether measured methods may decide yet (ready)
    Reload      read the config file again (the node has checked it already)

and a worker sends back:

    Carry       what its decisions asked for: persistence records to keep, LDNSes and
                client subnets to probe; and the one-use names it answered
                (`dns.rumnames`: which LDNS asked for which id); the node writes them (its
                records come back with the next batch)
    Tally       its query counters since the last tally, for the node's /metrics

Records travel in the peer codec's batches (the workers and the node share one clock).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from twisted.internet.protocol import connectionDone
from twisted.protocols import amp
from twisted.python.failure import Failure

from gtmcluster.lb.trace import SOURCES
from gtmcluster.runtime.stats import QueryStats
from gtmcluster.state.persistence import PersistKey, PersistRecord


class Records(amp.Command):
    arguments = [(b"batch", amp.String())]
    response = []


class State(amp.Command):
    arguments = [(b"observers", amp.ListOf(amp.Unicode())), (b"ready", amp.Boolean())]
    response = []


class Reload(amp.Command):
    #: own_dir: the node's own base folder when *path* is a bundle's (`config.load.build`)
    arguments = [(b"path", amp.Unicode()), (b"own_dir", amp.Unicode(optional=True))]
    response = [(b"problems", amp.ListOf(amp.Unicode()))]


class Carry(amp.Command):
    arguments = [(b"ops", amp.String())]
    response = []
    requiresAnswer = False


class Tally(amp.Command):
    arguments = [(b"counts", amp.String())]
    response = []
    requiresAnswer = False


# -- what decisions ask for, as JSON -------------------------------------------------------


def carry_ops(persist: PersistRecord | None, probe: str | None, subnet: str | None = None) -> bytes:
    ops: list[list[Any]] = []
    if persist is not None:
        k = persist.key
        ops.append(
            ["persist", k.wideip, k.qtype, k.network, k.resolver, persist.pool, list(persist.members), persist.ttl]
        )
    if probe is not None:
        ops.append(["probe", probe])
    if subnet is not None:
        ops.append(["subnet", subnet])
    return json.dumps(ops).encode()


class RumId(NamedTuple):
    """A one-use name a worker answered (`dns.rumnames.Seen`'s arguments)."""

    ident: str
    ldns: str
    ecs: str


def rum_id_ops(ident: str, ldns: str, ecs: str) -> bytes:
    return json.dumps([["rumid", ident, ldns, ecs]]).encode()


#: what a Carry asks for: a (persistence record, LDNS probe, client subnet probe), one of
#: them set, or a one-use name answered
Wanted = tuple[PersistRecord | None, str | None, str | None] | RumId


def read_ops(data: bytes, now: float) -> list[Wanted]:
    """What a Carry asks for (`Wanted`). Raises ValueError if malformed."""
    out: list[Wanted] = []
    for op in json.loads(data):
        if op[0] == "persist":
            _, wideip, qtype, network, resolver, pool, members, ttl = op
            key = PersistKey(str(wideip), int(qtype), str(network), str(resolver))
            out.append((PersistRecord(key, str(pool), tuple(str(m) for m in members), now, float(ttl)), None, None))
        elif op[0] == "probe":
            out.append((None, str(op[1]), None))
        elif op[0] == "subnet":
            out.append((None, None, str(op[1])))
        elif op[0] == "rumid":
            _, ident, ldns, ecs = op
            out.append(RumId(str(ident), str(ldns), str(ecs)))
        else:
            raise ValueError(f"unknown operation {op[0]!r}")
    return out


# -- counters, as JSON -------------------------------------------------------------------------

#: the proximity sources a worker's counts may name (`lb.trace.Decision.proximity`)
PROXIMITY_SOURCES = frozenset((*SOURCES, ""))


def take_counts(stats: QueryStats) -> bytes:
    """The counters of *stats*, which start again from zero."""
    counts = {
        "queries": [[*key, n] for key, n in stats.queries.items()],
        "decisions": [stats.decisions.counts, stats.decisions.total, stats.decisions.count],
        "kept": [stats.kept_hits, stats.kept_misses],
        "rate_limited": [stats.rate_dropped, stats.rate_slipped],
        "answered": [[*key[:4], list(key[4]), n] for key, n in stats.answered.items()],
        "query_log": [stats.query_log_written, stats.query_log_dropped, stats.query_log_failed],
        "rum_ids": [stats.rum_ids_recorded, stats.rum_ids_rate],
        "proximity": dict(stats.proximity),
    }
    stats.queries.clear()
    stats.answered.clear()
    d = stats.decisions
    d.counts = [0] * len(d.counts)
    d.total = 0.0
    d.count = 0
    stats.kept_hits = stats.kept_misses = 0
    stats.rate_dropped = stats.rate_slipped = 0
    stats.query_log_written = stats.query_log_dropped = stats.query_log_failed = 0
    stats.rum_ids_recorded = stats.rum_ids_rate = 0
    stats.proximity.clear()
    return json.dumps(counts).encode()


def add_counts(stats: QueryStats, data: bytes) -> int:
    """Add a worker's counters to *stats*; the queries it answered. Raises ValueError."""
    counts = json.loads(data)
    answered = 0
    for *key, n in counts["queries"]:
        stats.queries[(str(key[0]), str(key[1]), str(key[2]), str(key[3]))] += int(n)
        answered += int(n)
    buckets, total, count = counts["decisions"]
    d = stats.decisions
    if len(buckets) != len(d.counts):
        raise ValueError("decision buckets differ")
    d.counts = [a + int(b) for a, b in zip(d.counts, buckets, strict=True)]
    d.total += float(total)
    d.count += int(count)
    hits, misses = counts["kept"]
    stats.kept_hits += int(hits)
    stats.kept_misses += int(misses)
    dropped, slipped = counts.get("rate_limited", (0, 0))
    stats.rate_dropped += int(dropped)
    stats.rate_slipped += int(slipped)
    written, dropped, failed = counts.get("query_log", (0, 0, 0))
    stats.query_log_written += int(written)
    stats.query_log_dropped += int(dropped)
    stats.query_log_failed += int(failed)
    recorded, over = counts.get("rum_ids", (0, 0))
    stats.rum_ids_recorded += int(recorded)
    stats.rum_ids_rate += int(over)
    for source, n in dict(counts.get("proximity", {})).items():
        if source in PROXIMITY_SOURCES:  # (a label: never one a worker's bytes make up)
            stats.proximity[source] += int(n)
    for wideip, pool, slot, method, members, n in counts.get("answered", ()):
        stats.answered[(str(wideip), str(pool), str(slot), str(method), tuple(str(m) for m in members))] += int(n)
    return answered


class WorkerSide(amp.AMP):
    """The worker's end: applies what the node sends."""

    def __init__(
        self,
        records: Callable[[bytes], object],
        state: Callable[[list[str], bool], object],
        reload: Callable[[str, str | None], Any],
        lost: Callable[[], object],
    ):
        super().__init__()
        self._records = records
        self._state = state
        self._reload = reload
        self._lost = lost

    @Records.responder
    def on_records(self, batch: bytes) -> dict[str, Any]:
        self._records(batch)
        return {}

    @State.responder
    def on_state(self, observers: list[str], ready: bool) -> dict[str, Any]:
        self._state(observers, ready)
        return {}

    @Reload.responder
    def on_reload(self, path: str, own_dir: str | None = None) -> Any:
        return self._reload(path, own_dir or None)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        super().connectionLost(reason)
        self._lost()


class NodeSide(amp.AMP):
    """The node's end of one worker's feed: takes what the worker sends."""

    def __init__(self, carry: Callable[[bytes], object], tally: Callable[[bytes], object]):
        super().__init__()
        self._carry = carry
        self._tally = tally
        self.on_connect: Callable[[NodeSide], object] | None = None
        self.on_lost: Callable[[NodeSide], object] | None = None

    def connectionMade(self) -> None:
        super().connectionMade()
        if self.on_connect is not None:
            self.on_connect(self)

    @Carry.responder
    def on_carry(self, ops: bytes) -> dict[str, Any]:
        self._carry(ops)
        return {}

    @Tally.responder
    def on_tally(self, counts: bytes) -> dict[str, Any]:
        self._tally(counts)
        return {}

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        super().connectionLost(reason)
        if self.on_lost is not None:
            self.on_lost(self)
