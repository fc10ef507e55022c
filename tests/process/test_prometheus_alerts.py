"""The shipped alerting rules in a real Prometheus scraping a real node: a monitored virtual
server whose backend stops goes from healthy to a firing GtmVirtualServerDown alert that
names it (etc/prometheus/gtmcluster-rules.yml, its `for:` cut to 1 s for the test); and
every expression of the Grafana dashboard (etc/grafana/gtmcluster.json) runs there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_tool
from tests.support import configs, poll, promql
from tests.support.backends import Backend, running_backends
from tests.support.nodeproc import loopback_address, running_node
from tests.support.prometheus import rules_with_short_for, running_prometheus

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "etc" / "prometheus" / "gtmcluster-rules.yml"
BACKEND_PORT = 8080
WEB = {"type": "http", "interval": 0.5, "timeout": 0.25, "up_after": 1, "down_after": 2, "path": "/"}


def vs1_down(alert: dict[str, Any]) -> bool:
    labels: dict[str, str] = alert["labels"]
    return labels.get("alertname") == "GtmVirtualServerDown" and labels.get("virtual_server") == "vs1"


def test_a_virtual_server_whose_backend_stops_fires_its_alert(tmp_path: Path) -> None:
    require_tool("prometheus", "prometheus")
    address, backend_address, prometheus_address = loopback_address(), loopback_address(), loopback_address()
    raw = configs.base(address)
    raw["monitors"] = {"web": WEB}
    raw["virtual_servers"]["vs1"] = {
        "address": backend_address,
        "port": BACKEND_PORT,
        "datacenter": "DC1",
        "monitor": "web",
    }
    path = configs.write(tmp_path, raw)
    rules = rules_with_short_for(RULES, tmp_path / "rules.yml")
    backend = Backend("vs1", backend_address, BACKEND_PORT)
    with (
        running_backends(backend),
        running_node(path, "n1", address, 5353, tmp_path) as node,
        running_prometheus(tmp_path, prometheus_address, [f"{address}:8053"], rules) as prometheus,
    ):
        healthy = 'gtm_virtual_server_healthy{virtual_server="vs1",datacenter="DC1"}'
        poll.until(
            lambda: [r["value"][1] for r in prometheus.query(healthy)] == ["1"],
            timeout=30,
            what="Prometheus scraping vs1 healthy from the node",
            details=lambda: (prometheus.targets(), prometheus.log_text(), node.log_text()[-2000:]),
        )
        assert not [a for a in prometheus.alerts() if vs1_down(a)]
        backend.kill()
        firing = poll.until(
            lambda: [a for a in prometheus.alerts() if vs1_down(a) and a["state"] == "firing"],
            timeout=30,
            what="GtmVirtualServerDown firing for vs1",
            details=lambda: (prometheus.alerts(), prometheus.query(healthy)),
        )
        assert firing[0]["labels"]["severity"] == "warning"
        assert firing[0]["labels"]["datacenter"] == "DC1"
        assert firing[0]["annotations"]["summary"] == "Virtual server vs1 in data center DC1 is down"
        # every expression of the dashboard runs on this Prometheus over this node's series
        failed = [
            where
            for where, expr in promql.dashboard_expressions()
            if prometheus.get("/api/v1/query", query=promql.with_variables(expr)) is None
        ]
        assert not failed
        pools = prometheus.query("max by (pool) (gtm_pool_members_available)")
        assert {r["metric"]["pool"]: r["value"][1] for r in pools} == {"p": "2", "p6": "2"}
