"""Load-based answers from real load sources: a `twistd -n gtm` node whose two virtual
servers are frontends of a real haproxy (started by the test on loopback), each read from
haproxy's stats CSV by an http monitor with ``load: {format: haproxy}``; `dig` shows that
`least_connections` answers the frontend holding fewer connections, and follows when the
connections move. The same with two real nginx read through ``stub_status`` and
`weighted_least_connections`. Until figures arrive the pool yields nothing (no alternate):
the answer is empty, so each expected answer is the method's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import configs, loadservers, poll
from tests.support.dig import dig
from tests.support.loadservers import STATS_PORT, hold
from tests.support.nodeproc import loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool"), pytest.mark.alone]

DNS_PORT = 5353
NAME = "gslb.example.test"


def load_monitor(proxy: str) -> dict[str, Any]:
    return {
        "type": "http",
        "interval": 0.5,
        "timeout": 0.4,
        "up_after": 1,
        "port": STATS_PORT,
        "path": "/stats;csv",
        "load": {"format": "haproxy", "proxy": proxy, "server": "FRONTEND"},
    }


def test_least_connections_follows_haproxy_sessions(tmp_path: Path) -> None:
    loadservers.require("haproxy")
    node_address, a, b = loopback_address(), loopback_address(), loopback_address()
    with loadservers.running_haproxy(tmp_path / "haproxy", a, ("a", "b"), {"a": a, "b": b}) as haproxy:
        raw = configs.base(node_address, DNS_PORT)
        raw["monitors"] = {"load-a": load_monitor("a"), "load-b": load_monitor("b")}
        raw["virtual_servers"] = {
            "vsa": {"address": a, "port": haproxy.ports["a"], "datacenter": "DC1", "monitor": "load-a"},
            "vsb": {"address": b, "port": haproxy.ports["b"], "datacenter": "DC2", "monitor": "load-b"},
        }
        raw["pools"] = {"p": {"members": ["vsa", "vsb"], "load_balancing": {"preferred": "least_connections"}}}
        raw["wideips"] = {NAME: {"pools": ["p"]}}
        config = configs.write(tmp_path, raw)
        with running_node(config, "n1", node_address, DNS_PORT, tmp_path) as node:

            def answer() -> list[str]:
                return dig(node.address, node.port, NAME).answer_data()

            with hold(a, haproxy.ports["a"], 5), hold(b, haproxy.ports["b"], 1):
                poll.until(lambda: answer() == [b], 15, f"the answer {b} (1 connection against 5)", details=answer)
                with hold(b, haproxy.ports["b"], 8):
                    poll.until(lambda: answer() == [a], 15, f"the answer {a} (9 connections against 5)", details=answer)


def test_weighted_least_connections_from_nginx_stub_status(tmp_path: Path) -> None:
    """Two real nginx, each a virtual server read through its stub_status; ratios 3 and 1.
    Active connections count the held ones and the check's own: 7 / 3 beats 3 / 1 although
    7 > 3, and 11 / 3 loses to it."""
    loadservers.require("nginx")
    node_address, a, b = loopback_address(), loopback_address(), loopback_address()
    with (
        loadservers.running_nginx(tmp_path / "nginx-a", a) as nginx_a,
        loadservers.running_nginx(tmp_path / "nginx-b", b) as nginx_b,
    ):
        monitor = {
            "type": "http",
            "interval": 0.5,
            "timeout": 0.4,
            "up_after": 1,
            "path": "/nginx_status",
            "load": {"format": "nginx"},
        }
        raw = configs.base(node_address, DNS_PORT)
        raw["monitors"] = {"stub": monitor}
        raw["virtual_servers"] = {
            "vsa": {"address": a, "port": nginx_a.port, "datacenter": "DC1", "monitor": "stub"},
            "vsb": {"address": b, "port": nginx_b.port, "datacenter": "DC2", "monitor": "stub"},
        }
        raw["pools"] = {
            "p": {
                "members": [{"virtual_server": "vsa", "ratio": 3}, {"virtual_server": "vsb", "ratio": 1}],
                "load_balancing": {"preferred": "weighted_least_connections"},
            }
        }
        raw["wideips"] = {NAME: {"pools": ["p"]}}
        config = configs.write(tmp_path, raw)
        with running_node(config, "n1", node_address, DNS_PORT, tmp_path) as node:

            def answer() -> list[str]:
                return dig(node.address, node.port, NAME).answer_data()

            with hold(a, nginx_a.port, 6), hold(b, nginx_b.port, 2):
                poll.until(lambda: answer() == [a], 15, f"the answer {a} (7 / 3 against 3 / 1)", details=answer)
                with hold(a, nginx_a.port, 4):
                    poll.until(lambda: answer() == [b], 15, f"the answer {b} (11 / 3 against 3 / 1)", details=answer)
