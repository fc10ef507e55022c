"""/metrics is collected per family (`api.metricfamilies.FAMILIES`): each collector owns its
families (no name from two), and the node's collector is those collectors in their order."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.core import Metric
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.api.metricfamilies import FAMILIES
from gtmcluster.api.metrics import NodeCollector, metrics_steps
from gtmcluster.api.scrape import Scrape
from gtmcluster.config.load import load
from gtmcluster.runtime import slices
from gtmcluster.service import Sockets, make_service
from tests.support import configs


def test_each_family_comes_from_one_collector_in_order(tmp_path: Path) -> None:
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    raw["monitors"] = {"tcp": {"type": "tcp", "interval": 5, "timeout": 2, "port": 80}}
    raw["virtual_servers"]["vs1"]["monitor"] = "tcp"
    raw["links"] = {"l1": {"datacenter": "DC1", "monitor": "tcp", "targets": ["192.0.2.9:80"]}}
    service = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    scrape = Scrape(service, service.reactor.seconds(), {"host": 1}, {"idle": 2})
    owner: dict[str, str] = {}
    in_order: list[str] = []
    for collector in FAMILIES:
        for family in collector(scrape):
            if isinstance(family, Metric):
                assert family.name not in owner, (family.name, owner.get(family.name), collector.__name__)
                owner[family.name] = collector.__name__
                in_order.append(family.name)
    whole = [f.name for f in NodeCollector(service, {"host": 1}, {"idle": 2}).collect() if f is not None]
    assert whole == in_order
    assert owner["gtm_dns_queries"] == "dns_queries"
    assert owner["gtm_link_up"] == "links_up"
    assert owner["gtm_api_refused"] == "api"
    assert owner["gtm_health_urgent_longest_wait_seconds"] == "health_evaluation"
    text = slices.whole(metrics_steps(service, {"host": 1}, {"idle": 2})).body.decode()
    assert [line.split()[2] for line in text.splitlines() if line.startswith("# HELP")] == [
        name + ("_total" if f"# TYPE {name}_total counter" in text else "") for name in in_order
    ]


def test_the_health_figures_say_what_waits_and_how_long_an_urgent_change_waited(tmp_path: Path) -> None:
    """A change waiting for the tracker's turn shows as pending (urgent when it may take a
    server out); once evaluated, the longest wait is how long it waited."""
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    service = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    reactor = service.reactor
    service.node.store.put("admin/vs/vs1", {"state": "disabled"})

    def figures() -> dict[str, float]:
        scrape = Scrape(service, reactor.seconds(), {}, {})
        return {
            f.name: f.samples[0].value
            for collector in FAMILIES
            if collector.__name__ == "health_evaluation"
            for f in collector(scrape)
            if isinstance(f, Metric)
        }

    assert figures()["gtm_health_urgent"] == 1 and figures()["gtm_health_pending"] == 1
    reactor.advance(0.03)
    assert figures() == {
        "gtm_health_pending": 0,
        "gtm_health_urgent": 0,
        "gtm_health_urgent_longest_wait_seconds": 0.03,
    }
