"""A link's traffic read over HTTP (`probe.httpcounters`): octet counters from a Prometheus
exposition or HAProxy's stats CSV, in the config, from captured pages, and from a real
haproxy (its stats frontend carries the readings themselves, so its counters grow)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock

from gtmcluster.config.load import load
from gtmcluster.config.monitoring import HttpCounterSource, LoadSource, Sample
from gtmcluster.health.linktraffic import traffic_poller
from gtmcluster.probe.httpcounters import CounterError, HttpCounterReader, octets
from gtmcluster.probe.linkrate import Counters
from gtmcluster.probe.snmp import SnmpReader
from gtmcluster.state.store import Store
from tests.support import configs, loadservers
from tests.support.loadservers import Server
from tests.support.nodeproc import loopback_address
from tests.unit.test_config_errors import assert_form, find, problems_of_file
from tests.unit.test_config_links import linked

BODIES = Path(__file__).resolve().parents[1] / "support" / "loadbodies"
ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = HttpCounterSource(
    "http://127.0.0.1:8404/metrics",
    LoadSource("prometheus"),
    (Sample("haproxy_frontend_bytes_in_total", (("proxy", "stats"),)),),
    (Sample("haproxy_frontend_bytes_out_total", (("proxy", "stats"),)),),
)
HAPROXY = HttpCounterSource("http://127.0.0.1:8404/stats;csv", LoadSource("haproxy", proxy="stats", server="FRONTEND"))


def test_the_counters_of_captured_pages() -> None:
    """haproxy 2.6's own pages: the stats frontend's bytes in and out, in either form."""
    assert octets((BODIES / "haproxy-2.6-metrics.prom").read_bytes(), PROMETHEUS) == Counters(222, 5976)
    assert octets((BODIES / "haproxy-2.6-stats.csv").read_bytes(), HAPROXY) == Counters(111, 2984)


@pytest.mark.parametrize(
    ("body", "source", "reason"),
    [
        (b"# pxname,svname\n", HAPROXY, "HAProxy stats CSV without"),
        (b"nothing here", HAPROXY, "not HAProxy stats CSV"),
        (b'haproxy_frontend_bytes_in_total{proxy="stats"} 5\n', PROMETHEUS, "no sample"),
        (
            b'haproxy_frontend_bytes_in_total{proxy="stats"} 1e30\nhaproxy_frontend_bytes_out_total{proxy="stats"} 1\n',
            PROMETHEUS,
            "not a 64-bit counter",
        ),
        (b"\xff\xfe", PROMETHEUS, "not UTF-8"),
    ],
)
def test_pages_without_counters_say_why(body: bytes, source: HttpCounterSource, reason: str) -> None:
    with pytest.raises(CounterError, match=reason):
        octets(body, source)


def test_http_sources_in_the_config(tmp_path: Path) -> None:
    config = linked()
    config["links"]["cnc"]["traffic"] = {
        "http": {
            "url": "http://10.0.0.1:9100/metrics",
            "received": {"metric": "node_network_receive_bytes_total", "labels": {"device": "eth1"}},
            "sent": ["node_network_transmit_bytes_total"],
        },
        "interval": 5,
    }
    config["links"]["tel"]["traffic"] = {
        "http": {"url": "https://[::1]:8404/stats;csv", "format": "haproxy", "proxy": "up", "max_response_bytes": 65536}
    }
    loaded = load(configs.write(tmp_path, config))
    cnc, tel = loaded.links["cnc"].traffic, loaded.links["tel"].traffic
    assert cnc is not None and tel is not None and cnc.interval == 5
    assert cnc.source == HttpCounterSource(
        "http://10.0.0.1:9100/metrics",
        LoadSource("prometheus"),
        (Sample("node_network_receive_bytes_total", (("device", "eth1"),)),),
        (Sample("node_network_transmit_bytes_total"),),
    )
    assert tel.source == HttpCounterSource(
        "https://[::1]:8404/stats;csv", LoadSource("haproxy", proxy="up", server="FRONTEND"), max_response_bytes=65536
    )
    assert cnc.source.max_response_bytes == 4 * 1024 * 1024  # (the default)


BAD = [
    (
        {"url": "http://router.example:9100/metrics", "received": "a", "sent": "b"},
        "links.cnc.traffic.http.url",
        "IP address",
    ),
    ({"url": "ftp://10.0.0.1/x", "received": "a", "sent": "b"}, "links.cnc.traffic.http.url", "http(s)://"),
    ({"url": "http://10.0.0.1/m", "sent": "b"}, "links.cnc.traffic.http", "missing key 'received'"),
    ({"url": "http://10.0.0.1/m", "received": "a b", "sent": "b"}, "links.cnc.traffic.http.received", "metric name"),
    ({"url": "http://10.0.0.1/s", "format": "haproxy"}, "links.cnc.traffic.http", "missing key 'proxy'"),
    ({"url": "http://10.0.0.1/s", "format": "nginx"}, "links.cnc.traffic.http.format", "not one of"),
    (
        {"url": "http://10.0.0.1/m", "received": "a", "sent": "b", "max_response_bytes": 100},
        "links.cnc.traffic.http.max_response_bytes",
        "1024",
    ),
    (
        {"url": "http://10.0.0.1/m", "received": "a", "sent": "b", "max_response_bytes": 2**30},
        "links.cnc.traffic.http.max_response_bytes",
        "16777216",
    ),
]


@pytest.mark.parametrize(("http", "path", "fragment"), BAD)
def test_bad_http_sources(tmp_path: Path, http: dict[str, Any], path: str, fragment: str) -> None:
    config = linked()
    config["links"]["cnc"]["traffic"] = {"http": http}
    file = configs.write(tmp_path, config)
    assert_form(find(problems_of_file(file), path, fragment), file, path)


def test_one_source_at_a_time(tmp_path: Path) -> None:
    config = linked()
    config["links"]["cnc"]["traffic"]["http"] = {"url": "http://10.0.0.1/m", "received": "a", "sent": "b"}
    file = configs.write(tmp_path, config)
    assert_form(find(problems_of_file(file), "links.cnc.traffic", "not both"), file, "links.cnc.traffic")


# -- against a real haproxy -----------------------------------------------------------------


@pytest.fixture
def haproxy(tmp_path: Path) -> Iterator[Server]:
    loadservers.require("haproxy")
    with loadservers.running_haproxy(tmp_path / "haproxy", loopback_address(), ("a",)) as server:
        yield server


def read(source: dict[str, Any], reads: int = 2, **job: Any) -> list[dict[str, Any]]:
    """Readings with the real reactor in a process of its own (`tests.support.runcounters`)."""
    spec = json.dumps({"source": source, "reads": reads, **job})
    out = subprocess.run(
        [sys.executable, "-m", "tests.support.runcounters", spec],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    readings: list[dict[str, Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    return readings


@pytest.mark.process
def test_a_real_haproxy_counts_the_readings(haproxy: Server) -> None:
    """Each reading goes through haproxy's stats frontend: its bytes in and out grow from one
    reading to the next, in the CSV and in the Prometheus exporter alike."""
    base = f"http://{haproxy.address}:{haproxy.port}"
    csv = read({"url": f"{base}/stats;csv", "format": "haproxy", "proxy": "stats"})
    assert all("error" not in r for r in csv), csv
    assert csv[1]["in"] > csv[0]["in"] and csv[1]["out"] > csv[0]["out"], csv
    labels = {"proxy": "stats"}
    prom = read(
        {
            "url": f"{base}/metrics",
            "received": [["haproxy_frontend_bytes_in_total", labels]],
            "sent": [["haproxy_frontend_bytes_out_total", labels]],
        }
    )
    assert all("error" not in r for r in prom), prom
    assert prom[1]["in"] > prom[0]["in"] >= csv[1]["in"] and prom[1]["out"] > prom[0]["out"], (csv, prom)


@pytest.mark.process
def test_readings_that_fail_say_why(haproxy: Server) -> None:
    base = f"http://{haproxy.address}:{haproxy.port}"
    nope = read({"url": f"{base}/stats;csv", "format": "haproxy", "proxy": "nope"}, reads=1)
    assert nope == [{"error": "HTTP 200, no row for proxy 'nope' server 'FRONTEND' in the HAProxy stats"}]
    missing = read({"url": f"{base}/nothing", "format": "haproxy", "proxy": "stats"}, reads=1)
    assert missing == [{"error": "HTTP 503 not in [200]"}], missing
    closed = read({"url": f"http://{haproxy.address}:9/stats;csv", "format": "haproxy", "proxy": "stats"}, reads=1)
    assert "refused" in closed[0]["error"].lower(), closed


def test_the_nodes_poller_reads_each_link_from_its_own_kind_of_source(tmp_path: Path) -> None:
    """The node's poller (`traffic_poller`) reads an http link with an `HttpCounterReader`
    and an snmp link with an `SnmpReader`, only for the links of its own data center."""
    config = linked()
    config["links"]["tel"]["datacenter"] = "DC1"
    config["links"]["tel"]["traffic"] = {"http": {"url": "http://127.0.0.1:9/m", "received": "a", "sent": "b"}}
    loaded = load(configs.write(tmp_path, config))
    poller = traffic_poller(loaded, Store("n1", Clock().seconds), Clock(), "n1", "DC1")
    try:
        assert isinstance(poller.polls["cnc"].reader, SnmpReader)
        assert isinstance(poller.polls["tel"].reader, HttpCounterReader)
        assert poller.polls["tel"].reader.describe() == "prometheus http://127.0.0.1:9/m"
        assert not traffic_poller(loaded, Store("n2", Clock().seconds), Clock(), "n2", "DC2").polls
    finally:
        if poller.close is not None:
            poller.close()
