"""Client-subnet probing (issue 36 item 4, ``proximity.client_probe``): a trusted ECS
subnet without figures of its own is requested once across the group, within the group's
share of each interval, never when the prober may not probe it; each data center's node
tries the subnet's addresses in order (the one that answered before first), writes what it
measured as the subnet's client figure, and backs off a subnet that never answers. The
figures then decide the answer."""

from __future__ import annotations

import ipaddress
import random
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, task

from gtmcluster.config.load import load
from gtmcluster.config.model import Prober
from gtmcluster.node import Node
from gtmcluster.proximity.budget import Budget
from gtmcluster.proximity.clientprobe import ClientProbeScheduler
from gtmcluster.proximity.clientrequests import backoff, share
from gtmcluster.proximity.table import updated
from gtmcluster.state import keys
from gtmcluster.state.store import Store
from tests.support import configs
from tests.support.cluster import MemoryCluster
from tests.support.dnsclient import addresses, ecs_option, parse, query
from tests.unit.test_proximity import Reply

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

LDNS = "198.18.0.53"  # a trusted resolver (dns_server.ecs_trusted)
SUBNET = "198.19.7.0/24"
#: the client subnets of these tests are in 198.18.0.0/15 and 2001:db8::/32 (special-purpose,
#: so the prober needs prober.allow to open it)
OPEN = ["198.18.0.0/15", "2001:db8::/32"]


class Hosts:
    """A scripted host prober: each address answers in its RTT (µs), or never (absent)."""

    def __init__(self, rtts: dict[str, int] | None = None) -> None:
        self.rtts = rtts or {}
        self.asked: list[str] = []

    def probe(self, host: ipaddress.IPv4Address | ipaddress.IPv6Address) -> defer.Deferred[Reply]:
        self.asked.append(str(host))
        rtt = self.rtts.get(str(host))
        if rtt is None:
            return defer.succeed(Reply(False, 0, 0, "", "all protocols failed: icmp: no echo reply within 2s"))
        return defer.succeed(Reply(True, rtt, 0, "icmp", "icmp: echo reply"))

    def close(self) -> None:
        pass


def raw_config(members: int = 1, per_interval: int = 10, enabled: bool = True, **prober: Any) -> dict[str, Any]:
    raw = configs.base()
    for i in range(2, members + 1):
        configs.add_member(raw, f"n{i}", f"DC{i}", f"127.0.0.{i}")
    raw["pools"]["p"]["load_balancing"] = {"preferred": "rtt", "alternate": "topology"}
    raw["dns_server"]["ecs_trusted"] = ["198.18.0.0/15"]
    raw["prober"] = {"allow": OPEN, **prober}
    raw["proximity"] = {"client_probe": {"enabled": enabled, "subnets_per_interval": per_interval, "interval": 60}}
    return raw


def make_node(tmp_path: Path, raw: dict[str, Any], name: str = "n1", clock: Any = None) -> Node:
    config = load(configs.write(tmp_path / name, raw))
    n = Node(config, name, clock=clock or (lambda: 1000.0), rng=random.Random(5))
    n.ready = True
    return n


def ask(n: Node, ecs: str | None) -> tuple[list[str], int | None]:
    reply = n.responder.handle(query("gslb.example.test", ecs=ecs) if ecs else query("gslb.example.test"), LDNS)
    assert reply is not None
    msg = parse(reply)
    option = ecs_option(msg)
    return addresses(msg), None if option is None else option.scopelen


def requested(store: Store) -> list[str]:
    return sorted(
        keys.client_probe_subnet(r.key) or ""
        for r in store.scan(keys.CPROBE)
        if r.value is not None and not r.value["silent"]
    )


def prober_of(
    n: Node, hosts: Hosts, clock: task.Clock, datacenter: str = "DC1", name: str | None = None
) -> ClientProbeScheduler:
    name = name or n.member.name
    budget = Budget(n.config.prober, clock.seconds)
    s = ClientProbeScheduler(n.store, lambda: budget, hosts, name, datacenter, clock, [name], 3600.0)
    s.startService()
    return s


# -- asking ------------------------------------------------------------------------------------


def test_a_trusted_ecs_subnet_without_figures_is_requested(tmp_path: Path) -> None:
    n = make_node(tmp_path, raw_config())
    ask(n, "198.19.7.0/24")
    ask(n, "198.19.7.128/25")  # the same /24: one request
    assert requested(n.store) == [SUBNET]
    record = n.store.get(keys.client_probe(SUBNET))
    assert record is not None and record.value == {"by": "n1", "failures": 0, "silent": False}


@pytest.mark.parametrize(
    ("ecs", "why"),
    [
        (None, "no ECS"),
        ("198.19.0.0/16", "shorter than a /24: names 256 client subnets"),
        ("10.9.9.0/24", "special-purpose, not opened by prober.allow"),
        ("198.19.200.0/24", "in prober.deny"),
        ("224.1.2.0/24", "multicast: never"),
    ],
)
def test_no_request_for_what_the_prober_may_not_probe(tmp_path: Path, ecs: str | None, why: str) -> None:
    n = make_node(tmp_path, raw_config(deny=["198.19.200.0/24"]))
    ask(n, ecs)
    assert requested(n.store) == [], why


def test_no_request_for_an_untrusted_resolvers_subnet_or_with_probing_off(tmp_path: Path) -> None:
    raw = raw_config()
    raw["dns_server"]["ecs_trusted"] = ["127.0.0.0/8"]  # not the LDNS's network
    n = make_node(tmp_path, raw)
    ask(n, SUBNET)
    assert requested(n.store) == []
    off = make_node(tmp_path / "off", raw_config(enabled=False))
    ask(off, SUBNET)
    assert requested(off.store) == []


def test_a_measured_subnet_is_not_requested(tmp_path: Path) -> None:
    n = make_node(tmp_path, raw_config())
    for dc, us in (("DC1", 15_000), ("DC2", 90_000), ("DC3", 95_000)):
        n.store.put(keys.client(SUBNET, dc), {"rtt": us, "samples": [us], "source": "probe", "by": "n1"}, ttl=3600)
    assert ask(n, SUBNET) == (["10.0.1.1"], 24)
    assert requested(n.store) == []


# -- the group-wide cap ------------------------------------------------------------------------


def test_shares_add_up_to_the_cap_and_take_turns() -> None:
    for members in (1, 2, 3, 7):
        for per in (1, 2, 4, 10):
            for window in range(10):
                assert sum(share(members, i, per, window) for i in range(members)) == per
    # one request an interval among three members: each member's turn comes round
    assert [[share(3, i, 1, w) for i in range(3)] for w in range(3)] == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]


def test_the_group_files_at_most_subnets_per_interval_whoever_sees_them(tmp_path: Path) -> None:
    """Three members each see twelve new client subnets a window: the group probes four."""
    raw = raw_config(members=3, per_interval=4)
    cluster = MemoryCluster(["n1", "n2", "n3"], tmp_path / "certs")
    cluster.clock.advance(6000)  # window 100
    nodes = {name: make_node(tmp_path, raw, name, cluster.clock.seconds) for name in cluster.names}
    for name, n in nodes.items():
        cluster.add(name, n.store)
    for a, b in (("n1", "n2"), ("n1", "n3"), ("n2", "n3")):
        cluster.connect(a, b)
    for window in range(3):
        for i, n in enumerate(nodes.values()):
            for j in range(12):
                ask(n, f"198.19.{window * 40 + i * 12 + j}.0/24")
        cluster.settle()
        counts = [len(requested(store)) for store in cluster.stores.values()]
        assert counts == [4] * 3, counts  # every member holds the group's requests (a minute's)
        cluster.advance(60)
    filed = [n.client_requests.total for n in nodes.values()]
    assert sum(filed) == 12 and all(f >= 3 for f in filed), filed  # shares turn round


def test_a_subnet_requested_by_one_member_is_not_requested_again_by_another(tmp_path: Path) -> None:
    raw = raw_config(members=2)
    cluster = MemoryCluster(["n1", "n2"], tmp_path / "certs")
    nodes = {name: make_node(tmp_path, raw, name, cluster.clock.seconds) for name in cluster.names}
    for name, n in nodes.items():
        cluster.add(name, n.store)
    cluster.connect("n1", "n2")
    ask(nodes["n1"], SUBNET)
    cluster.settle()
    ask(nodes["n2"], SUBNET)
    assert [n.client_requests.total for n in nodes.values()] == [1, 0]


# -- probing -----------------------------------------------------------------------------------


def test_addresses_are_tried_in_order_the_one_that_answered_before_first(tmp_path: Path) -> None:
    clock = task.Clock()
    n = make_node(tmp_path, raw_config(), clock=clock.seconds)
    hosts = Hosts({"198.19.7.254": 30_000})
    s = prober_of(n, hosts, clock)
    s.want(SUBNET)
    assert hosts.asked == ["198.19.7.1", "198.19.7.254"]  # .1 first, silent; then .254
    record = n.store.get(keys.client(SUBNET, "DC1"))
    assert record is not None and record.value == {"rtt": 30_000, "samples": [30_000], "source": "probe", "by": "n1"}
    # the figure expires; asked again, the address that answered is tried first
    clock.advance(3601)
    hosts.asked.clear()
    s.want(SUBNET)
    assert hosts.asked == ["198.19.7.254"]
    # an IPv6 subnet: ::1 of its /48
    s.want("2001:db8:7::/48")
    assert hosts.asked[-1] == "2001:db8:7::1"


def test_a_request_is_probed_once_per_data_center_and_not_when_measured(tmp_path: Path) -> None:
    clock = task.Clock()
    n = make_node(tmp_path, raw_config(), clock=clock.seconds)
    hosts = Hosts({"198.19.7.1": 12_000})
    s = prober_of(n, hosts, clock)
    assert n.client_requests.file(n.store, n.probe_budget, SUBNET)
    assert hosts.asked == []  # not inside the turn that filed it (maybe a datagram handler)
    clock.advance(0)
    assert hosts.asked == ["198.19.7.1"]
    s.want(SUBNET)  # measured now
    assert hosts.asked == ["198.19.7.1"]
    # of two members of one data center, one probes a subnet
    other = ClientProbeScheduler(n.store, s.budget, hosts, "n9", "DC1", clock, ["n1", "n9"], 3600.0)
    s.configure(["n1", "n9"], 3600.0, True)
    subnets = [f"198.19.{i}.0/24" for i in range(20)]
    assert all(s.mine(x) != other.mine(x) for x in subnets)
    assert {s.mine(x) for x in subnets} == {True, False}


def test_addresses_the_prober_may_not_probe_are_skipped(tmp_path: Path) -> None:
    clock = task.Clock()
    n = make_node(tmp_path, raw_config(deny=["198.19.7.1/32"]), clock=clock.seconds)
    hosts = Hosts({"198.19.7.1": 5_000, "198.19.7.254": 9_000})
    s = prober_of(n, hosts, clock)
    s.want(SUBNET)
    assert hosts.asked == ["198.19.7.254"]


def test_probes_take_the_probe_budget(tmp_path: Path) -> None:
    clock = task.Clock()
    n = make_node(tmp_path, raw_config(), clock=clock.seconds)
    budget = Budget(Prober(max_per_second=2, allow=tuple(ipaddress.ip_network(x) for x in OPEN)), clock.seconds)
    hosts = Hosts()
    s = ClientProbeScheduler(n.store, lambda: budget, hosts, "n1", "DC1", clock, ["n1"], 3600.0)
    s.startService()
    for i in range(3):
        s.want(f"198.19.{i}.0/24")
    assert len(hosts.asked) == 2  # two starts a second
    clock.advance(1)
    assert len(hosts.asked) == 4
    clock.advance(1)
    assert len(hosts.asked) == 6 and budget.in_flight == 0
    s.stopService()


def test_a_silent_subnet_is_marked_and_backed_off_exponentially(tmp_path: Path) -> None:
    clock = task.Clock()
    clock.advance(1000)
    n = make_node(tmp_path, raw_config(), clock=clock.seconds)
    hosts = Hosts()  # nothing answers
    prober_of(n, hosts, clock)
    assert n.client_requests.file(n.store, n.probe_budget, SUBNET)
    clock.advance(0)
    assert hosts.asked == ["198.19.7.1", "198.19.7.254"]
    record = n.store.get(keys.client_probe(SUBNET))
    assert record is not None and record.value == {"by": "n1", "failures": 1, "silent": True}
    for failures in (1, 2, 3):
        hosts.asked.clear()
        clock.advance(backoff(failures) - 1)
        ask(n, SUBNET)  # within the back-off: no request
        assert not n.client_requests.file(n.store, n.probe_budget, SUBNET)
        assert hosts.asked == []
        clock.advance(1)
        ask(n, SUBNET)  # the back-off is over: asked again, and silent again
        clock.advance(0)
        assert hosts.asked == ["198.19.7.1", "198.19.7.254"]
        record = n.store.get(keys.client_probe(SUBNET))
        assert record is not None and record.value["failures"] == failures + 1
    assert [backoff(f) for f in (1, 2, 3, 20)] == [60.0, 120.0, 240.0, 86400.0]


# -- deciding by what was probed ---------------------------------------------------------------


def test_probed_figures_decide_the_answer_across_the_group(tmp_path: Path) -> None:
    """Three members, a data center each: n1 answers a trusted ECS subnet by the LDNS's
    paths and asks for the subnet; each data center's node probes it; the figures reach n1,
    whose answer then follows the subnet's nearest data center, with the /24 as scope."""
    raw = raw_config(members=3)
    cluster = MemoryCluster(["n1", "n2", "n3"], tmp_path / "certs")
    nodes = {name: make_node(tmp_path, raw, name, cluster.clock.seconds) for name in cluster.names}
    for name, n in nodes.items():
        cluster.add(name, n.store)
    for a, b in (("n1", "n2"), ("n1", "n3"), ("n2", "n3")):
        cluster.connect(a, b)
    # the LDNS is nearest DC2; the client subnet nearest DC3
    n1 = nodes["n1"]
    for dc, us in (("DC1", 120_000), ("DC2", 20_000), ("DC3", 80_000)):
        measured = updated(None, True, us, 0, "dns_dot", "n1", LDNS, dc)
        cluster.write(f"n{dc[-1]}", keys.path(LDNS, dc), measured.value(), ttl=3600)
    rtts = {"DC1": 90_000, "DC2": 70_000, "DC3": 8_000}
    probers = {}
    for i, (name, n) in enumerate(nodes.items(), 1):
        dc = f"DC{i}"
        hosts = Hosts({"198.19.7.1": rtts[dc]})
        probers[name] = (hosts, prober_of(n, hosts, cluster.clock, dc))
    assert ask(n1, SUBNET) == (["10.0.2.1"], 0)  # the LDNS's paths decide, for now
    cluster.settle()
    assert [hosts.asked for hosts, _ in probers.values()] == [["198.19.7.1"]] * 3
    for name, store in cluster.stores.items():
        held = {dc: r.value["rtt"] for dc in rtts if (r := store.get(keys.client(SUBNET, dc))) is not None}
        assert held == rtts, name
    assert ask(n1, SUBNET) == (["10.0.3.1"], 24)  # the probed subnet's own figures
    assert ask(nodes["n2"], SUBNET) == (["10.0.3.1"], 24)
    assert ask(n1, None) == (["10.0.2.1"], None)  # without the ECS: the LDNS's paths
