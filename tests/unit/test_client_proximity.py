"""Client proximity's aggregation (issue 36): subnets, caps, eviction, expiry, populations'
shares and weighted RTTs, and the order of sources."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtmcluster.proximity.clients import (
    ClientTable,
    Populations,
    Ranges,
    Refused,
    decide_source,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def net(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(text)


def public(i: int) -> str:
    """The i-th public /24's .7 (in 1.0.0.0/8, no special-purpose range)."""
    return f"1.{i // 256 % 256}.{i % 256}.7"


def test_subnet_is_the_24_or_48_and_reserved_sources_are_refused() -> None:
    ranges = Ranges()
    assert ranges.subnet("8.8.4.4") == net("8.8.4.0/24")
    assert ranges.subnet("2a00:1450:4001:81a::200e") == net("2a00:1450:4001::/48")
    for source in ("127.0.0.1", "10.1.2.3", "192.168.1.1", "::1", "fe80::1", "224.0.0.1", "nonsense"):
        with pytest.raises(Refused):
            ranges.subnet(source)
    opened = Ranges(allow=[net("10.0.0.0/8"), net("224.0.0.0/4")])
    assert opened.subnet("10.1.2.3") == net("10.1.2.0/24")
    with pytest.raises(Refused, match="multicast"):
        opened.subnet("224.0.0.1")  # never, whatever the allow list says


def test_median_per_dc_and_counts() -> None:
    clock = Clock()
    table = ClientTable(clock, max_subnets=10, max_age=600)
    subnet = table.add("8.8.8.8", {"east": 20.0, "west": 120.0})
    table.add("8.8.8.9", {"east": 22.0})
    table.add("8.8.8.10", {"east": 900.0})  # one slow tab moves the median little
    assert table.rtt(subnet, "east") == 22.0
    assert table.count(subnet, "east") == 3
    assert table.figures(subnet) == {"east": 22.0, "west": 120.0}
    assert table.rtt(subnet, "nowhere") is None and table.rtt(net("9.9.9.0/24"), "east") is None


def test_expiry_by_age() -> None:
    clock = Clock()
    table = ClientTable(clock, max_subnets=10, max_age=60)
    subnet = table.add("8.8.8.8", {"east": 20.0})
    clock.now += 30
    table.add("8.8.8.8", {"east": 40.0})
    clock.now += 31
    assert table.rtt(subnet, "east") == 40.0  # reads skip what expired before expire() runs
    table.expire()
    assert table.count(subnet, "east") == 1
    clock.now += 30
    table.expire()
    assert len(table) == 0


def test_eviction_is_least_recently_seen() -> None:
    clock = Clock()
    table = ClientTable(clock, max_subnets=2, max_age=600)
    a = table.add(public(1), {"east": 1.0})
    b = table.add(public(2), {"east": 1.0})
    table.add(public(1), {"east": 1.0})  # a seen again: b is now the oldest
    c = table.add(public(3), {"east": 1.0})
    assert list(table.entries) == [a, c] and b not in table.entries and table.evicted == 1


@given(st.lists(st.integers(0, 30), max_size=200), st.integers(1, 8))
def test_cap_never_exceeded_and_eviction_order(visits: list[int], cap: int) -> None:
    clock = Clock()
    table = ClientTable(clock, max_subnets=cap, max_age=600)
    for i in visits:
        clock.now += 1
        table.add(public(i), {"east": 5.0})
        assert len(table) <= cap
    # what is kept is exactly the last `cap` distinct subnets seen, oldest first
    recent: list[str] = []
    for i in reversed(visits):
        subnet = str(Ranges().subnet(public(i)))
        if subnet not in recent:
            recent.append(subnet)
    assert [str(s) for s in table.entries] == list(reversed(recent[:cap]))


# whole seconds: the boundary (a sample exactly max_age old is still read) without float noise
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 100)), max_size=60), st.integers(1, 100))
def test_nothing_older_than_max_age_is_read_or_kept(steps: list[tuple[int, int]], max_age: int) -> None:
    clock = Clock()
    table = ClientTable(clock, max_subnets=100, max_age=max_age)
    added: dict[str, float] = {}
    for i, wait in steps:
        clock.now += wait
        added[str(table.add(public(i), {"east": float(i)}))] = clock.now
    table.expire()
    for subnet, entry in table.entries.items():
        assert all(clock.now - at <= max_age for at, _ in entry.samples["east"])
        assert clock.now - added[str(subnet)] <= max_age
    for subnet_text, at in added.items():
        assert (table.rtt(net(subnet_text), "east") is not None) == (clock.now - at <= max_age)


def test_populations_shares_and_weighted_rtt() -> None:
    clock = Clock()
    table = ClientTable(clock, max_subnets=10, max_age=600)
    near = table.add("8.8.8.8", {"east": 10.0})
    far = table.add("9.9.9.9", {"east": 100.0})
    pops = Populations(table, clock, max_ldns=10, max_subnets=10, max_age=600)
    for _ in range(3):
        pops.tie("192.0.2.53", near)
    pops.tie("192.0.2.53", far)
    assert pops.shares("192.0.2.53") == {near: 0.75, far: 0.25}
    assert pops.weighted_rtt("192.0.2.53", "east", min_samples=2) == pytest.approx(32.5)
    assert pops.weighted_rtt("192.0.2.53", "east", min_samples=3) is None  # two samples behind it
    assert pops.weighted_rtt("192.0.2.53", "west", min_samples=1) is None
    assert pops.weighted_rtt("unknown", "east", min_samples=0) is None


@given(
    st.lists(st.tuples(st.integers(0, 12), st.integers(0, 40)), min_size=1, max_size=200),
    st.integers(1, 5),
    st.integers(1, 6),
)
def test_population_caps_and_shares_sum_to_one(pairs: list[tuple[int, int]], max_ldns: int, max_subnets: int) -> None:
    clock = Clock()
    table = ClientTable(clock, max_subnets=100, max_age=600)
    pops = Populations(table, clock, max_ldns=max_ldns, max_subnets=max_subnets, max_age=600)
    for ldns, client in pairs:
        clock.now += 1
        subnet = table.add(public(client), {"east": float(client)})
        pops.tie(f"ldns{ldns}", subnet)
        assert len(pops.ldns) <= max_ldns
        assert all(len(subnets) <= max_subnets for subnets in pops.ldns.values())
    assert next(reversed(pops.ldns)) == f"ldns{pairs[-1][0]}"  # the last tied is the newest
    for name in pops.ldns:
        shares = pops.shares(name)
        assert sum(shares.values()) == pytest.approx(1.0)
        weighted = pops.weighted_rtt(name, "east", min_samples=1)
        rtts = [table.rtt(s, "east") or 0.0 for s in shares]
        assert weighted is not None and min(rtts) - 1e-9 <= weighted <= max(rtts) + 1e-9


def test_population_expiry() -> None:
    clock = Clock()
    table = ClientTable(clock, max_subnets=10, max_age=600)
    pops = Populations(table, clock, max_ldns=10, max_subnets=10, max_age=60)
    old = table.add("8.8.8.8", {"east": 10.0})
    pops.tie("r", old)
    clock.now += 50
    new = table.add("9.9.9.9", {"east": 50.0})
    pops.tie("r", new)
    clock.now += 20
    assert pops.shares("r") == {new: 1.0}
    pops.expire()
    assert list(pops.ldns["r"]) == [new]
    clock.now += 60
    pops.expire()
    assert pops.ldns == {}


def order_setup() -> tuple[Clock, ClientTable, Populations]:
    clock = Clock()
    table = ClientTable(clock, max_subnets=10, max_age=600)
    pops = Populations(table, clock, max_ldns=10, max_subnets=10, max_age=600)
    client = table.add("8.8.8.8", {"east": 20.0, "west": 120.0})
    for _ in range(5):
        pops.tie("r", table.add("9.9.9.9", {"east": 200.0, "west": 30.0}))
    pops.tie("r", client)
    return clock, table, pops


def test_sources_in_order_with_scopes() -> None:
    _, table, pops = order_setup()
    ldns_rtts = {"east": 80.0, "west": 40.0}
    dcs = ["east", "west"]
    order = ["client", "ldns-population", "ldns"]
    decided = decide_source(order, dcs, table, pops, "r", ldns_rtts, 3, ecs=net("8.8.8.0/24"))
    assert decided and (decided.source, decided.figures, decided.scope) == ("client", {"east": 20.0, "west": 120.0}, 24)
    # a longer ECS subnet reads its /24; the scope is never wider than what the table knows
    decided = decide_source(order, dcs, table, pops, "r", ldns_rtts, 3, ecs=net("8.8.8.128/25"))
    assert decided and decided.source == "client" and decided.scope == 24
    # a shorter one, or an unmeasured one, or none: the LDNS's population, LDNS-wide
    for ecs in (net("8.8.0.0/16"), net("7.7.7.0/24"), None):
        decided = decide_source(order, dcs, table, pops, "r", ldns_rtts, 3, ecs=ecs)
        assert decided and decided.source == "ldns-population" and decided.scope == 0
        assert decided.figures["east"] == pytest.approx((5 * 200 + 20) / 6)
    # too few samples behind the population: the LDNS's own RTT
    decided = decide_source(order, dcs, table, pops, "r", ldns_rtts, 50, ecs=None)
    assert decided and (decided.source, decided.figures, decided.scope) == ("ldns", ldns_rtts, 0)
    # the configured order wins
    decided = decide_source(["ldns", "client"], dcs, table, pops, "r", ldns_rtts, 3, ecs=net("8.8.8.0/24"))
    assert decided and decided.source == "ldns"
    assert decide_source(["client"], dcs, table, pops, "r", ldns_rtts, 3) is None
    with pytest.raises(ValueError, match="unknown proximity source"):
        decide_source(["rum"], dcs, table, pops, "r", ldns_rtts, 3)


def test_ipv6_client_scope_is_48() -> None:
    clock = Clock()
    table = ClientTable(clock, max_subnets=10, max_age=600)
    pops = Populations(table, clock, max_ldns=10, max_subnets=10, max_age=600)
    table.add("2a00:1450:4001:81a::200e", {"east": 9.0})
    decided = decide_source(["client"], ["east"], table, pops, "r", {}, 1, ecs=net("2a00:1450:4001:800::/56"))
    assert decided and decided.scope == 48 and decided.figures == {"east": 9.0}
