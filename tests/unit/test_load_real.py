"""Load sources against the real servers from Debian, started on loopback by the test:
haproxy's stats CSV and Prometheus exporter, nginx's stub_status. The checks run with the
real reactor (`tests.support.runcheck`), as a node runs them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import loadservers
from tests.support.loadservers import Server, hold
from tests.support.nodeproc import loopback_address
from tests.support.probeservers import job, run_checks

pytestmark = pytest.mark.process


@pytest.fixture
def haproxy(tmp_path: Path) -> Iterator[Server]:
    loadservers.require("haproxy")
    with loadservers.running_haproxy(tmp_path / "haproxy", loopback_address(), ("a", "b")) as server:
        yield server


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Server]:
    loadservers.require("nginx")
    with loadservers.running_nginx(tmp_path / "nginx", loopback_address()) as server:
        yield server


def load_job(at: Server, path: str, again_after: float = 0, **load: object) -> dict[str, object]:
    spec = job("http", at.address, at.port, timeout=2.0, path=path, load=load, max_response_bytes=1 << 20)
    if again_after:
        spec["again_after"] = again_after
    return spec


def test_haproxy_stats_csv(haproxy: Server) -> None:
    """The stats row of a frontend gives its sessions and limit; the bytes counters give
    kbps from the second check on: the stats frontend carried the first check, frontend b
    carried nothing."""
    with hold(haproxy.address, haproxy.ports["a"], 3):
        run = run_checks(
            load_job(haproxy, "/stats;csv", format="haproxy", proxy="a", server="FRONTEND"),
            load_job(haproxy, "/stats;csv", 0.5, format="haproxy", proxy="stats", server="FRONTEND"),
            load_job(haproxy, "/stats;csv", 0.5, format="haproxy", proxy="b", server="FRONTEND"),
            load_job(haproxy, "/stats;csv", format="haproxy", proxy="nope", server="FRONTEND"),
        )
    a, stats, b, nope = run.results
    assert a["ok"] and a["data"] == {"connections": 3, "capacity": loadservers.FRONTEND_MAXCONN}, a
    assert a["reason"] == "HTTP 200, load connections=3 capacity=50"
    assert stats["ok"] and stats["data"]["kbps"] > 0, stats
    assert b["ok"] and b["data"] == {"connections": 0, "capacity": 50, "kbps": 0}, b
    assert not nope["ok"]
    assert nope["reason"] == "HTTP 200, no row for proxy 'nope' server 'FRONTEND' in the HAProxy stats"


def test_haproxy_prometheus_exporter(haproxy: Server) -> None:
    """The same figures through haproxy's Prometheus exporter, picked by name and label."""
    frontend = {"proxy": "a"}
    with hold(haproxy.address, haproxy.ports["a"], 2):
        run = run_checks(
            load_job(
                haproxy,
                "/metrics",
                format="prometheus",
                connections=[["haproxy_frontend_current_sessions", frontend]],
                capacity=[["haproxy_frontend_limit_sessions", frontend]],
            ),
            load_job(
                haproxy,
                "/metrics",
                0.5,
                format="prometheus",
                bytes=[
                    ["haproxy_frontend_bytes_in_total", {"proxy": "stats"}],
                    ["haproxy_frontend_bytes_out_total", {"proxy": "stats"}],
                ],
            ),
            load_job(haproxy, "/metrics", format="prometheus", connections=[["no_such_metric", {}]]),
        )
    gauges, rates, missing = run.results
    assert gauges["ok"] and gauges["data"] == {"connections": 2, "capacity": 50}, gauges
    assert rates["ok"] and set(rates["data"]) == {"kbps"} and rates["data"]["kbps"] > 0, rates
    assert not missing["ok"] and missing["reason"] == "HTTP 200, no sample no_such_metric for connections"


def test_nginx_stub_status(nginx: Server) -> None:
    """Active connections counts the held ones and the check's own; capacity comes from the
    config; a page that is not stub_status is a clear failure."""
    with hold(nginx.address, nginx.port, 4):
        run = run_checks(load_job(nginx, "/nginx_status", format="nginx", fixed_capacity=64))
    (status,) = run.results
    assert status["ok"] and status["data"] == {"connections": 5, "capacity": 64}, status
    (other,) = run_checks(load_job(nginx, "/", format="nginx")).results
    assert not other["ok"]
    assert other["reason"] == "HTTP 200, not nginx stub_status (no 'Active connections: N' first line)"
    assert run.leftovers == {"delayed_calls": [], "selectables": []}
