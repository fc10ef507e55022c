"""Several monitors per virtual server: the config (``monitor: [a, b]``, ``monitor_rule``),
their verdicts combined on a node (`health.monitors`), the checker's subject per (server,
monitor) writing one record, and the status reasons naming each monitor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import task
from twisted.logger import capturedLogs

from gtmcluster.config.load import load
from gtmcluster.config.monitoring import Monitor, MonitorRule
from gtmcluster.config.problems import ConfigError, format_path
from gtmcluster.health.checker import HealthChecker
from gtmcluster.health.flap import DOWN, UNKNOWN, UP
from gtmcluster.health.monitors import MonitorVerdict, decide
from gtmcluster.health.status import evaluate
from gtmcluster.probe.base import Check, Result, Target
from gtmcluster.state.record import Record, Version
from gtmcluster.state.store import Store
from tests.support import configs
from tests.support.healthcfg import health_config, load_config, observe
from tests.unit.test_health_checker import ScriptedChecks, run


def two_monitor_config(**vs1: Any) -> dict[str, Any]:
    """The health config with monitor `tcp` too, and vs1 checked by `web` and `tcp`."""
    raw = health_config()
    raw["monitors"]["tcp"] = {"type": "tcp", "interval": 2, "timeout": 1, "up_after": 1, "down_after": 1, "port": 22}
    raw["virtual_servers"]["vs1"].update({"monitor": ["web", "tcp"], **vs1})
    return raw


def problems_of(tmp_path: Path, raw: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        load(configs.write(tmp_path, raw))
    for p in caught.value.problems:  # the usual form: FILE: key.path: problem (line N)
        assert str(p).startswith(f"{tmp_path / 'cluster.yaml'}: {format_path(p.path)}: ")
        assert p.line is not None
    return [(format_path(p.path), p.message) for p in caught.value.problems]


# -- config


def test_a_list_of_monitors_and_the_rule(tmp_path: Path) -> None:
    """``monitor`` takes a list of names (kept in order) and ``monitor_rule`` all (the
    default) or {at_least: N}; a single name is still one monitor."""
    config = load_config(tmp_path, two_monitor_config())
    vs1 = config.virtual_servers["vs1"]
    assert [m.name for m in vs1.monitors] == ["web", "tcp"]
    assert vs1.monitor_rule == MonitorRule() and str(vs1.monitor_rule) == "all"
    assert config.virtual_servers["vs2"].monitors == (config.monitors["web"],)
    config = load_config(tmp_path, two_monitor_config(monitor_rule={"at_least": 1}))
    assert config.virtual_servers["vs1"].monitor_rule == MonitorRule(1)
    config = load_config(tmp_path, two_monitor_config(monitor_rule="all"))
    assert config.virtual_servers["vs1"].monitor_rule == MonitorRule()


@pytest.mark.parametrize(
    ("change", "path", "fragment"),
    [
        ({"monitor": ["web", "nope"]}, "virtual_servers.vs1.monitor[1]", "no monitor named 'nope'"),
        ({"monitor": ["web", "web"]}, "virtual_servers.vs1.monitor[1]", "monitor 'web' is given twice"),
        ({"monitor": []}, "virtual_servers.vs1.monitor", "an empty list"),
        ({"monitor": {"web": 1}}, "virtual_servers.vs1.monitor", "a monitor name or a list of them"),
        (
            {"monitor_rule": {"at_least": 3}},
            "virtual_servers.vs1.monitor_rule.at_least",
            "3 is more than the 2 monitors",
        ),
        ({"monitor_rule": {"at_least": 0}}, "virtual_servers.vs1.monitor_rule.at_least", "out of range"),
        ({"monitor_rule": {"at_least": "two"}}, "virtual_servers.vs1.monitor_rule.at_least", "whole number"),
        ({"monitor_rule": {}}, "virtual_servers.vs1.monitor_rule", "missing key 'at_least'"),
        ({"monitor_rule": {"at_least": 1, "most": 2}}, "virtual_servers.vs1.monitor_rule.most", "unknown key"),
        ({"monitor_rule": "any"}, "virtual_servers.vs1.monitor_rule", "'any'"),
        (
            {"monitor": "web", "monitor_rule": {"at_least": 2}},
            "virtual_servers.vs1.monitor_rule.at_least",
            "2 is more than the 1 monitor given",
        ),
    ],
)
def test_mistakes_in_the_monitors_of_a_server(tmp_path: Path, change: dict[str, Any], path: str, fragment: str) -> None:
    """Each mistake is one problem, at its key path."""
    found = problems_of(tmp_path, two_monitor_config(**change))
    assert len(found) == 1 and found[0][0] == path and fragment in found[0][1], found


def test_a_rule_without_monitors_is_an_error(tmp_path: Path) -> None:
    raw = configs.base()
    raw["virtual_servers"]["vs1"]["monitor_rule"] = {"at_least": 1}
    assert problems_of(tmp_path, raw) == [
        ("virtual_servers.vs1.monitor_rule", "a monitor rule needs monitors: give 'monitor' a list of names")
    ]


def test_monitors_that_combine_the_nodes_differently_are_an_error(tmp_path: Path) -> None:
    """The GTM nodes' verdicts on a server combine by one rule: its monitors must agree on
    `rule` and `unknown_as`; the problem names each monitor's."""
    raw = two_monitor_config()
    raw["monitors"]["tcp"]["rule"] = "all"
    [(path, message)] = problems_of(tmp_path, raw)
    assert path == "virtual_servers.vs1.monitor"
    assert "web (rule any, unknown_as up), tcp (rule all, unknown_as up)" in message


def test_each_monitor_of_a_server_counts_in_the_checkers_budget(tmp_path: Path) -> None:
    """Two monitors at 1 and 0.5 checks a second on each of 400 servers need 600 a second."""
    raw = two_monitor_config()
    raw["monitors"]["tcp"]["interval"] = 2
    raw["monitors"]["web"]["interval"] = 1
    raw["health"] = {"max_checks_per_second": 599}
    for i in range(400):
        raw["virtual_servers"][f"x{i}"] = {
            "address": f"10.9.{i // 200}.{i % 200 + 1}",
            "datacenter": "DC1",
            "monitor": ["web", "tcp"],
        }
    found = problems_of(tmp_path, raw)
    assert len(found) == 1 and found[0][0] == "health.max_checks_per_second" and "the monitors need 6" in found[0][1], (
        found
    )
    raw["health"] = {"max_checks_per_second": 610}
    load(configs.write(tmp_path, raw))


# -- the combination


verdict = st.builds(
    MonitorVerdict,
    monitor=st.sampled_from(["a", "b", "c", "d", "e"]),
    state=st.sampled_from([UP, DOWN, UNKNOWN]),
    reason=st.sampled_from(["", "status 503", "refused"]),
    unknown_as_up=st.booleans(),
)


@given(verdicts=st.lists(verdict, min_size=1, max_size=5), data=st.data())
def test_at_least_n_of_m(verdicts: list[MonitorVerdict], data: st.DataObject) -> None:
    """Up exactly when at least N of the M verdicts count as up (unknown as its monitor's
    `unknown_as`); `all` is at least M. The reason names every monitor's verdict, in
    order, then the rule's."""
    n = data.draw(st.integers(1, len(verdicts)))
    counted = [v.state == UP or (v.state == UNKNOWN and v.unknown_as_up) for v in verdicts]
    up, reason = decide(MonitorRule(n), verdicts)
    assert up == (sum(counted) >= n)
    up_all, _ = decide(MonitorRule(), verdicts)
    assert up_all == all(counted)
    parts = reason.split("; ")
    assert len(parts) == len(verdicts) + 1
    for part, v in zip(parts, verdicts, strict=False):
        assert part.startswith(f"{v.monitor}: {v.state}")
        if v.state == DOWN and v.reason:
            assert part.endswith(f"({v.reason})")
    assert parts[-1] == f"rule at_least {n}: {'up' if up else 'down'}"


def test_the_reason_reads_as_documented() -> None:
    up, reason = decide(
        MonitorRule(), [MonitorVerdict("http_check", DOWN, "status 503"), MonitorVerdict("tcp_check", UP, "connected")]
    )
    assert (up, reason) == (False, "http_check: down (status 503); tcp_check: up; rule all: down")
    up, reason = decide(
        MonitorRule(1), [MonitorVerdict("http_check", DOWN, "status 503"), MonitorVerdict("tcp_check", UNKNOWN)]
    )
    assert (up, reason) == (
        True,
        "http_check: down (status 503); tcp_check: unknown (no verdict yet, counted up); rule at_least 1: up",
    )


# -- the checker, with scripted results


class ByMonitor(ScriptedChecks):
    """Scripted checks whose results the test sets by monitor name."""

    def __init__(self, clock: task.Clock) -> None:
        super().__init__(clock)
        self.monitor_ok: dict[str, bool] = {}
        self.by_monitor: list[str] = []

    def factory(self, monitor: Monitor) -> Check:
        inner = super().factory(monitor)

        def check(target: Target) -> Any:
            self.by_monitor.append(f"{monitor.name} {target.address}:{target.port}")
            if monitor.name in self.monitor_ok:
                ok = self.monitor_ok[monitor.name]
                return inner(target).addCallback(
                    lambda _: Result(ok, "fine" if ok else f"{monitor.name} failed", 0.001)
                )
            return inner(target)

        return check


def make(tmp_path: Path, raw: dict[str, Any]) -> tuple[HealthChecker, Store, task.Clock, ByMonitor]:
    clock = task.Clock()
    store = Store("n1", clock.seconds)
    checks = ByMonitor(clock)
    checker = HealthChecker(load_config(tmp_path, raw), store, clock, "n1", checks.factory)
    return checker, store, clock, checks


def value(store: Store, key: str) -> Any:
    record = store.get(key)
    return None if record is None else record.value


def test_each_monitor_checks_the_server_at_its_own_port_and_one_record_is_written(tmp_path: Path) -> None:
    """vs1 is checked by web (the server's port, every 5 s) and tcp (its port 22, every
    2 s); this node writes one record for vs1, whose reason names both verdicts."""
    checker, store, clock, checks = make(tmp_path, two_monitor_config())
    checker.startService()
    run(clock, 10)
    mine = [c for c in checks.by_monitor if c.endswith(("10.0.1.1:80", "10.0.1.1:22"))]
    assert mine.count("web 10.0.1.1:80") == 2 and mine.count("tcp 10.0.1.1:22") == 5
    assert value(store, "obs/vs/vs1/n1") == {"up": True, "reason": "web: up; tcp: up; rule all: up"}
    assert [r.key for r in store.children("obs/vs/vs1/")] == ["obs/vs/vs1/n1"]
    checker.stopService()


def test_one_failing_monitor_takes_the_server_down_under_all_but_not_at_least_one(tmp_path: Path) -> None:
    """tcp fails: under `all` vs1 goes down (logged once, naming both monitors); under
    {at_least: 1} it stays up and the monitor's change is logged as such."""
    for rule, up in (("all", False), ({"at_least": 1}, True)):
        checker, store, clock, checks = make(tmp_path, two_monitor_config(monitor_rule=rule))
        checker.startService()
        run(clock, 6)
        checks.monitor_ok["tcp"] = False
        with capturedLogs() as events:
            run(clock, 6)
        shown = f"rule {'all' if rule == 'all' else 'at_least 1'}: {'up' if up else 'down'}"
        assert value(store, "obs/vs/vs1/n1") == {"up": up, "reason": f"web: up; tcp: down (tcp failed); {shown}"}
        changes = [e for e in events if e.get("event") == "observation" and e["subject"] == "virtual server vs1"]
        part = [e for e in events if e.get("event") == "monitor_observation"]
        if up:
            assert changes == [] and part[0]["subject"] == "virtual server vs1 monitor tcp"
        else:
            assert [(e["old"], e["new"]) for e in changes] == [("up", "down")] and part == []
        checker.stopService()


def test_a_reload_keeps_unchanged_monitors_of_a_server(tmp_path: Path) -> None:
    """A config read again keeps every subject; adding a third monitor to vs1 (or changing
    its rule) keeps the verdicts and schedules of the two unchanged (vs1, monitor) subjects,
    which now answer to the new rule; other servers' subjects stay as they were."""
    raw = two_monitor_config()
    checker, store, clock, checks = make(tmp_path, raw)
    checker.startService()
    run(clock, 6)
    checks.monitor_ok["tcp"] = False
    run(clock, 2)
    assert value(store, "obs/vs/vs1/n1")["up"] is False
    before = {s.ident: s for s in checker.subjects}
    checker.reconfigure(load_config(tmp_path, raw))
    assert all(before[s.ident] is s for s in checker.subjects)
    raw["monitors"]["ping"]["interval"] = 2
    raw["virtual_servers"]["vs1"]["monitor"] = ["web", "tcp", "ping"]
    raw["virtual_servers"]["vs1"]["monitor_rule"] = {"at_least": 2}
    checker.reconfigure(load_config(tmp_path, raw))
    kept = [s.ident for s in checker.subjects if before.get(s.ident) is s]
    assert "obs/vs/vs1/n1#web" in kept and "obs/vs/vs1/n1#tcp" in kept and "obs/vs/vs2/n1" in kept
    assert "obs/vs/vs1/n1#ping" not in kept
    group = before["obs/vs/vs1/n1#tcp"].group
    assert (
        group is not None
        and group.rule == MonitorRule(2)
        and [p.monitor.name for p in group.parts] == ["web", "tcp", "ping"]
    )
    assert before["obs/vs/vs1/n1#tcp"].flap.state == DOWN  # its verdict went on
    run(clock, 5)
    assert value(store, "obs/vs/vs1/n1") == {
        "up": True,
        "reason": "web: up; tcp: down (tcp failed); ping: up; rule at_least 2: up",
    }
    checker.stopService()


# -- the status


def test_the_status_reason_names_the_monitors(tmp_path: Path) -> None:
    """A server with several monitors: its reason, up or down, carries each node's
    combination (grouped when they agree); one with one monitor reads as before."""
    config = load_config(tmp_path, two_monitor_config())
    store = Store("n1", lambda: 1000.0)
    ok = "web: up; tcp: up; rule all: up"
    bad = "web: up; tcp: down (refused); rule all: down"
    observe(store, "vs", "vs1", "n1", True, ok)
    observe(store, "vs", "vs1", "n2", True, ok)
    observe(store, "vs", "vs2", "n1", True, "fine")
    servers, _ = evaluate(config, store)
    assert servers["vs1"].reason == f"up for n1, n2 ({ok})"
    assert servers["vs2"].reason == "up for n1"
    observe(store, "vs", "vs1", "n1", False, bad)
    observe(store, "vs", "vs1", "n2", False, bad)
    servers, _ = evaluate(config, store)
    assert servers["vs1"].reason == f"monitors web, tcp (rule all): n1: {bad}; n2: {bad}"


def test_a_restarted_node_that_finds_the_same_writes_nothing(tmp_path: Path) -> None:
    """After a restart, the verdict and reason held (from the snapshot) that the monitors
    find again, one by one, are no change: not written, not logged."""
    checker, store, clock, checks = make(tmp_path, two_monitor_config())
    clock.advance(100)
    held = {"up": True, "reason": "web: up; tcp: up; rule all: up"}
    store.merge(Record("obs/vs/vs1/n1", held, Version(1, 1, "n1"), 80, clock.seconds()))
    kept = store.get("obs/vs/vs1/n1")
    with capturedLogs() as events:
        checker.startService()
        run(clock, 6)
    assert store.get("obs/vs/vs1/n1") is kept
    assert not [e for e in events if "vs1" in str(e.get("subject", ""))]
    checks.monitor_ok["tcp"] = False
    run(clock, 2)
    assert value(store, "obs/vs/vs1/n1") == {"up": False, "reason": "web: up; tcp: down (tcp failed); rule all: down"}
    checker.stopService()


def test_a_new_rule_that_keeps_the_verdict_rewrites_the_reason_without_a_change(tmp_path: Path) -> None:
    """vs1 up under `all`; reloaded with {at_least: 1} it is still up: within the slowest
    monitor's interval its record says so by the new rule, and no change is logged."""
    raw = two_monitor_config()
    checker, store, clock, _ = make(tmp_path, raw)
    checker.startService()
    run(clock, 6)
    assert value(store, "obs/vs/vs1/n1") == {"up": True, "reason": "web: up; tcp: up; rule all: up"}
    raw["virtual_servers"]["vs1"]["monitor_rule"] = {"at_least": 1}
    with capturedLogs() as events:
        checker.reconfigure(load_config(tmp_path, raw))
        run(clock, 5)
    assert value(store, "obs/vs/vs1/n1") == {"up": True, "reason": "web: up; tcp: up; rule at_least 1: up"}
    assert not [e for e in events if e.get("event") in ("observation", "monitor_observation")]
    checker.stopService()
