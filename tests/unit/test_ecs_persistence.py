"""Whose client subnet counts, and whose persistence a query may create or read.

A resolver's EDNS client subnet option is used only when the resolver is in
`dns_server.ecs_trusted`; persistence of a client known by its subnet is kept per resolver
(the resolver's network and the client's), so no resolver can pin the answer another
resolver's clients get. Each test asks through the fast path and the general path.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.api.proximity import explain
from gtmcluster.config.load import load
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.node import Node
from tests.support import configs
from tests.support.dnsclient import addresses, ecs_option, parse, query

WIDEIP = "gslb.example.test"
DC1, DC2, DC3 = "10.0.1.1", "10.0.2.1", "10.0.3.1"


def persistent(config: dict[str, Any]) -> None:
    """Persistence per /24; 127.0.8.200 alone is in a region of its own (DC3), the rest of
    127.0.8.0/24 in one going to DC2."""
    config["regions"]["lone"] = ["127.0.8.200/32"]
    config["regions"]["victims"] = ["127.0.8.0/24"]
    config["topology"][:0] = [
        {"ldns": "region lone", "server": "datacenter DC3", "score": 100},
        {"ldns": "region victims", "server": "datacenter DC2", "score": 50},
    ]
    config["wideips"][WIDEIP]["persistence"] = {"ttl": 600, "ipv4_prefix": 24}


class Asker:
    """A node asked through its fast path (UDP) or its general path alone."""

    def __init__(self, tmp_path: Path, *mutations: Callable[[dict[str, Any]], None]):
        raw = configs.base()
        for mutate in mutations:
            mutate(raw)
        self.node = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: 1000.0, rng=random.Random(7))
        self.fast = FastPath(self.node.responder)

    def ask(self, source: str, ecs: str | None = None, fast: bool = True) -> tuple[list[str], int | None]:
        """(addresses, the reply's ECS scope or None)."""
        wire = query(WIDEIP, ecs=ecs)
        reply = self.fast.handle(wire, source) if fast else self.node.responder.handle(wire, source)
        assert reply is not None
        message = parse(reply)
        option = ecs_option(message)
        return addresses(message), None if option is None else option.scopelen

    def persist_keys(self) -> list[str]:
        return sorted(r.key for r in self.node.store.scan("persist/"))


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "general-path"])
def test_one_resolvers_client_subnet_does_not_pin_another_resolvers_answer(tmp_path: Path, fast: bool) -> None:
    """127.0.0.1 (even a trusted resolver) asking for client 127.0.8.200/32 gets DC3 and
    holds it for that client *through itself*; 127.0.8.53, the real resolver of
    127.0.8.0/24, still gets its own topology answer (DC2), not DC3 "by persistence"."""
    asker = Asker(tmp_path, persistent)
    assert asker.ask("127.0.0.1", "127.0.8.200/32", fast) == ([DC3], 32)
    for _ in range(3):  # (again: the decision kept for the network must not be shared either)
        assert asker.ask("127.0.8.53", fast=fast) == ([DC2], None)
        assert asker.ask("127.0.8.54", fast=fast) == ([DC2], None)
    # the network's own record, written by its own first answer
    assert asker.persist_keys() == [
        f"persist/{WIDEIP}/1/127.0.0.0/24/ecs/127.0.8.0/24",
        f"persist/{WIDEIP}/1/127.0.8.0/24",
    ]


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "general-path"])
def test_a_resolver_keeps_its_clients_answers_and_no_other_resolver_reads_them(tmp_path: Path, fast: bool) -> None:
    """The same resolver asking again for the same client network gets the persisted answer
    (round robin would move on); another resolver sending the same client subnet decides
    anew and has a record of its own."""

    def rr(config: dict[str, Any]) -> None:
        config["pools"]["p"]["load_balancing"] = {"preferred": "round_robin"}

    asker = Asker(tmp_path, persistent, rr)
    first = asker.ask("127.0.0.1", "198.51.100.0/24", fast)
    for source in ("127.0.0.1", "127.0.0.9"):  # (one resolver network at /24)
        assert asker.ask(source, "198.51.100.77/32", fast) == first
    other = asker.ask("127.0.5.1", "198.51.100.0/24", fast)
    assert other[1] == 24
    assert asker.persist_keys() == [
        f"persist/{WIDEIP}/1/127.0.0.0/24/ecs/198.51.100.0/24",
        f"persist/{WIDEIP}/1/127.0.5.0/24/ecs/198.51.100.0/24",
    ]


def only_127_0_1_trusted(config: dict[str, Any]) -> None:
    config["dns_server"]["ecs_trusted"] = ["127.0.1.0/24"]


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "general-path"])
def test_the_client_subnet_of_an_untrusted_resolver_is_ignored_with_scope_0(tmp_path: Path, fast: bool) -> None:
    """From a resolver outside dns_server.ecs_trusted the option is echoed with scope 0 and
    the answer is the resolver's own (127.0.2.9 is in r2: DC2, whatever subnet it names);
    a trusted resolver's subnet decides (203.0.113.0/24 is in r2 too, 198.51.100.0/24 in r1)."""
    asker = Asker(tmp_path, only_127_0_1_trusted)
    assert asker.ask("127.0.2.9", "198.51.100.0/24", fast) == ([DC2], 0)
    assert asker.ask("127.0.2.9", "198.51.100.0/24", fast) == ([DC2], 0)
    assert asker.ask("127.0.1.9", "203.0.113.0/24", fast) == ([DC2], 24)
    assert asker.ask("127.0.1.9", "198.51.100.0/24", fast) == ([DC1], 24)


def test_an_untrusted_resolver_varying_its_client_subnet_makes_one_record(tmp_path: Path) -> None:
    """A single host sending a thousand client subnets creates one persistence record (its
    own network's), not a thousand; a trusted resolver creates one per client network."""
    asker = Asker(tmp_path, persistent, only_127_0_1_trusted)
    for i in range(1000):
        asker.ask("127.0.2.9", f"100.{64 + i // 256}.{i % 256}.0/24")
    assert asker.persist_keys() == [f"persist/{WIDEIP}/1/127.0.2.0/24"]
    for i in range(10):
        asker.ask("127.0.1.9", f"100.64.{i}.0/24")
    assert len(asker.persist_keys()) == 11


def test_explain_applies_the_same_trust(tmp_path: Path) -> None:
    """`gtmcluster explain --subnet` decides as a query would: the subnet counts only for
    a trusted LDNS, and the answer says so."""
    asker = Asker(tmp_path, only_127_0_1_trusted)
    untrusted = explain(asker.node, {"wideip": WIDEIP, "ldns": "127.0.2.9", "subnet": "198.51.100.0/24"})
    assert untrusted["answer"] == [DC2]  # 127.0.2.9's own region, not the subnet's (r1: DC1)
    assert "ignored" in untrusted["client"]["keys"]
    trusted = explain(asker.node, {"wideip": WIDEIP, "ldns": "127.0.1.9", "subnet": "198.51.100.0/24"})
    assert trusted["answer"] == [DC1] and trusted["scope"] == 24
