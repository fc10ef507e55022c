"""Load-based answers from a real load source: a `twistd -n gtm` node whose two virtual
servers are frontends of a real haproxy (started by the test on loopback), each read from
haproxy's stats CSV by an http monitor with ``load: {format: haproxy}``; `dig` shows that
`least_connections` answers the frontend holding fewer connections, and follows when the
connections move."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import configs, loadservers, poll
from tests.support.dig import dig
from tests.support.loadservers import STATS_PORT, hold
from tests.support.nodeproc import loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

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
