"""The health tracker: snapshots on change, events, manual resume, slow start."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.logger import capturedLogs

from gtmcluster.health.tracker import HealthTracker
from gtmcluster.state.store import Store
from tests.support.healthcfg import health_config, load_config, observe


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, **extra: dict[str, object]) -> tuple[HealthTracker, Store, Clock]:
    config = load_config(tmp_path, health_config(**extra))
    clock = Clock()
    store = Store("n1", clock)
    return HealthTracker(config, store, clock, "n1"), store, clock


def test_snapshot_follows_observation_records(tmp_path: Path) -> None:
    """A new verdict record swaps in a new snapshot at once."""
    tracker, store, _ = make(tmp_path)
    vs2 = tracker.config.virtual_servers["vs2"]
    assert tracker.vs_up(vs2)
    observe(store, "vs", "vs2", "n1", False)
    assert not tracker.vs_up(vs2)
    observe(store, "vs", "vs2", "n1", True)
    assert tracker.vs_up(vs2)


def test_state_changes_are_logged_with_from_to_reason_observer(tmp_path: Path) -> None:
    """Every change of a virtual server or link is a structured event."""
    _, store, _ = make(tmp_path)
    observe(store, "vs", "vs1", "n1", True)
    with capturedLogs() as events:
        observe(store, "vs", "vs2", "n1", False, "HTTP 503 not in [200]")
        observe(store, "link", "l1", "n1", False, "no echo reply")
    vs_events = [e for e in events if e.get("event") == "vs_state"]
    assert {(e["vs"], e["old"], e["new"]) for e in vs_events} == {
        ("vs2", "available", "unavailable"),
        ("vs1", "available", "unavailable"),
    }
    assert any("HTTP 503" in e["reason"] for e in vs_events)
    assert all(e["observer"] == "sync group" for e in vs_events)
    link_events = [e for e in events if e.get("event") == "link_state"]
    assert [(e["link"], e["old"], e["new"]) for e in link_events] == [("l1", "unknown", "down")]


def test_manual_resume_holds_a_server_that_went_down(tmp_path: Path) -> None:
    """With manual_resume, a server that goes down stays out after it recovers, until the
    hold is removed (an operator enabling it)."""
    tracker, store, _ = make(tmp_path, vs2={"manual_resume": True})
    vs2 = tracker.config.virtual_servers["vs2"]
    observe(store, "vs", "vs2", "n1", True)
    with capturedLogs() as events:
        observe(store, "vs", "vs2", "n1", False)
    assert store.get("held/vs/vs2") is not None
    assert any(e.get("event") == "vs_held" for e in events)
    observe(store, "vs", "vs2", "n1", True)
    assert not tracker.vs_up(vs2)
    assert "manual resume" in tracker.snapshot.vs["vs2"].reason
    store.delete("held/vs/vs2")
    assert tracker.vs_up(vs2)


def test_without_manual_resume_recovery_is_automatic(tmp_path: Path) -> None:
    """The default: a server that recovers is back without an operator."""
    tracker, store, _ = make(tmp_path)
    observe(store, "vs", "vs2", "n1", False)
    observe(store, "vs", "vs2", "n1", True)
    assert store.get("held/vs/vs2") is None
    assert tracker.vs_up(tracker.config.virtual_servers["vs2"])


@pytest.mark.parametrize(
    ("elapsed", "weight"),
    [(0, 0.1), (5, 0.1), (10, 0.2), (55, 0.6), (99, 1.0), (100, 1.0), (500, 1.0)],
)
def test_slow_start_ramps_a_returning_server(tmp_path: Path, elapsed: float, weight: float) -> None:
    """After coming back, a server's weight rises in tenths over slow_start seconds."""
    tracker, store, clock = make(tmp_path, vs2={"slow_start": 100})
    vs2 = tracker.config.virtual_servers["vs2"]
    observe(store, "vs", "vs2", "n1", True)
    assert tracker.weight(vs2, clock.now) == 1.0  # first verdict: no ramp
    observe(store, "vs", "vs2", "n1", False)
    observe(store, "vs", "vs2", "n1", True)
    assert tracker.weight(vs2, clock.now + elapsed) == pytest.approx(weight)


def test_no_ramp_without_slow_start(tmp_path: Path) -> None:
    """A server without slow_start is back at full share at once."""
    tracker, store, clock = make(tmp_path)
    vs2 = tracker.config.virtual_servers["vs2"]
    observe(store, "vs", "vs2", "n1", False)
    observe(store, "vs", "vs2", "n1", True)
    assert tracker.weight(vs2, clock.now) == 1.0
