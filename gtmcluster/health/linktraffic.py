"""Reads the traffic of this data center's links and shares it with the sync group.

Only the members in a link's data center read its traffic source (the router is theirs;
the others may not even reach it). Every `traffic.interval` each reads the link's counters
(`probe.linkrate.TrafficReader`), and from the second reading on writes the rate as the
record ``traffic/link/<link>`` (`lb.linkload`), with a TTL of `TTL_INTERVALS`
intervals (at least `MIN_TTL`): the sync group carries it to every member, so all see the
same figure, and one nobody renews (its readers stopped, the router unreachable) goes.
A reading still in flight when the next is due skips that round; a failed reading is
logged when the source's state changes (not every round), and the next one counts from
the last good reading.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.application.service import Service
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from gtmcluster.config.model import Config, Link
from gtmcluster.config.monitoring import HttpCounterSource, TrafficSource
from gtmcluster.lb import linkload
from gtmcluster.probe.httpcounters import HttpCounterReader
from gtmcluster.probe.linkrate import CounterRate, Counters, TrafficReader
from gtmcluster.probe.snmp import SnmpClient, SnmpReader
from gtmcluster.state import keys
from gtmcluster.state.schema import shorten
from gtmcluster.state.store import Store

log = Logger()

#: a figure lives this many intervals (two missed readings in a row keep it)
TTL_INTERVALS = 3
MIN_TTL = 30.0

ReaderFactory = Callable[[TrafficSource], TrafficReader]


@dataclass(slots=True)
class _Poll:
    link: Link
    reader: TrafficReader
    rate: CounterRate = field(default_factory=CounterRate)
    loop: LoopingCall | None = None
    busy: bool = False
    failing: str = ""  # the last failure's reason, "" while readings succeed
    readings: int = 0
    failures: int = 0


class LinkTrafficPoller(Service):
    """Polls the traffic sources of the links in `datacenter` (this node's)."""

    def __init__(
        self,
        config: Config,
        store: Store,
        clock: IReactorTime,
        node: str,
        datacenter: str,
        readers: ReaderFactory,
        close: Callable[[], None] | None = None,
    ):
        #: run when the service stops, after its readings (the readers' shared client)
        self.close = close
        self.store = store
        self.clock = clock
        self.node = node
        self.datacenter = datacenter
        self.readers = readers
        self.polls: dict[str, _Poll] = {}
        self._use(config)

    def _ours(self, config: Config) -> dict[str, Link]:
        return {
            name: link
            for name, link in config.links.items()
            if link.traffic is not None and link.datacenter == self.datacenter
        }

    def _use(self, config: Config) -> None:
        for name, link in self._ours(config).items():
            assert link.traffic is not None
            self.polls[name] = _Poll(link, self.readers(link.traffic))

    def startService(self) -> None:
        super().startService()
        for poll in self.polls.values():
            self._start(poll)

    def stopService(self) -> None:
        for poll in self.polls.values():
            self._stop(poll)
        super().stopService()
        if self.close is not None:
            self.close()

    def prepare(self, config: Config) -> Callable[[], None]:
        """The readers *config* needs, made now; the switch puts them in use: a link whose
        source and bandwidth are unchanged keeps polling (and its last reading)."""
        wanted = self._ours(config)
        made: dict[str, _Poll] = {}
        for name, link in wanted.items():
            old = self.polls.get(name)
            if old is None or old.link.traffic != link.traffic:
                assert link.traffic is not None
                made[name] = _Poll(link, self.readers(link.traffic))

        def switch() -> None:
            for name in list(self.polls):
                if name not in wanted or name in made:
                    self._stop(self.polls.pop(name))
            for name, link in wanted.items():
                if name in self.polls:
                    self.polls[name].link = link
            self.polls.update(made)
            if self.running:
                for name in made:
                    self._start(self.polls[name])

        return switch

    def _start(self, poll: _Poll) -> None:
        assert poll.link.traffic is not None
        loop = poll.loop = LoopingCall(self._read, poll)
        loop.clock = self.clock
        loop.start(poll.link.traffic.interval, now=True)

    def _stop(self, poll: _Poll) -> None:
        if poll.loop is not None and poll.loop.running:
            poll.loop.stop()
        poll.loop = None

    def _read(self, poll: _Poll) -> None:
        if poll.busy or poll.loop is None:
            return
        poll.busy = True
        d = poll.reader.read()
        d.addCallbacks(self._got, self._failed, callbackArgs=(poll,), errbackArgs=(poll,))
        d.addBoth(self._done, poll)

    def _done(self, _: object, poll: _Poll) -> None:
        poll.busy = False

    def _got(self, counters: Counters, poll: _Poll) -> None:
        poll.readings += 1
        if poll.failing:
            log.info(
                "link {link} traffic readable again from {source}",
                link=poll.link.name,
                source=poll.reader.describe(),
                event="link_traffic_up",
            )
            poll.failing = ""
        if poll.loop is None:  # stopped while the reading was in flight
            return
        rate = poll.rate.update(counters, self.clock.seconds())
        if rate is None:
            return
        traffic = poll.link.traffic
        assert traffic is not None
        load = linkload.LinkLoad(rate.bps_in, rate.bps_out, self.node)
        ttl = max(MIN_TTL, TTL_INTERVALS * traffic.interval)
        self.store.put(keys.traffic(poll.link.name), load.value(), ttl)

    def _failed(self, failure: Failure, poll: _Poll) -> None:
        poll.failures += 1
        reason = shorten(str(failure.value) or type(failure.value).__name__, 200)
        if reason != poll.failing:
            log.warn(
                "link {link} traffic not read from {source}: {reason}",
                link=poll.link.name,
                source=poll.reader.describe(),
                reason=reason,
                event="link_traffic_failed",
            )
        poll.failing = reason


def traffic_poller(config: Config, store: Store, reactor: Any, node: str, datacenter: str) -> LinkTrafficPoller:
    """The node's poller: links read by SNMP through one `SnmpClient` (its thread starts at
    the first SNMP reading, if this data center has such a link), closed when it stops; and
    links read over HTTP (`probe.httpcounters`)."""
    client = SnmpClient()

    def reader(t: TrafficSource) -> TrafficReader:
        if isinstance(t.source, HttpCounterSource):
            return HttpCounterReader(reactor, t.source, t.timeout)
        return SnmpReader(reactor, client, t.source, t.timeout)

    return LinkTrafficPoller(config, store, reactor, node, datacenter, reader, client.close)
