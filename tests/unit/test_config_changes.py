"""What a reload changes, by name (gtmcluster/config/changes.py), and the parts that react
to a reload looking names up instead of comparing every definition."""

from __future__ import annotations

from pathlib import Path

from twisted.internet import defer, task

from gtmcluster.config.changes import Changes, between
from gtmcluster.config.monitoring import Monitor
from gtmcluster.health.checker import HealthChecker
from gtmcluster.probe.base import Check, Result
from gtmcluster.state.store import Store
from tests.support.healthcfg import health_config, load_config


def test_added_removed_and_changed_definitions_are_named_and_equal_ones_are_not(tmp_path: Path) -> None:
    old = load_config(tmp_path, health_config())
    assert between(old, load_config(tmp_path, health_config())) == Changes(frozenset(), frozenset())
    raw = health_config()
    raw["virtual_servers"]["vs1"]["port"] = 8080  # changed
    del raw["virtual_servers"]["vs3"]  # removed
    raw["pools"]["p"]["members"].remove("vs3")
    raw["virtual_servers"]["vs9"] = {"address": "10.0.9.1", "datacenter": "DC1"}  # added
    raw["links"]["l1"]["targets"] = ["10.9.0.1"]
    changes = between(old, load_config(tmp_path, raw))
    assert changes.virtual_servers == {"vs1", "vs3", "vs9"}
    assert changes.links == {"l1"}


def test_the_checker_keeps_what_the_changes_do_not_name(tmp_path: Path) -> None:
    """Given the changes, the checker compares nothing itself: a server the changes do not
    name keeps its subject even though its definition is another object."""
    clock = task.Clock()

    def factory(monitor: Monitor) -> Check:
        return lambda target: defer.succeed(Result(True, "fine", 0.001))

    checker = HealthChecker(load_config(tmp_path, health_config()), Store("n1", clock.seconds), clock, "n1", factory)
    before = {s.key: s for s in checker.subjects}
    raw = health_config()
    raw["virtual_servers"]["vs1"]["port"] = 8080
    raw["virtual_servers"]["vs2"]["port"] = 8080
    new = load_config(tmp_path, raw)
    checker.prepare(new, Changes(frozenset({"vs1"}), frozenset()))()
    renewed = sorted(s.key for s in checker.subjects if before[s.key] is not s)
    assert renewed == ["obs/vs/vs1/n1"]  # vs2 changed too, but the changes did not say so
