"""Client-subnet probing in a real node (issue 36 item 4): queries from a trusted resolver
naming client subnets make the node probe them over real sockets (loopback answers TCP
with a refusal), within the group's cap per interval; what it measured decides the answers
to those subnets (their /24 is the reply's scope) and is kept as the subnets' client
figures (read from the snapshot the node leaves when it stops)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gtmcluster.config.load import load
from gtmcluster.state import keys, snapshot
from gtmcluster.state.store import Store
from tests.support import configs, dnsclient, poll
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = [pytest.mark.process]

SUBNETS = ("127.77.5.0/24", "127.77.6.0/24", "127.77.7.0/24")


def scope(node: RunningNode, subnet: str) -> int | None:
    reply = dnsclient.parse(dnsclient.udp(dnsclient.query("gslb.example.test", ecs=subnet), node.server))
    option = dnsclient.ecs_option(reply)
    return None if option is None else option.scopelen


def test_a_node_probes_the_client_subnets_it_is_asked_about_within_the_cap(tmp_path: Path) -> None:
    address = loopback_address()
    raw = configs.base(address, 5353)
    raw["pools"]["p"] = {"members": ["vs1"], "load_balancing": {"preferred": "rtt", "alternate": "topology"}}
    raw["sync_group"]["cold_start_wait"] = 0
    raw["dns_server"]["ecs_trusted"] = ["127.0.0.0/8"]
    raw["prober"] = {"allow": ["127.0.0.0/8"], "timeout": 0.5}
    raw["proximity"] = {"client_probe": {"enabled": True, "subnets_per_interval": 2, "interval": 3600}}
    path = configs.write(tmp_path, raw)
    with running_node(path, "n1", address, 5353, tmp_path) as node:
        first = [scope(node, s) for s in SUBNETS]  # no client figures yet; two subnets are asked for
        assert 24 not in first, first
        decided = [True, True, False]  # the third subnet: past the cap of the interval
        poll.until(lambda: [scope(node, s) == 24 for s in SUBNETS] == decided, what="probed subnets deciding")
    store = Store("reader", time.time)
    snapshot.read(load(path).state_dir_for("n1") / "state.sqlite", store, time.time())
    figures = {keys.client_parts(r.key): r.value for r in store.scan(keys.CLIENT)}
    assert set(figures) == {("127.77.5.0/24", "DC1"), ("127.77.6.0/24", "DC1")}  # two an interval
    for value in figures.values():
        assert value["source"] == "probe" and value["by"] == "n1" and 0 < value["rtt"] < 500_000
