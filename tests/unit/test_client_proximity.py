"""Client proximity's values (issue 36): subnets and refused sources, the samples and their
median, populations' counts, caps and weighted RTTs, and the order of sources read from a
real record store (expiry by the store's TTL and by age)."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtmcluster.proximity.clients import (
    MAX_SUBNETS,
    SAMPLES_PER_DC,
    ClientSources,
    Ranges,
    Refused,
    merge_sample,
    population_after,
)
from gtmcluster.state import keys, schema
from gtmcluster.state.store import Store


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def net(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(text)


def addr(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def test_subnet_is_the_24_or_48_and_reserved_sources_are_refused() -> None:
    ranges = Ranges()
    assert ranges.subnet("8.8.4.4") == net("8.8.4.0/24")
    assert ranges.subnet("2a00:1450:4001:81a::200e") == net("2a00:1450:4001::/48")
    assert ranges.subnet("::ffff:8.8.4.4") == net("8.8.4.0/24")  # a mapped source is its IPv4 one
    for source, why in (
        ("127.0.0.1", "special-purpose"),
        ("10.1.2.3", "special-purpose"),
        ("::ffff:10.1.2.3", "special-purpose"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "multicast"),
        ("nonsense", "not an address"),
    ):
        with pytest.raises(Refused, match=why):
            ranges.subnet(source)
    assert Ranges([net("10.0.0.0/8")]).subnet("10.1.2.3") == net("10.1.2.0/24")
    with pytest.raises(Refused):
        Ranges([net("10.0.0.0/8")]).subnet("224.0.0.1")  # never, whatever allow says


def test_samples_keep_the_last_sixteen_and_read_their_median() -> None:
    value: dict[str, Any] | None = None
    for us in (20_000, 21_000, 900_000, 19_000):
        value = merge_sample(value, us, "rum", "n1")
    assert value is not None and value["rtt"] == 20_000  # the outlier does not move it
    for us in range(1, 40):
        value = merge_sample(value, us * 1000, "rum", "n1")
    assert len(value["samples"]) == SAMPLES_PER_DC and value["samples"][-1] == 39_000
    assert schema.problem(keys.client("8.8.8.0/24", "DC1"), value, "n1", 60.0) is None
    assert merge_sample(None, 10**12, "rum", "n1")["rtt"] == schema.MAX_CLIENT_RTT  # clamped


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 500)), min_size=1, max_size=300))
def test_a_population_stays_within_its_cap_and_its_rtt_between_its_subnets(ties: list[tuple[int, int]]) -> None:
    figures = {keys.subnet_text(f"1.0.{i}.0/24"): {"DC1": (i + 1) * 1000} for i in range(61)}
    value: dict[str, Any] | None = None
    for i, _ in ties:
        value = population_after(value, net(f"1.0.{i}.0/24"), lambda s: figures.get(s, {}))
        assert len(value["subnets"]) <= MAX_SUBNETS
        assert keys.subnet_text(f"1.0.{i}.0/24") in value["subnets"]  # the newest is never the one dropped
        held = [figures[s]["DC1"] for s in value["subnets"]]
        assert min(held) <= value["rtt"]["DC1"] <= max(held)
        assert value["n"] == sum(value["subnets"].values())
    assert value is not None and schema.problem(keys.population("192.0.2.53"), value, "n1", 60.0) is None


def test_population_weights_by_counts_over_the_subnets_measured() -> None:
    figures = {"8.8.8.0_24": {"east": 10_000}, "9.9.9.0_24": {"east": 100_000, "west": 5_000}}
    value = None
    for subnet in ("8.8.8.0/24", "8.8.8.0/24", "8.8.8.0/24", "9.9.9.0/24"):
        value = population_after(value, net(subnet), lambda s: figures.get(s, {}))
    assert value == {
        "subnets": {"8.8.8.0_24": 3, "9.9.9.0_24": 1},
        "rtt": {"east": round((3 * 10_000 + 100_000) / 4), "west": 5_000},
        "n": 4,
    }


def setup() -> tuple[Clock, Store]:
    clock = Clock()
    store = Store("n1", clock)
    for dc, us in (("east", 20_000), ("west", 120_000)):
        store.put(keys.client("8.8.8.0/24", dc), merge_sample(None, us, "rum", "n1"), ttl=600)
    pop = {"subnets": {"9.9.9.0_24": 5, "8.8.8.0_24": 1}, "rtt": {"east": 170_000, "west": 45_000}, "n": 6}
    store.put(keys.population("192.0.2.53"), pop, ttl=600)
    return clock, store


def test_sources_in_order_with_scopes() -> None:
    clock, store = setup()
    sources = ClientSources(store.get, clock, ("client", "population", "ldns"), 3, 600)
    dcs = ("east", "west")
    chosen = sources.paths(addr("8.8.8.0"), 24, True, "192.0.2.53", dcs)
    assert chosen and (chosen.source, chosen.scope, chosen.subject) == ("client", 24, "8.8.8.0/24")
    assert {dc: f.rtt_us for dc, f in chosen.figures.items()} == {"east": 20_000, "west": 120_000}
    # a longer ECS subnet reads its /24
    chosen = sources.paths(addr("8.8.8.128"), 25, True, "192.0.2.53", dcs)
    assert chosen and chosen.source == "client" and chosen.scope == 24
    # a shorter one, an unmeasured one, one not from a trusted resolver: the population
    for address, prefix, ecs in (("8.8.0.0", 16, True), ("7.7.7.0", 24, True), ("8.8.8.0", 24, False)):
        chosen = sources.paths(addr(address), prefix, ecs, "192.0.2.53", dcs)
        assert chosen and (chosen.source, chosen.scope, chosen.samples) == ("population", 0, 6)
        assert chosen.figures["east"].rtt_us == 170_000
    # a DC without a figure: the source does not decide
    assert sources.paths(addr("7.7.7.0"), 24, True, "192.0.2.53", ("east", "north")) is None
    # too few samples behind the population, or an LDNS never tied: the LDNS's own paths
    assert (
        ClientSources(store.get, clock, ("client", "population", "ldns"), 50, 600).paths(
            addr("7.7.7.0"), 24, True, "192.0.2.53", dcs
        )
        is None
    )
    assert sources.paths(addr("7.7.7.0"), 24, True, "192.0.2.99", dcs) is None
    # the configured order wins
    assert (
        ClientSources(store.get, clock, ("ldns", "client"), 3, 600).paths(addr("8.8.8.0"), 24, True, "192.0.2.53", dcs)
        is None
    )
    chosen = ClientSources(store.get, clock, ("population", "client"), 3, 600).paths(
        addr("8.8.8.0"), 24, True, "192.0.2.53", dcs
    )
    assert chosen and chosen.source == "population"


def test_figures_older_than_the_age_or_expired_are_not_read() -> None:
    clock, store = setup()
    sources = ClientSources(store.get, clock, ("client", "population", "ldns"), 3, 300)
    clock.now += 301
    assert sources.paths(addr("8.8.8.0"), 24, True, "192.0.2.53", ("east", "west")) is None
    clock.now += 600  # past the records' TTL: the store holds them no more
    assert store.get(keys.client("8.8.8.0/24", "east")) is None


def test_ipv6_client_scope_is_48() -> None:
    clock = Clock()
    store = Store("n1", clock)
    store.put(keys.client("2a00:1450:4001::/48", "east"), merge_sample(None, 9000, "probe", "n1"), ttl=600)
    chosen = ClientSources(store.get, clock, ("client",), 1, 600).paths(
        addr("2a00:1450:4001:800::"), 56, True, "2001:db8::53", ("east",)
    )
    assert chosen and chosen.scope == 48 and chosen.figures["east"].rtt_us == 9000
    assert chosen.figures["east"].source == "probe"


@given(st.text(max_size=60), st.text(max_size=60))
def test_the_schema_refuses_client_keys_that_are_not_subnets(subnet: str, dc: str) -> None:
    value = merge_sample(None, 1000, "rum", "n1")
    problem = schema.problem(f"client/{subnet}/{dc}", value, "n1", 60.0)
    if problem is None:
        assert "_" in subnet and dc and "/" not in subnet


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("client/8.8.8.0_24/DC1", {"rtt": 0, "samples": [1], "source": "rum", "by": "n"}, "'rtt'"),
        ("client/8.8.8.0_24/DC1", {"rtt": 1, "samples": [1] * 17, "source": "rum", "by": "n"}, "'samples'"),
        ("client/8.8.8.0_24/DC1", {"rtt": 1, "samples": [1.5], "source": "rum", "by": "n"}, "'samples'"),
        ("client/8.8.8.0_24/DC1", {"rtt": 1, "samples": [1], "source": "gps", "by": "n"}, "'source'"),
        ("client/8.8.8.0/24/DC1", {"rtt": 1, "samples": [1], "source": "rum", "by": "n"}, "the key"),
        ("pop/192.0.2.53", {"subnets": {}, "rtt": {}, "n": 0}, "'subnets'"),
        ("pop/192.0.2.53", {"subnets": {"x": 1}, "rtt": {}, "n": 1}, "'subnets'"),
        ("pop/192.0.2.53", {"subnets": {"8.8.8.0_24": 1}, "rtt": {"DC1": -1}, "n": 1}, "'rtt'"),
        ("rumid/short", {"ldns": "192.0.2.53", "ecs": ""}, "the key"),
        ("rumid/abcdefghij0123456789", {"ldns": "resolver", "ecs": ""}, "'ldns'"),
    ],
)
def test_the_schema_refuses_malformed_client_records(key: str, value: dict[str, Any], fragment: str) -> None:
    problem = schema.problem(key, value, "n1", 60.0)
    assert problem is not None and fragment in problem.text
