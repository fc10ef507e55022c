"""Balancer.decide with LDNS persistence: a client network's answer kept for the TTL,
refreshed past half of it, decided anew when its member goes down, per family and type, and
at the persistence prefix for a shorter client subnet."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from gtmcluster.config.model import Config, WideIP
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_AAAA
from gtmcluster.lb.context import Availability, Client
from gtmcluster.lb.trace import Decision, Step
from gtmcluster.node import Node
from tests.support.lbfakes import FakeAvailability, FakeClock, ecs_client, load_config
from tests.unit.test_engine import R1, R1_NEIGHBOUR, R2, WIP, addresses, ask, balancer, cfg

# -- LDNS persistence -----------------------------------------------------------------------

PERSIST_POOLS = {"p": {"members": ["vs1", "vs2", "vs3"]}, "p6": {"members": ["vs1-6", "vs2-6"]}}
PERSIST = {"ttl": 100, "ipv4_prefix": 24, "ipv6_prefix": 56}


def persist_node(
    tmp_path: Path, availability: Availability | None = None, persistence: dict[str, Any] | None = None
) -> tuple[Node, Config, FakeClock]:
    wide: dict[str, Any] = {"type": ["A", "AAAA"], "pools": ["p", "p6"], "pool_lb": "global_availability"}
    wide["persistence"] = persistence or PERSIST
    config = load_config(tmp_path, cfg(PERSIST_POOLS, wide))
    clock = FakeClock(1000.0)
    return Node(config, "n1", clock=clock, rng=random.Random(1), availability=availability), config, clock


def test_persistence_keeps_the_answer_for_the_client_network(tmp_path: Path) -> None:
    """A client network keeps its first answer although round robin would move on; the /24 shares it."""
    node, config, _ = persist_node(tmp_path)
    first = ask(node, config, R1)
    assert (first.members, first.method) == (("vs1",), "round_robin")
    assert first.persist is not None and first.persist.key.network == "198.51.100.0/24"
    for who in (R1, R1, R1_NEIGHBOUR, "198.51.100.0"):
        d = ask(node, config, who)
        assert (d.members, d.method, addresses(d)) == (("vs1",), "persistence", ["10.0.1.1"])
    # a client in another /24 gets the rotation's next member: persistence hits did not advance it
    assert ask(node, config, R2).members == ("vs2",)
    assert len(node.persistence) == 2


def test_persistence_trace_and_scope(tmp_path: Path) -> None:
    """A persistence hit is one trace step naming the client network, and the scope is the prefix."""
    node, config, _ = persist_node(tmp_path)
    assert ask(node, config, R1).scope == 24
    d = ask(node, config, R1_NEIGHBOUR)
    assert d.trace == (
        Step(f"wideip {WIP}", "persistence", "persistence", ("198.51.100.0/24",), ("vs1",), note="record for pool p"),
    )
    assert d.scope == 24
    assert d.ttl == 30


def test_persistence_expires_after_ttl(tmp_path: Path) -> None:
    """After its ttl (by the injected clock) the record is gone and the answer is decided anew."""
    node, config, clock = persist_node(tmp_path)
    assert ask(node, config, R1).members == ("vs1",)
    clock.advance(99)
    assert ask(PersistenceOnly(node), config, R1).method == "persistence"
    clock.advance(1)
    d = ask(node, config, R1)
    assert (d.members, d.method) == (("vs2",), "round_robin")
    assert d.persist is not None and d.persist.written == clock.now


class PersistenceOnly:
    """Asks the node's balancer without storing what it returns (so a read does not refresh)."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def decide(self, wideip: WideIP, qtype: int, client: Client) -> Decision:
        return self.node.balancer.decide(wideip, qtype, client)


def test_persistence_refreshed_only_after_half_its_ttl(tmp_path: Path) -> None:
    """A hit refreshes the record only once it is older than half its ttl; the refresh extends its life."""
    node, config, clock = persist_node(tmp_path)
    start = clock.now
    ask(node, config, R1)
    clock.advance(50)
    d = ask(node, config, R1)
    assert d.method == "persistence" and d.persist is None
    clock.advance(1)
    d = ask(node, config, R1)
    assert d.method == "persistence"
    assert d.persist is not None and d.persist.written == start + 51
    clock.now = start + 150  # past the first record's expiry, inside the refreshed one's
    d = ask(PersistenceOnly(node), config, R1)
    assert (d.members, d.method) == (("vs1",), "persistence")
    clock.now = start + 151
    assert ask(node, config, R1).method == "round_robin"


def test_persistence_redecided_when_the_member_goes_down(tmp_path: Path) -> None:
    """A persisted member that goes down is replaced, and the client keeps the new one afterwards."""
    avail = FakeAvailability()
    node, config, _ = persist_node(tmp_path, avail)
    assert ask(node, config, R1).members == ("vs1",)
    avail.down.add("vs1")
    d = ask(node, config, R1)
    assert d.method == "round_robin"
    assert d.members in (("vs2",), ("vs3",))
    assert d.trace[0].slot == "persistence"
    assert d.trace[0].result == ()
    assert "no longer available" in d.trace[0].note
    assert d.persist is not None and d.persist.members == d.members
    avail.down.clear()
    again = ask(node, config, R1)
    assert (again.members, again.method) == (d.members, "persistence")


def test_persistence_ipv6_prefix_and_types_are_separate(tmp_path: Path) -> None:
    """IPv6 clients persist per /56; A and AAAA answers persist under separate keys."""
    node, config, _ = persist_node(tmp_path)
    d = ask(node, config, "2001:db8:1:2300::1", TYPE_AAAA)
    assert d.members == ("vs1-6",)
    assert d.persist is not None and d.persist.key.network == "2001:db8:1:2300::/56"
    assert ask(node, config, "2001:db8:1:23ff::99", TYPE_AAAA).method == "persistence"
    assert ask(node, config, "2001:db8:1:2400::1", TYPE_AAAA).members == ("vs2-6",)
    # the same client network asking A gets its own decision and record
    a = ask(node, config, "2001:db8:1:2300::1", TYPE_A)
    assert (a.members, a.method) == (("vs1",), "round_robin")
    assert len(node.persistence) == 3


def test_persistence_with_a_short_client_subnet_holds_its_first_network_at_the_prefix(tmp_path: Path) -> None:
    """An ECS client with a /16 source prefix is held as its zero-padded address's /24 (the
    persistence prefix), and the answer says scope /24: it is that /24's answer, not the
    /16's (issue 32; tests/unit/test_ecs_scope.py)."""
    node, config, _ = persist_node(tmp_path)
    d = ask(node, config, ecs_client("198.51.0.0/16", R2))
    assert d.persist is not None and d.persist.key.network == "198.51.0.0/24"
    assert d.scope == 24


def test_balancer_alone_does_not_store_records(tmp_path: Path) -> None:
    """The balancer returns the record to write; the node is what stores it."""
    wide = {"type": "A", "pools": ["p"], "persistence": PERSIST}
    config = load_config(tmp_path, cfg(PERSIST_POOLS, wide))
    b = balancer(config)
    assert [ask(b, config, R1).method for _ in range(2)] == ["round_robin", "round_robin"]
