"""An ECS answer holds for every address inside the scope it claims (RFC 7871 7.2.1, 7.3.1).

A trusted resolver may send a client subnet shorter than what decides the answer: the
persistence prefix, the prefix `static_persist` hashes, a topology or GeoIP network
longer than the source. The node then decides for the subnet's address zero-padded to the
deciding length and returns that length as the scope (longer than the source, as RFC 7871
allows), so a caching resolver never hands one network's answer to another network the
node answers differently. Topology already narrows its scope so (a /24 record inside a /16
region); persistence and `static_persist` did not: a /16 sent against a /24 persistence
prefix was held by a record of the /16 and answered with scope /16 (issue 32).

Each case is asked of the engine, then as a query on every answer path: the fast path and
the general path, over UDP and TCP, signed (DO=1 in a signed zone) and unsigned, each
query three times (the second and third come from the kept decision and the kept reply).
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.config.load import load
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dnsdata import keys
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_AAAA
from gtmcluster.lb.trace import Decision
from gtmcluster.node import Node
from tests.support import configs
from tests.support.dnsclient import addresses, ecs_option, parse, query
from tests.support.lbfakes import ecs_client, wideip

WIDEIP = "gslb.example.test"
RESOLVER = "127.0.0.1"  # in configs.ECS_TRUSTED

Mutation = Callable[[dict[str, Any]], None]


def sticky(config: dict[str, Any]) -> None:
    """The issue's setup: round robin (every new client network gets the next member),
    persistence per /24 (IPv4) and /56 (IPv6)."""
    for pool in ("p", "p6"):
        config["pools"][pool]["load_balancing"] = {"preferred": "round_robin"}
    config["wideips"][WIDEIP]["persistence"] = {"ttl": 600, "ipv4_prefix": 24, "ipv6_prefix": 56}


def hashed(config: dict[str, Any]) -> None:
    """static_persist over the client's /24 (IPv4) and /56 (IPv6), no persistence."""
    for pool in ("p", "p6"):
        config["pools"][pool]["load_balancing"] = {"preferred": "static_persist"}
        config["pools"][pool]["static_persist"] = {"ipv4_prefix": 24, "ipv6_prefix": 56}


def make_node(tmp_path: Path, *mutations: Mutation, signed: bool = False) -> Node:
    config = configs.base()
    for mutate in mutations:
        mutate(config)
    if signed:
        keys.keygen(tmp_path / "keys", "example.test")
        config["zones"][0]["dnssec"] = {"keys": "keys"}
    return Node(load(configs.write(tmp_path, config)), "n1", clock=lambda: 1000.0, rng=random.Random(7))


# -- the engine ------------------------------------------------------------------------------


def decide(node: Node, subnet: str, qtype: int = TYPE_A) -> Decision:
    """The node's decision (persistence records kept) for *subnet* sent by the trusted RESOLVER."""
    return node.decide(wideip(node.config, WIDEIP), qtype, ecs_client(subnet, RESOLVER))


def test_a_source_shorter_than_the_persistence_prefix_is_decided_at_the_prefix(tmp_path: Path) -> None:
    """The issue's reproduction: 10.1.7.0/24 gets one member; 10.1.0.0/16 is then decided
    for 10.1.0.0/24 (its record is that /24's, its scope /24), so it does not claim the
    /24s inside it that persistence holds otherwise; and 10.1.0.0/24 asked afterwards gets
    the /16's answer, as the scope said."""
    node = make_node(tmp_path, sticky)
    inner = decide(node, "10.1.7.0/24")
    assert inner.scope == 24
    wide = decide(node, "10.1.0.0/16")
    assert wide.members != inner.members  # (round robin: the next member)
    assert wide.scope == 24
    assert wide.persist is not None and wide.persist.key.network == "10.1.0.0/24"
    for subnet in ("10.1.0.0/24", "10.1.0.0/25", "10.1.0.77/32", "10.1.0.0/16"):
        assert decide(node, subnet).members == wide.members, subnet
    assert decide(node, "10.1.7.0/24").members == inner.members


def test_an_ipv6_source_shorter_than_the_persistence_prefix_is_decided_at_the_prefix(tmp_path: Path) -> None:
    """The same with IPv6: a /48 sent against ipv6_prefix 56 is decided for the /48's
    first /56, with scope /56."""
    node = make_node(tmp_path, sticky)
    inner = decide(node, "2001:db8:7:700::/56", TYPE_AAAA)
    wide = decide(node, "2001:db8:7::/48", TYPE_AAAA)
    assert wide.members != inner.members
    assert wide.scope == 56
    assert wide.persist is not None and wide.persist.key.network == "2001:db8:7::/56"
    for subnet in ("2001:db8:7::/56", "2001:db8:7:ff::/64", "2001:db8:7::1/128"):
        assert decide(node, subnet, TYPE_AAAA).members == wide.members, subnet
    assert decide(node, "2001:db8:7:700::/56", TYPE_AAAA).members == inner.members


#: /16s whose first /24 static_persist hashes to another member than the /16 itself did
SIXTEENS = [f"10.{i}.0.0/16" for i in range(16)]


def test_static_persist_hashes_the_network_its_scope_names(tmp_path: Path) -> None:
    """static_persist over /24s with a /16 sent hashes the /16's first /24, the network
    its scope /24 names: the same member as that /24 asked itself (and any address in it)."""
    node = make_node(tmp_path, hashed)
    for subnet in SIXTEENS:
        network = ipaddress.ip_network(subnet)
        wide = decide(node, subnet)
        assert wide.scope == 24
        first = f"{network.network_address}/24"
        assert decide(node, first).members == wide.members, subnet
        assert decide(node, f"{network.network_address + 200}/32").members == wide.members, subnet
    v6 = decide(node, "2001:db8:5::/48", TYPE_AAAA)
    assert v6.scope == 56
    assert decide(node, "2001:db8:5::/56", TYPE_AAAA).members == v6.members


# -- every answer path ------------------------------------------------------------------------


class Paths:
    """A node asked on one answer path: the fast path or the general path alone, over UDP
    or TCP, with DO=1 in a signed zone or unsigned."""

    def __init__(self, node: Node, path: str, signed: bool) -> None:
        self.node = node
        self.path = path
        self.signed = signed
        self.fast = FastPath(node.responder)

    def ask(self, subnet: str, rdtype: str = "A") -> tuple[list[str], int]:
        """(addresses, the reply's scope), asked three times (the same each time)."""
        seen = {self._ask_once(subnet, rdtype) for _ in range(3)}
        assert len(seen) == 1, f"{subnet} answered differently when asked again: {seen}"
        found = seen.pop()
        return list(found[0]), found[1]

    def _ask_once(self, subnet: str, rdtype: str) -> tuple[tuple[str, ...], int]:
        wire = query(WIDEIP, rdtype, ecs=subnet, dnssec=self.signed)
        if self.path == "fast-udp":
            reply = self.fast.handle(wire, RESOLVER)
        elif self.path == "fast-tcp":
            replies = self.fast.handle_stream(wire, RESOLVER)
            assert isinstance(replies, list) and len(replies) == 1
            reply = replies[0]
        else:
            reply = self.node.responder.handle(wire, RESOLVER, self.path == "general-tcp")
        assert reply is not None
        message = parse(reply)
        if self.signed:
            assert any(rrset.rdtype == 46 for rrset in message.answer), "a signed answer carries its RRSIG"
        option = ecs_option(message)
        assert option is not None
        return tuple(addresses(message)), option.scopelen


PATHS = ["fast-udp", "fast-tcp", "general-udp", "general-tcp"]


@pytest.fixture(
    params=[(p, s) for p in PATHS for s in (False, True)], ids=lambda p: f"{p[0]}-{'signed' if p[1] else 'unsigned'}"
)
def path(request: pytest.FixtureRequest) -> tuple[str, bool]:
    value: tuple[str, bool] = request.param
    return value


def holds_inside(paths: Paths, subnet: str, answer: tuple[list[str], int], inside: list[str], rdtype: str) -> None:
    """Every subnet of *inside* that lies within *subnet*'s scope gets *answer*."""
    addresses_, scope = answer
    address = ipaddress.ip_network(subnet).network_address
    claimed = ipaddress.ip_network((address, scope), strict=False)
    for other in inside:
        if ipaddress.ip_network(other).subnet_of(claimed):  # type: ignore[arg-type]
            assert paths.ask(other, rdtype)[0] == addresses_, f"{other} inside {claimed} ({subnet}'s scope)"


def test_persistence_scope_on_every_path(tmp_path: Path, path: tuple[str, bool]) -> None:
    """The reproduction as queries: 10.1.7.0/24, then 10.1.0.0/16 (scope /24: it claims
    only 10.1.0.0/24, which then gets its answer), then 10.1.7.0/24 again (its own answer);
    and the same with a /48 against ipv6_prefix 56."""
    name, signed = path
    paths = Paths(make_node(tmp_path, sticky, signed=signed), name, signed)
    for rdtype, inner, wide, inside in (
        ("A", "10.1.7.0/24", "10.1.0.0/16", ["10.1.7.0/24", "10.1.0.0/24", "10.1.0.128/25", "10.1.200.0/24"]),
        ("AAAA", "2001:db8:7:700::/56", "2001:db8:7::/48", ["2001:db8:7:700::/56", "2001:db8:7::/56"]),
    ):
        first = paths.ask(inner, rdtype)
        answer = paths.ask(wide, rdtype)
        assert answer[0] != first[0]  # (round robin: the next member)
        assert answer[1] == (24 if rdtype == "A" else 56)
        holds_inside(paths, wide, answer, inside, rdtype)
        assert paths.ask(inner, rdtype) == first


def test_static_persist_scope_on_every_path(tmp_path: Path, path: tuple[str, bool]) -> None:
    """static_persist over /24s with /16s sent: each answer is its scope's, the first /24's."""
    name, signed = path
    paths = Paths(make_node(tmp_path, hashed, signed=signed), name, signed)
    for subnet in SIXTEENS[:8]:
        answer = paths.ask(subnet)
        assert answer[1] == 24
        base = ipaddress.ip_network(subnet).network_address
        holds_inside(paths, subnet, answer, [f"{base}/24", f"{base + 9}/32", f"{base + 256}/24"], "A")
