"""The decision names the proximity source that decided it (issue 36, item 5): ``client``
(the ECS client subnet's own RTT), ``population`` (the LDNS's measured clients), ``ldns``
(the LDNS's own paths) or none (a method that reads no paths); the kept decision keeps it,
and the node counts its wide IP answers by source (`QueryStats.proximity`), those of a kept
decision and its answering processes' too."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from gtmcluster.config.load import load
from gtmcluster.fanout.feed import add_counts, take_counts
from gtmcluster.lb.context import Client
from gtmcluster.lb.trace import Decision
from gtmcluster.node import Node
from gtmcluster.runtime.stats import QueryStats
from gtmcluster.state import keys
from tests.support import configs
from tests.unit.test_client_decisions import CLIENT, ask, client, node
from tests.unit.test_dynamic import LDNS, path

POPULATION = {"subnets": {"198.51.100.0_24": 5}, "rtt": {"DC1": 10_000, "DC2": 90_000, "DC3": 95_000}, "n": 5}


def decided(n: Node, ecs: str | None = None, key: object = "k") -> Decision:
    """The node's decision for the LDNS (with *ecs*, a trusted client subnet), kept under *key*."""
    wideip = next(iter(n.config.wideips.values()))
    ldns = ipaddress.ip_address(LDNS)
    who = Client.from_ldns(ldns)
    if ecs is not None:
        network = ipaddress.ip_network(ecs)
        who = Client(network.network_address, network.prefixlen, ldns, True)
    return n.decide(wideip, 1, who, key=(key, ecs))


def test_each_source_is_named_in_the_decision_and_counted(tmp_path: Path) -> None:
    n = node(tmp_path)
    assert decided(n).proximity == "ldns"  # no client figures: the LDNS's own paths
    client(n, CLIENT, DC1=15_000, DC2=110_000, DC3=90_000)
    by_client = decided(n, CLIENT)
    assert (by_client.proximity, by_client.members, by_client.scope) == ("client", ("vs1",), 24)
    n.store.put(keys.population(LDNS), POPULATION, ttl=3600)
    assert decided(n, "203.0.113.0/24").proximity == "population"  # an unmeasured client
    assert dict(n.stats.proximity) == {"ldns": 1, "client": 1, "population": 1}


def test_a_kept_decision_keeps_its_source(tmp_path: Path) -> None:
    n = node(tmp_path)
    client(n, CLIENT, DC1=15_000, DC2=110_000, DC3=90_000)
    first = decided(n, CLIENT)
    wideip = next(iter(n.config.wideips.values()))
    kept = n.cached(wideip, 1, ("k", CLIENT))
    assert kept is first and kept.proximity == "client"
    assert n.stats.proximity["client"] == 1  # (a look at the kept decision is no answer)


def test_every_answer_is_counted_by_its_source_the_kept_and_the_workers_too(tmp_path: Path) -> None:
    n = node(tmp_path)
    client(n, CLIENT, DC1=15_000, DC2=110_000, DC3=90_000)
    for _ in range(3):  # decided once, then answered from the kept decision (the fast path)
        assert ask(n, CLIENT) == (["10.0.1.1"], 24)
    assert n.stats.proximity["client"] == 3
    worker = QueryStats()
    worker.proximity["population"] += 2
    worker.proximity["made-up"] += 5  # (a label a worker's bytes make up is not taken)
    add_counts(n.stats, take_counts(worker))
    assert dict(n.stats.proximity) == {"client": 3, "population": 2}
    assert dict(worker.proximity) == {}


def test_a_method_that_reads_no_paths_names_no_source(tmp_path: Path) -> None:
    n = node(tmp_path)
    client(n, CLIENT, DC1=15_000, DC2=110_000, DC3=90_000)
    # the rtt method yields nothing while a path is missing: the alternate (topology) decides
    for dc in ("DC1", "DC2", "DC3"):
        n.store.delete(keys.path(LDNS, dc))
    other = decided(n, key="other")
    assert other.method == "topology" and other.proximity == ""
    assert n.stats.proximity[""] == 1


def test_the_pool_lb_source_holds_for_a_pool_whose_own_method_reads_no_paths(tmp_path: Path) -> None:
    raw = configs.base()
    raw["pools"]["p"]["load_balancing"] = {"preferred": "round_robin"}
    raw["wideips"]["gslb.example.test"]["pool_lb"] = "rtt"
    raw["rum"] = {"targets": {"DC1": "https://dc1.example.net/o"}}
    n = Node(load(configs.write(tmp_path, raw)), "n1", clock=lambda: 1000.0)
    n.ready = True
    for dc, us in (("DC1", 120_000), ("DC2", 20_000), ("DC3", 80_000)):
        path(n, dc, us)
    client(n, CLIENT, DC1=15_000, DC2=110_000, DC3=90_000)
    by_client = decided(n, CLIENT)
    assert (by_client.method, by_client.proximity) == ("round_robin", "client")
    assert decided(n, key="no ecs").proximity == "ldns"
