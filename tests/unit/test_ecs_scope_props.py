"""The property behind issue 32: an ECS answer with scope S holds for every address inside
its scope, asked with any source at least as long (RFC 7871 7.2.1, 7.3.1).

Random configs: regions of networks of mixed lengths (IPv4 and IPv6, nested and
overlapping), topology records by region, subnet, GeoIP country and continent and `any`
with scores that tie, chains of methods in the pools (topology, round robin, ratio,
random, global availability, static_persist with random prefixes, `none`), a pool choice
among pools, and LDNS persistence with random prefixes or none. A trusted resolver (or an
untrusted one) asks once with a random client subnet of any length (1 to the width; a
source of 0 opts out of ECS and its answer is for /0 queries only, RFC 7871 7.3.1); then
addresses inside the answer's scope, each with a random source length from the scope to
the width, must get the same answer. Every query goes through a random answer path: the
fast path or the general path alone, UDP or TCP, DO=1 or not in a signed zone or not.

Fixed clock. Before the question, other clients ask (sources of 16 bits or more), the
rotations moving on between them, so that the persistence records differ from one network
to the next as on a live node; from then on the node's random source and its rotations are
put back before each question as they were before the first (round robin, ratio, random
and ties would otherwise move on by design); the persistence records are the ones those
clients and the first answer wrote.
"""

from __future__ import annotations

import copy
import ipaddress
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtmcluster.config.load import load
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dnsdata import keys
from gtmcluster.node import Node
from tests.support import configs, geodb
from tests.support.dnsclient import addresses, ecs_option, parse, query

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
WIDEIP = "prop.example.test"
TRUSTED, UNTRUSTED = "127.0.1.9", "127.0.2.9"
PATHS = ("fast-udp", "fast-tcp", "general-udp", "general-tcp")

#: addresses near each other, so that regions nest and sources straddle their edges
HOT_V4 = [f"10.{a}.{b}.{c}" for a in (0, 1, 128) for b in (0, 1, 7, 128, 255) for c in (0, 1, 77, 128, 255)]
HOT_V6 = [f"2001:db8:{a:x}:{b:x}::{c:x}" for a in (0, 1, 0x8000) for b in (0, 1, 0x700, 0xFF00) for c in (0, 1, 0x8000)]
#: the GeoIP country database: networks of several lengths over the hot addresses
COUNTRIES = {
    "10.0.0.0/9": ("JP", "AS"),
    "10.1.7.0/24": ("DE", "EU"),
    "10.128.0.0/9": ("US", "NA"),
    "2001:db8::/33": ("JP", "AS"),
    "2001:db8:1:700::/56": ("DE", "EU"),
}


def networks(v6: bool) -> st.SearchStrategy[str]:
    hot, low, width = (HOT_V6, 32, 128) if v6 else (HOT_V4, 8, 32)
    return st.builds(
        lambda a, n: str(ipaddress.ip_network((a, n), strict=False)), st.sampled_from(hot), st.integers(low, width)
    )


NETWORK = networks(False) | networks(True)
LDNS = (
    st.builds(lambda i: f"region g{i}", st.integers(0, 3))
    | st.builds(lambda n: f"subnet {n}", NETWORK)
    | st.sampled_from(["country JP", "country DE", "continent EU", "any"])
)
SERVER = st.sampled_from(["datacenter DC1", "datacenter DC2", "datacenter DC3", "pool a2", "pool b2"])
RECORD = st.fixed_dictionaries({"ldns": LDNS, "server": SERVER, "score": st.sampled_from([0, 1, 50, 100])})
METHOD = st.sampled_from(["topology", "round_robin", "ratio", "random", "global_availability", "static_persist"])
CHAIN = st.fixed_dictionaries(
    {"preferred": METHOD}, optional={"alternate": METHOD | st.just("none"), "fallback": METHOD | st.just("none")}
)
PREFIXES = st.fixed_dictionaries({"ipv4_prefix": st.integers(0, 32), "ipv6_prefix": st.integers(0, 128)})
POOL = st.fixed_dictionaries(
    {"load_balancing": CHAIN, "max_answers": st.integers(1, 3)}, optional={"static_persist": PREFIXES}
)
MEMBERS = {
    "a1": ["vs1", "vs2", "vs3"],
    "a2": ["vs2", "vs3"],
    "b1": ["vs1-6", "vs2-6", "vs3-6"],
    "b2": ["vs2-6", "vs3-6"],
}


@st.composite
def raw_configs(draw: st.DrawFn) -> dict[str, Any]:
    """A config of the property's shapes (see the module's doc)."""
    config = configs.base()
    config["virtual_servers"]["vs3-6"] = {"address": "2001:db8:3::1", "datacenter": "DC3"}
    config["dns_server"]["ecs_trusted"] = ["127.0.1.0/24"]
    config["regions"] = {f"g{i}": draw(st.lists(NETWORK, min_size=1, max_size=3)) for i in range(4)}
    config["topology"] = draw(st.lists(RECORD, max_size=8))
    config["pools"] = {name: {"members": members, **draw(POOL)} for name, members in MEMBERS.items()}
    wide: dict[str, Any] = {
        "type": ["A", "AAAA"],
        "pools": list(MEMBERS),
        "pool_lb": draw(st.sampled_from(["global_availability", "round_robin", "topology", "static_persist"])),
    }
    if draw(st.booleans()):
        wide["persistence"] = {"ttl": 600, **draw(PREFIXES)}
    config["wideips"] = {WIDEIP: wide}
    return config


@dataclass(frozen=True)
class Question:
    resolver: str
    subnet: IPNetwork
    rdtype: str
    path: str
    do: bool


class Asked:
    """A node built from one drawn config, asked on any path; its random source and
    rotations put back before each question as they were before the first."""

    def __init__(self, directory: Path, raw: dict[str, Any], shared: Path, signed: bool) -> None:
        raw = copy.deepcopy(raw)
        raw["geoip"] = {"country": str(shared / "country.mmdb")}
        if signed:
            raw["zones"][0]["dnssec"] = {"keys": str(shared / "keys")}
        self.node = Node(load(configs.write(directory, raw)), "n1", clock=lambda: 1000.0, rng=random.Random(7))
        self.node.ready = True
        self.fast = FastPath(self.node.responder)
        balancer = self.node.balancer
        self.rotations = copy.deepcopy(balancer.rotations)
        self.rng = balancer.rng.getstate()

    def settle(self) -> None:
        """Put back the random source and rotations as they are now, before each question
        from here on."""
        balancer = self.node.balancer
        self.rotations = copy.deepcopy(balancer.rotations)
        self.rng = balancer.rng.getstate()

    def ask(self, q: Question, reset: bool = True) -> tuple[tuple[str, ...], int, int]:
        """(addresses, rcode, scope) of the reply to *q* (*reset*: with the random source
        and rotations put back first; else they move on, as between clients)."""
        balancer = self.node.balancer
        if reset:
            balancer.rotations = copy.deepcopy(self.rotations)
            balancer.rng.setstate(self.rng)
        wire = query(WIDEIP, q.rdtype, ecs=str(q.subnet), dnssec=q.do)
        if q.path == "fast-udp":
            reply = self.fast.handle(wire, q.resolver)
        elif q.path == "fast-tcp":
            replies = self.fast.handle_stream(wire, q.resolver)
            assert isinstance(replies, list) and len(replies) == 1
            reply = replies[0]
        else:
            reply = self.node.responder.handle(wire, q.resolver, q.path == "general-tcp")
        assert reply is not None
        message = parse(reply)
        option = ecs_option(message)
        assert option is not None
        return tuple(addresses(message)), message.rcode(), option.scopelen


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What every example's config names: the GeoIP database and the zone's keys."""
    directory = tmp_path_factory.mktemp("ecs-props")
    geodb.write_country(directory / "country.mmdb", COUNTRIES)
    keys.keygen(directory / "keys", "example.test")
    return directory


def sources(v6: bool, shortest: int = 1) -> st.SearchStrategy[IPNetwork]:
    hot, width = (HOT_V6, 128) if v6 else (HOT_V4, 32)
    return st.builds(
        lambda a, n: ipaddress.ip_network((a, n), strict=False), st.sampled_from(hot), st.integers(shortest, width)
    )


def inside(network: IPNetwork, shortest: int) -> st.SearchStrategy[IPNetwork]:
    """Client subnets inside *network*, at least *shortest* bits long: a hot address in it,
    or any address of it, with a source length from *shortest* to the width."""
    width = network.max_prefixlen
    hot = [a for a in (HOT_V6 if network.version == 6 else HOT_V4) if ipaddress.ip_address(a) in network]
    base = int(network.network_address)
    span = network.num_addresses - 1
    address = st.integers(0, span).map(lambda offset: base + offset)
    if hot:
        address = address | st.sampled_from(hot).map(lambda a: int(ipaddress.ip_address(a)))
    make = ipaddress.IPv6Address if network.version == 6 else ipaddress.IPv4Address
    return st.builds(
        lambda a, n: ipaddress.ip_network((make(a), n), strict=False), address, st.integers(max(shortest, 1), width)
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=raw_configs(), signed=st.booleans(), data=st.data())
def test_an_answer_holds_for_every_address_in_its_scope(
    shared: Path, raw: dict[str, Any], signed: bool, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        asked = Asked(Path(directory), raw, shared, signed)
        resolver = data.draw(st.sampled_from([TRUSTED, TRUSTED, UNTRUSTED]), "resolver")
        rdtype = data.draw(st.sampled_from(["A", "AAAA"]), "type")
        # Other clients first, the rotations moving on between them: the persistence
        # records they leave differ, as a live node's do (the issue's case: a /24's record
        # inside the /16 that a shorter client subnet then asks for).
        for _ in range(data.draw(st.integers(0, 12), "clients before")):
            earlier = data.draw(sources(data.draw(st.booleans(), "v6 earlier"), 16), "earlier")
            asked.ask(Question(resolver, earlier, rdtype, "general-udp", False), reset=False)
        asked.settle()
        subnet = data.draw(sources(data.draw(st.booleans(), "v6 subnet")), "subnet")
        path, do = data.draw(st.sampled_from(PATHS), "path"), signed and data.draw(st.booleans(), "DO")
        first = asked.ask(Question(resolver, subnet, rdtype, path, do))
        found, rcode, scope = first
        scoped = ipaddress.ip_network((subnet.network_address, scope), strict=False)
        for _ in range(6):
            other = data.draw(inside(scoped, scope), "inside the scope")
            path, do = data.draw(st.sampled_from(PATHS), "path"), signed and data.draw(st.booleans(), "DO")
            again = asked.ask(Question(resolver, other, rdtype, path, do))
            assert again[:2] == (found, rcode), f"{other} is inside {scoped}, the scope of {subnet}'s answer {found}"
