"""`gtmcluster explain NAME --client ADDR [--ecs SUBNET]` says which proximity source decided
(client RUM, client probe, LDNS population, LDNS), each data center's RTT from it beside the
LDNS's own, and why the sources before it were passed over: on the node's whole service
tree built in-process, the client and population records written as the listener writes
them, the API's answer checked against what the CLI reads and rendered by it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from twisted.internet.testing import MemoryReactorClock

from gtmcluster.api import proximity
from gtmcluster.cli import explain
from gtmcluster.cli.shape import check
from gtmcluster.cli.terminal import printable
from gtmcluster.config.load import load
from gtmcluster.nodeservice import NodeService
from gtmcluster.proximity.clients import merge_sample
from gtmcluster.service import Sockets, make_service
from gtmcluster.state import keys
from tests.support import configs
from tests.unit.test_dynamic import LDNS, path

CLIENT = "198.51.100.0/24"


def service(tmp_path: Path, trusted: bool = True) -> NodeService:
    """Pool p by rtt; the LDNS nearer DC2, its clients nearer DC1."""
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    raw["pools"]["p"]["load_balancing"] = {"preferred": "rtt", "alternate": "round_robin"}
    raw["wideips"]["gslb.example.test"].update(pools=["p"], type=["A"])
    raw["rum"] = {"targets": {"DC1": "https://dc1.example.net/o"}, "min_samples": 3}
    raw["dns_server"]["ecs_trusted"] = ["198.18.0.0/15"] if trusted else ["192.0.2.0/24"]
    top = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    top.node.ready = True
    for dc, us in (("DC1", 120_000), ("DC2", 20_000), ("DC3", 80_000)):
        path(top.node, dc, us)
    return top


def client(top: NodeService, source: str = "rum", **rtts: int) -> None:
    for dc, us in rtts.items():
        value = None
        for _ in range(3):
            value = merge_sample(value, us, source, "n1")
        top.node.store.put(keys.client(CLIENT, dc), value, ttl=3600)


def explained(top: NodeService, **args: str) -> tuple[dict[str, Any], list[str]]:
    answer = proximity.explain(top.node, {"wideip": "gslb.example.test", "ldns": LDNS, **args})
    check(answer, explain.EXPLAINED)
    return answer, explain.render(printable(answer)).splitlines()


def test_a_client_measurement_decides_and_each_dc_shows_both_rtts(tmp_path: Path) -> None:
    top = service(tmp_path)
    client(top, DC1=15_000, DC2=110_000, DC3=90_000)
    answer, lines = explained(top, subnet=CLIENT)
    assert answer["answer"] == ["10.0.1.1"] and answer["scope"] == 24
    source = answer["proximity"]
    assert (source["source"], source["name"], source["subject"], source["samples"]) == (
        "client",
        "client RUM",
        CLIENT,
        3,  # (the fewest samples behind a DC's figure)
    )
    assert [(d["datacenter"], d["rtt_ms"], d["ldns_rtt_ms"]) for d in source["datacenters"]] == [
        ("DC1", 15.0, 120.0),
        ("DC2", 110.0, 20.0),
        ("DC3", 90.0, 80.0),
    ]
    assert source["passed_over"] == []
    assert (
        "  proximity: decided by client RUM: client subnet 198.51.100.0/24's own RTT (3 samples); ECS scope /24"
        in lines
    )
    assert "    DC1 client 15.0 ms (rum, 0 s old) · LDNS 120.0 ms" in lines
    assert "    DC2 client 110.0 ms (rum, 0 s old) · LDNS 20.0 ms" in lines


def test_probed_figures_are_named_a_client_probe(tmp_path: Path) -> None:
    top = service(tmp_path)
    client(top, "probe", DC1=15_000, DC2=110_000, DC3=90_000)
    answer, _ = explained(top, subnet=CLIENT)
    assert answer["proximity"]["name"] == "client probe"


def test_the_ldns_decides_and_the_client_sources_say_why_not(tmp_path: Path) -> None:
    top = service(tmp_path)
    client(top, DC1=15_000, DC2=110_000)  # DC3 never measured
    top.node.store.put(
        keys.population(LDNS), {"subnets": {"198.51.100.0_24": 2}, "rtt": {"DC1": 10_000}, "n": 2}, ttl=3600
    )
    answer, lines = explained(top, subnet=CLIENT)
    source = answer["proximity"]
    assert answer["answer"] == ["10.0.2.1"] and answer["scope"] == 0
    assert (source["source"], source["name"]) == ("ldns", "LDNS")
    assert [(d["datacenter"], d["rtt_ms"], d["ldns_rtt_ms"]) for d in source["datacenters"]] == [
        ("DC1", 120.0, 120.0),
        ("DC2", 20.0, 20.0),
        ("DC3", 80.0, 80.0),
    ]
    assert source["passed_over"] == [
        {"source": "client", "reason": "client subnet 198.51.100.0/24 has no figure from DC3"},
        {
            "source": "population",
            "reason": f"LDNS {LDNS}'s measured clients are 2 beacons, fewer than rum.min_samples (3)",
        },
    ]
    assert f"  proximity: decided by the LDNS's own paths (LDNS {LDNS})" in lines
    assert "    DC2 rtt 20.0 ms (10 samples) for vs2; measured by n1 0 s ago" in lines  # (the LDNS's own paths)
    assert "    passed over client: client subnet 198.51.100.0/24 has no figure from DC3" in lines


def test_the_ldns_population_decides_without_a_client_subnet(tmp_path: Path) -> None:
    top = service(tmp_path)
    pop = {"subnets": {"198.51.100.0_24": 4}, "rtt": {"DC1": 10_000, "DC2": 90_000, "DC3": 95_000}, "n": 4}
    top.node.store.put(keys.population(LDNS), pop, ttl=3600)
    answer, lines = explained(top)
    source = answer["proximity"]
    assert answer["answer"] == ["10.0.1.1"]
    assert (source["source"], source["name"], source["samples"]) == ("population", "LDNS population", 4)
    assert source["passed_over"][0]["reason"].startswith("no client subnet from a trusted resolver")
    assert f"  proximity: decided by LDNS population: LDNS {LDNS}'s measured clients (4 beacons)" in lines
    assert "    DC1 population 10.0 ms (population, 0 s old) · LDNS 120.0 ms" in lines


def test_an_untrusted_resolvers_subnet_is_said_to_be_ignored(tmp_path: Path) -> None:
    top = service(tmp_path, trusted=False)
    client(top, DC1=15_000, DC2=110_000, DC3=90_000)
    answer, lines = explained(top, subnet=CLIENT)
    assert answer["client"]["ecs_trusted"] is False
    assert answer["proximity"]["source"] == "ldns" and answer["answer"] == ["10.0.2.1"]
    assert lines[0] == (
        f"gslb.example.test A asked by LDNS {LDNS}, client subnet {CLIENT} (not trusted from this LDNS: ignored)"
    )


def test_a_method_without_paths_names_no_source(tmp_path: Path) -> None:
    top = service(tmp_path)
    for dc in ("DC1", "DC2", "DC3"):
        top.node.store.delete(keys.path(LDNS, dc))
    answer, lines = explained(top)
    assert answer["method"] == "round_robin"
    assert answer["proximity"]["source"] is None
    assert "  proximity: no proximity source: round_robin decided without paths" in lines


def test_client_and_ecs_are_the_options_ldns_and_subnet_the_same() -> None:
    parser = argparse.ArgumentParser()
    explain.add_parser(parser.add_subparsers())
    new = parser.parse_args(["explain", "-c", "x.yaml", "www", "--client", "192.0.2.1", "--ecs", CLIENT])
    old = parser.parse_args(["explain", "-c", "x.yaml", "www", "--ldns", "192.0.2.1", "--subnet", CLIENT])
    assert (new.ldns, new.subnet) == (old.ldns, old.subnet) == ("192.0.2.1", CLIENT)
