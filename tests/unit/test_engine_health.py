"""How health reaches decisions: drain with persistence, slow start shares, failure responses."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import dns.flags
import dns.rcode
import pytest

from gtmcluster.lb.context import Client
from gtmcluster.lb.trace import Action
from gtmcluster.node import Node
from tests.support import configs
from tests.support.dnsclient import addresses, parse, query
from tests.support.lbfakes import FakeAvailability, FakeClock, load_config

A = 1


def node_with(tmp_path: Path, raw: dict[str, Any], availability: FakeAvailability, clock: FakeClock) -> Node:
    return Node(load_config(tmp_path, raw), "n1", clock=clock, rng=random.Random(3), availability=availability)


def rr_config(**wideip: Any) -> dict[str, Any]:
    raw = configs.base()
    raw["pools"]["p"]["load_balancing"] = {"preferred": "round_robin"}
    raw["wideips"]["gslb.example.test"].update(wideip)
    return raw


def client(address: str) -> Client:
    import ipaddress

    return Client.from_ldns(ipaddress.ip_address(address))


def test_drain_keeps_persisted_clients_and_takes_no_new_ones(tmp_path: Path) -> None:
    """A draining server keeps the clients persistence holds on it, and gets no new ones."""
    avail, clock = FakeAvailability(), FakeClock()
    node = node_with(tmp_path, rr_config(persistence={"ttl": 600, "ipv4_prefix": 24}), avail, clock)
    wideip = next(iter(node.config.wideips.values()))
    held: dict[str, str] = {}
    for i in range(6):
        decision = node.decide(wideip, A, client(f"198.18.{i}.1"))
        held[f"198.18.{i}.1"] = decision.members[0]
    drained = held["198.18.0.1"]
    avail.draining.add(drained)
    again = node.decide(wideip, A, client("198.18.0.1"))
    assert again.members == (drained,) and again.method == "persistence"
    fresh = [node.decide(wideip, A, client(f"198.19.{i}.1")).members[0] for i in range(9)]
    assert drained not in fresh
    clock.advance(601)  # the persistence ends: the client moves
    assert node.decide(wideip, A, client("198.18.0.1")).members[0] != drained


def test_persisted_clients_leave_a_server_that_goes_down(tmp_path: Path) -> None:
    """Persistence never holds a client on a server that is down."""
    avail, clock = FakeAvailability(), FakeClock()
    node = node_with(tmp_path, rr_config(persistence={"ttl": 600}), avail, clock)
    wideip = next(iter(node.config.wideips.values()))
    first = node.decide(wideip, A, client("198.18.0.1")).members[0]
    avail.down.add(first)
    assert node.decide(wideip, A, client("198.18.0.1")).members[0] != first


def test_slow_start_reduces_a_returning_members_share(tmp_path: Path) -> None:
    """Under round robin a member at 20% gets about a fifth of a full member's answers."""
    avail, clock = FakeAvailability(weights={"vs2": 0.2}), FakeClock()
    node = node_with(tmp_path, rr_config(), avail, clock)
    wideip = next(iter(node.config.wideips.values()))
    counts = Counter(node.decide(wideip, A, client("198.18.0.1")).members[0] for _ in range(2200))
    assert counts["vs1"] == counts["vs3"] == 1000
    assert counts["vs2"] == 200
    decision = node.decide(wideip, A, client("198.18.0.1"))
    assert "slow start: vs2 at 20%" in decision.trace[-1].note


def test_slow_start_scales_ratio_weights(tmp_path: Path) -> None:
    """Under ratio the ramping member's weight is scaled, the others keep theirs."""
    raw = rr_config()
    raw["pools"]["p"]["members"] = [{"virtual_server": "vs1", "ratio": 3}, {"virtual_server": "vs2", "ratio": 1}]
    raw["pools"]["p"]["load_balancing"] = {"preferred": "ratio"}
    avail = FakeAvailability(weights={"vs1": 0.5})
    node = node_with(tmp_path, raw, avail, FakeClock())
    wideip = next(iter(node.config.wideips.values()))
    counts = Counter(node.decide(wideip, A, client("198.18.0.1")).members[0] for _ in range(500))
    assert counts["vs1"] == 300 and counts["vs2"] == 200  # 3 x 0.5 : 1


def test_slow_start_does_not_touch_other_methods(tmp_path: Path) -> None:
    """Topology still picks the best member while it ramps (the ramp is a share, not a block)."""
    raw = configs.base()
    avail = FakeAvailability(weights={"vs1": 0.1})
    node = node_with(tmp_path, raw, avail, FakeClock())
    wideip = next(iter(node.config.wideips.values()))
    assert node.decide(wideip, A, client("127.0.1.9")).members == ("vs1",)


@pytest.mark.parametrize(
    ("response", "rcode", "aa", "authority"),
    [
        ("nxdomain", dns.rcode.NXDOMAIN, True, 1),
        ("servfail", dns.rcode.SERVFAIL, False, 0),
        ("refused", dns.rcode.REFUSED, False, 0),
    ],
)
def test_failure_response_rcodes(tmp_path: Path, response: str, rcode: int, aa: bool, authority: int) -> None:
    """When every pool is down the wide IP answers with its configured failure rcode."""
    avail = FakeAvailability(down={"vs1", "vs2", "vs3", "vs1-6", "vs2-6"})
    node = node_with(tmp_path, rr_config(failure_response=response), avail, FakeClock())
    reply = node.responder.handle(query("gslb.example.test"), "127.0.0.1")
    assert reply is not None
    msg = parse(reply)
    assert msg.rcode() == rcode
    assert bool(msg.flags & dns.flags.AA) == aa
    assert len(msg.authority) == authority and not msg.answer


def test_failure_response_fallback_ip_and_drop(tmp_path: Path) -> None:
    """fallback_ip answers the wide IP's addresses of the asked family; drop sends nothing."""
    avail = FakeAvailability(down={"vs1", "vs2", "vs3", "vs1-6", "vs2-6"})
    raw = rr_config(failure_response="fallback_ip", fallback_ip=["192.0.2.250", "2001:db8::250"])
    node = node_with(tmp_path, raw, avail, FakeClock())
    assert addresses(parse(node.responder.handle(query("gslb.example.test"), "127.0.0.1") or b"")) == ["192.0.2.250"]
    aaaa = parse(node.responder.handle(query("gslb.example.test", "AAAA"), "127.0.0.1") or b"")
    assert addresses(aaaa) == ["2001:db8::250"]
    wideip = next(iter(node.config.wideips.values()))
    decision = node.decide(wideip, A, client("127.0.0.1"))
    assert decision.trace[-1].slot == "failure_response"
    dropping = node_with(tmp_path / "d", rr_config(failure_response="drop"), avail, FakeClock())
    assert dropping.responder.handle(query("gslb.example.test"), "127.0.0.1") is None


def test_default_failure_response_is_the_static_zone(tmp_path: Path) -> None:
    """Without failure_response, the static zone answers (NODATA when it has nothing there)."""
    avail = FakeAvailability(down={"vs1", "vs2", "vs3"})
    node = node_with(tmp_path, rr_config(), avail, FakeClock())
    wideip = next(iter(node.config.wideips.values()))
    assert node.decide(wideip, A, client("127.0.0.1")).action is Action.RETURN_TO_DNS
    msg = parse(node.responder.handle(query("gslb.example.test"), "127.0.0.1") or b"")
    assert msg.rcode() == dns.rcode.NOERROR and not msg.answer


def test_last_resort_comes_before_the_failure_response(tmp_path: Path) -> None:
    """A last resort pool with an available member answers before the failure response."""
    raw = rr_config(failure_response="servfail", last_resort_pool="p6")
    raw["wideips"]["gslb.example.test"]["pools"] = ["p"]
    raw["wideips"]["gslb.example.test"]["type"] = ["A", "AAAA"]
    raw["pools"]["p"]["members"] = ["vs1", "vs2", "vs3", "vs1-6"]
    raw["pools"]["p6"]["load_balancing"] = {"preferred": "global_availability"}
    avail = FakeAvailability(down={"vs1", "vs2", "vs3", "vs1-6"})
    node = node_with(tmp_path, raw, avail, FakeClock())
    aaaa = parse(node.responder.handle(query("gslb.example.test", "AAAA"), "127.0.0.1") or b"")
    assert addresses(aaaa) == ["2001:db8:2::1"]
    a = parse(node.responder.handle(query("gslb.example.test"), "127.0.0.1") or b"")
    assert a.rcode() == dns.rcode.SERVFAIL
