"""The node's open-file limit: raised to the hard limit at start, logged, and a warning
when even that is below what the TCP client caps may need. `resource` is faked here: the
real limits of the test process stay as they are."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
from twisted.logger import capturedLogs

from gtmcluster import limits
from gtmcluster.config.load import load
from tests.support import configs


class FakeLimits:
    def __init__(self, soft: int, hard: int, refuse: bool = False):
        self.soft = soft
        self.hard = hard
        self.refuse = refuse

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def setrlimit(self, which: int, value: tuple[int, int]) -> None:
        if self.refuse:
            raise ValueError("not allowed")
        self.soft, self.hard = value


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeLimits:
    fake = FakeLimits(1024, 524288)
    monkeypatch.setattr(resource, "getrlimit", fake.getrlimit)
    monkeypatch.setattr(resource, "setrlimit", fake.setrlimit)
    return fake


def test_the_soft_limit_is_raised_to_the_hard_one_and_logged(fake: FakeLimits) -> None:
    """systemd's 1024 becomes the hard limit, and the log says so."""
    with capturedLogs() as events:
        assert limits.raise_open_files(2256) == (1024, 524288)
    assert fake.soft == 524288
    assert [e["event"] for e in events] == ["open_files_raised"]
    assert events[0]["before"] == 1024 and events[0]["after"] == 524288


def test_a_hard_limit_below_the_need_is_warned_about(fake: FakeLimits) -> None:
    fake.hard = 1500
    with capturedLogs() as events:
        limits.raise_open_files(2256)
    assert [e["event"] for e in events] == ["open_files_raised", "open_files_low"]
    assert events[1]["limit"] == 1500 and events[1]["needed"] == 2256


def test_a_refused_raise_is_a_warning_not_a_crash(fake: FakeLimits) -> None:
    fake.refuse = True
    with capturedLogs() as events:
        assert limits.raise_open_files(100) == (1024, 1024)
    assert "could not raise" in events[0]["log_format"]


def test_nothing_is_logged_when_the_limit_is_already_high(fake: FakeLimits) -> None:
    fake.soft = fake.hard
    with capturedLogs() as events:
        assert limits.raise_open_files(2256) == (524288, 524288)
    assert events == []


def test_the_need_counts_every_dns_address_and_the_health_checks_in_flight(tmp_path: Path) -> None:
    """tcp_max_clients applies per listener: two addresses need twice the descriptors; each
    health check in flight may hold one too, and each API connection."""
    raw = configs.base()
    raw["sync_group"]["members"][0]["dns"] = ["127.0.0.1:5353", "[::1]:5353"]
    raw["dns_server"] = {"tcp_max_clients": 3000}
    raw["health"] = {"max_in_flight": 500}
    raw["api"] = {"limits": {"connections": 300}}
    config = load(configs.write(tmp_path, raw))
    assert len(config.sync_group.members) == 1  # (no peer port)
    assert limits.needed_open_files(config, "n1") == 2 * 3000 + 500 + 300 + limits.SPARE


def test_the_need_counts_the_peer_ports_connections(tmp_path: Path) -> None:
    """With peers: the connections still in TLS or Hello (64, and 8 from each member's own
    address, which the 64 do not count), and per other member the incoming ones it may hold
    (4) and the one this node dials."""
    raw = configs.add_member(configs.add_member(configs.base(), "n2", "DC2", "127.0.0.2"), "n3", "DC3", "127.0.0.3")
    config = load(configs.write(tmp_path, raw))
    alone = limits.needed_open_files(config, "n1") - (64 + 2 * (8 + 4 + 1))
    assert alone == config.dns_server.tcp_max_clients + config.health.max_in_flight + 256 + limits.SPARE
