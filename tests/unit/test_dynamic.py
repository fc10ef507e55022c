"""Dynamic methods through a node: RTT with tolerance and tie-breaks, probe requests for
missing paths, readiness, ECS, QoS, load figures, and explain without side effects."""

from __future__ import annotations

import ipaddress
import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.config.load import load
from gtmcluster.lb.context import Client
from gtmcluster.node import Node
from gtmcluster.proximity.table import updated
from gtmcluster.state import keys
from tests.support import configs
from tests.support.dnsclient import addresses, ecs_option, parse, query

LDNS = "198.18.0.53"  # in no region: topology would send it to DC3


def node(tmp_path: Path, **pool: Any) -> Node:
    raw = configs.base()
    raw["pools"]["p"]["load_balancing"] = pool.pop("load_balancing", {"preferred": "rtt", "alternate": "topology"})
    raw["pools"]["p"].update(pool)
    n = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: 1000.0, rng=random.Random(5))
    n.ready = True
    return n


def path(n: Node, dc: str, rtt_us: int, completion_ok: int = 10, hops: int = 0, ldns: str = LDNS) -> None:
    p = None
    for i in range(10):
        p = updated(p, i < completion_ok, rtt_us, hops, "dns_dot", "n1", ldns, dc)
    assert p is not None
    n.store.put(keys.path(ldns, dc), p.value())


def ask(n: Node, source: str = LDNS, **kw: Any) -> list[str]:
    reply = n.responder.handle(query("gslb.example.test", **kw), source)
    assert reply is not None
    return addresses(parse(reply))


def test_rtt_picks_the_data_center_closest_to_the_ldns(tmp_path: Path) -> None:
    """The lowest measured RTT wins, whatever topology would say."""
    n = node(tmp_path)
    path(n, "DC1", 120_000)
    path(n, "DC2", 20_000)
    path(n, "DC3", 80_000)
    assert ask(n) == ["10.0.2.1"]
    path(n, "DC1", 5_000)
    assert ask(n) == ["10.0.1.1"]


def test_missing_paths_fall_through_and_request_a_probe(tmp_path: Path) -> None:
    """With no path yet, the alternate (topology) answers at once and a probe is requested."""
    n = node(tmp_path)
    assert ask(n) == ["10.0.3.1"]  # topology: anyone -> DC3
    record = n.store.get(keys.probe_request(LDNS))
    assert record is not None and record.value == {"by": "n1"}


def test_stale_paths_are_used_and_refreshed(tmp_path: Path) -> None:
    """A path older than probe_interval still decides, and asks for a new measurement."""
    raw_clock = [1000.0]
    raw = configs.base()
    raw["pools"]["p"]["load_balancing"] = {"preferred": "rtt"}
    raw["prober"]["probe_interval"] = 60
    n = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: raw_clock[0])
    n.ready = True
    for dc, rtt in (("DC1", 9000), ("DC2", 1000), ("DC3", 5000)):
        path(n, dc, rtt)
    assert ask(n) == ["10.0.2.1"] and n.store.get(keys.probe_request(LDNS)) is None
    raw_clock[0] += 61
    assert ask(n) == ["10.0.2.1"]
    assert n.store.get(keys.probe_request(LDNS)) is not None


def test_rtts_within_tolerance_are_settled_by_completion_then_hops(tmp_path: Path) -> None:
    """10 ms vs 10.5 ms is a tie (10% tolerance): the better completion rate wins; with equal
    completion, fewer hops win."""
    n = node(tmp_path)
    path(n, "DC1", 10_000, completion_ok=7)
    path(n, "DC2", 10_500, completion_ok=10)
    path(n, "DC3", 50_000)
    assert ask(n) == ["10.0.2.1"]
    path(n, "DC1", 10_000, hops=9)
    path(n, "DC2", 10_500, hops=4)
    assert ask(n) == ["10.0.2.1"]
    tight = node(tmp_path / "tight", rtt_tolerance={"percent": 0, "min_us": 0})
    path(tight, "DC1", 10_000, completion_ok=7)
    path(tight, "DC2", 10_500, completion_ok=10)
    path(tight, "DC3", 50_000)
    assert ask(tight) == ["10.0.1.1"]  # no tolerance: strictly the lowest RTT


def test_exact_ties_share_the_load(tmp_path: Path) -> None:
    """Members equal in RTT, completion and hops are taken in turn."""
    n = node(tmp_path)
    for dc in ("DC1", "DC2", "DC3"):
        path(n, dc, 20_000)
    assert {ask(n)[0] for _ in range(6)} == {"10.0.1.1", "10.0.2.1", "10.0.3.1"}


def test_not_ready_means_no_measured_methods(tmp_path: Path) -> None:
    """Until the node has reconciled after starting, rtt yields nothing."""
    n = node(tmp_path)
    path(n, "DC2", 1000)
    n.ready = False
    assert ask(n) == ["10.0.3.1"]
    wideip = next(iter(n.config.wideips.values()))
    decision = n.balancer.explain(wideip, 1, Client.from_ldns(ipaddress.ip_address(LDNS)))
    assert "not ready" in decision.trace[1].note


def test_rtt_keys_on_the_ldns_even_with_a_client_subnet(tmp_path: Path) -> None:
    """RTT is measured to the resolver: a client subnet does not change it, and the answer
    is valid for every client behind that resolver (scope 0)."""
    n = node(tmp_path)
    path(n, "DC1", 90_000)
    path(n, "DC2", 10_000)
    path(n, "DC3", 50_000)
    reply = n.responder.handle(query("gslb.example.test", ecs="198.51.100.0/24"), LDNS)
    assert reply is not None
    msg = parse(reply)
    assert addresses(msg) == ["10.0.2.1"]  # region r1 (DC1) for topology, but RTT decides
    option = ecs_option(msg)
    assert option is not None and option.scopelen == 0


def test_completion_rate_and_hops_methods(tmp_path: Path) -> None:
    """completion_rate takes the most reliable path; hops the fewest measured hops."""
    n = node(tmp_path, load_balancing={"preferred": "completion_rate"})
    path(n, "DC1", 1000, completion_ok=6)
    path(n, "DC2", 9000, completion_ok=9)
    path(n, "DC3", 9000, completion_ok=8)
    assert ask(n) == ["10.0.2.1"]
    h = node(tmp_path / "h", load_balancing={"preferred": "hops"})
    path(h, "DC1", 1000, hops=12)
    path(h, "DC2", 1000, hops=3)
    path(h, "DC3", 1000, hops=0)  # unknown: not a candidate
    assert ask(h) == ["10.0.2.1"]


def metrics(n: Node, vs: str, **figures: float) -> None:
    n.store.put(f"metrics/vs/{vs}", {**figures, "by": "n1"})


@pytest.mark.parametrize(
    ("method", "field", "values", "winner"),
    [
        ("least_connections", "connections", (900, 100, 500), "10.0.2.1"),
        ("packet_rate", "packets_per_second", (10, 50, 5), "10.0.3.1"),
        ("kbps", "kbps", (7, 3, 9), "10.0.2.1"),
        ("vs_capacity", "capacity", (2, 8, 4), "10.0.2.1"),
    ],
)
def test_load_methods(tmp_path: Path, method: str, field: str, values: tuple[int, ...], winner: str) -> None:
    """Load-based methods use the metrics monitors' figures; without figures they yield nothing."""
    n = node(tmp_path, load_balancing={"preferred": method, "alternate": "global_availability"})
    assert ask(n) == ["10.0.1.1"]  # no figures: the alternate answers
    for vs, value in zip(("vs1", "vs2", "vs3"), values, strict=True):
        metrics(n, vs, **{field: value})
    assert ask(n) == [winner]


def test_qos_weighs_rtt_against_load(tmp_path: Path) -> None:
    """QoS combines RTT and load: a slightly slower but idle data center beats a busy one
    when packet rate weighs enough."""
    n = node(
        tmp_path,
        load_balancing={"preferred": "qos"},
        qos={"rtt": 1, "packet_rate": 10, "kbps": 0, "completion_rate": 0},
    )
    path(n, "DC1", 10_000)
    path(n, "DC2", 12_000)
    path(n, "DC3", 200_000)
    metrics(n, "vs1", packets_per_second=1000)
    metrics(n, "vs2", packets_per_second=100)
    metrics(n, "vs3", packets_per_second=100)
    assert ask(n) == ["10.0.2.1"]
    rtt_only = node(tmp_path / "r", load_balancing={"preferred": "qos"}, qos={"rtt": 1, "packet_rate": 0, "kbps": 0})
    path(rtt_only, "DC1", 10_000)
    path(rtt_only, "DC2", 12_000)
    path(rtt_only, "DC3", 200_000)
    assert ask(rtt_only) == ["10.0.1.1"]


def test_pool_level_rtt(tmp_path: Path) -> None:
    """pool_lb rtt picks the pool whose data centers are closest to the LDNS."""
    raw = configs.base()
    raw["pools"]["near"] = {"members": ["vs2"], "load_balancing": {"preferred": "global_availability"}}
    raw["pools"]["far"] = {"members": ["vs1"], "load_balancing": {"preferred": "global_availability"}}
    raw["wideips"]["gslb.example.test"] = {"pools": ["far", "near"], "pool_lb": "rtt"}
    n = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: 1000.0)
    n.ready = True
    path(n, "DC1", 100_000)
    path(n, "DC2", 3_000)
    assert ask(n) == ["10.0.2.1"]


def test_explain_changes_nothing(tmp_path: Path) -> None:
    """explain shows the decision without advancing rotations or writing records."""
    n = node(tmp_path, load_balancing={"preferred": "round_robin"})
    wideip = next(iter(n.config.wideips.values()))
    client = Client.from_ldns(ipaddress.ip_address(LDNS))
    before = len(n.store)
    first = [n.balancer.explain(wideip, 1, client).members for _ in range(3)]
    assert first[0] == first[1] == first[2]
    assert len(n.store) == before
    assert ask(n) == ["10.0.1.1"]  # the real rotation had not moved


def test_rtt_waits_for_every_measuring_data_center(tmp_path: Path) -> None:
    """With GTMs in DC1 and DC2, a path from DC1 alone decides nothing (the alternate
    answers); once DC2 has measured, RTT compares. DC3 has no GTM and never holds it up."""
    raw = configs.base()
    configs.add_member(raw, "n2", "DC2", "127.0.0.2")
    raw["pools"]["p"]["load_balancing"] = {"preferred": "rtt", "alternate": "topology"}
    n = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: 1000.0)
    n.ready = True
    path(n, "DC1", 1_000)
    assert ask(n) == ["10.0.3.1"]  # topology: waiting for DC2's measurement
    wideip = next(iter(n.config.wideips.values()))
    decision = n.balancer.explain(wideip, 1, Client.from_ldns(ipaddress.ip_address(LDNS)))
    assert "no path from DC2" in decision.trace[1].note
    path(n, "DC2", 50_000)
    assert ask(n) == ["10.0.1.1"]  # DC3 unmeasured, but it has no GTM to measure from


def weighted(tmp_path: Path, method: str, ratios: tuple[int, ...]) -> Node:
    """A node whose pool p has members vs1, vs2, vs3 of *ratios*, *method* first."""
    raw = configs.base()
    raw["pools"]["p"]["load_balancing"] = {"preferred": method, "alternate": "global_availability"}
    raw["pools"]["p"]["members"] = [
        {"virtual_server": vs, "ratio": r} for vs, r in zip(("vs1", "vs2", "vs3"), ratios, strict=True)
    ]
    n = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: 1000.0, rng=random.Random(5))
    n.ready = True
    return n


def test_weighted_least_connections_divides_by_the_ratio(tmp_path: Path) -> None:
    """The lowest connections / ratio wins: 30 connections at ratio 3 (10 each) lose to 8 at
    ratio 1, and win at 18 (6 each); ratio 0 takes nothing; equal loads are taken in turn."""
    n = weighted(tmp_path, "weighted_least_connections", (3, 1, 0))
    assert ask(n) == ["10.0.1.1"]  # no figures: the alternate answers
    metrics(n, "vs1", connections=30)
    metrics(n, "vs2", connections=8)
    metrics(n, "vs3", connections=0)  # ratio 0: never chosen, however idle
    assert ask(n) == ["10.0.2.1"]
    metrics(n, "vs1", connections=18)
    assert ask(n) == ["10.0.1.1"]
    metrics(n, "vs1", connections=24)  # 8 each, as vs2
    assert {ask(n)[0] for _ in range(4)} == {"10.0.1.1", "10.0.2.1"}
    wideip = next(iter(n.config.wideips.values()))
    decision = n.balancer.explain(wideip, 1, Client.from_ldns(ipaddress.ip_address(LDNS)))
    assert dict(decision.trace[1].scores) == {"vs1": 8.0, "vs2": 8.0}


def test_dynamic_ratio_scales_ratios_by_spare_capacity(tmp_path: Path) -> None:
    """Half full at ratio 2 weighs as much as empty at ratio 1; a full member gets nothing;
    over a cycle the answers follow the scaled ratios exactly."""
    n = weighted(tmp_path, "dynamic_ratio", (2, 1, 5))
    assert ask(n) == ["10.0.1.1"]  # no figures: the alternate answers
    metrics(n, "vs1", capacity=100, connections=50)  # 2 × 0.5
    metrics(n, "vs2", capacity=40, connections=0)  # 1 × 1
    metrics(n, "vs3", capacity=10, connections=12)  # over capacity: 0
    answers = [ask(n)[0] for _ in range(40)]
    assert answers.count("10.0.1.1") == answers.count("10.0.2.1") == 20
    metrics(n, "vs1", capacity=100, connections=0)  # now 2 × 1 against 1 × 1
    answers = [ask(n)[0] for _ in range(30)]
    assert (answers.count("10.0.1.1"), answers.count("10.0.2.1")) == (20, 10)
    for vs in ("vs1", "vs2"):
        metrics(n, vs, capacity=10, connections=10)
    assert ask(n) == ["10.0.1.1"]  # every member full: the method yields nothing, the alternate answers
    wideip = next(iter(n.config.wideips.values()))
    decision = n.balancer.explain(wideip, 1, Client.from_ldns(ipaddress.ip_address(LDNS)))
    assert decision.trace[1].note == "no spare capacity (or ratio 0)"


@pytest.fixture(scope="module")
def dynamic_node(tmp_path_factory: pytest.TempPathFactory) -> Node:
    return weighted(tmp_path_factory.mktemp("dynamic"), "dynamic_ratio", (3, 1, 2))


@given(figures=st.lists(st.tuples(st.integers(1, 200), st.integers(0, 250)), min_size=3, max_size=3))
@settings(max_examples=60)
def test_dynamic_ratio_answers_follow_ratio_times_spare(dynamic_node: Node, figures: list[tuple[int, int]]) -> None:
    """Over a run of answers, a member with no spare capacity is never answered (unless none
    has any: the alternate answers), and one of a larger ratio × spare share is answered at
    least as often as a smaller one (give or take the turn a run may cut)."""
    n = dynamic_node
    share = {}
    for (vs, ratio), (capacity, connections) in zip((("vs1", 3), ("vs2", 1), ("vs3", 2)), figures, strict=True):
        metrics(n, vs, capacity=capacity, connections=connections)
        share[f"10.0.{vs[2]}.1"] = ratio * max(capacity - connections, 0) / capacity
    answers = [ask(n)[0] for _ in range(90)]
    if not any(share.values()):
        assert set(answers) == {"10.0.1.1"}  # the alternate, global_availability
        return
    for a, x in share.items():
        if x == 0:
            assert a not in answers
        for b, y in share.items():
            if x > y:
                assert answers.count(a) >= answers.count(b) - 1, (share, answers)


def test_load_figures_past_any_server_count_for_nothing(tmp_path: Path) -> None:
    """A figure over `MAX_FIGURE` (the readers refuse such; an older member's record may
    hold one) counts as none: a pool of two members reporting a capacity of 1e308 does not
    sum to infinity, so no qos score is NaN (0 × NaN would be, even at a weight of 0) and
    the pools are ranked by the figures that are numbers (here the packet rates)."""
    raw = configs.base()
    raw["pools"]["big"] = {"members": ["vs1", "vs2"], "load_balancing": {"preferred": "global_availability"}}
    raw["pools"]["small"] = {"members": ["vs3"], "load_balancing": {"preferred": "global_availability"}}
    raw["wideips"]["gslb.example.test"] = {"pools": ["small", "big"], "pool_lb": "qos"}
    n = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: 1000.0)
    n.ready = True
    for dc in ("DC1", "DC2", "DC3"):
        path(n, dc, 10_000)
    metrics(n, "vs1", capacity=1e308, packets_per_second=10)
    metrics(n, "vs2", capacity=1e308, packets_per_second=10)
    metrics(n, "vs3", capacity=10, packets_per_second=100)
    wideip = next(iter(n.config.wideips.values()))
    decision = n.balancer.explain(wideip, 1, Client.from_ldns(ipaddress.ip_address(LDNS)))
    scores = [score for step in decision.trace for _, score in step.scores]
    assert scores and all(math.isfinite(s) for s in scores), decision.trace
    assert decision.trace[0].result[0] == "big", decision.trace
    assert ask(n) == ["10.0.1.1"]


@pytest.mark.parametrize("method", ["vs_capacity", "dynamic_ratio", "least_connections"])
def test_load_methods_ignore_figures_that_are_no_numbers(tmp_path: Path, method: str) -> None:
    """The pool-level sums of every load method skip a figure past `MAX_FIGURE`: their
    scores stay finite, and the members with real figures are chosen by them."""
    n = node(tmp_path, load_balancing={"preferred": method, "alternate": "global_availability"})
    metrics(n, "vs1", capacity=1e308, connections=1e300)
    metrics(n, "vs2", capacity=100, connections=10)
    metrics(n, "vs3", capacity=50, connections=40)
    wideip = next(iter(n.config.wideips.values()))
    decision = n.balancer.explain(wideip, 1, Client.from_ldns(ipaddress.ip_address(LDNS)))
    scores = dict(decision.trace[1].scores)
    assert "vs1" not in scores and all(math.isfinite(s) for s in scores.values()), decision.trace
    assert ask(n) == ["10.0.2.1"]
