"""/metrics on client proximity (issue 36): ``gtm_proximity_decisions_total{source}`` counts
the wide IP answers of a node by the source that decided them, ``gtm_rum_subnets`` and
``gtm_rum_populations`` what the store holds of the client table; the text parses with
prometheus_client's parser, and /api/v1/status carries the same figures for the dashboard."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.api.metrics import metrics_steps
from gtmcluster.api.status import status_steps
from gtmcluster.config.load import load
from gtmcluster.lb.context import Client
from gtmcluster.nodeservice import NodeService
from gtmcluster.rum.beacon import Beacon
from gtmcluster.runtime import slices
from gtmcluster.service import Sockets, make_service
from gtmcluster.state import keys
from tests.support import configs
from tests.unit.test_client_decisions import CLIENT, client
from tests.unit.test_dynamic import LDNS, path

POPULATION = {"subnets": {"198.51.100.0_24": 5}, "rtt": {"DC1": 10_000, "DC2": 90_000, "DC3": 95_000}, "n": 5}


def service(tmp_path: Path) -> NodeService:
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    raw["pools"]["p"]["load_balancing"] = {"preferred": "rtt", "alternate": "topology"}
    raw["rum"] = {"targets": {"DC1": "https://dc1.example.net/o", "DC2": "https://dc2.example.net/o"}, "min_samples": 3}
    top = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    top.node.ready = True
    for dc, us in (("DC1", 120_000), ("DC2", 20_000), ("DC3", 80_000)):
        path(top.node, dc, us)
    return top


def scraped(top: NodeService) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    text = slices.whole(metrics_steps(top, {}, {})).body.decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_decisions_by_source_and_the_client_table_are_exported(tmp_path: Path) -> None:
    top = service(tmp_path)
    node = top.node
    wideip = next(iter(node.config.wideips.values()))
    ldns = ipaddress.ip_address(LDNS)
    before = scraped(top)
    assert before["gtm_proximity_decisions_total"] == {
        (("source", s),): 0.0 for s in ("client", "population", "ldns", "none")
    }
    assert before["gtm_rum_subnets"] == {(): 0.0} and before["gtm_rum_populations"] == {(): 0.0}
    node.decide(wideip, 1, Client.from_ldns(ldns))  # the LDNS's paths
    client(node, CLIENT, DC1=15_000, DC2=110_000, DC3=90_000)
    node.store.put(keys.population(LDNS), POPULATION, ttl=3600)
    ecs = Client(ipaddress.ip_address("198.51.100.0"), 24, ldns, True)
    for _ in range(2):
        node.decide(wideip, 1, ecs)  # (without a key: decided anew each time)
    node.decide(wideip, 1, Client.from_ldns(ldns))  # the population
    after = scraped(top)
    decided = {labels[0][1]: n for labels, n in after["gtm_proximity_decisions_total"].items()}
    assert decided == {"client": 2.0, "population": 1.0, "ldns": 1.0, "none": 0.0}
    assert after["gtm_rum_subnets"] == {(): 3.0}  # one subnet, three data centers
    assert after["gtm_rum_populations"] == {(): 1.0}
    status = slices.whole(status_steps(node, top.replicator, 0.0))
    assert status["proximity"] == {
        "sources": ["client", "population", "ldns"],
        "subnets": 3,
        "populations": 1,
        "decisions": {"client": 2, "population": 1, "ldns": 1, "none": 0},
    }


def test_the_rum_listener_and_client_probing_are_exported(tmp_path: Path) -> None:
    """A member with a RUM listener exports its beacons by result, their ids' ties and the ids
    pending; every node its one-use names recorded and its client-probe requests and probes."""
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    raw["rum"] = {"targets": {"DC1": "https://dc1.example.net/o"}}
    raw["sync_group"]["members"][0]["rum"] = "127.0.0.1:8443"  # (the socket is handed in, bound elsewhere)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    reactor = MemoryReactorClock()
    top = make_service(load(configs.write(tmp_path, raw)), "n1", reactor, Sockets(dns=[], rum=sock))
    try:
        site = top.getServiceNamed("rum").factory
        site.keep(ipaddress.ip_network("198.51.100.0/24"), Beacon({"DC1": 21.0}, "abcdefghij0123456789"))
        site.beacons["kept"] += 1
        site.beacons["rate"] += 2
        top.node.stats.rum_ids_recorded += 4
        got = scraped(top)
    finally:
        sock.close()
    assert got["gtm_rum_beacons_total"][(("result", "kept"),)] == 1.0
    assert got["gtm_rum_beacons_total"][(("result", "rate"),)] == 2.0
    assert got["gtm_rum_pending_ids"] == {(): 1.0}  # (its id was never resolved)
    assert got["gtm_rum_ids_total"][(("result", "recorded"),)] == 4.0
    assert got["gtm_rum_subnets"] == {(): 1.0}
    assert got["gtm_client_probe_requests_total"] == {(("result", "filed"),): 0.0, (("result", "over_share"),): 0.0}
    assert got["gtm_client_probes_total"][(("result", "measured"),)] == 0.0
