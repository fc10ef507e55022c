"""A reload is all or nothing (gtmcluster/service.py `NodeService.switch`), on the node's
whole service tree built in-process (`make_service`, a memory reactor): when one part
cannot take the new config, the reload is refused with the part and the reason, and every
part (answers, DNS, health checks, probes, the sync group) keeps the old one; when all
can, all switch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.config.changes import between
from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.nodeservice import NodeService
from gtmcluster.service import Sockets, make_service
from tests.support import configs


def raw_config(tmp_path: Path, changed: bool) -> dict[str, Any]:
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    raw["monitors"] = {"tcp": {"type": "tcp", "interval": 5, "timeout": 2, "port": 80}}
    raw["virtual_servers"]["vs1"]["monitor"] = "tcp"
    if changed:  # a new monitored server (with a new monitor: a check is made per monitor),
        # other DNS limits, another probe rate, a new zone TTL
        raw["monitors"]["tcp81"] = {"type": "tcp", "interval": 5, "timeout": 2, "port": 81}
        raw["virtual_servers"]["vs2"]["monitor"] = "tcp81"
        raw["dns_server"] = {"tcp_idle_timeout": 3}
        raw["prober"] = {"max_per_second": 7}
        raw["pools"]["p"]["ttl"] = 17
        raw["sync_group"].update({"heartbeat_interval": 0.5, "heartbeat_timeout": 2})
    return raw


@pytest.fixture
def service(tmp_path: Path) -> NodeService:
    path = configs.write(tmp_path, raw_config(tmp_path, changed=False))
    top = make_service(load(path), "n1", MemoryReactorClock(), Sockets(dns=[]))
    top.read_config = lambda path, own_dir: defer.succeed(load(path, own_dir))
    configs.write(tmp_path, raw_config(tmp_path, changed=True))  # what the reload reads
    return top


def state(top: NodeService) -> dict[str, Any]:
    """What each part runs on."""
    assert top.dns is not None and top.checker is not None and top.probes is not None
    return {
        "generation": top.node.generation,
        "config": top.node.config,
        "dns responder": top.dns.responder,
        "dns idle timeout": top.dns.tcp.idle_timeout,
        "checked": sorted(s.key for s in top.checker.subjects),
        "probe rate": top.probes.budget.prober.max_per_second,
        "sync digest": top.replicator.config_digest,
        "heartbeats": (top.replicator.heartbeat_interval, top.replicator.heartbeat_timeout),
    }


def reload(top: NodeService) -> list[str]:
    results: list[list[str]] = []
    top.reload().addCallback(results.append)
    assert results, "the reload did not finish"
    return results[0]


def refuse(top: NodeService, part: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make *part* unable to take a new config (it raises while preparing)."""

    def cannot(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("out of luck")

    if part == "answers":
        monkeypatch.setattr(top.node, "prepare_reload", cannot)
    elif part == "DNS":
        monkeypatch.setattr(top.dns, "prepare", cannot)
    elif part == "health checks":
        assert top.checker is not None
        monkeypatch.setattr(top.checker, "make_check", cannot)  # the new monitor's check
    else:
        monkeypatch.setattr("gtmcluster.nodeparts.Budget", cannot)


@pytest.mark.parametrize("part", ["answers", "DNS", "health checks", "probes"])
def test_a_part_that_cannot_take_the_new_config_leaves_every_part_on_the_old_one(
    service: NodeService, part: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On main, a part that raised midway left the node half reloaded: the generation went
    up, while DNS, health checks and peers kept the old config (POST /reload said 500)."""
    before = state(service)
    refuse(service, part, monkeypatch)
    problems = reload(service)
    assert len(problems) == 1 and f"{part} cannot take the new config: RuntimeError: out of luck" in problems[0]
    assert state(service) == before
    monkeypatch.undo()
    assert reload(service) == []
    after = state(service)
    assert after["generation"] == before["generation"] + 1
    assert after["dns responder"] is service.node.responder is not before["dns responder"]
    assert after["dns idle timeout"] == 3
    assert after["checked"] == ["obs/vs/vs1/n1", "obs/vs/vs2/n1"]
    assert after["probe rate"] == 7
    assert after["heartbeats"] == (0.5, 2)
    config: Config = after["config"]
    assert after["sync digest"] == config.digest != before["sync digest"]


def test_a_switch_in_steps_builds_each_part_in_its_own_step_and_changes_nothing_until_the_last(
    service: NodeService,
) -> None:
    """A reload on a running reactor switches in steps (a few milliseconds per turn): each
    part builds what it needs in a step of its own, and the node runs on the old config,
    every part of it, until the last step switches them all."""
    before = state(service)
    new = load(service.config_path)
    steps = service.switching(new, None, between(service.node.config, new))
    taken = 0
    while True:
        try:
            next(steps)
        except StopIteration:
            break
        taken += 1
        assert state(service) == before, f"a part switched in step {taken}"
    assert taken >= 3  # answers, DNS, health checks: one step each
    after = state(service)
    assert after["config"] is new and after["generation"] == before["generation"] + 1
    assert after["checked"] == ["obs/vs/vs1/n1", "obs/vs/vs2/n1"] and after["probe rate"] == 7
