"""Deciding by the client (issue 36) through a node: the ECS subnet's own RTTs first, with
the answer's scope that subnet's prefix; the LDNS's measured client population next
(scope 0); the LDNS's own paths when neither has a figure for every data center; and a kept
decision ends when a client record it read changes."""

from __future__ import annotations

import ipaddress
import random
from pathlib import Path
from typing import Any

from gtmcluster.config.load import load
from gtmcluster.lb.context import Client
from gtmcluster.node import Node
from gtmcluster.proximity.clients import merge_sample
from gtmcluster.state import keys
from tests.support import configs
from tests.support.dnsclient import addresses, ecs_option, parse, query
from tests.unit.test_dynamic import LDNS, path

CLIENT = "198.51.100.0/24"


def node(tmp_path: Path, **proximity: Any) -> Node:
    raw = configs.base()
    raw["pools"]["p"]["load_balancing"] = {"preferred": "rtt", "alternate": "topology"}
    raw["rum"] = {"targets": {"DC1": "https://dc1.example.net/o", "DC2": "https://dc2.example.net/o"}, "min_samples": 3}
    raw["dns_server"]["ecs_trusted"] = ["198.18.0.0/15"]  # the LDNS's ECS is taken
    if proximity:
        raw["proximity"] = proximity
    n = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: 1000.0, rng=random.Random(5))
    n.ready = True
    # the LDNS is nearer DC2; its clients (and the client subnet) nearer DC1
    for dc, us in (("DC1", 120_000), ("DC2", 20_000), ("DC3", 80_000)):
        path(n, dc, us)
    return n


def client(n: Node, subnet: str, **rtts: int) -> None:
    for dc, us in rtts.items():
        n.store.put(keys.client(subnet, dc), merge_sample(None, us, "rum", "n1"), ttl=3600)


def ask(n: Node, ecs: str | None = None) -> tuple[list[str], int | None]:
    reply = n.responder.handle(query("gslb.example.test", ecs=ecs) if ecs else query("gslb.example.test"), LDNS)
    assert reply is not None
    msg = parse(reply)
    option = ecs_option(msg)
    return addresses(msg), None if option is None else option.scopelen


def test_the_client_subnets_own_rtt_decides_with_its_prefix_as_scope(tmp_path: Path) -> None:
    n = node(tmp_path)
    assert ask(n, CLIENT) == (["10.0.2.1"], 0)  # no client figures: the LDNS's paths
    client(n, CLIENT, DC1=15_000, DC2=110_000, DC3=90_000)
    assert ask(n, CLIENT) == (["10.0.1.1"], 24)
    assert ask(n, "198.51.100.128/25") == (["10.0.1.1"], 24)  # a longer ECS reads its /24
    assert ask(n, "198.51.0.0/16") == (["10.0.2.1"], 0)  # a shorter one: never wider than known
    assert ask(n) == (["10.0.2.1"], None)  # no ECS: the LDNS's own paths
    # the figures change: the kept decision ends with the record it read
    client(n, CLIENT, DC1=150_000)
    assert ask(n, CLIENT) == (["10.0.3.1"], 24)


def test_a_client_subnet_measured_from_some_data_centers_only_does_not_decide(tmp_path: Path) -> None:
    n = node(tmp_path)
    client(n, CLIENT, DC1=15_000, DC2=110_000)  # DC3 never measured
    assert ask(n, CLIENT) == (["10.0.2.1"], 0)


def test_the_ldns_population_decides_once_it_has_enough_samples(tmp_path: Path) -> None:
    n = node(tmp_path)
    pop = {"subnets": {"198.51.100.0_24": 2}, "rtt": {"DC1": 10_000, "DC2": 90_000, "DC3": 95_000}, "n": 2}
    n.store.put(keys.population(LDNS), pop, ttl=3600)
    assert ask(n) == (["10.0.2.1"], None)  # two beacons behind it, min_samples 3
    n.store.put(keys.population(LDNS), {**pop, "n": 3}, ttl=3600)
    assert ask(n) == (["10.0.1.1"], None)
    assert ask(n, "203.0.113.0/24") == (["10.0.1.1"], 0)  # an unmeasured client: LDNS-wide


def test_the_configured_order_wins(tmp_path: Path) -> None:
    n = node(tmp_path, sources=["ldns", "client"])
    client(n, CLIENT, DC1=15_000, DC2=110_000, DC3=90_000)
    assert ask(n, CLIENT) == (["10.0.2.1"], 0)


def test_an_untrusted_resolvers_client_subnet_is_not_taken(tmp_path: Path) -> None:
    raw = configs.base()
    raw["pools"]["p"]["load_balancing"] = {"preferred": "rtt"}
    raw["rum"] = {"targets": {"DC1": "https://dc1.example.net/o"}}
    other = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: 1000.0)
    other.ready = True
    for dc, us in (("DC1", 120_000), ("DC2", 20_000), ("DC3", 80_000)):
        path(other, dc, us)
    client(other, CLIENT, DC1=15_000, DC2=110_000, DC3=90_000)
    assert ask(other, CLIENT)[0] == ["10.0.2.1"]  # 198.18.0.53 is not in ecs_trusted there


def test_explain_names_the_source(tmp_path: Path) -> None:
    n = node(tmp_path)
    client(n, CLIENT, DC1=15_000, DC2=110_000, DC3=90_000)
    wideip = next(iter(n.config.wideips.values()))
    who = Client(ipaddress.ip_address("198.51.100.0"), 24, ipaddress.ip_address(LDNS), True)
    decision = n.balancer.explain(wideip, 1, who)
    notes = " ".join(step.note for step in decision.trace)
    assert "client subnet 198.51.100.0/24's own RTT" in notes, notes
    assert decision.scope == 24
