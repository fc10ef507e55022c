"""`gtmcluster replay` over a real node's query log and state snapshot: a real `twistd gtm`
node logs real `dig` queries from several loopback sources (and client subnets), is stopped
(writing its state snapshot), and the real CLI tells which clients a topology change would
move; its HTML report is loaded in headless Chromium."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_tool
from tests.support import configs, poll
from tests.support.apiclient import call
from tests.support.dig import dig
from tests.support.nodeproc import loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

DNS_PORT = 5353
GSLB = "gslb.example.test"
#: the command as installed
GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
#: (source address, client subnet sent or None, the answer the node gives)
ASKERS = [
    ("127.0.1.5", None, "10.0.1.1"),  # region r1: DC1
    ("127.0.2.5", None, "10.0.2.1"),  # region r2: DC2
    ("127.0.2.6", None, "10.0.2.1"),
    ("127.0.3.5", None, "10.0.1.1"),  # no region: DC3 (score 2) is down, so DC1 (score 1)
    ("127.0.0.1", "203.0.113.0/24", "10.0.2.1"),  # a trusted resolver's client in r2
    ("127.0.0.1", "198.51.100.0/24", "10.0.1.1"),  # ... in r1
]


def node_config(address: str, down: str) -> dict[str, Any]:
    """configs.base() with the query log on and vs3 (DC3) monitored on a closed port."""
    config = configs.base(address, DNS_PORT)
    config["dns_server"]["query_log"] = {"path": "var/log/queries.dnstap"}
    config["monitors"] = {"tcp": {"type": "tcp", "interval": 0.5, "timeout": 0.25, "up_after": 1, "down_after": 1}}
    config["virtual_servers"]["vs3"] = {"address": down, "port": 9, "datacenter": "DC3", "monitor": "tcp"}
    config["topology"][2]["score"] = 2
    config["topology"].append({"ldns": "any", "server": "datacenter DC1", "score": 1})
    return config


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GTMCLUSTER), "replay", *args], capture_output=True, text=True, timeout=120, check=False)


def test_replay_names_exactly_the_clients_a_topology_change_moves(tmp_path: Path) -> None:
    address = loopback_address()
    down = loopback_address()  # nothing listens there: vs3's monitor finds it down
    config = node_config(address, down)
    path = configs.write(tmp_path, config)
    with running_node(path, "n1", address, DNS_PORT, tmp_path):
        # vs3's first verdict first (asked of the API, so that no query is logged before it)
        poll.until(
            lambda: call((address, 8053), f"/api/v1/explain?wideip={GSLB}&ldns=127.0.3.5")[1]["members"] == ["vs1"],
            timeout=20,
            what="vs3 found down",
        )
        for source, subnet, expected in ASKERS:
            extra = [f"+subnet={subnet}"] if subnet else []
            assert dig(address, DNS_PORT, GSLB, "A", *extra, source=source).answer_data() == [expected]
    state = tmp_path / "var" / "state" / "n1" / "state.sqlite"
    log = tmp_path / "var" / "log" / "queries.dnstap"
    assert state.exists() and log.exists()

    moved = configs.base(address, DNS_PORT)
    moved.update({k: config[k] for k in ("monitors", "virtual_servers", "topology", "dns_server")})
    moved["topology"] = [dict(r) for r in config["topology"]]
    moved["topology"][1]["server"] = "datacenter DC1"  # region r2 goes to DC1
    new = configs.write(tmp_path, moved, name="new.yaml")
    html = tmp_path / "report.html"
    run = replay("--log", str(log), "--config", str(new), "--base", str(path), "--state", str(state))
    assert run.returncode == 0, run.stderr
    assert f"  {GSLB}  127.0.2.5: DC2 -> DC1  (1 query)" in run.stdout.splitlines()
    assert "Clients that move (3)" in run.stdout
    run = replay(
        "--log",
        str(log),
        "--config",
        str(new),
        "--base",
        str(path),
        "--state",
        str(state),
        "--json",
        "--html",
        str(html),
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert [(m["client"], m["from"], m["to"]) for m in report["moved"]] == [
        ("127.0.0.1 ecs 203.0.113.0/24", "DC2", "DC1"),
        ("127.0.2.5", "DC2", "DC1"),
        ("127.0.2.6", "DC2", "DC1"),
    ]
    # the state is the node's: vs3 down as it was, so the base replay decides as the node did
    agreement = report["agreement"]
    assert agreement["compared"] == agreement["agree"] >= len(ASKERS)
    assert report["wideips"][GSLB]["datacenters"]["DC2"]["after"] == 0
    assert report["now_failing"] == []
    # without the snapshot every server is taken as up: 127.0.3.5 would get DC3
    bare = replay("--log", str(log), "--config", str(path), "--json")
    assert bare.returncode == 0, bare.stderr
    bare_report = json.loads(bare.stdout)
    assert bare_report["state"]["snapshot"] is None
    assert bare_report["agreement"]["agree"] < bare_report["agreement"]["compared"]
    assert any(e["client"] == "127.0.3.5" and "DC3" in e["replayed"] for e in bare_report["agreement"]["examples"])

    require_tool("chromium", "chromium")
    dom = subprocess.run(
        [
            "chromium",
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    # the browser parsed the chart: an SVG with a bar per data center answering and side
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="shares"' in dom
    assert dom.count('class="bar before"') == dom.count('class="bar after"') == 2
    assert '<rect class="bar after" data-datacenter="DC1" data-share="1.0"' in dom
    assert '<rect class="bar after" data-datacenter="DC2" data-share="0.0"' in dom
    assert "<td>127.0.2.5</td><td>DC2</td><td>DC1</td>" in dom
