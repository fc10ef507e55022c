"""Balancer.decide on loaded configs: method chains, pools, health, answers, persistence, trace."""

from __future__ import annotations

import ipaddress
import random
from pathlib import Path
from typing import Any, Protocol

import pytest

from gtmcluster.config.lbmethods import STATIC
from gtmcluster.config.model import Config, WideIP
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_AAAA
from gtmcluster.lb.context import Availability, Client, ConfiguredAvailability
from gtmcluster.lb.engine import Balancer
from gtmcluster.lb.trace import Action, Decision, Step
from gtmcluster.state.persistence import StorePersistence
from gtmcluster.state.store import Store
from tests.support import configs
from tests.support.lbfakes import FakeAvailability, FakeClock, client, ecs_client, load_config, wideip

R1 = "198.51.100.7"  # in region r1 (prefers DC1)
R1_NEIGHBOUR = "198.51.100.200"  # same /24
R2 = "203.0.113.9"  # in region r2 (prefers DC2)
ELSEWHERE = "192.0.2.77"  # in no region
WIP = "gslb.example.test"

NO_ANY = [
    {"ldns": "region r1", "server": "datacenter DC1", "score": 100},
    {"ldns": "region r2", "server": "datacenter DC2", "score": 100},
]


def cfg(
    pools: dict[str, Any] | None = None,
    wide: dict[str, Any] | None = None,
    topology: list[dict[str, Any]] | None = None,
    **vs_changes: dict[str, Any],
) -> dict[str, Any]:
    """configs.base() with the pools, the wide IP, the topology or some virtual servers replaced."""
    config = configs.base()
    if pools is not None:
        config["pools"] = pools
    if wide is not None:
        config["wideips"] = {WIP: wide}
    if topology is not None:
        config["topology"] = topology
    for name, changes in vs_changes.items():
        config["virtual_servers"][name.replace("_", "-")].update(changes)
    return config


def balancer(
    config: Config, availability: Availability | None = None, clock: FakeClock | None = None, seed: int = 1
) -> Balancer:
    clock = clock or FakeClock()
    return Balancer(
        config.topology,
        availability or FakeAvailability(),
        StorePersistence(Store("n1", clock)),
        clock,
        random.Random(seed),
    )


class Decider(Protocol):
    def decide(self, wideip: WideIP, qtype: int, client: Client) -> Decision: ...


def ask(b: Decider, config: Config, who: str | Client, qtype: int = TYPE_A) -> Decision:
    return b.decide(wideip(config), qtype, client(who) if isinstance(who, str) else who)


def addresses(decision: Decision) -> list[str]:
    return [str(a) for a in decision.addresses]


def slots(decision: Decision) -> list[tuple[str, str, str]]:
    return [(s.subject, s.slot, s.method) for s in decision.trace]


ONE_EACH = {
    "pa": {"members": ["vs1"]},
    "pb": {"members": ["vs2"]},
    "pc": {"members": ["vs3"]},
}


# -- the answer and the chain ---------------------------------------------------------------


def test_topology_answers_by_region(tmp_path: Path) -> None:
    """The sample setup answers each region with its data center and others with the `any` one."""
    config = load_config(tmp_path, configs.base())
    b = balancer(config)
    d = ask(b, config, R1)
    assert (d.action, addresses(d), d.members, d.pool, d.ttl, d.method) == (
        Action.ANSWER,
        ["10.0.1.1"],
        ("vs1",),
        "p",
        30,
        "topology",
    )
    assert addresses(ask(b, config, R2)) == ["10.0.2.1"]
    assert addresses(ask(b, config, ELSEWHERE)) == ["10.0.3.1"]


def test_alternate_runs_when_preferred_yields_nothing(tmp_path: Path) -> None:
    """Topology with no matching record passes to the alternate (round robin), which answers."""
    pools = {
        "p": {"members": ["vs1", "vs2", "vs3"], "load_balancing": {"preferred": "topology", "alternate": "round_robin"}}
    }
    config = load_config(tmp_path, cfg(pools, {"pools": ["p"]}, NO_ANY))
    b = balancer(config)
    first, second = ask(b, config, ELSEWHERE), ask(b, config, ELSEWHERE)
    assert (first.members, second.members) == (("vs1",), ("vs2",))
    assert first.method == "round_robin"
    assert slots(first) == [
        (f"wideip {WIP}", "pool_lb", "round_robin"),
        ("pool p", "preferred", "topology"),
        ("pool p", "alternate", "round_robin"),
    ]
    assert first.trace[1].result == ()
    assert first.trace[1].note == "no topology record matches"
    # a client topology knows is still answered by topology
    assert ask(b, config, R2).members == ("vs2",)
    assert ask(b, config, R2).method == "topology"


def test_fallback_after_a_none_alternate(tmp_path: Path) -> None:
    """`none` is skipped without a trace step; the fallback answers when the preferred has nothing."""
    pools = {
        "p": {
            "members": ["vs1", "vs2", "vs3"],
            "load_balancing": {"preferred": "rtt", "alternate": "none", "fallback": "global_availability"},
        }
    }
    config = load_config(tmp_path, cfg(pools, {"pools": ["p"]}))
    d = ask(balancer(config), config, R2)
    assert d.members == ("vs1",)
    assert d.method == "global_availability"
    assert [s.slot for s in d.trace] == ["pool_lb", "preferred", "fallback"]
    assert d.trace[1].note == "no measurements on this node"


def test_standard_chain_rtt_then_topology_then_global_availability(tmp_path: Path) -> None:
    """The seeds' setup: RTT has no data yet, so topology answers; with no topology match, GA does."""
    lb = {"preferred": "rtt", "alternate": "topology", "fallback": "global_availability"}
    pools = {"p": {"members": ["vs1", "vs2", "vs3"], "load_balancing": lb}}
    config = load_config(tmp_path, cfg(pools, {"pools": ["p"]}, NO_ANY))
    b = balancer(config)
    d = ask(b, config, R2)
    assert (d.members, d.method) == (("vs2",), "topology")
    d = ask(b, config, ELSEWHERE)
    assert (d.members, d.method) == (("vs1",), "global_availability")
    assert [s.method for s in d.trace] == ["round_robin", "rtt", "topology", "global_availability"]


def test_topology_first_then_rtt_order(tmp_path: Path) -> None:
    """Seed 001's order (topology, then RTT, then global availability) works as well."""
    lb = {"preferred": "topology", "alternate": "rtt", "fallback": "global_availability"}
    pools = {"p": {"members": ["vs2", "vs1"], "load_balancing": lb}}
    config = load_config(tmp_path, cfg(pools, {"pools": ["p"]}, NO_ANY))
    b = balancer(config)
    assert ask(b, config, R1).members == ("vs1",)
    d = ask(b, config, ELSEWHERE)
    assert (d.members, d.method) == (("vs2",), "global_availability")


# -- health ---------------------------------------------------------------------------------


def test_down_member_is_not_a_candidate(tmp_path: Path) -> None:
    """A member the availability reports down is not offered; topology falls to the next best score."""
    config = load_config(tmp_path, configs.base())
    d = ask(balancer(config, FakeAvailability({"vs1"})), config, R1)
    assert d.members == ("vs3",)
    assert d.trace[1].candidates == ("vs2", "vs3")


def test_disabled_vs_in_config_is_never_answered(tmp_path: Path) -> None:
    """`enabled: false` takes a virtual server out under ConfiguredAvailability."""
    pools = {"p": {"members": ["vs1", "vs2", "vs3"]}}
    config = load_config(tmp_path, cfg(pools, {"pools": ["p"]}, vs1={"enabled": False}))
    b = balancer(config, ConfiguredAvailability())
    answers = [ask(b, config, R1).members[0] for _ in range(6)]
    assert answers == ["vs2", "vs3"] * 3


def test_disabled_vs_loses_its_topology_clients(tmp_path: Path) -> None:
    """With vs1 disabled, r1's clients get the next topology choice."""
    config = load_config(tmp_path, cfg(vs1={"enabled": False}))
    assert ask(balancer(config, ConfiguredAvailability()), config, R1).members == ("vs3",)


@pytest.mark.parametrize("method", STATIC)
def test_each_method_offers_only_available_members(tmp_path: Path, method: str) -> None:
    """Whatever the method, a down member is never answered, and with every member down nothing is."""
    pools = {"p": {"members": ["vs1", "vs2"], "load_balancing": {"preferred": method}}}
    config = load_config(tmp_path, cfg(pools, {"pools": ["p"]}))
    b = balancer(config, FakeAvailability({"vs1"}))
    answered = [ask(b, config, who) for who in (R1, R2, ELSEWHERE, R1, R2, ELSEWHERE)]
    assert {d.members for d in answered if d.action is Action.ANSWER} <= {("vs2",)}
    assert ask(b, config, R2).members == ("vs2",)
    d = ask(balancer(config, FakeAvailability({"vs1", "vs2"})), config, R2)
    assert (d.action, d.members) == (Action.RETURN_TO_DNS, ())  # the default failure response


def test_pool_with_every_member_down_is_skipped(tmp_path: Path) -> None:
    """A pool without an available member is not offered to pool_lb; the next pool answers."""
    config = load_config(tmp_path, cfg(ONE_EACH, {"pools": ["pa", "pb"], "pool_lb": "global_availability"}))
    assert ask(balancer(config), config, R1).pool == "pa"
    d = ask(balancer(config, FakeAvailability({"vs1"})), config, R1)
    assert (d.pool, d.members) == ("pb", ("vs2",))
    assert d.trace[0].candidates == ("pb",)


def test_next_pool_when_a_chain_yields_nothing(tmp_path: Path) -> None:
    """A pool whose methods all yield nothing passes the query to the next pool in the ranking."""
    pools = {"pa": {"members": ["vs1"], "load_balancing": {"preferred": "topology"}}, "pb": {"members": ["vs2"]}}
    config = load_config(tmp_path, cfg(pools, {"pools": ["pa", "pb"], "pool_lb": "global_availability"}, NO_ANY))
    d = ask(balancer(config), config, ELSEWHERE)
    assert (d.pool, d.members) == ("pb", ("vs2",))
    assert slots(d)[1:] == [("pool pa", "preferred", "topology"), ("pool pb", "preferred", "round_robin")]


def test_last_resort_pool(tmp_path: Path) -> None:
    """When every listed pool is down, the last resort pool answers, marked so in the trace."""
    config = load_config(tmp_path, cfg(ONE_EACH, {"pools": ["pa"], "last_resort_pool": "pc"}))
    assert ask(balancer(config), config, R1).pool == "pa"
    d = ask(balancer(config, FakeAvailability({"vs1"})), config, R1)
    assert (d.action, d.pool, d.members) == (Action.ANSWER, "pc", ("vs3",))
    assert d.trace[-1].subject == "pool pc (last resort)"


def test_last_resort_pool_after_chains_yield_nothing(tmp_path: Path) -> None:
    """The last resort pool also answers when the listed pools are up but their methods yield nothing."""
    pools = {"pa": {"members": ["vs1"], "load_balancing": {"preferred": "topology"}}, "pc": {"members": ["vs3"]}}
    config = load_config(tmp_path, cfg(pools, {"pools": ["pa"], "last_resort_pool": "pc"}, NO_ANY))
    assert ask(balancer(config), config, ELSEWHERE).pool == "pc"
    assert ask(balancer(config), config, R1).pool == "pa"


def test_every_pool_down_is_nothing(tmp_path: Path) -> None:
    """With every pool (last resort too) down the decision is the failure response (by default
    return_to_dns), without addresses."""
    config = load_config(tmp_path, cfg(ONE_EACH, {"pools": ["pa", "pb"], "last_resort_pool": "pc"}))
    d = ask(balancer(config, FakeAvailability({"vs1", "vs2", "vs3"})), config, R1)
    assert (d.action, d.addresses, d.pool, d.members) == (Action.RETURN_TO_DNS, (), None, ())
    assert d.trace[-1].slot == "failure_response"
    assert d.trace[0].note == "no pool has an available member"
    assert d.trace[-2].note == "no available member"


def test_every_member_down_in_the_sample_is_nothing(tmp_path: Path) -> None:
    """The sample wide IP with all its IPv4 members down has no A answer."""
    config = load_config(tmp_path, configs.base())
    d = ask(balancer(config, FakeAvailability({"vs1", "vs2", "vs3"})), config, R1)
    assert d.action is Action.RETURN_TO_DNS


# -- special methods ------------------------------------------------------------------------


def test_return_to_dns_ends_the_search(tmp_path: Path) -> None:
    """return_to_dns after a method with nothing ends the search: the next pool is not tried."""
    lb = {"preferred": "topology", "fallback": "return_to_dns"}
    pools = {"pa": {"members": ["vs1"], "load_balancing": lb}, "pb": {"members": ["vs2"]}}
    config = load_config(tmp_path, cfg(pools, {"pools": ["pa", "pb"], "pool_lb": "global_availability"}, NO_ANY))
    b = balancer(config)
    d = ask(b, config, ELSEWHERE)
    assert (d.action, d.addresses, d.method) == (Action.RETURN_TO_DNS, (), "return_to_dns")
    assert not any(s.subject == "pool pb" for s in d.trace)
    assert d.trace[-1].note == "ends the search"
    assert ask(b, config, R1).action is Action.ANSWER


def test_drop_packet_ends_the_search(tmp_path: Path) -> None:
    """drop_packet as the preferred method drops the query even with members up."""
    pools = {"pa": {"members": ["vs1"], "load_balancing": {"preferred": "drop_packet"}}, "pb": {"members": ["vs2"]}}
    config = load_config(tmp_path, cfg(pools, {"pools": ["pa", "pb"], "pool_lb": "global_availability"}))
    d = ask(balancer(config), config, R1)
    assert (d.action, d.addresses, d.method) == (Action.DROP, (), "drop_packet")
    assert [s.subject for s in d.trace] == [f"wideip {WIP}", "pool pa"]


FALLBACK_POOL = {
    "members": ["vs1", "vs2"],
    "fallback_ip": ["192.0.2.200", "2001:db8::200", "192.0.2.201"],
    "load_balancing": {"preferred": "global_availability", "fallback": "fallback_ip"},
}


def test_fallback_ip_answers_when_members_are_down(tmp_path: Path) -> None:
    """fallback_ip answers with the pool's fallback address of the asked family, whatever the health."""
    config = load_config(tmp_path, cfg({"pf": FALLBACK_POOL}, {"type": ["A", "AAAA"], "pools": ["pf"]}))
    b = balancer(config, FakeAvailability({"vs1", "vs2"}))
    d = ask(b, config, R1)
    assert (d.action, addresses(d), d.members, d.method, d.pool) == (
        Action.ANSWER,
        ["192.0.2.200"],
        (),
        "fallback_ip",
        "pf",
    )
    assert d.trace[-1].note == "regardless of health"
    d6 = ask(b, config, R1, TYPE_AAAA)
    assert addresses(d6) == ["2001:db8::200"]
    # with members up the preferred method answers
    assert ask(balancer(config), config, R1).members == ("vs1",)


def test_a_pool_without_members_answers_its_fallback_address(tmp_path: Path) -> None:
    """A pool with no members and fallback_ip in its chain (F5's fallback-only pool: a
    maintenance address) is a candidate and answers its fallback address, whichever slot
    holds fallback_ip; for AAAA it has no address, and the next pool answers."""
    maint = {"fallback_ip": "10.200.30.43", "load_balancing": {"preferred": "fallback_ip"}}
    late = {"members": [], "fallback_ip": ["10.200.30.44"], "load_balancing": {"fallback": "fallback_ip"}}
    pools = {"maint": maint, "late": late, "p6": {"members": ["vs2-6"]}}
    wide = {"type": ["A", "AAAA"], "pools": ["maint", "p6"], "pool_lb": "global_availability"}
    config = load_config(tmp_path, cfg(pools, wide))
    assert config.pools["maint"].members == ()
    d = ask(balancer(config), config, R1)
    assert (d.action, addresses(d), d.pool, d.members, d.method) == (
        Action.ANSWER,
        ["10.200.30.43"],
        "maint",
        (),
        "fallback_ip",
    )
    d6 = ask(balancer(config), config, R1, TYPE_AAAA)
    assert (d6.pool, addresses(d6)) == ("p6", ["2001:db8:2::1"])
    config = load_config(tmp_path / "late", cfg(pools, {"type": "A", "pools": ["late"]}))
    d = ask(balancer(config), config, R1)
    assert (addresses(d), d.slot) == (["10.200.30.44"], "fallback")
    assert [(s.slot, s.note) for s in d.trace[1:]] == [
        ("preferred", "no available member"),
        ("fallback", "regardless of health"),
    ]


def test_fallback_ip_respects_max_answers_and_family(tmp_path: Path) -> None:
    """With max_answers 2 an A answer holds both IPv4 fallback addresses and never the IPv6 one."""
    pool = dict(FALLBACK_POOL, max_answers=2, load_balancing={"preferred": "fallback_ip"})
    config = load_config(tmp_path, cfg({"pf": pool}, {"type": ["A", "AAAA"], "pools": ["pf"]}))
    d = ask(balancer(config), config, R1)
    assert addresses(d) == ["192.0.2.200", "192.0.2.201"]
    assert addresses(ask(balancer(config), config, R1, TYPE_AAAA)) == ["2001:db8::200"]


def test_fallback_ip_of_the_wrong_family_passes_on(tmp_path: Path) -> None:
    """A pool whose fallback addresses are all IPv4 has nothing for AAAA; the next pool answers."""
    pf = dict(FALLBACK_POOL, fallback_ip=["192.0.2.200"], load_balancing={"preferred": "fallback_ip"})
    pools = {"pf": pf, "p6": {"members": ["vs2-6"]}}
    config = load_config(
        tmp_path, cfg(pools, {"type": ["A", "AAAA"], "pools": ["pf", "p6"], "pool_lb": "global_availability"})
    )
    d = ask(balancer(config), config, R1, TYPE_AAAA)
    assert (d.pool, addresses(d)) == ("p6", ["2001:db8:2::1"])


def test_max_answers_returns_several_records(tmp_path: Path) -> None:
    """max_answers 2 answers with the method's best two available members."""
    pools = {
        "p": {
            "members": ["vs1", "vs2", "vs3"],
            "max_answers": 2,
            "load_balancing": {"preferred": "global_availability"},
        }
    }
    config = load_config(tmp_path, cfg(pools, {"pools": ["p"]}))
    d = ask(balancer(config), config, R1)
    assert (d.members, addresses(d)) == (("vs1", "vs2"), ["10.0.1.1", "10.0.2.1"])
    d = ask(balancer(config, FakeAvailability({"vs1"})), config, R1)
    assert d.members == ("vs2", "vs3")
    d = ask(balancer(config, FakeAvailability({"vs1", "vs2"})), config, R1)
    assert d.members == ("vs3",)


# -- address families -----------------------------------------------------------------------


def test_aaaa_picks_only_ipv6_members(tmp_path: Path) -> None:
    """AAAA queries are answered from IPv6 members only, A queries from IPv4 members only."""
    pools = {"pm": {"members": ["vs1", "vs1-6", "vs2", "vs2-6"]}}
    config = load_config(tmp_path, cfg(pools, {"type": ["A", "AAAA"], "pools": ["pm"]}))
    b = balancer(config)
    six = {ask(b, config, R1, TYPE_AAAA).members[0] for _ in range(4)}
    four = {ask(b, config, R1, TYPE_A).members[0] for _ in range(4)}
    assert six == {"vs1-6", "vs2-6"}
    assert four == {"vs1", "vs2"}


def test_dual_type_wideip_uses_the_pool_of_each_family(tmp_path: Path) -> None:
    """The sample wide IP answers A from pool p and AAAA from pool p6 (p has no IPv6 member)."""
    config = load_config(tmp_path, configs.base())
    b = balancer(config)
    d4, d6 = ask(b, config, R2, TYPE_A), ask(b, config, R2, TYPE_AAAA)
    assert (d4.pool, addresses(d4)) == ("p", ["10.0.2.1"])
    assert (d6.pool, addresses(d6)) == ("p6", ["2001:db8:2::1"])
    assert d6.trace[0].candidates == ("p6",)
    assert d6.ttl == 60


def test_ipv6_client_topology(tmp_path: Path) -> None:
    """An IPv6 LDNS in r1's IPv6 network gets DC1 for both A and AAAA."""
    config = load_config(tmp_path, configs.base())
    b = balancer(config)
    assert ask(b, config, "2001:db8:aaaa::53", TYPE_AAAA).members == ("vs1-6",)
    assert ask(b, config, "2001:db8:aaaa::53", TYPE_A).members == ("vs1",)


def test_aaaa_with_no_ipv6_choice_is_nothing(tmp_path: Path) -> None:
    """An IPv6 client topology sends to DC3 (no IPv6 member there) gets no AAAA answer."""
    config = load_config(tmp_path, configs.base())
    d = ask(balancer(config), config, "2001:db8:bbbb::1", TYPE_AAAA)
    assert d.action is Action.RETURN_TO_DNS
    assert d.trace[-2].note == "no topology record matches"
    assert d.trace[-1].slot == "failure_response"


# -- pool_lb --------------------------------------------------------------------------------


def test_pool_lb_round_robin(tmp_path: Path) -> None:
    """pool_lb round_robin takes the pools in turn."""
    config = load_config(tmp_path, cfg(ONE_EACH, {"pools": ["pa", "pb", "pc"], "pool_lb": "round_robin"}))
    b = balancer(config)
    assert [ask(b, config, R1).pool for _ in range(4)] == ["pa", "pb", "pc", "pa"]


def test_pool_lb_round_robin_skips_a_down_pool_evenly(tmp_path: Path) -> None:
    """With one pool down, round robin alternates evenly between the other two."""
    config = load_config(tmp_path, cfg(ONE_EACH, {"pools": ["pa", "pb", "pc"], "pool_lb": "round_robin"}))
    b = balancer(config, FakeAvailability({"vs1"}))
    assert [ask(b, config, R1).pool for _ in range(4)] == ["pb", "pc", "pb", "pc"]


def test_pool_lb_round_robin_skips_a_dead_pool_with_unused_fallback_ips(tmp_path: Path) -> None:
    """A pool whose members are all down cannot answer even if it lists fallback addresses its chain
    never uses; round robin shares the queries evenly between the two pools that can."""
    pools = dict(ONE_EACH, pa={"members": ["vs1"], "fallback_ip": "192.0.2.200"})
    config = load_config(tmp_path, cfg(pools, {"pools": ["pa", "pb", "pc"], "pool_lb": "round_robin"}))
    b = balancer(config, FakeAvailability({"vs1"}))
    assert [ask(b, config, R1).pool for _ in range(6)] == ["pb", "pc"] * 3


def test_pool_lb_ratio(tmp_path: Path) -> None:
    """pool_lb ratio uses the pools' ratios: 3:1 gives pa, pa, pb, pa; ratio 0 is never picked."""
    pools = [{"pool": "pa", "ratio": 3}, {"pool": "pb", "ratio": 1}, {"pool": "pc", "ratio": 0}]
    config = load_config(tmp_path, cfg(ONE_EACH, {"pools": pools, "pool_lb": "ratio"}))
    b = balancer(config)
    assert [ask(b, config, R1).pool for _ in range(8)] == ["pa", "pa", "pb", "pa"] * 2


def test_pool_lb_global_availability(tmp_path: Path) -> None:
    """pool_lb global_availability always takes the first available pool."""
    config = load_config(tmp_path, cfg(ONE_EACH, {"pools": ["pb", "pa"], "pool_lb": "global_availability"}))
    b = balancer(config)
    assert [ask(b, config, R1).pool for _ in range(3)] == ["pb"] * 3
    assert ask(balancer(config, FakeAvailability({"vs2"})), config, R1).pool == "pa"


def test_pool_lb_topology(tmp_path: Path) -> None:
    """pool_lb topology scores pools with pool and data center selectors."""
    pools = {"pa": {"members": ["vs1", "vs2"]}, "pb": {"members": ["vs3"]}}
    topology = [
        {"ldns": "region r1", "server": "pool pb", "score": 100},
        {"ldns": "region r2", "server": "pool pa", "score": 100},
        {"ldns": "any", "server": "datacenter DC1", "score": 1},
    ]
    config = load_config(tmp_path, cfg(pools, {"pools": ["pa", "pb"], "pool_lb": "topology"}, topology))
    b = balancer(config)
    d = ask(b, config, R1)
    assert d.pool == "pb"
    assert d.trace[0].scores == (("pa", 1.0), ("pb", 100.0))
    assert d.scope == 24
    assert ask(b, config, R2).pool == "pa"
    assert ask(b, config, ELSEWHERE).pool == "pa"


def test_pool_lb_static_persist_keeps_a_client_on_its_pool(tmp_path: Path) -> None:
    """pool_lb static_persist gives the same pool to the same client, whatever the rotations do."""
    config = load_config(tmp_path, cfg(ONE_EACH, {"pools": ["pa", "pb", "pc"], "pool_lb": "static_persist"}))
    b = balancer(config)
    for who in (R1, R2, ELSEWHERE):
        assert len({ask(b, config, who).pool for _ in range(5)}) == 1
    assert len({ask(b, config, f"10.9.{i}.1").pool for i in range(30)}) > 1


# -- static persist through the engine ------------------------------------------------------


def test_static_persist_losing_a_member_moves_only_its_clients(tmp_path: Path) -> None:
    """When a static_persist member goes down only the clients it had change member."""
    pools = {"p": {"members": ["vs1", "vs2", "vs3"], "load_balancing": {"preferred": "static_persist"}}}
    config = load_config(tmp_path, cfg(pools, {"pools": ["p"]}))
    avail = FakeAvailability()
    b = balancer(config, avail)
    clients = [f"10.{i}.{i * 7 % 256}.{i * 13 % 256}" for i in range(120)]
    before = {c: ask(b, config, c).members[0] for c in clients}
    assert set(before.values()) == {"vs1", "vs2", "vs3"}
    avail.down.add("vs2")
    after = {c: ask(b, config, c).members[0] for c in clients}
    for c in clients:
        if before[c] == "vs2":
            assert after[c] != "vs2"
        else:
            assert after[c] == before[c], c
    avail.down.clear()
    assert {c: ask(b, config, c).members[0] for c in clients} == before


# -- ECS, trace and scope -------------------------------------------------------------------


def test_ecs_client_subnet_drives_topology(tmp_path: Path) -> None:
    """The EDNS client subnet, not the LDNS address, picks the topology answer."""
    config = load_config(tmp_path, configs.base())
    b = balancer(config)
    assert ask(b, config, R2).members == ("vs2",)
    d = ask(b, config, ecs_client("198.51.100.0/24", ldns=R2))
    assert d.members == ("vs1",)
    assert d.scope == 24


def test_trace_of_a_topology_decision(tmp_path: Path) -> None:
    """The trace lists each step with subject, slot, method, candidates, scores and result."""
    config = load_config(tmp_path, configs.base())
    d = ask(balancer(config), config, R1)
    assert d.trace == (
        Step(f"wideip {WIP}", "pool_lb", "global_availability", ("p",), ("p",)),
        Step("pool p", "preferred", "topology", ("vs1", "vs2", "vs3"), ("vs1",), (("vs1", 100.0), ("vs3", 1.0))),
    )
    assert [s.describe() for s in d.trace] == [
        f"wideip {WIP} pool_lb=global_availability: candidates [p] -> [p]",
        "pool p preferred=topology: candidates [vs1, vs2, vs3] scores [vs1=100, vs3=1] -> [vs1]",
    ]


def test_describe_a_step_with_nothing() -> None:
    """A step that yielded nothing says so, with its note."""
    step = Step("pool pa", "preferred", "topology", ("vs1",), (), note="no topology record matches")
    assert step.describe() == "pool pa preferred=topology: candidates [vs1] -> nothing (no topology record matches)"


def test_scope_of_decisions(tmp_path: Path) -> None:
    """A topology answer's scope is the matched network's; a round robin answer's scope is 0."""
    config = load_config(tmp_path / "topo", configs.base())
    assert ask(balancer(config), config, R1).scope == 24
    rr = load_config(tmp_path / "rr", cfg({"p": {"members": ["vs1", "vs2"]}}, {"pools": ["p"]}))
    assert ask(balancer(rr), rr, R1).scope == 0


def test_scope_counts_a_topology_miss(tmp_path: Path) -> None:
    """When topology finds nothing and round robin answers, the scope still covers the topology miss."""
    pools = {
        "p": {"members": ["vs1", "vs2", "vs3"], "load_balancing": {"preferred": "topology", "alternate": "round_robin"}}
    }
    config = load_config(tmp_path, cfg(pools, {"pools": ["p"]}, NO_ANY))
    d = ask(balancer(config), config, ELSEWHERE)
    assert d.method == "round_robin"
    assert d.scope == config.topology.match(ipaddress.ip_address(ELSEWHERE)).scope
    assert d.scope > 0
