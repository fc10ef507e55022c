"""A link's traffic: rates from 64-bit counters (wraps and resets), and the poller that reads
this data center's links and writes ``traffic/link/<link>`` records (fake clock, a recording
reader standing in for the router)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.logger import capturedLogs

from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.config.monitoring import SnmpSource, TrafficSource
from gtmcluster.health.linktraffic import MIN_TTL, LinkTrafficPoller
from gtmcluster.lb import linkload
from gtmcluster.probe.linkrate import COUNTER64, MAX_LINE_BPS, CounterRate, Counters, Rate, delta, rate
from gtmcluster.state import keys, schema
from gtmcluster.state.store import Store
from tests.support import configs
from tests.unit.test_config_links import linked

counter = st.integers(0, COUNTER64 - 1)
seconds = st.floats(0.5, 3600)


@given(counter, st.integers(0, 10**13), seconds)
def test_a_counter_that_grew_or_wrapped_gives_what_was_counted(start: int, counted: int, interval: float) -> None:
    """From any value, octets counted (at a rate an interface can reach) come back exactly,
    whether or not the counter passed 2**64 on the way."""
    if counted * 8 > MAX_LINE_BPS * interval:
        counted = int(MAX_LINE_BPS * interval / 8)
    end = (start + counted) % COUNTER64
    assert delta(start, end, interval) == counted
    bps = counted * 8 / interval
    assert rate(Counters(start, start), Counters(end, end), interval) == Rate(bps, bps)


@given(counter, counter, seconds)
def test_a_counter_gone_back_beyond_a_plausible_wrap_is_a_reset(old: int, new: int, interval: float) -> None:
    """A lower value is a wrap only if counting up to 2**64 and on to it fits the fastest
    line in the interval; otherwise the agent restarted (or the counter was cleared)."""
    if new >= old:
        assert delta(old, new, interval) == new - old
        return
    wrapped = new + COUNTER64 - old
    expected = wrapped if wrapped * 8 <= MAX_LINE_BPS * interval else None
    assert delta(old, new, interval) == expected


def test_rates_each_way_and_the_busier_direction() -> None:
    r = rate(Counters(1000, 5000), Counters(1000 + 1_250_000, 5000 + 250_000), 10.0)
    assert r == Rate(1_000_000.0, 200_000.0)
    assert linkload.LinkLoad(r.bps_in, r.bps_out).bps == 1_000_000.0
    # a wrap of the in counter: 2**64 - 100 -> 900 is 1000 octets
    assert rate(Counters(COUNTER64 - 100, 0), Counters(900, 0), 8.0) == Rate(1000.0, 0.0)
    assert rate(Counters(0, 0), Counters(10, 10), 0.0) is None  # no time passed


@given(st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 10**9)), min_size=2, max_size=20))
def test_counter_rate_restarts_after_a_reset(steps: list[tuple[int, int]]) -> None:
    """Reading by reading: the first gives nothing, each later one the rate since the last;
    after an agent restart (counters back near 0) that round gives nothing and the next
    counts from the new values."""
    tracker = CounterRate()
    at, value_in, value_out = 0.0, 10**15, 10**15
    assert tracker.update(Counters(value_in, value_out), at) is None
    for grow_in, grow_out in steps:
        at += 10
        value_in, value_out = value_in + grow_in, value_out + grow_out
        assert tracker.update(Counters(value_in, value_out), at) == Rate(grow_in * 8 / 10, grow_out * 8 / 10)
    at += 10
    assert tracker.update(Counters(5, 5), at) is None  # restarted
    assert tracker.update(Counters(5 + 125, 5), at + 10) == Rate(100.0, 0.0)


# -- the poller -------------------------------------------------------------------------------


class FakeRouter:
    """Readers whose answers the test gives: one pending Deferred per read."""

    def __init__(self) -> None:
        self.pending: dict[str, list[defer.Deferred[Counters]]] = {}
        self.made: list[TrafficSource] = []

    def reader(self, source: TrafficSource) -> FakeReader:
        self.made.append(source)
        assert isinstance(source.source, SnmpSource)
        return FakeReader(self, str(source.source.if_index))


class FakeReader:
    def __init__(self, router: FakeRouter, name: str) -> None:
        self.router = router
        self.name = name

    def describe(self) -> str:
        return f"fake ifIndex {self.name}"

    def read(self) -> defer.Deferred[Counters]:
        d: defer.Deferred[Counters] = defer.Deferred()
        self.router.pending.setdefault(self.name, []).append(d)
        return d

    def answer(self, counters: Counters | Exception) -> None:
        d = self.router.pending[self.name].pop(0)
        if isinstance(counters, Exception):
            d.errback(counters)
        else:
            d.callback(counters)


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return load(configs.write(tmp_path, linked()))


def poller_for(config: Config, datacenter: str) -> tuple[LinkTrafficPoller, Store, Clock, FakeRouter]:
    clock = Clock()
    store = Store("n1", clock.seconds)
    router = FakeRouter()
    poller = LinkTrafficPoller(config, store, clock, "n1", datacenter, router.reader)
    return poller, store, clock, router


def test_only_the_links_of_this_data_center_are_read(config: Config) -> None:
    """n1 in DC1 reads cnc (index 2), not tel (DC2's router, index 3)."""
    poller, _, _, router = poller_for(config, "DC1")
    poller.startService()
    assert list(poller.polls) == ["cnc"] and [
        s.source.if_index for s in router.made if isinstance(s.source, SnmpSource)
    ] == [2]
    assert list(router.pending) == ["2"]  # the first reading at once
    poller.stopService()
    other, _, _, router = poller_for(config, "DC3")
    other.startService()
    assert not other.polls and not router.pending


def test_readings_become_shared_figures_with_a_ttl(config: Config) -> None:
    poller, store, clock, _router = poller_for(config, "DC1")
    poller.startService()
    reader = poller.polls["cnc"].reader
    assert isinstance(reader, FakeReader)
    reader.answer(Counters(10**12, 10**12))
    assert store.get(keys.traffic("cnc")) is None  # one reading is no rate
    clock.advance(10)
    reader.answer(Counters(10**12 + 1_250_000_000, 10**12 + 125_000_000))  # 1 Gbit/s in, 100 Mbit/s out
    record = store.get(keys.traffic("cnc"))
    assert record is not None
    assert record.value == {"bps_in": 1_000_000_000, "bps_out": 100_000_000, "by": "n1"}
    assert record.ttl == max(MIN_TTL, 3 * 10)
    load = linkload.from_value(record.value)
    assert linkload.utilisation(config.links["cnc"], load) == 1.0
    poller.stopService()


def test_a_slow_or_failing_source_skips_rounds_and_counts_on(config: Config) -> None:
    """A reading still in flight when the next is due: that round is skipped. A failure is
    logged once (not every round) and the next good reading counts from the last good one."""
    poller, store, clock, router = poller_for(config, "DC1")
    poller.startService()
    reader = poller.polls["cnc"].reader
    assert isinstance(reader, FakeReader)
    clock.advance(10)
    clock.advance(10)
    assert len(router.pending["2"]) == 1  # the first is still in flight
    reader.answer(Counters(0, 0))
    clock.advance(10)
    with capturedLogs() as events:
        reader.answer(TimeoutError("no reply in 2 s"))
        clock.advance(10)
        reader.answer(TimeoutError("no reply in 2 s"))
    failed = [e for e in events if e.get("event") == "link_traffic_failed"]
    assert len(failed) == 1 and failed[0]["reason"] == "no reply in 2 s", events
    assert poller.polls["cnc"].failures == 2
    clock.advance(10)  # 30 s after the good reading
    with capturedLogs() as events:
        reader.answer(Counters(30 * 1_000_000 // 8, 0))
    assert [e["event"] for e in events if "event" in e] == ["link_traffic_up"]
    record = store.get(keys.traffic("cnc"))
    assert record is not None and record.value["bps_in"] == 1_000_000
    poller.stopService()
    assert all(not p.loop for p in poller.polls.values())


def test_stopping_stops_the_readings_then_closes_the_client(config: Config) -> None:
    """A reading in flight when the node stops writes nothing; the readers' client is
    closed after the loops stop."""
    clock = Clock()
    store = Store("n1", clock.seconds)
    router = FakeRouter()
    closed: list[bool] = []
    poller = LinkTrafficPoller(
        config, store, clock, "n1", "DC1", router.reader, lambda: closed.append(poller.polls["cnc"].loop is None)
    )
    poller.startService()
    reader = poller.polls["cnc"].reader
    assert isinstance(reader, FakeReader)
    reader.answer(Counters(0, 0))
    clock.advance(10)
    poller.stopService()
    assert closed == [True]
    reader.answer(Counters(10**9, 0))  # (arrives after the stop)
    assert store.get(keys.traffic("cnc")) is None


def test_a_reload_keeps_unchanged_sources_and_starts_new_ones(tmp_path: Path, config: Config) -> None:
    poller, _store, _clock, router = poller_for(config, "DC1")
    poller.startService()
    kept = poller.polls["cnc"]
    same = load(configs.write(tmp_path / "same", linked()))
    poller.prepare(same)()
    assert poller.polls["cnc"] is kept and len(router.made) == 1
    changed = linked()
    changed["links"]["cnc"]["traffic"]["snmp"]["if_index"] = 9
    poller.prepare(load(configs.write(tmp_path / "changed", changed)))()
    assert poller.polls["cnc"] is not kept and kept.loop is None
    assert [s.source.if_index for s in router.made if isinstance(s.source, SnmpSource)] == [2, 9]
    assert "9" in router.pending  # the new source is read at once
    gone = linked(traffic=None, max_utilisation=None)
    gone["pools"]["lp"]["load_balancing"]["preferred"] = "round_robin"
    poller.prepare(load(configs.write(tmp_path / "gone", gone)))()
    assert not poller.polls
    poller.stopService()


# -- the record ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "ttl", "reason"),
    [
        ("traffic/link/cnc", {"bps_in": 1, "bps_out": 2.5, "by": "n1"}, 30.0, None),
        ("traffic/link/cnc", {"bps_in": 1, "bps_out": 2, "by": "n1", "newer": [1]}, 30.0, None),  # a newer field
        ("traffic/link/cnc", None, 60.0, None),  # a deletion
        ("traffic/link/cnc", {"bps_in": 1, "bps_out": 2}, None, "ttl"),  # figures need a TTL
        ("traffic/link/cnc", {"bps_in": 1, "bps_out": 2}, 2 * 86400.0, "ttl"),
        ("traffic/link/cnc", {"bps_in": -1, "bps_out": 2}, 30.0, "value"),
        ("traffic/link/cnc", {"bps_in": float("nan"), "bps_out": 2}, 30.0, "value"),
        ("traffic/link/cnc", {"bps_in": True, "bps_out": 2}, 30.0, "value"),
        ("traffic/link/cnc", {"bps_out": 2}, 30.0, "value"),
        ("traffic/link/cnc", {"bps_in": 1, "bps_out": 2, "by": 7}, 30.0, "value"),
        ("traffic/link/cnc", {"bps_in": 1, "bps_out": 2, "pad": "x" * 2000}, 30.0, "size"),
        ("traffic/vs/cnc", {"bps_in": 1, "bps_out": 2}, 30.0, "key"),
        ("traffic/link/", {"bps_in": 1, "bps_out": 2}, 30.0, "key"),
        ("traffic/link/a/b", {"bps_in": 1, "bps_out": 2}, 30.0, "key"),
    ],
)
def test_what_a_traffic_record_may_be(key: str, value: object, ttl: float | None, reason: str | None) -> None:
    """Checked where records enter (from peers, from the snapshot): the figures are
    non-negative numbers, a TTL is required (a day at most), the size is capped."""
    found = schema.problem(key, value, "n1", ttl)
    assert (found.reason if found else None) == reason, found
    if reason is None and value is not None:
        assert schema.problem(key, value, "n1", ttl, version=3) is not None  # a version-3 member refuses it


@pytest.mark.parametrize(
    ("before", "after", "seconds"),
    [
        (Counters(0, 0), Counters(2**63, 0), 10.0),  # in: 7e17 bit/s
        (Counters(5, 5), Counters(5, COUNTER64 - 1), 3600.0),  # out: 4e16 bit/s over an hour
        (Counters(0, 0), Counters(int(MAX_LINE_BPS / 8) + 1, 0), 1.0),  # just over the fastest line
    ],
)
def test_a_counter_that_jumped_further_than_a_line_can_count_gives_no_figure(
    before: Counters, after: Counters, seconds: float
) -> None:
    """Counters that went up by more than MAX_LINE_BPS could count in the interval were
    replaced (another agent, another counter), not traffic: that round gives no figure
    (a figure of 10**17 bit/s would mark the link full), and the next counts from there."""
    assert rate(before, after, seconds) is None
    tracker = CounterRate()
    tracker.update(before, 0.0)
    assert tracker.update(after, seconds) is None
    grown = Counters((after.in_octets + 1000) % COUNTER64, (after.out_octets + 1000) % COUNTER64)
    assert tracker.update(grown, 2 * seconds) == Rate(8000 / seconds, 8000 / seconds)


def test_a_shared_figure_past_any_link_counts_for_nothing() -> None:
    """A traffic record over the largest bandwidth a link may have (an older member's, a
    corrupted one) is no figure: the link is judged without it."""
    assert linkload.from_value({"bps_in": 1e300, "bps_out": 0, "by": "n2"}) is None
    assert linkload.from_value({"bps_in": 0, "bps_out": 10**30, "by": "n2"}) is None
    top = linkload.from_value({"bps_in": linkload.MAX_BPS, "bps_out": 0, "by": "n2"})
    assert top is not None and top.bps == linkload.MAX_BPS
