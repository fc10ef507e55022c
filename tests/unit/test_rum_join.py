"""A kept beacon (`proximity.rumjoin`): its samples become the client subnet's figures, its
id ties the LDNS that resolved it (on this node or another, before or after the beacon) to
the subnet, once; ids never resolved leave nothing; the populations weigh their subnets."""

from __future__ import annotations

import ipaddress
import random
import statistics
from pathlib import Path
from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import task

from gtmcluster.config.load import load
from gtmcluster.config.rum import Rum
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.node import Node
from gtmcluster.proximity.rumjoin import RumJoin
from gtmcluster.rum.beacon import Beacon
from gtmcluster.state import keys
from gtmcluster.state.store import Store
from tests.support import configs
from tests.support.cluster import MemoryCluster
from tests.support.twins import make_query

TARGETS = MappingProxyType({"DC1": "https://dc1.example.net/o", "DC2": "https://dc2.example.net/o"})
RUM = Rum(TARGETS)
SUBNET = ipaddress.ip_network("10.1.2.0/24")
IDENT = "0123456789abcdefghij"
LDNS = "198.51.100.7"


def beacon(samples: dict[str, float] | None = None, ident: str | None = IDENT) -> Beacon:
    """A beacon as the listener keeps it (`gtmcluster.rum.beacon`)."""
    return Beacon({"DC1": 20.0, "DC2": 120.0} if samples is None else samples, ident)


def joined(store: Store, clock: task.Clock, rum: Rum | None = RUM, by: str = "n1") -> RumJoin:
    return RumJoin(store, by, lambda: rum, clock.callLater)


def value(store: Store, key: str) -> Any:
    record = store.get(key)
    return None if record is None else record.value


def asked(store: Store, ident: str = IDENT, ldns: str = LDNS, ecs: str = "") -> None:
    """What the node that answered ``<ident>.rum.<zone>`` writes (`Node.record_rum_id`)."""
    store.put(keys.rum_id(ident), {"ldns": ldns, "ecs": ecs}, 120.0)


def test_a_beacon_on_the_node_that_answered_its_name_ties_the_ldns_once(tmp_path: Path) -> None:
    raw = configs.base()
    raw["rum"] = {"targets": dict(TARGETS)}
    clock = task.Clock()
    clock.advance(1000)
    node = Node(load(configs.write(tmp_path, raw)), "n1", clock=clock.seconds, rng=random.Random(1))
    join = RumJoin(node.store, "n1", lambda: node.config.rum, clock.callLater)
    FastPath(node.responder).handle(make_query(f"{IDENT}.rum.example.test", 1), LDNS)
    join.keep(SUBNET, beacon())
    store = node.store
    dc1 = store.get(keys.client("10.1.2.0/24", "DC1"))
    assert dc1 is not None and dc1.ttl == RUM.sample_ttl
    assert dc1.value == {"rtt": 20_000, "samples": [20_000], "source": "rum", "by": "n1"}
    assert value(store, keys.client("10.1.2.0/24", "DC2"))["rtt"] == 120_000
    population = {"subnets": {"10.1.2.0_24": 1}, "rtt": {"DC1": 20_000, "DC2": 120_000}, "n": 1}
    assert value(store, keys.population(LDNS)) == population
    spent = store.raw(keys.rum_id(IDENT))
    assert spent is not None and spent.value is None and spent.live(clock.seconds())
    # one use: the same id again ties nothing, nor does its name asked again
    FastPath(node.responder).handle(make_query(f"{IDENT}.rum.example.test", 1), LDNS)
    join.keep(SUBNET, beacon())
    assert value(store, keys.population(LDNS))["n"] == 1
    assert join.counts["tied"] == 1 and join.counts["spent"] == 1
    assert value(store, keys.client("10.1.2.0/24", "DC1"))["samples"] == [20_000, 20_000]  # (samples still count)


def test_across_two_nodes_the_id_recorded_first(tmp_path: Path) -> None:
    cluster = MemoryCluster(["a", "b"], tmp_path)
    cluster.clock.advance(1000)
    cluster.connect("a", "b")
    join = joined(cluster.stores["b"], cluster.clock, by="b")
    asked(cluster.stores["a"])  # (a answered the name)
    cluster.settle()
    join.keep(SUBNET, beacon())  # (b took the beacon)
    cluster.settle()
    for store in cluster.stores.values():
        assert value(store, keys.population(LDNS))["subnets"] == {"10.1.2.0_24": 1}
        assert value(store, keys.client("10.1.2.0/24", "DC1"))["by"] == "b"
        assert value(store, keys.rum_id(IDENT)) is None
    assert join.counts["tied"] == 1 and not join.pending


def test_across_two_nodes_the_beacon_first_waits_for_the_id(tmp_path: Path) -> None:
    cluster = MemoryCluster(["a", "b"], tmp_path)
    cluster.clock.advance(1000)
    cluster.connect("a", "b")
    join = joined(cluster.stores["b"], cluster.clock, by="b")
    join.keep(SUBNET, beacon())
    assert IDENT in join.pending and value(cluster.stores["b"], keys.population(LDNS)) is None
    asked(cluster.stores["a"])
    cluster.settle()  # (the record reaches b; the tie is made on the next turn, then replicated)
    cluster.settle()
    for store in cluster.stores.values():
        assert value(store, keys.population(LDNS))["rtt"] == {"DC1": 20_000, "DC2": 120_000}
        assert value(store, keys.rum_id(IDENT)) is None
    assert join.counts["tied_later"] == 1 and not join.pending


def test_ids_never_resolved_leave_nothing() -> None:
    clock = task.Clock()
    store = Store("n1", clock.seconds)
    join = joined(store, clock)
    join.keep(SUBNET, beacon())
    clock.advance(RUM.id_ttl)
    join.expire()
    assert not join.pending and join.counts["expired"] == 1
    asked(store)  # (its record arriving now ties nothing)
    clock.advance(0)
    assert value(store, keys.population(LDNS)) is None
    assert sorted(store.kinds()) == ["client", "rumid"]  # (the samples, and the late record itself)
    # past the bound, the least recently seen ids go
    small = Rum(TARGETS, max_pending_ids=3)
    join = joined(Store("n2", clock.seconds), clock, small)
    for i in range(5):
        join.keep(SUBNET, beacon(ident=f"{i:020d}"))
    assert list(join.pending) == [f"{i:020d}" for i in (2, 3, 4)] and join.counts["dropped"] == 2


def test_the_beacons_subnet_is_tied_when_the_ecs_subnet_differs() -> None:
    clock = task.Clock()
    store = Store("n1", clock.seconds)
    join = joined(store, clock)
    asked(store, ecs="10.9.0.0_24")
    join.keep(SUBNET, beacon())
    assert value(store, keys.population(LDNS))["subnets"] == {"10.1.2.0_24": 1}
    assert join.counts["ecs_differs"] == 1
    asked(store, "abcdefghij0123456789", ecs="10.1.0.0_16")  # (holds the beacon's subnet)
    join.keep(SUBNET, beacon(ident="abcdefghij0123456789"))
    assert join.counts["ecs_differs"] == 1 and value(store, keys.population(LDNS))["n"] == 2


def test_without_rum_a_beacon_does_nothing_and_unknown_dcs_are_left_out() -> None:
    clock = task.Clock()
    store = Store("n1", clock.seconds)
    asked(store)
    joined(store, clock, None).keep(SUBNET, beacon())
    assert sorted(store.kinds()) == ["rumid"]
    joined(store, clock).keep(SUBNET, beacon({"DC1": 30.0, "DC9": 5.0, "DC2": float("nan")}, None))
    assert sorted(store.kinds()) == ["client", "rumid"] and store.kinds()["client"] == 1


BEACONS = st.lists(
    st.tuples(st.integers(0, 4), st.floats(1, 500), st.floats(1, 500)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=40, deadline=None)
@given(beacons=BEACONS)
def test_populations_weigh_each_subnet_by_its_beacons(beacons: list[tuple[int, float, float]]) -> None:
    clock = task.Clock()
    store = Store("n1", clock.seconds)
    join = joined(store, clock)
    samples: dict[int, dict[str, list[int]]] = {}
    for i, (subnet, dc1, dc2) in enumerate(beacons):
        ident = f"{i:020d}"
        asked(store, ident)
        join.keep(ipaddress.ip_network(f"10.0.{subnet}.0/24"), beacon({"DC1": dc1, "DC2": dc2}, ident))
        held = samples.setdefault(subnet, {"DC1": [], "DC2": []})
        held["DC1"].append(max(1, round(dc1 * 1000)))
        held["DC2"].append(max(1, round(dc2 * 1000)))
        clock.advance(1)
    population = value(store, keys.population(LDNS))
    counts = {s: sum(1 for b in beacons if b[0] == s) for s in samples}
    assert population["subnets"] == {f"10.0.{s}.0_24": n for s, n in counts.items()}
    assert population["n"] == len(beacons)
    for dc in ("DC1", "DC2"):
        medians = {s: statistics.median_low(held[dc][-16:]) for s, held in samples.items()}
        expected = sum(counts[s] * medians[s] for s in samples) / len(beacons)
        assert abs(population["rtt"][dc] - expected) <= 1
    assert join.counts["tied"] == len(beacons)
