"""The health checker service, with a fake clock and scripted check results.

The fake clock is advanced in small steps (`run`), as a real reactor's time passes: one
big `clock.advance` would be a reactor that stood still that long, and the checker skips
rounds that could not start in time (see test_health_schedule.py for the schedule alone).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, task
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import capturedLogs

from gtmcluster.config.monitoring import Monitor
from gtmcluster.health.checker import HealthChecker
from gtmcluster.probe.base import Check, Result, Target
from gtmcluster.probe.kinds import make_check
from gtmcluster.state.record import Record, Version
from gtmcluster.state.store import Store
from tests.support import configs
from tests.support.healthcfg import health_config, load_config


class ScriptedChecks:
    """Checks whose results the test decides: by address, a fixed verdict or a hanging call."""

    def __init__(self, clock: task.Clock) -> None:
        self.clock = clock
        self.ok: dict[str, bool] = defaultdict(lambda: True)
        self.hang: set[str] = set()
        self.slow: dict[str, float] = {}  # address -> seconds until it fails (a timeout)
        self.calls: list[str] = []
        self.times: list[tuple[float, str]] = []  # (when, address) of every call
        self.pending: list[defer.Deferred[Result]] = []
        self.in_flight = 0
        self.peak = 0

    def factory(self, monitor: Monitor) -> Check:
        def check(target: Target) -> defer.Deferred[Result]:
            address = str(target.address)
            self.calls.append(address)
            self.times.append((self.clock.seconds(), address))
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            d: defer.Deferred[Result]
            if address in self.slow:
                d = defer.Deferred()
                self.clock.callLater(self.slow[address], d.callback, Result(False, "timed out", 0))
            elif address in self.hang:
                d = defer.Deferred()
                self.pending.append(d)
            else:
                ok = self.ok[address]
                d = defer.succeed(Result(ok, "fine" if ok else "refused", 0.001))
            return d.addBoth(self._done)

        return check

    def _done(self, result: Result) -> Result:
        self.in_flight -= 1
        return result


def make(tmp_path: Path, raw: dict[str, Any] | None = None) -> tuple[HealthChecker, Store, task.Clock, ScriptedChecks]:
    config = load_config(tmp_path, raw or health_config())
    clock = task.Clock()
    store = Store("n1", clock.seconds)
    checks = ScriptedChecks(clock)
    checker = HealthChecker(config, store, clock, "n1", checks.factory)
    return checker, store, clock, checks


def verdict(store: Store, key: str) -> Any:
    record = store.get(key)
    return None if record is None else record.value["up"]


def run(clock: task.Clock, seconds: float, step: float = 0.01) -> None:
    """Let *seconds* pass in steps of *step*, as a reactor's time does."""
    clock.pump([step] * round(seconds / step))


def many_servers(count: int) -> dict[str, Any]:
    """The health config plus *count* servers x0, x1, ... on 10.1.x.y, all with tcp monitor `web`."""
    raw = health_config()
    raw["monitors"]["web"]["type"] = "tcp"
    for i in range(count):
        address = f"10.1.{i // 250}.{i % 250 + 1}"
        raw["virtual_servers"][f"x{i}"] = {"address": address, "datacenter": "DC1", "monitor": "web"}
    return raw


def test_every_monitored_server_and_link_is_checked_within_its_first_interval(tmp_path: Path) -> None:
    """The first round of each subject comes within its first interval (spread over it, not
    all at once), then rounds repeat every interval at the same phase."""
    checker, store, clock, checks = make(tmp_path)
    checker.startService()
    run(clock, 2)
    assert checks.calls.count("192.0.2.1") == 1  # the link: ping, interval 2
    run(clock, 3)
    assert sorted(set(checks.calls)) == ["10.0.1.1", "10.0.2.1", "10.0.3.1", "192.0.2.1", "192.0.2.2"]
    assert verdict(store, "obs/vs/vs1/n1") is True
    assert verdict(store, "obs/link/l1/n1") is True
    first = [t for t, a in checks.times if a == "10.0.2.1"]
    run(clock, 10)
    again = [t for t, a in checks.times if a == "10.0.2.1"]
    assert again == pytest.approx([first[0], first[0] + 5, first[0] + 10], abs=0.011)
    assert checker.stats.skipped == 0
    assert checker.stats.lag_max <= 0.011  # due rounds start within a tick
    checker.stopService()
    assert not clock.getDelayedCalls()


def test_first_rounds_are_spread_over_the_interval(tmp_path: Path) -> None:
    """200 servers at interval 5: the first round's checks spread over the 5 s (about 40 a
    second), not in a burst; each server's phase comes from its key."""
    raw = many_servers(200)
    checker, _, clock, checks = make(tmp_path, raw)
    checker.startService()
    run(clock, 5)
    firsts = sorted(t for t, a in checks.times if a.startswith("10.1."))
    assert len(firsts) == 200
    per_second = [sum(1 for t in firsts if k <= t < k + 1) for k in range(5)]
    assert all(20 <= n <= 60 for n in per_second), per_second
    checker.stopService()


def test_down_after_thresholds_then_up_after(tmp_path: Path) -> None:
    """A server goes down after down_after failing rounds and back after up_after good ones."""
    checker, store, clock, checks = make(tmp_path)
    checker.startService()
    run(clock, 5)
    checks.ok["10.0.2.1"] = False
    run(clock, 10)
    assert verdict(store, "obs/vs/vs2/n1") is True  # two failures: not yet (down_after 3)
    run(clock, 5)
    record = store.get("obs/vs/vs2/n1")
    assert record is not None and record.value == {"up": False, "reason": "refused"}
    checks.ok["10.0.2.1"] = True
    run(clock, 5)
    assert verdict(store, "obs/vs/vs2/n1") is False  # one success: not yet (up_after 2)
    run(clock, 5)
    assert verdict(store, "obs/vs/vs2/n1") is True
    checker.stopService()


def test_a_link_with_one_live_target_stays_up(tmp_path: Path) -> None:
    """A link is up while any of its targets answers; its reason lists each target."""
    checker, store, clock, checks = make(tmp_path)
    checks.ok["192.0.2.1"] = False
    checker.startService()
    run(clock, 5)
    record = store.get("obs/link/l1/n1")
    assert record is not None and record.value["up"] is True
    assert "192.0.2.1: refused" in record.value["reason"]
    checks.ok["192.0.2.2"] = False
    run(clock, 4)  # ping: interval 2, down_after 2
    assert verdict(store, "obs/link/l1/n1") is False
    checker.stopService()


def test_a_round_still_running_makes_the_next_one_wait(tmp_path: Path) -> None:
    """Checks never pile up: while a subject's round runs, it gets no other; when it ends,
    the rounds it missed are counted as skipped, the one due within the last half interval
    starts at once, and the following ones keep the old phase."""
    checker, _, clock, checks = make(tmp_path)
    checks.hang.add("10.0.3.1")
    checker.startService()
    run(clock, 5)
    began = next(t for t, a in checks.times if a == "10.0.3.1")
    run(clock, 20)  # four more intervals while the round hangs
    assert checks.calls.count("10.0.3.1") == 1
    assert checker.stats.in_flight == 1
    checks.hang.clear()
    ended = clock.seconds()
    checks.pending[0].callback(Result(True, "late", 25))
    assert checker.stats.skipped_busy == 3  # due at +5, +10, +15: more than 2.5 s late
    run(clock, 5)
    times = [t for t, a in checks.times if a == "10.0.3.1"]
    assert times[1:] == pytest.approx([ended, began + 25], abs=0.011)  # +20 at once, then +25
    checker.stopService()


def test_checks_that_time_out_after_a_whole_interval_still_come_every_interval(tmp_path: Path) -> None:
    """timeout = interval is allowed: each failing check then ends just after the next is
    due. The next round starts as soon as it ends (not an interval later), so a server is
    down after interval x down_after + timeout (web: 5 x 3 + 0.01 from its first failing
    check), not twice that."""
    checker, store, clock, checks = make(tmp_path)
    checker.startService()
    run(clock, 5)
    assert verdict(store, "obs/vs/vs2/n1") is True
    checks.slow["10.0.2.1"] = 5.01
    checks.calls.clear()
    while "10.0.2.1" not in checks.calls:
        clock.advance(0.01)
    began = clock.seconds()
    while verdict(store, "obs/vs/vs2/n1") is not False and clock.seconds() - began < 60:
        clock.advance(0.01)
    assert clock.seconds() - began == pytest.approx(15.03, abs=0.05)
    assert checks.calls.count("10.0.2.1") == 4  # a round every ~5 s: the fourth has begun
    assert checker.stats.skipped == 0
    checker.stopService()


def test_checks_in_flight_never_exceed_the_cap_and_waiting_is_bounded(tmp_path: Path) -> None:
    """health.max_in_flight 2 and every check taking its whole timeout (1 s): never more than
    2 run at once; a round that gets no slot within half its interval is skipped and counted,
    not queued; when slots free, waiting rounds start."""
    raw = health_config()
    raw["health"] = {"max_in_flight": 2}
    checker, _, clock, checks = make(tmp_path, raw)
    checks.slow.update(dict.fromkeys(("10.0.1.1", "10.0.2.1", "10.0.3.1", "192.0.2.1", "192.0.2.2"), 1.0))
    checker.startService()
    run(clock, 30)
    assert checks.peak == 2
    assert checker.stats.peak_in_flight == 2
    assert checker.stats.skipped_late > 0
    assert checker.stats.lag_max <= 1.0 + 0.011  # the ping link's half interval
    assert len(checker.schedule) + checker.stats.in_flight // 2 <= 4  # one place per subject
    # 30 s: web (3 servers, interval 5) 18 rounds due, the link (2 targets, interval 2) 15:
    # each check holds a slot 1 s, so at most 2 checks a second start
    assert checker.stats.started <= 60 + 2
    assert checker.stats.started + checker.stats.skipped == pytest.approx(18 + 30, abs=4)
    checker.stopService()


def test_a_check_hanging_past_its_timeout_releases_its_socket_and_slot(tmp_path: Path) -> None:
    """A real tcp check whose connection never completes (a black hole): at its timeout it
    stops connecting (the socket is closed), its verdict is a failure, and its slot is free."""
    raw = configs.base()
    raw["monitors"] = {"web": {"type": "tcp", "interval": 5, "timeout": 2, "up_after": 1, "down_after": 1}}
    raw["virtual_servers"]["vs1"]["port"] = 80
    raw["virtual_servers"]["vs1"]["monitor"] = "web"
    config = load_config(tmp_path, raw)
    reactor = MemoryReactorClock()
    store = Store("n1", reactor.seconds)
    checker = HealthChecker(config, store, reactor, "n1", lambda m: make_check(m, reactor))
    checker.startService()
    while not reactor.connectors:
        reactor.advance(0.01)
    [connector] = reactor.connectors
    began = reactor.seconds()
    assert checker.stats.in_flight == 1
    while not connector.stoppedConnecting:
        reactor.advance(0.01)
    assert reactor.seconds() - began == pytest.approx(2, abs=0.011)
    assert checker.stats.in_flight == 0
    record = store.get("obs/vs/vs1/n1")
    assert record is not None and record.value == {"up": False, "reason": "no connection within 2s"}
    checker.stopService()


def test_a_reactor_that_stood_still_skips_what_it_missed(tmp_path: Path) -> None:
    """A 30 s stall (one clock jump): rounds missed are counted as skipped, and afterwards
    each subject comes back on its own phase, not in one burst of old rounds."""
    checker, _, clock, checks = make(tmp_path)
    checker.startService()
    run(clock, 5)
    checks.calls.clear()
    clock.advance(30)
    assert checker.stats.skipped_late >= 3 * 5  # web: 3 servers, 6 rounds in 30 s, most missed
    run(clock, 5)
    assert 1 <= checks.calls.count("10.0.2.1") <= 2
    checker.stopService()


def test_unchanged_verdicts_are_rewritten_before_they_expire(tmp_path: Path) -> None:
    """A steady verdict is rewritten every third of its TTL, so it never lapses while checked."""
    checker, store, clock, _ = make(tmp_path)
    checker.startService()
    run(clock, 5)
    first = store.get("obs/vs/vs2/n1")
    assert first is not None and first.ttl is not None
    for _ in range(int(first.ttl / 5) * 2):
        run(clock, 5, step=0.05)
        store.expire()
        assert store.get("obs/vs/vs2/n1") is not None
    latest = store.get("obs/vs/vs2/n1")
    assert latest is not None and latest.version > first.version
    checker.stopService()


def test_reconfigure_keeps_unchanged_subjects_on_schedule_and_stops_removed_ones(tmp_path: Path) -> None:
    """A reload keeps the phase of servers whose monitor did not change, starts new ones
    within an interval, and never checks a removed server again (even one mid-round)."""
    checker, store, clock, checks = make(tmp_path)
    checks.hang.add("10.0.3.1")
    checker.startService()
    run(clock, 5)
    before = [t for t, a in checks.times if a == "10.0.1.1"]
    raw = health_config()
    del raw["virtual_servers"]["vs3"]["monitor"]
    raw["virtual_servers"]["vs4"] = {"address": "10.0.4.1", "datacenter": "DC1", "monitor": "web"}
    checker.reconfigure(load_config(tmp_path, raw))
    run(clock, 10)
    after = [t for t, a in checks.times if a == "10.0.1.1"]
    assert after[len(before) :] == pytest.approx([before[0] + 5, before[0] + 10], abs=0.011)
    assert checks.calls.count("10.0.4.1") == 2
    checks.pending[0].callback(Result(False, "late", 15))  # the removed server's round ends
    assert checks.calls.count("10.0.3.1") == 1
    assert checker.stats.in_flight == 0
    assert verdict(store, "obs/vs/vs3/n1") is None
    checker.stopService()


def test_a_reload_keeps_unchanged_subjects_and_makes_one_check_per_monitor(tmp_path: Path) -> None:
    """A config read again (equal, not the same objects) keeps every subject as it is and
    makes no check (a reload at thousands of servers costs what changed, not what is
    there); a changed server gets a new subject; servers of one monitor share its check."""
    made: list[str] = []
    config = load_config(tmp_path, health_config())
    clock = task.Clock()
    checks = ScriptedChecks(clock)

    def factory(monitor: Monitor) -> Check:
        made.append(monitor.name)
        return checks.factory(monitor)

    checker = HealthChecker(config, Store("n1", clock.seconds), clock, "n1", factory)
    assert sorted(made) == sorted({s.monitor.name for s in checker.subjects})
    by_monitor: dict[str, set[int]] = defaultdict(set)
    for subject in checker.subjects:
        by_monitor[subject.monitor.name].add(id(subject.check))
    assert all(len(ids) == 1 for ids in by_monitor.values()), by_monitor
    before = {s.key: s for s in checker.subjects}
    made.clear()
    checker.reconfigure(load_config(tmp_path, health_config()))
    assert made == []
    assert all(before[s.key] is s for s in checker.subjects)
    raw = health_config()
    raw["virtual_servers"]["vs1"]["port"] = 8080
    checker.reconfigure(load_config(tmp_path, raw))
    assert made == []  # its monitor's check is still there
    changed = [s.key for s in checker.subjects if before[s.key] is not s]
    assert changed == ["obs/vs/vs1/n1"]


def test_the_checker_statistics_in_prometheus_text(tmp_path: Path) -> None:
    """/metrics shows checks started and skipped (by reason), in flight, and the lag histogram."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.registry import Collector

    from gtmcluster.api.metricfamilies import health_check_metrics

    raw = health_config()
    raw["health"] = {"max_in_flight": 2}
    checker, _, clock, checks = make(tmp_path, raw)
    checks.slow.update(dict.fromkeys(("10.0.1.1", "10.0.2.1", "10.0.3.1", "192.0.2.1", "192.0.2.2"), 1.0))
    checker.startService()
    run(clock, 20)
    stats = checker.stats

    class Checks(Collector):
        def collect(self) -> Any:
            yield from health_check_metrics(stats)

    registry = CollectorRegistry()
    registry.register(Checks())
    text = generate_latest(registry).decode()
    assert f"gtm_health_checks_started_total {stats.started:.1f}" in text
    assert f'gtm_health_checks_skipped_total{{reason="late"}} {stats.skipped_late:.1f}' in text
    assert stats.skipped_late > 0
    assert 'gtm_health_checks_skipped_total{reason="busy"} 0.0' in text
    assert f"gtm_health_checks_in_flight {stats.in_flight:.1f}" in text
    assert f"gtm_health_check_lag_seconds_count {stats.lag.count:.1f}" in text
    checker.stopService()


def test_skipped_checks_are_logged_at_most_once_a_minute(tmp_path: Path) -> None:
    """An operator hears of skipped checks: one warning with the counts, then at most one a
    minute while more are skipped."""
    from twisted.logger import capturedLogs

    raw = health_config()
    raw["health"] = {"max_in_flight": 2}
    checker, _, clock, checks = make(tmp_path, raw)
    checks.slow.update(dict.fromkeys(("10.0.1.1", "10.0.2.1", "10.0.3.1", "192.0.2.1", "192.0.2.2"), 1.0))
    with capturedLogs() as events:
        checker.startService()
        run(clock, 90, step=0.05)
    warnings = [e for e in events if e.get("event") == "health_checks_skipped"]
    assert len(warnings) == 2  # the first skip, then 60 s later
    assert warnings[0]["late"] > 0 and warnings[0]["since"] == "start"
    assert warnings[1]["since"] in ("60 s ago", "61 s ago")  # at the first turn a minute later
    assert sum(w["late"] for w in warnings) <= checker.stats.skipped_late
    checker.stopService()


def test_a_first_verdict_that_this_node_held_already_is_no_change(tmp_path: Path) -> None:
    """After a restart the node holds its own verdicts again (read from its snapshot): a
    first round that finds the same is not a change (not written, not logged), and the
    verdict is rewritten a third of its TTL after it was first written, as if the node
    had never stopped; a first round that finds otherwise is written and logged at once."""
    checker, store, clock, checks = make(tmp_path)
    ttl = checker.subjects[0].ttl
    written_ago = 10.0
    clock.advance(100)
    for key, up in (("obs/vs/vs1/n1", True), ("obs/vs/vs2/n1", True)):
        # as a snapshot gives it back: born when read, with what was left of its life
        store.merge(Record(key, {"up": up, "reason": "fine"}, Version(1, 1, "n1"), ttl - written_ago, clock.seconds()))
    held = {key: store.get(key) for key in ("obs/vs/vs1/n1", "obs/vs/vs2/n1")}
    checks.ok["10.0.2.1"] = False  # vs2 went down while the node was away
    with capturedLogs() as events:
        checker.startService()
        run(clock, 5)
    logged = {e["subject"] for e in events if e.get("event") == "observation"}
    assert "virtual server vs1" not in logged
    assert store.get("obs/vs/vs1/n1") is held["obs/vs/vs1/n1"]  # not written again
    assert "virtual server vs2" in logged
    now_down = store.get("obs/vs/vs2/n1")
    assert now_down is not None and now_down.value == {"up": False, "reason": "refused"}
    # rewritten once a third of its TTL has passed since it was written, before it lapses
    run(clock, ttl / 3 - written_ago - 6, step=0.05)
    assert store.get("obs/vs/vs1/n1") is held["obs/vs/vs1/n1"]
    run(clock, 6, step=0.05)
    latest, before = store.get("obs/vs/vs1/n1"), held["obs/vs/vs1/n1"]
    assert latest is not None and before is not None and latest.version > before.version
    checker.stopService()


def test_the_rewrites_of_verdicts_that_changed_together_are_spread(tmp_path: Path) -> None:
    """200 servers all get their first verdict within the first interval (5 s): their
    rewrites come spread over a third of their TTL (30 s), not together every 30 s; each is
    still rewritten at least every third of its TTL."""
    raw = many_servers(200)
    checker, store, clock, _ = make(tmp_path, raw)
    written: dict[str, list[float]] = defaultdict(list)
    store.subscribe(lambda r: written[r.key].append(clock.seconds()) if r.key.startswith("obs/vs/x") else None)
    checker.startService()
    run(clock, 100, step=0.05)
    period = checker.subjects[0].ttl / 3
    firsts = [times[0] for times in written.values()]
    assert len(firsts) == 200 and max(firsts) - min(firsts) < 5.1  # together, in the first interval
    # rewrites between 40 and 70 s, by the 5 s interval they came in: about 33 in each
    # (all 200 in one of them, were they bunched)
    rewrites = [t for times in written.values() for t in times[1:] if 40 <= t < 70]
    per_interval = [sum(1 for t in rewrites if 40 + 5 * k <= t < 45 + 5 * k) for k in range(6)]
    assert min(per_interval) >= 10 and max(per_interval) <= 80, per_interval
    for times in written.values():
        assert all(b - a <= period + 5.1 for a, b in itertools.pairwise(times))
    checker.stopService()
