"""GET /api/v1/ldns on a large table: one LDNS by lookups, the whole table in pages."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gtmcluster.api import proximity
from gtmcluster.api.server import ApiError
from gtmcluster.config.load import load
from gtmcluster.node import Node
from gtmcluster.proximity.table import updated
from gtmcluster.state import keys
from tests.support import configs


def node_with_paths(tmp_path: Path, ldnses: int) -> Node:
    node = Node(load(configs.write(tmp_path, configs.base())), "n1", clock=lambda: 1000.0, rng=random.Random(7))
    for i in range(ldnses):
        ldns = f"192.0.{i // 250}.{i % 250 + 1}"
        for dc, rtt in (("DC1", 20_000), ("DC2", 40_000)):
            path = updated(None, True, rtt + i, 5, "icmp", "n1", ldns, dc)
            node.store.put(keys.path(ldns, dc), path.value(), ttl=3600)
    return node


def test_one_ldns_is_found_by_its_data_centers_paths(tmp_path: Path) -> None:
    node = node_with_paths(tmp_path, 30)
    table = proximity.ldns_table(node, {"address": "192.0.0.7"})
    (entry,) = table["ldns"]
    assert entry["address"] == "192.0.0.7"
    assert [(p["datacenter"], p["rtt_us"]) for p in entry["paths"]] == [("DC1", 20_006), ("DC2", 40_006)]
    assert not table["truncated"]
    assert proximity.ldns_table(node, {"address": "192.0.9.9"})["ldns"] == []


def test_the_whole_table_comes_in_at_most_limit_paths(tmp_path: Path) -> None:
    node = node_with_paths(tmp_path, 30)
    whole = proximity.ldns_table(node, {})
    assert len(whole["ldns"]) == 30 and not whole["truncated"]
    assert [e["address"] for e in whole["ldns"]][:3] == ["192.0.0.1", "192.0.0.2", "192.0.0.3"]
    page = proximity.ldns_table(node, {"limit": "10"})
    assert sum(len(e["paths"]) for e in page["ldns"]) == 10 and page["truncated"]
    exact = proximity.ldns_table(node, {"limit": "60"})
    assert sum(len(e["paths"]) for e in exact["ldns"]) == 60 and not exact["truncated"]


@pytest.mark.parametrize("limit", ["0", "-1", "ten", str(proximity.MAX_LDNS_LIMIT + 1)])
def test_a_bad_limit_is_a_clear_400(tmp_path: Path, limit: str) -> None:
    node = node_with_paths(tmp_path, 1)
    with pytest.raises(ApiError) as raised:
        proximity.ldns_table(node, {"limit": limit})
    assert raised.value.code == 400 and "limit must be" in raised.value.message
