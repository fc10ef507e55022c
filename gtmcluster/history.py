"""The node's last hour, in memory, for the dashboard's graphs (``GET /api/v1/history``).

Every `INTERVAL` seconds `History` takes one sample from counters the node keeps anyway
(`gtmcluster.runtime.stats`): queries per second per wide IP, and wide IP answers per second per
data center. Between samples it hears of two more things, each in O(1) per change:

- path records (``path/<ldns>/<dc>``, measured here or by a peer): the newest `RTT_WINDOW`
  smoothed RTTs per data center; a sample keeps their median, in milliseconds (the median
  RTT of the most recently measured paths to that data center);
- events for the timeline: virtual servers becoming available, unavailable or draining
  (the health tracker's standing changes: failovers, and failbacks) and admin changes at
  every level (``admin/...`` records, whoever wrote them).

Memory is bounded: `POINTS` samples (an hour), each holding at most `TOP_PER_SAMPLE` wide
IPs (the busiest; the rest summed as `OTHER`), and `MAX_EVENTS` events. A sample costs in
proportion to the wide IPs that have had queries and the distinct answers given, not to
the size of the config.
"""

from __future__ import annotations

import heapq
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gtmcluster.proximity.table import PathValue
from gtmcluster.runtime import slices
from gtmcluster.runtime.stats import Tally
from gtmcluster.state import admin, keys

if TYPE_CHECKING:
    from gtmcluster.config.model import Config
    from gtmcluster.node import Node
    from gtmcluster.state.record import Record

log = Logger()

#: seconds between samples
INTERVAL = 10.0
#: samples kept: one hour
POINTS = 360
#: wide IPs kept per sample (the busiest); the others are summed as OTHER
TOP_PER_SAMPLE = 20
#: wide IP series that /api/v1/history shows (the busiest over the hour)
SHOWN = 10
#: the name of the series of every wide IP not shown
OTHER = "(other)"
#: RTTs kept per data center (the newest path records)
RTT_WINDOW = 256
#: timeline events kept
MAX_EVENTS = 500
#: servers named per health change; more make one summary event
EVENTS_PER_CHANGE = 20
#: counters looked at between two checks of the time a sample's turn has taken
STEP = 500


@dataclass(frozen=True)
class Sample:
    at: float
    #: queries per second by wide IP (at most TOP_PER_SAMPLE of them, plus OTHER)
    queries: dict[str, float]
    #: wide IP answers per second by data center
    answers: dict[str, float]
    #: median RTT (ms) of the newest measured paths, by data center
    rtt_ms: dict[str, float]


@dataclass(frozen=True)
class Event:
    at: float
    #: "failover" (a virtual server's availability changed) or "admin"
    kind: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "kind": self.kind, "text": self.text}


class History(Service):
    """The node's samples and events of the last hour (see the module's docstring)."""

    def __init__(
        self,
        node: Node,
        clock: Any,
        interval: float = INTERVAL,
        points: int = POINTS,
        max_events: int = MAX_EVENTS,
    ) -> None:
        self.node = node
        self.clock = clock
        self.interval = interval
        self.points = points
        self.samples: deque[Sample] = deque(maxlen=points)
        self.events: deque[Event] = deque(maxlen=max_events)
        self._rtts: dict[str, deque[int]] = {}
        #: the counters at the previous sample (None before the first)
        self._queries: dict[str, int] | None = None
        self._answered: dict[Tally, int] = {}
        #: the data centers of each answer's servers, under `_config`
        self._config: Config | None = None
        self._datacenters_of: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._last = 0.0
        self._loop: LoopingCall | None = None
        self._hearing = False

    # -- the service ---------------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        if not self._hearing:  # (the store and the tracker keep their listeners for good)
            self._hearing = True
            self.node.store.subscribe(self._record_changed)
            self.node.health.standing_listeners.append(self._standing_changed)
        self._loop = LoopingCall(self.sample)
        self._loop.clock = self.clock
        self._loop.start(self.interval, now=True)

    def stopService(self) -> None:
        super().stopService()
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None

    # -- hearing of changes ----------------------------------------------------------------------

    def _record_changed(self, record: Record) -> None:
        if not self.running:
            return
        key = record.key
        if key.startswith(keys.PATH):
            self._path(key, record.value)
        elif key.startswith(keys.ADMIN):
            self._admin(key, record.value)

    def _path(self, key: str, value: Any) -> None:
        if type(value) is PathValue:
            rtt = value.rtt
        else:
            try:
                rtt = int(value["rtt"])
            except (KeyError, TypeError, ValueError):
                return
        if rtt <= 0:  # an LDNS that never answered
            return
        parts = keys.path_parts(key)
        if parts is None:
            return
        datacenter = parts[1]
        window = self._rtts.get(datacenter)
        if window is None:
            if len(self._rtts) >= max(8, 2 * len(self.node.config.datacenters)):
                return  # a name no config holds (a bad peer): not a series of its own
            window = self._rtts[datacenter] = deque(maxlen=RTT_WINDOW)
        window.append(rtt)

    def _admin(self, key: str, value: Any) -> None:
        parsed = admin.parse_key(key)
        if parsed is None:
            return
        level, name = parsed
        state = admin.from_value(level, name, value)
        at = self.clock.seconds()
        if state is None:
            text = f"{admin.LEVEL_WORDS.get(level, level)} {name}: admin state cleared"
        else:
            text = state.describe()
            if state.at is not None and state.at <= at:  # when the operator made it (on any node)
                at = state.at
        self.events.append(Event(at, "admin", text))

    def _standing_changed(self, servers: list[str]) -> None:
        if not self.running:
            return
        now = self.clock.seconds()
        statuses = self.node.health.snapshot.vs
        for name in servers[:EVENTS_PER_CHANGE]:
            status = statuses.get(name)
            if status is None:
                continue
            word = "available" if status.available else "draining" if status.serving else "unavailable"
            reason = f": {status.reason}" if status.reason else ""
            self.events.append(Event(now, "failover", f"virtual server {name} {word}{reason}"))
        if len(servers) > EVENTS_PER_CHANGE:
            more = len(servers) - EVENTS_PER_CHANGE
            self.events.append(Event(now, "failover", f"{more} more virtual servers changed"))

    # -- sampling -----------------------------------------------------------------------------

    def sample(self) -> Deferred[None]:
        """Take one sample: rates since the previous one (none on the first). With many
        wide IPs queried, a few milliseconds per reactor turn (`gtmcluster.runtime.slices`)."""
        return slices.run(self.sample_steps(), self.clock)

    def sample_steps(self) -> slices.Steps[None]:
        now = self.clock.seconds()
        stats = self.node.stats
        # the counters as they are now (copied at once: answers go on counting meanwhile)
        counted = list(stats.queries.items())
        answered = dict(stats.answered)
        yield
        totals: dict[str, int] = {}
        for i, ((wideip, _qtype, _rcode, _method), n) in enumerate(counted):
            if wideip:
                totals[wideip] = totals.get(wideip, 0) + n
            if i % STEP == STEP - 1:
                yield
        previous, self._queries = self._queries, totals
        previous_answered, self._answered = self._answered, answered
        elapsed, self._last = now - self._last, now
        rtt = {dc: statistics.median(window) / 1000.0 for dc, window in self._rtts.items() if window}
        if previous is None or elapsed <= 0:
            return
        rates = {}
        for i, (wideip, n) in enumerate(totals.items()):
            delta = n - previous.get(wideip, 0)
            if delta > 0:
                rates[wideip] = delta / elapsed
            if i % STEP == STEP - 1:
                yield
        yield
        if len(rates) > TOP_PER_SAMPLE:
            top = heapq.nlargest(TOP_PER_SAMPLE, rates.items(), key=lambda item: item[1])
            other = sum(rates.values()) - sum(rate for _, rate in top)
            rates = dict(top)
            rates[OTHER] = other
        # answers per second by data center: an answer counts once for each data center
        # of its virtual servers
        config = self.node.config
        if config is not self._config:  # (a reload may move a server)
            self._config, self._datacenters_of = config, {}
        datacenters_of = self._datacenters_of
        servers = config.virtual_servers
        per_dc: dict[str, float] = {}
        for i, (key, n) in enumerate(answered.items()):
            delta = n - previous_answered.get(key, 0)
            members = key[4]
            if delta > 0:
                dcs = datacenters_of.get(members)
                if dcs is None:
                    dcs = datacenters_of[members] = tuple({servers[m].datacenter for m in members if m in servers})
                for dc in dcs:
                    per_dc[dc] = per_dc.get(dc, 0.0) + delta / elapsed
            if i % STEP == STEP - 1:
                yield
        self.samples.append(Sample(now, rates, per_dc, rtt))

    # -- reading ------------------------------------------------------------------------------

    def to_json(self, shown: int = SHOWN) -> dict[str, Any]:
        """The hour as aligned series: ``times`` and, per series, one value per time (a
        wide IP or data center without answers in a sample: 0; no RTT known yet: null)."""
        now = self.clock.seconds()
        samples = list(self.samples)
        times = [s.at for s in samples]
        busiest: dict[str, float] = {}
        for s in samples:
            for wideip, rate in s.queries.items():
                if wideip != OTHER:
                    busiest[wideip] = busiest.get(wideip, 0.0) + rate
        names = [n for n, _ in heapq.nlargest(shown, busiest.items(), key=lambda item: item[1])]
        queries = {n: [round(s.queries.get(n, 0.0), 3) for s in samples] for n in names}
        if len(busiest) > len(names) or any(OTHER in s.queries for s in samples):
            kept = set(names)
            queries[OTHER] = [round(sum(r for n, r in s.queries.items() if n not in kept), 3) for s in samples]
        datacenters = sorted(_keys(s.answers for s in samples) | set(self.node.config.datacenters))
        answers = {dc: [round(s.answers.get(dc, 0.0), 3) for s in samples] for dc in datacenters}
        rtt_dcs = sorted(_keys(s.rtt_ms for s in samples))
        rtt = {dc: [_rounded(s.rtt_ms.get(dc)) for s in samples] for dc in rtt_dcs}
        since = now - self.interval * self.points
        return {
            "node": self.node.member.name,
            "now": now,
            "interval": self.interval,
            "window": self.interval * self.points,
            "times": times,
            "queries_per_second": queries,
            "wideips_with_queries": len(busiest),
            "answers_per_second": answers,
            "rtt_ms": rtt,
            "rtt_summary": f"median smoothed RTT of the {RTT_WINDOW} most recently measured paths per data center",
            "events": [e.to_json() for e in self.events if e.at >= since],
        }


def _keys(dicts: Iterable[dict[str, float]]) -> set[str]:
    out: set[str] = set()
    for d in dicts:
        out.update(d)
    return out


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
