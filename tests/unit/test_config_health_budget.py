"""The `health` section: the checker's budget, and monitors that must fit in it.

Same form as test_config_errors.py: each bad config is one problem
`FILE: key.path: problem (line N)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gtmcluster.config.load import load
from gtmcluster.config.model import Health
from tests.support import configs
from tests.unit.test_config_errors import Mutation, assert_form, combined, find, problems_of, put


def servers(n: int, interval: float = 5, timeout: float = 2) -> Mutation:
    """*n* tcp-monitored virtual servers (x0, x1, ...) at *interval* and *timeout*."""

    def apply(config: dict[str, Any]) -> None:
        config["monitors"] = {"m": {"type": "tcp", "interval": interval, "timeout": timeout}}
        for i in range(n):
            config["virtual_servers"][f"x{i}"] = {
                "address": f"10.9.{i // 250}.{i % 250 + 1}",
                "port": 80,
                "datacenter": "DC1",
                "monitor": "m",
            }

    return apply


def link(targets: int, interval: float, timeout: float) -> Mutation:
    def apply(config: dict[str, Any]) -> None:
        config.setdefault("monitors", {})["ping"] = {"type": "icmp", "interval": interval, "timeout": timeout}
        config["links"] = {
            "up": {"datacenter": "DC1", "targets": [f"192.0.2.{i + 1}" for i in range(targets)], "monitor": "ping"}
        }

    return apply


BAD = [
    pytest.param(
        put("health", value={"max_checks_per_second": 0}),
        "health.max_checks_per_second",
        "0 is out of range (1 to 100000)",
        id="rate-zero",
    ),
    pytest.param(
        put("health", value={"max_checks_per_second": "fast"}),
        "health.max_checks_per_second",
        "must be a number from 1 to 100000, not a string",
        id="rate-text",
    ),
    pytest.param(
        put("health", value={"max_in_flight": 0}),
        "health.max_in_flight",
        "0 is out of range (1 to 100000)",
        id="in-flight-zero",
    ),
    pytest.param(
        put("health", value={"max_checks_per_sec": 10}),
        "health.max_checks_per_sec",
        "unknown key (did you mean 'max_checks_per_second'?)",
        id="typo",
    ),
    pytest.param(
        combined(servers(5001), put("health", value={"max_in_flight": 3000})),
        "health.max_checks_per_second",
        "the monitors need 1,000.2 checks a second (5001 monitored virtual servers), more than 1000: raise it",
        id="over-the-default-rate",
    ),
    pytest.param(
        combined(servers(100, interval=1, timeout=1), put("health", value={"max_checks_per_second": 50})),
        "health.max_checks_per_second",
        "the monitors need 100 checks a second (100 monitored virtual servers), more than 50",
        id="over-a-set-rate",
    ),
    pytest.param(
        combined(servers(10), link(4, interval=1, timeout=1), put("health", value={"max_checks_per_second": 5})),
        "health.max_checks_per_second",
        "the monitors need 6 checks a second (10 monitored virtual servers and 4 link targets), more than 5",
        id="links-count-per-target",
    ),
    pytest.param(
        combined(servers(1000, interval=5, timeout=5), put("health", value={"max_in_flight": 1249})),
        "health.max_in_flight",
        "if every target hung until its timeout, 1,000 checks would run at once (1000 monitored "
        "virtual servers); with a quarter more to spare it must be at least 1,250, not 1249: raise it "
        "(each check in flight holds a socket)",
        id="over-in-flight",
    ),
    pytest.param(
        servers(4001, interval=5, timeout=3),
        "health.max_in_flight",
        "2,401 checks would run at once (4001 monitored virtual servers); with a quarter more to "
        "spare it must be at least 3,001, not 2500",
        id="over-the-default-in-flight",
    ),
]


@pytest.mark.parametrize(("mutation", "path", "fragment"), BAD)
def test_bad_health_settings(tmp_path: Path, mutation: Mutation, path: str, fragment: str) -> None:
    file, problems = problems_of(tmp_path, mutation)
    problem = find(problems, path, fragment)
    assert_form(problem, file, path)
    assert len(problems) == 1, problems


def test_defaults(tmp_path: Path) -> None:
    """Without a health section: 2500 checks in flight, 1000 started a second."""
    config = load(configs.write(tmp_path, configs.base()))
    assert config.health == Health(2500, 1000.0)


def test_values_are_read(tmp_path: Path) -> None:
    raw = configs.base()
    raw["health"] = {"max_in_flight": 300, "max_checks_per_second": 250.5}
    config = load(configs.write(tmp_path, raw))
    assert config.health == Health(300, 250.5)


def test_monitors_exactly_at_the_budget_are_accepted(tmp_path: Path) -> None:
    """5,000 servers at interval 5 and timeout 2 are 1,000 checks a second and, every target
    hanging, 2,000 in flight (2,500 with the headroom): exactly the defaults."""
    raw = configs.base()
    servers(5000)(raw)
    config = load(configs.write(tmp_path, raw))
    assert sum(1 for vs in config.virtual_servers.values() if vs.monitors) == 5000
