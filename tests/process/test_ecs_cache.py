"""ECS answers a real resolver's cache can trust (issue 32): a real node asked with the real
`dig +subnet`, and a real `unbound` subnet cache in front of it (tests/support/subnetcache.py).

An answer with scope S must hold for every address inside the scope's network, since a
caching resolver hands it to every client there (RFC 7871 7.3.1). The node below has
persistence per /24 and /56 over round robin (`sticky`), topology with a /24 record inside
a /16 region (`geo`), and `static_persist` over /24s (`hashed`); the names under
``tcp.example.test`` are aliases that unbound asks over TCP.

Each question is asked through unbound and directly (the same question from the resolver's
address, with the client's subnet), and the answers must be the same: the persistence case
of the issue (a /16 sent against ipv4_prefix 24, and a /48 against ipv6_prefix 56), the
/24-inside-/16 topology case, clients sending no ECS (unbound sends their own /24), a
resolver not in `dns_server.ecs_trusted`, IPv6 subnets, and TCP to the node.

Timing: answers live 2 s in unbound's cache. The checks that an answer came from the
cache (`num.query.subnet_cache`) count only when the question was asked well inside those
2 s, else the question is asked again; the second pass of each case waits for unbound's
entries to expire, which needs real time (a real cache's TTL is wall-clock seconds): a
bounded poll until unbound asks the node again, not a sleep.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_tool
from tests.support import configs
from tests.support.dig import DigResult, dig
from tests.support.nodeproc import RunningNode, loopback_address, running_node
from tests.support.poll import until
from tests.support.subnetcache import TCP_ZONE, SubnetCache

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.usefixtures("dig_tool")]

DNS_PORT = 5353
TTL = 2  # the pools' answer TTL: how long unbound keeps an answer
#: a question asked this long after the one whose answer it should find in unbound's cache
#: must find it there (unbound's clock has whole seconds: an entry lives at least TTL s)
SURELY_CACHED = 1.5
DC1, DC2, DC3 = "10.0.1.1", "10.0.2.1", "10.0.3.1"


@dataclass(frozen=True)
class Site:
    """The node, the two resolvers in front of it (their queries come from their own
    addresses: `trusted` is the one in dns_server.ecs_trusted) and the loopback /16 its
    clients without ECS live in."""

    node: RunningNode
    trusted: SubnetCache
    untrusted: SubnetCache
    lo: str  # "127.N": the clients 127.N.x.y; topology has 127.N.0.0/16 and 127.N.7.0/24


def node_config(address: str, trusted: str, lo: str) -> dict[str, Any]:
    config = configs.base(address, DNS_PORT)
    config["dns_server"]["ecs_trusted"] = [f"{trusted}/32"]
    config["regions"] = {
        "wide": ["10.9.0.0/16", f"{lo}.0.0/16"],
        "inner": ["10.9.7.0/24", f"{lo}.7.0/24"],
    }
    config["topology"] = [
        {"ldns": "region inner", "server": "datacenter DC2", "score": 100},
        {"ldns": "region wide", "server": "datacenter DC1", "score": 50},
        {"ldns": "any", "server": "datacenter DC3", "score": 1},
    ]
    rr = {"preferred": "round_robin"}
    config["pools"] = {
        "rr": {"members": ["vs1", "vs2", "vs3"], "load_balancing": rr, "ttl": TTL},
        "rr6": {"members": ["vs1-6", "vs2-6"], "load_balancing": rr, "ttl": TTL},
        "topo": {"members": ["vs1", "vs2", "vs3"], "load_balancing": {"preferred": "topology"}, "ttl": TTL},
        "hash": {
            "members": ["vs1", "vs2", "vs3"],
            "load_balancing": {"preferred": "static_persist"},
            "static_persist": {"ipv4_prefix": 24},
            "ttl": TTL,
        },
    }
    config["wideips"] = {
        "sticky.example.test": {
            "type": ["A", "AAAA"],
            "pools": ["rr", "rr6"],
            "persistence": {"ttl": 600, "ipv4_prefix": 24, "ipv6_prefix": 56},
            "aliases": [f"sticky.{TCP_ZONE}"],
        },
        "geo.example.test": {"type": "A", "pools": ["topo"], "aliases": [f"geo.{TCP_ZONE}"]},
        "hashed.example.test": {"type": "A", "pools": ["hash"]},
    }
    return config


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    require_tool("unbound", "unbound")
    address, trusted, untrusted = loopback_address(), loopback_address(), loopback_address()
    lo = ".".join(address.split(".")[:2])
    workdir: Path = tmp_path_factory.mktemp("ecs-cache")
    path = configs.write(workdir, node_config(address, trusted, lo))
    with running_node(path, "n1", address, DNS_PORT, workdir) as node:
        server = (address, DNS_PORT)
        with (
            SubnetCache(workdir, "trusted", trusted, DNS_PORT, server) as trusting,
            SubnetCache(workdir, "untrusted", untrusted, DNS_PORT, server) as other,
        ):
            yield Site(node, trusting, other, lo)


def scope_of(result: DigResult) -> int | None:
    """The scope of the reply's client subnet option (None without one)."""
    if result.edns is None or "CLIENT-SUBNET" not in result.edns:
        return None
    return int(str(result.edns["CLIENT-SUBNET"]).rsplit("/", 1)[1])


def answer(result: DigResult) -> list[str]:
    assert result.status == "NOERROR", result.raw
    return sorted(result.answer_data())


# -- the node alone, with dig ---------------------------------------------------------------


def test_a_short_client_subnet_is_answered_for_the_persistence_prefix(site: Site) -> None:
    """The issue's commands: ``dig -b RESOLVER +subnet=`` 10.1.7.0/24, then 10.1.0.0/16
    (scope /24, not /16: it is the answer for 10.1.0.0/24, which then gets it), then
    10.1.7.0/24 again (its own answer); the same with a /48 against ipv6_prefix 56."""
    node = site.node

    def ask(subnet: str, rdtype: str = "A") -> tuple[list[str], int | None]:
        result = dig(*node.server, "sticky.example.test", rdtype, f"+subnet={subnet}", source=site.trusted.address)
        return answer(result), scope_of(result)

    for rdtype, inner, short, first, width in (
        ("A", "10.1.7.0/24", "10.1.0.0/16", "10.1.0.0/24", 24),
        ("AAAA", "2001:db8:7:700::/56", "2001:db8:7::/48", "2001:db8:7::/56", 56),
    ):
        mine = ask(inner, rdtype)
        assert mine[1] == width
        wide = ask(short, rdtype)
        assert wide[0] != mine[0]  # (round robin: the next member)
        assert wide[1] == width
        assert ask(first, rdtype)[0] == wide[0]
        assert ask(inner, rdtype) == mine


def test_static_persist_answers_a_short_client_subnet_for_its_prefix(site: Site) -> None:
    """static_persist over /24s, a /16 sent: scope /24, and the /16's first /24 asked
    itself gets the same member."""

    def ask(subnet: str) -> DigResult:
        return dig(*site.node.server, "hashed.example.test", "A", f"+subnet={subnet}", source=site.trusted.address)

    for i in range(8):
        short, first = ask(f"10.{i}.0.0/16"), ask(f"10.{i}.0.0/24")
        assert scope_of(short) == 24
        assert answer(short) == answer(first), f"10.{i}.0.0/16"


# -- through a real subnet cache ------------------------------------------------------------


STICKY, GEO = "sticky.example.test", "geo.example.test"


def tcp_name(name: str) -> str:
    """The alias of wide IP *name* that unbound asks the node over TCP."""
    return name.replace("example.test", TCP_ZONE)


class Asker:
    """Asks a question through one of the site's resolvers and directly, and compares.

    A client is a subnet it sends (``10.2.7.0/24``) or, as ``from 127.N.7.9``, a client
    sending none from that address (unbound sends its /24). Directly is the question the
    resolver would ask for it: from the resolver's address, with the client's subnet (its
    address as a /32 for a client that sent none), over TCP for the TCP names."""

    def __init__(self, site: Site, cache: SubnetCache, name: str, rdtype: str = "A", tcp: bool = False) -> None:
        self.site = site
        self.cache = cache
        self.name = tcp_name(name) if tcp else name
        self.rdtype = rdtype
        self.tcp = tcp

    def through(self, client: str) -> DigResult:
        if client.startswith("from "):
            return dig(*self.cache.server, self.name, self.rdtype, "+rec", source=client.removeprefix("from "))
        return dig(*self.cache.server, self.name, self.rdtype, "+rec", f"+subnet={client}")

    def directly(self, client: str) -> DigResult:
        subnet = f"{client.removeprefix('from ')}/32" if client.startswith("from ") else client
        args = [f"+subnet={subnet}", *(["+tcp"] if self.tcp else [])]
        return dig(*self.site.node.server, self.name, self.rdtype, *args, source=self.cache.address)

    def compare(self, client: str) -> list[str]:
        """The answer through the cache, which must be the node's answer to the resolver."""
        via = answer(self.through(client))
        assert via == answer(self.directly(client)), f"{client}: {self.name} {self.rdtype} through {self.cache.name}"
        return via

    def missed(self, client: str) -> bool:
        """Whether asking for *client* (compared) went past unbound's cache to the node."""
        before = self.cache.cache_answers()
        self.compare(client)
        return self.cache.cache_answers() == before

    def served_from_cache(self, first: str, second: str) -> None:
        """*second* is answered from the entry *first*'s answer leaves in the cache: *first*
        is asked until unbound asks the node for it (its entry is new), then *second* at
        once; if that took too long to be sure the entry is still there, again."""
        started = [0.0]

        def fresh() -> bool:
            started[0] = time.monotonic()
            return self.missed(first)

        for _ in range(3):
            until(fresh, 4 * TTL, f"unbound asking the node for {first}")
            hit = not self.missed(second)
            if time.monotonic() - started[0] < SURELY_CACHED:
                assert hit, f"{second} not answered from the entry of {first} ({self.name} {self.rdtype})"
                return
        pytest.fail(f"asking {first} then {second} took over {SURELY_CACHED}s three times")

    def expired(self, client: str) -> None:
        """Wait until unbound's entry for *client* has expired (it asks the node again):
        a bounded poll, each answer compared."""
        until(lambda: self.missed(client), 4 * TTL, f"unbound asking the node again for {client}")


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_persistence_through_a_subnet_cache(site: Site, tcp: bool) -> None:
    """The issue's persistence case through unbound: a client of 10.2.7.0/24, then one
    sending 10.2.0.0/16 (answered with scope /24: unbound keeps it for /16 questions only),
    then 10.2.7.0/24 again gets its own answer, not the /16's; 10.2.0.0/24 is not answered
    from the /16's entry but by the node, which says what it said for the /16. Then the
    /24s inside, and clients sending no subnet; after every entry expired, all again."""
    net = "10.3" if tcp else "10.2"
    ask = Asker(site, site.trusted, STICKY, tcp=tcp)
    clients = [f"{net}.0.128/25", f"{net}.7.77/32", f"from {site.lo}.17.9", f"from {site.lo}.17.10"]
    clients += [f"from {site.lo}.18.9", f"{net}.0.0/16", f"{net}.7.0/24"]
    inner = ask.compare(f"{net}.7.0/24")
    short = ask.compare(f"{net}.0.0/16")
    assert ask.compare(f"{net}.7.0/24") == inner
    assert ask.missed(f"{net}.0.0/24"), f"{net}.0.0/24 answered from the entry of {net}.0.0/16"
    ask.served_from_cache(f"{net}.0.0/16", f"{net}.0.0/16")
    first = {client: ask.compare(client) for client in clients}
    assert first[f"{net}.0.128/25"] == short and first[f"{net}.7.77/32"] == inner
    assert first[f"from {site.lo}.17.9"] == first[f"from {site.lo}.17.10"]  # (one /24)
    ask.expired(f"{net}.7.0/24")
    assert {client: ask.compare(client) for client in clients} == first


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_ipv6_persistence_through_a_subnet_cache(site: Site, tcp: bool) -> None:
    """The same with IPv6 subnets: a /48 sent against ipv6_prefix 56 (unbound sends at
    most /56) is answered for the /48's first /56."""
    net = "2001:db8:9" if tcp else "2001:db8:8"
    ask = Asker(site, site.trusted, STICKY, "AAAA", tcp)
    clients = [f"{net}::/56", f"{net}::1/128", f"{net}:700::/56", f"{net}:7ff::/64", f"{net}::/48"]
    inner = ask.compare(f"{net}:700::/56")
    short = ask.compare(f"{net}::/48")
    assert ask.compare(f"{net}:700::/56") == inner
    assert ask.missed(f"{net}::/56"), f"{net}::/56 answered from the entry of {net}::/48"
    first = {client: ask.compare(client) for client in clients}
    assert first[f"{net}::/56"] == first[f"{net}::1/128"] == short
    assert first[f"{net}:7ff::/64"] == inner
    ask.expired(f"{net}:700::/56")
    assert {client: ask.compare(client) for client in clients} == first


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_topology_through_a_subnet_cache(site: Site, tcp: bool) -> None:
    """A /24 record inside a /16 region: the node narrows the neighbours' scopes (10.9.6.0
    /24, 10.9.4.0 /23, 10.9.0.0/16 /22), so unbound answers 10.9.5.0/24 from 10.9.4.0/24's
    entry and never hands the region's answer to 10.9.7.0/24; the same for clients sending
    no subnet, in 127.N.0.0/16 with 127.N.7.0/24 inside."""
    ask = Asker(site, site.trusted, GEO, tcp=tcp)
    lo = site.lo
    expected = {
        "10.9.0.0/16": (DC1, 22),
        "10.9.7.0/24": (DC2, 24),
        "10.9.7.128/25": (DC2, 24),
        "10.9.6.0/24": (DC1, 24),
        "10.9.4.0/24": (DC1, 23),
        "10.9.5.0/24": (DC1, 23),
        "10.10.0.0/16": (DC3, 15),
        f"from {lo}.7.9": (DC2, 24),
        f"from {lo}.6.9": (DC1, 24),
        f"from {lo}.4.9": (DC1, 23),
        f"from {lo}.5.9": (DC1, 23),
    }
    for client, (address, scope) in expected.items():
        assert ask.compare(client) == [address], client
        assert scope_of(ask.directly(client)) == scope, client
    ask.served_from_cache("10.9.4.0/24", "10.9.5.0/24")
    ask.served_from_cache(f"from {lo}.4.9", f"from {lo}.5.9")
    ask.expired("10.9.0.0/16")
    for client, (address, _) in expected.items():
        assert ask.compare(client) == [address], client


def test_an_untrusted_resolvers_client_subnets_are_ignored_through_its_cache(site: Site) -> None:
    """A resolver not in dns_server.ecs_trusted: the node answers it by its own address
    with scope 0, so unbound keeps one answer for all its clients, and it is the node's."""
    geo = Asker(site, site.untrusted, GEO)
    clients = ["10.9.7.0/24", "10.9.6.0/24", "10.2.0.0/16", f"from {site.lo}.7.9", "2001:db8:8::/48"]
    answers = {client: geo.compare(client) for client in clients}
    assert list(answers.values()) == [[DC1]] * len(clients)  # (its own address is in region wide)
    assert scope_of(geo.directly("10.9.7.0/24")) == 0
    sticky = Asker(site, site.untrusted, STICKY)
    first = sticky.compare("10.2.7.0/24")
    assert [sticky.compare(client) for client in clients] == [first] * len(clients)
    sticky.expired("10.2.7.0/24")
    assert [sticky.compare(client) for client in clients] == [first] * len(clients)
