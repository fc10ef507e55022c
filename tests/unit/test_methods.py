"""The load-balancing methods, each on its own: rankings for one client from a context."""

from __future__ import annotations

import collections
import ipaddress
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.config.lbmethods import DYNAMIC, LINK, MEMBER_METHODS, POOL_METHODS, SPECIAL, STATIC
from gtmcluster.dnsdata.zone import TYPE_A
from gtmcluster.lb import methods
from gtmcluster.lb.context import Rotations
from gtmcluster.lb.engine import Balancer
from gtmcluster.lb.methods import METHODS, Ranking, ratio_schedule
from gtmcluster.state.persistence import StorePersistence
from gtmcluster.state.store import Store
from gtmcluster.topology.records import Record, Selector, Topology
from tests.support import configs
from tests.support.lbfakes import (
    Cand,
    FakeAvailability,
    FakeClock,
    cands,
    client,
    context,
    load_config,
    slot,
    wideip,
)


def firsts(method: methods.Method, candidates: list[Cand], calls: int) -> list[str]:
    """The best candidate of *calls* successive rankings in one context (one node's rotations)."""
    ctx = context()
    out = []
    for _ in range(calls):
        ranking = method(candidates, ctx, slot())
        out.append(ranking.order[0].name)
    return out


def names(ranking: Ranking) -> list[str]:
    return [c.name for c in ranking.order]


def test_every_static_and_dynamic_method_is_implemented() -> None:
    """Each method name the config accepts (other than the chain's special ones) has an implementation."""
    assert set(METHODS) == set(STATIC) | set(DYNAMIC) | set(LINK)
    assert set(MEMBER_METHODS) == set(STATIC) | set(DYNAMIC) | set(LINK) | set(SPECIAL)
    assert set(POOL_METHODS) <= set(METHODS)


# -- round robin ----------------------------------------------------------------------------


def test_round_robin_rotates_the_whole_order() -> None:
    """Each call starts one further along and keeps the rest in configured order."""
    ctx = context()
    orders = [names(methods.round_robin(cands("a", "b", "c"), ctx, slot())) for _ in range(4)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def test_round_robin_counters_are_per_slot() -> None:
    """Two slots (pools or chain positions) rotate independently."""
    ctx = context()
    members = cands("a", "b", "c")
    first = [methods.round_robin(members, ctx, slot("x")).order[0].name for _ in range(2)]
    other = methods.round_robin(members, ctx, slot("y")).order[0].name
    assert first == ["a", "b"]
    assert other == "a"
    assert methods.round_robin(members, ctx, slot("x")).order[0].name == "c"


def test_round_robin_scope_is_zero() -> None:
    """Round robin does not depend on the client: scope 0."""
    assert methods.round_robin(cands("a", "b"), context(), slot()).scope == 0


def test_round_robin_with_max_answers_through_the_engine(tmp_path: Path) -> None:
    """With max_answers 2 each answer holds two members, and the window rotates one per query."""
    config = configs.base()
    config["pools"]["p"] = {"members": ["vs1", "vs2", "vs3"], "max_answers": 2}
    config["wideips"]["gslb.example.test"] = {"type": "A", "pools": ["p"]}
    loaded = load_config(tmp_path, config)
    clock = FakeClock()
    balancer = Balancer(
        loaded.topology, FakeAvailability(), StorePersistence(Store("n1", clock)), clock, random.Random(1)
    )
    wip = wideip(loaded)
    answers = [balancer.decide(wip, TYPE_A, client("192.0.2.9")).members for _ in range(4)]
    assert answers == [("vs1", "vs2"), ("vs2", "vs3"), ("vs3", "vs1"), ("vs1", "vs2")]


# -- ratio ----------------------------------------------------------------------------------


def test_ratio_three_to_one_is_interleaved() -> None:
    """Weights 3:1 give a, a, b, a per cycle (spread out), not a, a, a, b."""
    members = [Cand("a", 3), Cand("b", 1)]
    assert firsts(methods.ratio, members, 8) == ["a", "a", "b", "a"] * 2


def test_ratio_equal_weights_alternate() -> None:
    """Weights 2:2 alternate a, b rather than a, a, b, b."""
    members = [Cand("a", 2), Cand("b", 2)]
    assert firsts(methods.ratio, members, 4) == ["a", "b", "a", "b"]


def test_ratio_each_member_exactly_its_weight_per_cycle() -> None:
    """Over one cycle of sum(weights) queries each member is first exactly its ratio times."""
    members = [Cand("a", 5), Cand("b", 3), Cand("c", 2), Cand("d", 1)]
    counts = collections.Counter(firsts(methods.ratio, members, 11))
    assert counts == {"a": 5, "b": 3, "c": 2, "d": 1}


@settings(max_examples=100)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=6))
def test_ratio_cycle_counts_property(weights: list[int]) -> None:
    """For any weights, one cycle gives each member exactly its weight, zero-weight members never."""
    members = [Cand(f"m{i}", w) for i, w in enumerate(weights)]
    total = sum(weights)
    if total == 0:
        assert methods.ratio(members, context(), slot()).order == ()
        return
    counts = collections.Counter(firsts(methods.ratio, members, total))
    assert counts == {m.name: m.ratio for m in members if m.ratio}


def test_ratio_schedule_is_exact() -> None:
    """The schedule holds each index weight/gcd times and spreads a 3:1 pair as 0, 0, 1, 0."""
    assert ratio_schedule((3, 1)) == (0, 0, 1, 0)
    assert collections.Counter(ratio_schedule((4, 2, 6))) == {0: 2, 1: 1, 2: 3}


def test_ratio_zero_weight_never_chosen() -> None:
    """A member with ratio 0 never comes first and is left out of the order altogether."""
    members = [Cand("a", 0), Cand("b", 1), Cand("c", 2)]
    ctx = context()
    for _ in range(9):
        ranking = methods.ratio(members, ctx, slot())
        assert "a" not in names(ranking)
        assert sorted(names(ranking)) == ["b", "c"]


def test_ratio_all_zero_yields_nothing() -> None:
    """When every ratio is 0 the method offers nothing (so the chain moves on), and says why."""
    ranking = methods.ratio([Cand("a", 0), Cand("b", 0)], context(), slot())
    assert ranking.order == ()
    assert ranking.note == "every ratio is 0"
    assert ranking.scores == (("a", 0.0), ("b", 0.0))


def test_ratio_order_lists_every_weighted_member_once() -> None:
    """The ranking behind the first choice holds each weighted member once (for max_answers)."""
    ctx = context()
    for _ in range(6):
        ranking = methods.ratio([Cand("a", 3), Cand("b", 1), Cand("c", 2)], ctx, slot())
        assert sorted(names(ranking)) == ["a", "b", "c"]


# -- global availability --------------------------------------------------------------------


def test_global_availability_keeps_the_configured_order() -> None:
    """The first available member always wins; the others follow in configured order."""
    ctx = context()
    for _ in range(3):
        assert names(methods.global_availability(cands("a", "b", "c"), ctx, slot())) == ["a", "b", "c"]
    # with a gone (the engine passes only available members) b is first
    assert names(methods.global_availability(cands("b", "c"), ctx, slot())) == ["b", "c"]


# -- random ---------------------------------------------------------------------------------


def test_random_uses_the_context_rng() -> None:
    """Random shuffles with ctx.rng: the same seed gives the same sequence of rankings."""
    members = cands("a", "b", "c", "d")
    runs = []
    for _ in range(2):
        ctx = context(rng=random.Random(42))
        runs.append([names(methods.random_choice(members, ctx, slot())) for _ in range(20)])
    assert runs[0] == runs[1]
    expected_rng = random.Random(42)
    expected = []
    for _ in range(20):
        order = list(members)
        expected_rng.shuffle(order)
        expected.append([c.name for c in order])
    assert runs[0] == expected


def test_random_reaches_every_member() -> None:
    """Over many queries each member comes first sometimes, and each ranking is a permutation."""
    ctx = context(rng=random.Random(7))
    members = cands("a", "b", "c", "d")
    seen = set()
    for _ in range(200):
        order = names(methods.random_choice(members, ctx, slot()))
        assert sorted(order) == ["a", "b", "c", "d"]
        seen.add(order[0])
    assert seen == {"a", "b", "c", "d"}


# -- topology -------------------------------------------------------------------------------

R1 = (ipaddress.ip_network("198.51.100.0/24"),)


def region_r1() -> Selector:
    return Selector("region", False, "r1", R1)


def dc(name: str) -> Selector:
    return Selector("datacenter", False, name)


def ranked_topology(with_any: bool = True) -> Topology:
    records = [
        Record(0, region_r1(), dc("DC1"), 100),
        Record(1, region_r1(), dc("DC2"), 100),
        Record(2, region_r1(), dc("DC3"), 50),
    ]
    if with_any:
        records.append(Record(3, Selector("any", False, ""), dc("DC4"), 10))
    return Topology.build(records)


# a candidate's mask holds the ids of the server selectors it passes: here DC1 is 0, DC2 1, ...
TOPO_CANDS = [
    Cand("a", 1, frozenset({0})),
    Cand("b", 1, frozenset({1})),
    Cand("c", 1, frozenset({2})),
    Cand("d", 1, frozenset({3})),
    Cand("e", 1, frozenset()),
]


def test_topology_best_score_wins_and_lower_scores_follow() -> None:
    """The highest score comes first, lower scores after it; a candidate no record matches is left out."""
    ctx = context("198.51.100.7", topology=ranked_topology())
    ranking = methods.topology(TOPO_CANDS[2:], ctx, slot())
    assert names(ranking) == ["c", "d"]
    assert ranking.scores == (("c", 50.0), ("d", 10.0))


def test_topology_ties_rotate() -> None:
    """Candidates tied at the best score take turns first; the lower scores keep their place after them."""
    ctx = context("198.51.100.7", topology=ranked_topology())
    orders = [names(methods.topology(TOPO_CANDS, ctx, slot())) for _ in range(3)]
    assert orders == [["a", "b", "c", "d"], ["b", "a", "c", "d"], ["a", "b", "c", "d"]]
    ranking = methods.topology(TOPO_CANDS, ctx, slot())
    assert ranking.scores == (("a", 100.0), ("b", 100.0), ("c", 50.0), ("d", 10.0))
    assert "tied" in ranking.note


def test_topology_client_elsewhere_gets_the_any_record() -> None:
    """A client outside every region is scored by the `any` record only."""
    ctx = context("192.0.2.1", topology=ranked_topology())
    assert names(methods.topology(TOPO_CANDS, ctx, slot())) == ["d"]


def test_topology_no_match_yields_nothing_with_a_note_and_scope() -> None:
    """No matching record: empty ranking (the chain moves on), a note, and the scope of that fact."""
    topo = ranked_topology(with_any=False)
    ctx = context("192.0.2.1", topology=topo)
    ranking = methods.topology(TOPO_CANDS, ctx, slot())
    assert ranking.order == ()
    assert ranking.note == "no topology record matches"
    assert ranking.scope == topo.match(ipaddress.ip_address("192.0.2.1")).scope
    assert ranking.scope > 0


def test_topology_returns_the_match_scope() -> None:
    """A topology answer holds for the client's whole matched network: scope 24 for a /24 region."""
    ranking = methods.topology(TOPO_CANDS, context("198.51.100.7", topology=ranked_topology()), slot())
    assert ranking.scope == 24


def test_topology_score_zero_excludes() -> None:
    """A candidate whose first matching record scores 0 is excluded, even if a later record scores it higher."""
    topo = Topology.build(
        [
            Record(0, region_r1(), dc("DC1"), 0),
            Record(1, Selector("any", False, ""), dc("DC1"), 100),
            Record(2, Selector("any", False, ""), dc("DC2"), 5),
        ]
    )
    members = [Cand("a", 1, frozenset({0})), Cand("b", 1, frozenset({1}))]  # the ids of DC1's and DC2's selectors
    inside = methods.topology(members, context("198.51.100.7", topology=topo), slot())
    assert names(inside) == ["b"]
    assert inside.scores == (("a", 0.0), ("b", 5.0))
    outside = methods.topology(members, context("192.0.2.1", topology=topo), slot())
    assert names(outside) == ["a", "b"]


def test_topology_all_zero_scores_yield_nothing() -> None:
    """When every matching record scores 0 there is nothing to answer, and the note says so."""
    topo = Topology.build([Record(0, Selector("any", False, ""), dc("DC1"), 0)])
    ranking = methods.topology([Cand("a", 1, frozenset({0}))], context(topology=topo), slot())
    assert ranking.order == ()
    assert ranking.note == "every matching record scores 0"


def test_topology_ipv6_client() -> None:
    """An IPv6 client is matched against IPv6 networks."""
    net6 = ipaddress.ip_network("2001:db8:aaaa::/48")
    topo = Topology.build(
        [
            Record(0, Selector("region", False, "r", (net6,)), dc("DC1"), 100),
            Record(1, Selector("any", False, ""), dc("DC2"), 1),
        ]
    )
    members = [Cand("b", 1, frozenset({1})), Cand("a", 1, frozenset({0}))]
    ranking = methods.topology(members, context("2001:db8:aaaa::5", topology=topo), slot())
    assert names(ranking) == ["a", "b"]
    assert ranking.scope == 48
    assert names(methods.topology(members, context("2001:db8:bbbb::5", topology=topo), slot())) == ["b"]


# -- static persist -------------------------------------------------------------------------

EIGHT = cands(*(f"m{i}" for i in range(8)))


def persist_first(address: str, members: list[Cand] = EIGHT, ipv4: int = 32, ipv6: int = 128) -> str:
    return methods.static_persist(members, context(address), slot(ipv4=ipv4, ipv6=ipv6)).order[0].name


def test_static_persist_same_client_same_member() -> None:
    """The same client gets the same member on every query and in every fresh context."""
    choices = {persist_first("198.51.100.7") for _ in range(5)}
    ctx = context("198.51.100.7", rng=random.Random(99))
    for _ in range(5):
        choices.add(methods.static_persist(EIGHT, ctx, slot()).order[0].name)
    assert len(choices) == 1


def test_static_persist_spreads_clients() -> None:
    """Different clients do not all land on one member."""
    chosen = {persist_first(f"192.0.2.{i}") for i in range(64)}
    assert len(chosen) >= 6


def test_static_persist_groups_an_ipv4_prefix() -> None:
    """With a /24 prefix every address of a /24 gets the same member, and the scope is 24."""
    for block in ("198.51.100", "203.0.113", "192.0.2"):
        assert len({persist_first(f"{block}.{i}", ipv4=24) for i in range(256)}) == 1
    assert len({persist_first(f"10.{i}.0.1", ipv4=24) for i in range(64)}) > 1
    ranking = methods.static_persist(EIGHT, context("198.51.100.7"), slot(ipv4=24))
    assert ranking.scope == 24
    assert "198.51.100.0/24" in ranking.note


def test_static_persist_groups_an_ipv6_prefix() -> None:
    """With a /56 prefix IPv6 addresses that differ only below bit 56 share a member; scope 56."""
    base = int(ipaddress.IPv6Address("2001:db8:1:200::"))
    same = {persist_first(str(ipaddress.IPv6Address(base + (i << 40) + i)), ipv6=56) for i in range(64)}
    assert len(same) == 1
    spread = {persist_first(str(ipaddress.IPv6Address(base + (i << 72))), ipv6=56) for i in range(64)}
    assert len(spread) > 1
    assert methods.static_persist(EIGHT, context("2001:db8::1"), slot(ipv6=56)).scope == 56


def test_static_persist_full_prefix_tells_hosts_apart() -> None:
    """With the default /32 two hosts of one /24 may differ, and the scope is 32."""
    assert len({persist_first(f"198.51.100.{i}") for i in range(64)}) > 1
    assert methods.static_persist(EIGHT, context("198.51.100.1"), slot()).scope == 32


def test_static_persist_ratio_is_roughly_proportional() -> None:
    """Over many clients a ratio-3 member gets about three times the clients of a ratio-1 member."""
    members = [Cand("heavy", 3), Cand("light", 1)]
    counts = collections.Counter(
        persist_first(str(ipaddress.IPv4Address(0x0A000000 + i)), members) for i in range(4000)
    )
    share = counts["heavy"] / 4000
    assert 0.71 < share < 0.79


def test_static_persist_zero_ratio_excluded() -> None:
    """A ratio-0 member is never ranked; with all ratios 0 nothing is offered."""
    members = [Cand("zero", 0), Cand("a", 1), Cand("b", 1)]
    for i in range(100):
        ranking = methods.static_persist(members, context(f"192.0.2.{i}"), slot())
        assert "zero" not in names(ranking)
        assert sorted(names(ranking)) == ["a", "b"]
    assert methods.static_persist([Cand("z", 0)], context(), slot()).order == ()


def test_static_persist_scores_are_reported() -> None:
    """Each ranked candidate's score is in the trace, best first."""
    ranking = methods.static_persist(EIGHT, context("192.0.2.1"), slot())
    assert [n for n, _ in ranking.scores] == names(ranking)
    values = [s for _, s in ranking.scores]
    assert values == sorted(values, reverse=True)


# -- dynamic methods ------------------------------------------------------------------------


@pytest.mark.parametrize("name", DYNAMIC)
def test_dynamic_methods_yield_nothing_yet(name: str) -> None:
    """Methods that need measurements offer nothing (so the chain moves on) rather than failing."""
    ranking = METHODS[name](cands("a", "b"), context(), slot())
    assert ranking.order == ()
    assert ranking.note


def test_methods_advance_only_their_rotation() -> None:
    """Rankings advance the rotation of the slot they run in and no other counter."""
    rotations = Rotations()
    ctx = context(rotations=rotations)
    methods.round_robin(cands("a", "b"), ctx, slot("x"))
    methods.global_availability(cands("a", "b"), ctx, slot("y"))
    methods.static_persist(cands("a", "b"), ctx, slot("y"))
    assert rotations.next(("test", "x")) == 1
    assert rotations.next(("test", "y")) == 0
