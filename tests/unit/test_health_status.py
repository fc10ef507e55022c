"""Evaluating availability from observation records: rules, links, dependencies, admin."""

from __future__ import annotations

from pathlib import Path

import pytest

from gtmcluster.config.monitoring import HealthRule
from gtmcluster.health.status import combine, evaluate
from gtmcluster.state.record import Record, Version
from gtmcluster.state.store import Store
from tests.support.healthcfg import health_config, load_config, observe


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def verdicts(*pairs: tuple[str, bool]) -> list[Record]:
    return [Record("k", {"up": up, "reason": "x"}, Version(1, 0, who), None, 0) for who, up in pairs]


@pytest.mark.parametrize(
    ("rule", "pairs", "state"),
    [
        (HealthRule("any"), [("a", True), ("b", False)], "up"),
        (HealthRule("any"), [("a", False), ("b", False)], "down"),
        (HealthRule("all"), [("a", True), ("b", False)], "down"),
        (HealthRule("all"), [("a", True), ("b", True)], "up"),
        (HealthRule("quorum", 2), [("a", True), ("b", False), ("c", True)], "up"),
        (HealthRule("quorum", 2), [("a", True), ("b", False), ("c", False)], "down"),
        (HealthRule("quorum", 2), [("a", True)], "down"),
        (HealthRule("any"), [], "unknown"),
    ],
)
def test_rules_combine_observers(rule: HealthRule, pairs: list[tuple[str, bool]], state: str) -> None:
    """any / all / quorum N over the observers' verdicts; no verdict is unknown."""
    assert combine(rule, verdicts(*pairs)).state == state


def test_down_reason_names_the_observers(tmp_path: Path) -> None:
    """A down verdict says who saw what."""
    observed = combine(HealthRule("any"), verdicts(("n2", False), ("n1", False)))
    assert observed.reason == "n1: x; n2: x"


def test_unknown_counts_as_up_by_default(tmp_path: Path) -> None:
    """Before any verdict a monitored server is available (unknown_as: up)."""
    config = load_config(tmp_path, health_config())
    status, _ = evaluate(config, Store("n1", Clock()))
    assert status["vs1"].health == "unknown" and status["vs1"].available


def test_unknown_as_down(tmp_path: Path) -> None:
    """With unknown_as: down a server waits for its first good verdict."""
    raw = health_config()
    raw["monitors"]["web"]["unknown_as"] = "down"
    status, _ = evaluate(load_config(tmp_path, raw), Store("n1", Clock()))
    assert not status["vs2"].available
    assert "no verdict yet" in status["vs2"].reason


def test_one_observer_alone_decides(tmp_path: Path) -> None:
    """A node alone uses its own observations."""
    config = load_config(tmp_path, health_config())
    store = Store("n1", Clock())
    observe(store, "vs", "vs2", "n1", False, "HTTP 503 not in [200]")
    status, _ = evaluate(config, store)
    assert not status["vs2"].available and not status["vs2"].serving
    assert "HTTP 503" in status["vs2"].reason


def test_link_down_takes_its_servers_out(tmp_path: Path) -> None:
    """A virtual server bound to a link is out while the link is down, whatever its monitor says."""
    config = load_config(tmp_path, health_config())
    store = Store("n1", Clock())
    observe(store, "vs", "vs1", "n1", True)
    observe(store, "link", "l1", "n1", False, "192.0.2.1: no reply, 192.0.2.2: no reply")
    status, links = evaluate(config, store)
    assert links["l1"].state == "down"
    assert not status["vs1"].available
    assert "link l1 down" in status["vs1"].reason
    observe(store, "link", "l1", "n1", True)
    assert evaluate(config, store)[0]["vs1"].available


def test_dependencies_follow_the_servers_they_need(tmp_path: Path) -> None:
    """depends_on: a server is out while one it depends on is out (draining counts as in)."""
    config = load_config(tmp_path, health_config(vs2={"depends_on": ["vs3"]}, vs3={"admin_state": "drain"}))
    store = Store("n1", Clock())
    status, _ = evaluate(config, store)
    assert status["vs3"].serving and not status["vs3"].available  # draining
    assert status["vs2"].available
    observe(store, "vs", "vs3", "n1", False)
    status, _ = evaluate(config, store)
    assert not status["vs2"].available
    assert "depends on vs3" in status["vs2"].reason


def test_admin_records_override_the_config(tmp_path: Path) -> None:
    """An operator's admin record (disable, drain, enable) wins over the configured state."""
    config = load_config(tmp_path, health_config(vs2={"admin_state": "disabled"}))
    store = Store("n1", Clock())
    assert not evaluate(config, store)[0]["vs2"].serving
    store.put("admin/vs/vs2", {"state": "enabled"})
    assert evaluate(config, store)[0]["vs2"].available
    store.put("admin/vs/vs1", {"state": "drain"})
    vs1 = evaluate(config, store)[0]["vs1"]
    assert vs1.serving and not vs1.available


def test_expired_observations_no_longer_count(tmp_path: Path) -> None:
    """A verdict from a node that stopped reporting ends with its TTL."""
    config = load_config(tmp_path, health_config())
    clock = Clock()
    store = Store("n1", clock)
    observe(store, "vs", "vs2", "n2", False, ttl=30)
    assert not evaluate(config, store)[0]["vs2"].available
    clock.now += 31
    assert evaluate(config, store)[0]["vs2"].health == "unknown"


def test_quorum_rule_across_nodes(tmp_path: Path) -> None:
    """quorum: 2 needs two observers seeing it up."""
    raw = health_config()
    raw["monitors"]["web"]["rule"] = {"quorum": 2}
    config = load_config(tmp_path, raw)
    store = Store("n1", Clock())
    observe(store, "vs", "vs2", "n1", True)
    observe(store, "vs", "vs2", "n2", False)
    assert not evaluate(config, store)[0]["vs2"].available
    observe(store, "vs", "vs2", "n3", True)
    assert evaluate(config, store)[0]["vs2"].available


def test_verdicts_of_disconnected_peers_do_not_count(tmp_path: Path) -> None:
    """A peer's last verdict is stale once it is gone: with `any`, a dead GTM's old 'up'
    must not keep a server that every connected node sees down."""
    config = load_config(tmp_path, health_config())
    store = Store("n1", Clock())
    observe(store, "vs", "vs2", "n1", False)
    observe(store, "vs", "vs2", "n2", True)  # n2 saw it up, then n2 died
    assert evaluate(config, store, frozenset({"n1", "n2"}))[0]["vs2"].available
    status = evaluate(config, store, frozenset({"n1"}))[0]["vs2"]
    assert not status.available
    assert "n2" not in status.reason
