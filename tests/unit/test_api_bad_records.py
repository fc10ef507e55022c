"""No single record stops evaluation or an API answer: with a record of the wrong shape of
each kind held locally (as a writer's bug would leave it; peers and the snapshot refuse
them, see test_sync_records.py and test_snapshot.py), health is evaluated from the rest,
and /api/v1/health, status, wideips, explain, ldns and /metrics answer, on the node's whole
service tree built in-process. The records refused are counted in /metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.api import admin, proximity
from gtmcluster.api.metrics import metrics_steps
from gtmcluster.api.status import status_steps
from gtmcluster.config.load import load
from gtmcluster.nodeservice import NodeService
from gtmcluster.runtime import slices
from gtmcluster.service import Sockets, make_service
from tests.support import configs

LDNS = "198.51.100.53"
PATH = {
    "rtt": 1000,
    "last_rtt": 1000,
    "hops": 0,
    "completion": 10000,
    "protocol": "udp",
    "failures": 0,
    "window": "1",
    "by": "n1",
}

#: per kind, values of the wrong shape (each written in turn at the kind's key)
BAD: dict[str, list[Any]] = {
    "obs/vs/vs1/n1": ["x", [], {"up": "yes", "reason": []}, {"reason": {"a": 1}}],
    "obs/vs/vs1/zz": [[]],
    "obs/link/l1/n1": [[], {"up": 1, "reason": None}],
    "admin/vs/vs1": ["x", {"state": []}, {"state": {"a": 1}}, {"state": "enabled", "by": []}],
    "held/vs/vs1": ["x", {"reason": []}, {"since": "now"}],
    "metrics/vs/vs1": ["x", [], {"connections": "many"}],
    f"path/{LDNS}/DC1": ["x", [], {"rtt": "a"}, {**PATH, "protocol": 7}, {**PATH, "rtt": 10**30}],
    "persist/gslb.example.test/1/198.51.100.0/24": ["x", {"pool": [], "members": "abc"}, {"pool": "p", "members": [1]}],
    f"probe/{LDNS}": ["x", []],
    "zz/0": [{"x": 1}],
}


@pytest.fixture
def service(tmp_path: Path) -> NodeService:
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    raw["monitors"] = {"tcp": {"type": "tcp", "interval": 5, "timeout": 2, "port": 80}}
    raw["virtual_servers"]["vs1"]["monitor"] = "tcp"
    raw["virtual_servers"]["vs2"]["monitor"] = "tcp"
    raw["links"] = {"l1": {"datacenter": "DC1", "monitor": "tcp", "targets": ["192.0.2.9:80"]}}
    raw["pools"]["p"]["load_balancing"] = {"preferred": "rtt", "alternate": "topology"}
    top = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    top.node.ready = True
    return top


def answers(top: NodeService) -> dict[str, Any]:
    node = top.node
    return {
        "health": admin.health(node),
        "status": slices.whole(status_steps(node, top.replicator, 0.0)),
        "wideips": admin.wideips(node),
        "explain": proximity.explain(node, {"wideip": "gslb.example.test", "ldns": LDNS}),
        "ldns": proximity.ldns_table(node, {}),
        "ldns of one": proximity.ldns_table(node, {"address": LDNS}),
        "metrics": slices.whole(metrics_steps(top)).body.decode(),
    }


@pytest.mark.parametrize(("key", "index"), [(k, i) for k, values in BAD.items() for i in range(len(values))])
def test_a_bad_record_held_locally_stops_no_evaluation_and_no_answer(
    service: NodeService, key: str, index: int
) -> None:
    """vs2's verdict (down) is evaluated whatever is wrong with vs1's records, and every API
    answer is made."""
    store = service.node.store
    store.put("obs/vs/vs2/n1", {"up": False, "reason": "refused"}, ttl=90)
    store.put(key, BAD[key][index], ttl=90)
    got = answers(service)
    vs2 = got["health"]["virtual_servers"]["vs2"]
    assert vs2["health"] == "down" and vs2["available"] is False, vs2
    assert got["status"]["health"]["virtual_servers"]["vs2"]["available"] is False
    assert got["explain"]["wideip"] == "gslb.example.test"
    assert "gtm_virtual_server_available" in got["metrics"]


def test_refused_records_are_counted_in_metrics(service: NodeService) -> None:
    service.replicator.refused["admin", "value"] += 2
    service.replicator.refused["unknown", "kind"] += 1
    assert service.snapshots is not None
    service.snapshots.refused["obs", "origin"] += 1
    text = slices.whole(metrics_steps(service)).body.decode()
    assert 'gtm_records_refused_total{kind="admin",reason="value",source="peer"} 2.0' in text
    assert 'gtm_records_refused_total{kind="unknown",reason="kind",source="peer"} 1.0' in text
    assert 'gtm_records_refused_total{kind="obs",reason="origin",source="snapshot"} 1.0' in text
