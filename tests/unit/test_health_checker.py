"""The health checker service, with a fake clock and scripted check results."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, task

from gtmcluster.config.model import Monitor
from gtmcluster.health.checker import STARTUP_SPREAD, HealthChecker
from gtmcluster.probe.base import Check, Result, Target
from gtmcluster.state.store import Store
from tests.support.healthcfg import health_config, load_config


class ScriptedChecks:
    """Checks whose results the test decides: by address, a fixed verdict or a hanging call."""

    def __init__(self, clock: task.Clock) -> None:
        self.clock = clock
        self.ok: dict[str, bool] = defaultdict(lambda: True)
        self.hang: set[str] = set()
        self.slow: dict[str, float] = {}  # address -> seconds until it fails (a timeout)
        self.calls: list[str] = []
        self.pending: list[defer.Deferred[Result]] = []

    def factory(self, monitor: Monitor) -> Check:
        def check(target: Target) -> defer.Deferred[Result]:
            address = str(target.address)
            self.calls.append(address)
            if address in self.slow:
                late: defer.Deferred[Result] = defer.Deferred()
                self.clock.callLater(self.slow[address], late.callback, Result(False, "timed out", 0))
                return late
            if address in self.hang:
                d: defer.Deferred[Result] = defer.Deferred()
                self.pending.append(d)
                return d
            ok = self.ok[address]
            return defer.succeed(Result(ok, "fine" if ok else "refused", 0.001))

        return check


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


def test_every_monitored_server_and_link_is_checked_soon_after_start(tmp_path: Path) -> None:
    """The first round is spread over the first seconds, then checks repeat every interval."""
    checker, store, clock, checks = make(tmp_path)
    checker.startService()
    clock.advance(STARTUP_SPREAD)
    assert sorted(checks.calls) == ["10.0.1.1", "10.0.2.1", "10.0.3.1", "192.0.2.1", "192.0.2.2"]
    assert verdict(store, "obs/vs/vs1/n1") is True
    assert verdict(store, "obs/link/l1/n1") is True
    checks.calls.clear()
    clock.advance(5)
    assert checks.calls.count("10.0.2.1") == 1  # web's interval is 5 s
    checker.stopService()
    assert not clock.getDelayedCalls()


def test_down_after_thresholds_then_up_after(tmp_path: Path) -> None:
    """A server goes down after down_after failing rounds and back after up_after good ones."""
    checker, store, clock, checks = make(tmp_path)
    checker.startService()
    clock.advance(STARTUP_SPREAD)
    checks.ok["10.0.2.1"] = False
    clock.advance(5)
    clock.advance(5)
    assert verdict(store, "obs/vs/vs2/n1") is True  # two failures: not yet (down_after 3)
    clock.advance(5)
    record = store.get("obs/vs/vs2/n1")
    assert record is not None and record.value == {"up": False, "reason": "refused"}
    checks.ok["10.0.2.1"] = True
    clock.advance(5)
    assert verdict(store, "obs/vs/vs2/n1") is False  # one success: not yet (up_after 2)
    clock.advance(5)
    assert verdict(store, "obs/vs/vs2/n1") is True
    checker.stopService()


def test_a_link_with_one_live_target_stays_up(tmp_path: Path) -> None:
    """A link is up while any of its targets answers; its reason lists each target."""
    checker, store, clock, checks = make(tmp_path)
    checks.ok["192.0.2.1"] = False
    checker.startService()
    clock.advance(STARTUP_SPREAD + 10)
    record = store.get("obs/link/l1/n1")
    assert record is not None and record.value["up"] is True
    assert "192.0.2.1: refused" in record.value["reason"]
    checks.ok["192.0.2.2"] = False
    for _ in range(2):  # ping: interval 2, down_after 2 (one step per round: LoopingCall skips missed rounds)
        clock.advance(2)
    assert verdict(store, "obs/link/l1/n1") is False
    checker.stopService()


def test_a_round_still_running_makes_the_next_one_wait(tmp_path: Path) -> None:
    """Checks never pile up: while a subject's last round runs, its ticks start nothing; when
    it ends, one round starts at once (not one per missed tick), then every interval."""
    checker, _, clock, checks = make(tmp_path)
    checks.hang.add("10.0.3.1")
    checker.startService()
    clock.advance(STARTUP_SPREAD)
    for _ in range(4):
        clock.advance(5)  # four ticks while the round hangs
    assert checks.calls.count("10.0.3.1") == 1
    checks.hang.clear()
    checks.pending[0].callback(Result(True, "late", 25))
    assert checks.calls.count("10.0.3.1") == 2
    clock.advance(5)
    assert checks.calls.count("10.0.3.1") == 3
    checker.stopService()


def test_checks_that_time_out_after_a_whole_interval_still_come_every_interval(tmp_path: Path) -> None:
    """timeout = interval is allowed: each failing check then ends just after the next tick.
    The next round starts as soon as it ends (not at the tick after), so a server is down
    after interval x down_after + timeout (web: 5 x 3 + 0.01 from its first failing check),
    not twice that."""
    checker, store, clock, checks = make(tmp_path)
    checker.startService()
    clock.advance(STARTUP_SPREAD)
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
    checker.stopService()


def test_checks_in_flight_are_bounded(tmp_path: Path) -> None:
    """No more than health.max_in_flight checks run at once; the rest wait their turn."""
    raw = health_config()
    raw["health"] = {"max_in_flight": 2}
    checker, _, clock, checks = make(tmp_path, raw)
    checks.hang.update({"10.0.1.1", "10.0.2.1", "10.0.3.1", "192.0.2.1", "192.0.2.2"})
    checker.startService()
    clock.advance(STARTUP_SPREAD)
    assert len(checks.calls) == 2
    checks.pending[0].callback(Result(True, "ok", 1))
    assert len(checks.calls) == 3
    checker.stopService()


def test_unchanged_verdicts_are_rewritten_before_they_expire(tmp_path: Path) -> None:
    """A steady verdict is rewritten every third of its TTL, so it never lapses while checked."""
    checker, store, clock, _ = make(tmp_path)
    checker.startService()
    clock.advance(STARTUP_SPREAD)
    first = store.get("obs/vs/vs2/n1")
    assert first is not None and first.ttl is not None
    for _ in range(int(first.ttl / 5) * 2):
        clock.advance(5)
        store.expire()
        assert store.get("obs/vs/vs2/n1") is not None
    latest = store.get("obs/vs/vs2/n1")
    assert latest is not None and latest.version > first.version
    checker.stopService()
