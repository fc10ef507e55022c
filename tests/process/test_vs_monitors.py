"""Several monitors per virtual server, for real: one `twistd -n gtm` node, two real HTTP
servers of this test on loopback (``/health`` answers 200, or 503 once the test says so),
real `dig`, the node's HTTP API and `gtmcluster status`.

Each of the two servers backs one virtual server checked by an http monitor (``/health``)
and a tcp monitor (the same port): ``vs_all`` with ``monitor_rule: all`` and ``vs_one``
with ``{at_least: 1}``, each the preferred member of its own wide IP, with an unmonitored
alternative. When ``/health`` turns 503 (the port still accepts connections) the answer for
``vs_all``'s wide IP moves to its alternative and ``vs_one``'s does not; the reasons the API
and `status` give name both monitors' verdicts.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import configs, poll
from tests.support.apiclient import call, token_of
from tests.support.dig import dig
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

DNS_PORT = 5353
BACKEND_PORT = 8080
API_PORT = 8053
ALL = "all.example.test"
ONE = "one.example.test"
ALT_ALL = "10.0.2.61"
ALT_ONE = "10.0.2.62"
MONITOR = {"interval": 0.5, "timeout": 0.3, "up_after": 1, "down_after": 2}


class Health:
    """What ``/health`` answers on both servers: 200, or 503 once `failing`."""

    failing = False


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 503 if Health.failing and self.path == "/health" else 200
        body = b"maintenance\n" if status == 503 else b"ok\n"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a check that hung up early (the tcp monitor only connects)


def serving(address: str) -> tuple[_Server, threading.Thread]:
    server = _Server((address, BACKEND_PORT), _Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return server, thread


def node_config(address: str, vs_all: str, vs_one: str) -> dict[str, Any]:
    config = configs.base(address, DNS_PORT)
    config["monitors"] = {
        "http_check": {"type": "http", "path": "/health", **MONITOR},
        "tcp_check": {"type": "tcp", **MONITOR},
    }
    both = ["http_check", "tcp_check"]
    config["virtual_servers"] = {
        "vs_all": {"address": vs_all, "port": BACKEND_PORT, "datacenter": "DC1", "monitor": both},
        "vs_one": {
            "address": vs_one,
            "port": BACKEND_PORT,
            "datacenter": "DC1",
            "monitor": both,
            "monitor_rule": {"at_least": 1},
        },
        "alt_all": {"address": ALT_ALL, "datacenter": "DC2"},
        "alt_one": {"address": ALT_ONE, "datacenter": "DC2"},
    }
    config["pools"] = {
        "pa": {"members": ["vs_all", "alt_all"], "load_balancing": {"preferred": "global_availability"}, "ttl": 5},
        "po": {"members": ["vs_one", "alt_one"], "load_balancing": {"preferred": "global_availability"}, "ttl": 5},
    }
    config["wideips"] = {ALL: {"type": "A", "pools": ["pa"]}, ONE: {"type": "A", "pools": ["po"]}}
    return config


class Setup:
    def __init__(self, node: RunningNode, config: Path, vs_all: str, vs_one: str) -> None:
        self.node = node
        self.config = config
        self.vs_all = vs_all
        self.vs_one = vs_one

    def answer(self, name: str) -> list[str]:
        try:
            return dig(self.node.address, self.node.port, name, "A", "+tries=1", "+time=1").answer_data()
        except (AssertionError, yaml.YAMLError):
            return []

    def health(self) -> dict[str, Any]:
        status, body = call((self.node.address, API_PORT), "/api/v1/health", token=token_of(self.config, "n1"))
        assert status == 200, body
        servers: dict[str, Any] = body["virtual_servers"]
        return servers

    def health_when(self, done: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """The API's servers once *done* holds for them (polled for 10 s)."""
        seen: list[dict[str, Any]] = []

        def check() -> bool:
            seen[:] = [self.health()]
            return done(seen[0])

        poll.until(check, 10, what, details=lambda: seen)
        return seen[0]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    address, vs_all, vs_one = loopback_address(), loopback_address(), loopback_address()
    Health.failing = False
    servers = [serving(vs_all), serving(vs_one)]
    path = configs.write(tmp_path, node_config(address, vs_all, vs_one))
    try:
        with running_node(path, "n1", address, DNS_PORT, tmp_path) as node:
            yield Setup(node, path, vs_all, vs_one)
    finally:
        for server, thread in servers:
            server.shutdown()
            server.server_close()
            thread.join(5)


def test_one_failing_monitor_moves_the_answer_under_all_but_not_at_least_one(setup: Setup) -> None:
    both = "http_check: up; tcp_check: up"
    poll.until(
        lambda: setup.answer(ALL) == [setup.vs_all] and setup.answer(ONE) == [setup.vs_one],
        15,
        "both servers answered",
        details=setup.health,
    )
    health = setup.health_when(
        lambda h: both in h["vs_all"]["reason"] and both in h["vs_one"]["reason"], "reasons naming both monitors"
    )
    assert health["vs_all"]["reason"] == f"up for n1 ({both}; rule all: up)"
    assert health["vs_one"]["reason"] == f"up for n1 ({both}; rule at_least 1: up)"
    assert health["vs_all"]["monitors"] == ["http_check", "tcp_check"]
    assert health["vs_one"]["monitor_rule"] == "at_least 1"

    Health.failing = True  # the port still accepts: tcp_check stays up
    poll.until(lambda: setup.answer(ALL) == [ALT_ALL], 10, f"{ALL} moved to {ALT_ALL}", details=setup.health)
    health = setup.health_when(
        lambda h: "http_check: down" in h["vs_one"]["reason"], "vs_one's reason naming http_check down"
    )
    assert setup.answer(ONE) == [setup.vs_one]
    assert health["vs_one"]["available"] is True
    one = health["vs_one"]["reason"]
    assert one.startswith("up for n1 (http_check: down (") and "503" in one, one
    assert one.endswith("; tcp_check: up; rule at_least 1: up)"), one
    gone = health["vs_all"]
    assert gone["available"] is False
    assert gone["reason"].startswith("monitors http_check, tcp_check (rule all): n1: http_check: down ("), gone
    assert gone["reason"].endswith("; tcp_check: up; rule all: down"), gone

    status = subprocess.run(
        [sys.executable, "-m", "gtmcluster.cli.main", "status", "--config", str(setup.config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    line = next((s for s in status.stdout.splitlines() if "virtual server vs_all unavailable" in s), None)
    assert line is not None, status.stdout + status.stderr
    assert "http_check: down (" in line and "tcp_check: up; rule all: down" in line, line
    assert "vs_one unavailable" not in status.stdout
    explain = subprocess.run(
        [
            sys.executable,
            "-m",
            "gtmcluster.cli.main",
            "explain",
            "--config",
            str(setup.config),
            ALL,
            "--ldns",
            "127.0.1.1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert f"  virtual server vs_all out (health down): {gone['reason']}" in explain.stdout.splitlines(), explain
    assert explain.stdout.rstrip().endswith(
        f"=> {ALT_ALL} from pool pa (alt_all) by global_availability, TTL 5, ECS scope /0"
    )

    Health.failing = False
    poll.until(lambda: setup.answer(ALL) == [setup.vs_all], 10, f"{ALL} back on vs_all", details=setup.health)
