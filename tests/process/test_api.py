"""The HTTP API of a real node: JSON views, admin actions (with the token), reload (by
POST and by SIGHUP, refused when invalid), errors as JSON, and Prometheus metrics."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import configs, dnsclient, poll
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = [pytest.mark.process]

TOKEN = "a-long-enough-token-for-tests"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningNode, Path]]:
    directory = tmp_path_factory.mktemp("api")
    address = loopback_address()
    raw = configs.base(address, 5353)
    configs.write_secret(directory / "api-token", TOKEN + "\n")
    raw["api"] = {"token_file": "api-token"}  # (config sync publishes a reload: never an inline secret)
    raw["pools"]["p"]["load_balancing"] = {"preferred": "global_availability"}
    path = configs.write(directory, raw)
    with running_node(path, "n1", address, 5353, directory) as running:
        yield running, path


def call(node: RunningNode, path: str, method: str = "GET", token: str | None = None) -> tuple[int, Any, str]:
    request = urllib.request.Request(
        f"http://{node.address}:8053{path}", method=method, data=b"{}" if method == "POST" else None
    )
    if method == "POST":
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            body = response.read().decode()
            kind = response.headers["content-type"]
            return response.status, json.loads(body) if "json" in kind else body, kind
    except urllib.error.HTTPError as e:
        body = e.read().decode()
        return e.code, json.loads(body), e.headers["content-type"]


def answer(node: RunningNode) -> list[str]:
    return dnsclient.addresses(dnsclient.parse(dnsclient.udp(dnsclient.query("gslb.example.test"), node.server)))


def test_views(node: tuple[RunningNode, Path]) -> None:
    """status, health, wideips, ldns answer JSON describing the node."""
    n, _ = node
    code, status, kind = call(n, "/api/v1/status")
    assert code == 200 and kind.startswith("application/json")
    assert status["node"] == "n1" and status["config_generation"] >= 1 and status["state"]["digest"]
    code, health, _ = call(n, "/api/v1/health")
    assert code == 200 and set(health["virtual_servers"]) >= {"vs1", "vs2", "vs3"}
    code, wideips, _ = call(n, "/api/v1/wideips")
    assert wideips["wideips"]["gslb.example.test"]["pools"][0]["name"] == "p"
    code, ldns, _ = call(n, "/api/v1/ldns?address=192.0.2.1")
    assert code == 200 and ldns["ldns"] == []


@pytest.mark.parametrize(
    ("path", "method", "code", "fragment"),
    [
        ("/api/v1/nothing", "GET", 404, "no such resource"),
        ("/api/v1/status", "POST", 405, "not allowed"),
        ("/api/v1/ldns?address=not-an-ip", "GET", 400, "is not an IP address"),
        ("/api/v1/ldns?bogus=1", "GET", 400, "unknown parameter 'bogus'"),
        ("/api/v1/explain?wideip=gslb.example.test", "GET", 400, "give ldns="),
        ("/api/v1/explain?wideip=nope.example.test&ldns=192.0.2.1", "GET", 404, "no wide IP"),
        ("/api/v1/stats?wideip=nope.example.test", "GET", 404, "no wide IP"),
    ],
)
def test_bad_requests_get_json_errors(
    node: tuple[RunningNode, Path], path: str, method: str, code: int, fragment: str
) -> None:
    """Bad input gets a 4xx status with a JSON error naming the problem."""
    n, _ = node
    got, body, kind = call(n, path, method, TOKEN)
    assert got == code and kind.startswith("application/json")
    assert fragment in body["error"]


def test_admin_actions_need_the_token_and_change_answers(node: tuple[RunningNode, Path]) -> None:
    """POST without the token is 401, with a wrong one 403; disable takes a server out of
    the answers at once, enable brings it back."""
    n, _ = node
    assert call(n, "/api/v1/virtual-servers/vs1/disable", "POST")[0] == 401
    assert call(n, "/api/v1/virtual-servers/vs1/disable", "POST", "wrong-token-xxxxxxxx")[0] == 403
    assert call(n, "/api/v1/virtual-servers/nope/disable", "POST", TOKEN)[0] == 404
    assert call(n, "/api/v1/virtual-servers/vs1/explode", "POST", TOKEN)[0] == 404
    assert answer(n) == ["10.0.1.1"]
    code, body, _ = call(n, "/api/v1/virtual-servers/vs1/disable", "POST", TOKEN)
    assert code == 200 and body["admin"] == "disabled" and body["available"] is False
    assert answer(n) == ["10.0.2.1"]
    code, body, _ = call(n, "/api/v1/virtual-servers/vs1/enable", "POST", TOKEN)
    assert body["available"] is True
    assert answer(n) == ["10.0.1.1"]


def test_statistics_per_wide_ip_pool_and_member(node: tuple[RunningNode, Path]) -> None:
    """GET /api/v1/stats counts what the node answered per wide IP, pool and pool member (as
    BIG-IP's show gtm wideip / pool / pool-member), and /metrics carries the same figures."""
    n, _ = node
    before = call(n, "/api/v1/stats?wideip=gslb.example.test")[1]
    was = before["wideips"].get("gslb.example.test", {}).get("answered", 0)
    for _ in range(5):
        assert answer(n) == ["10.0.1.1"]
    code, stats, kind = call(n, "/api/v1/stats?wideip=GSLB.example.test.")
    assert code == 200 and kind.startswith("application/json") and stats["node"] == "n1"
    wideip = stats["wideips"]["gslb.example.test"]
    assert wideip["answered"] == was + 5 and wideip["slots"]["preferred"] >= 5
    assert wideip["types"]["A"] >= 5 and wideip["methods"]["global_availability"] >= 5
    assert stats["pools"]["p"]["members"]["vs1"]["slots"]["preferred"] >= 5
    text = call(n, "/metrics")[1]
    assert 'gtm_wideip_answers_total{slot="preferred",wideip="gslb.example.test"}' in text
    assert 'gtm_pool_answers_total{pool="p",slot="preferred"}' in text
    assert 'gtm_pool_method_answers_total{method="global_availability",pool="p"}' in text
    assert 'gtm_pool_member_answers_total{member="vs1",pool="p",slot="preferred"}' in text


def test_the_stats_command(node: tuple[RunningNode, Path]) -> None:
    """`gtmcluster stats` prints the same figures, per wide IP, pool and member."""
    n, path = node
    answer(n)
    cli = [sys.executable, "-m", "gtmcluster.cli.main", "stats", "--config", str(path)]
    shown = subprocess.run(
        [*cli, "--wideip", "gslb.example.test"], check=False, capture_output=True, text=True, timeout=30
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("wideip gslb.example.test: requests ") and " answered " in lines[0], lines
    assert any(line.startswith("pool p: answered ") for line in lines), lines
    assert any(line.strip().startswith("member vs1  answered ") and "preferred" in line for line in lines), lines
    wrong = subprocess.run(
        [*cli, "--wideip", "nope.example.test"], check=False, capture_output=True, text=True, timeout=30
    )
    assert wrong.returncode == 1 and "no wide IP named 'nope.example.test'" in wrong.stderr


def test_reload_by_post_and_sighup_and_refusal(node: tuple[RunningNode, Path]) -> None:
    """A valid change is taken (TTL changes, generation grows); an invalid file is refused
    with its problems and the old config keeps answering."""
    n, path = node
    raw = yaml.safe_load(path.read_text())
    generation = call(n, "/api/v1/status")[1]["config_generation"]
    raw["pools"]["p"]["ttl"] = 77
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    code, body, _ = call(n, "/api/v1/reload", "POST", TOKEN)
    assert code == 200 and body["generation"] == generation + 1
    reply = dnsclient.parse(dnsclient.udp(dnsclient.query("gslb.example.test"), n.server))
    assert reply.answer[0].ttl == 77
    raw["pools"]["p"]["ttl"] = 55
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    n.proc.send_signal(signal.SIGHUP)
    poll.until(lambda: call(n, "/api/v1/status")[1]["config_generation"] == generation + 2, what="SIGHUP reload")
    path.write_text(path.read_text() + "\nbogus_key: 1\n")
    code, body, _ = call(n, "/api/v1/reload", "POST", TOKEN)
    assert code == 422 and "unknown key" in body["error"]
    reply = dnsclient.parse(dnsclient.udp(dnsclient.query("gslb.example.test"), n.server))
    assert reply.answer[0].ttl == 55
    assert "reload refused" in n.log_text()


def test_metrics_in_prometheus_format(node: tuple[RunningNode, Path]) -> None:
    """GET /metrics is Prometheus text with query counters by wide IP and method, decision
    latency, server availability and store sizes."""
    n, _ = node
    answer(n)
    code, text, kind = call(n, "/metrics")
    assert code == 200 and kind.startswith("text/plain")
    assert (
        'gtm_dns_queries_total{method="global_availability",qtype="A",rcode="NOERROR",wideip="gslb.example.test"}'
        in text
    )
    assert "gtm_decision_seconds_count" in text
    assert 'gtm_kept_decision_lookups_total{result="hit"}' in text
    assert 'gtm_virtual_server_available{datacenter="DC1",virtual_server="vs1"}' in text
    assert "gtm_store_records" in text and "gtm_config_generation" in text
    assert "gtm_gc_full_collections_total" in text and "gtm_gc_longest_full_collection_seconds" in text
    assert "gtm_gc_frozen_objects" in text
    assert "gtm_health_checks_started_total" in text and "gtm_health_check_lag_seconds_count" in text
    assert "gtm_reactor_lag_seconds_bucket" in text and "gtm_reactor_lag_max_seconds" in text
    assert "gtm_reactor_lag_recent_max_seconds" in text
