"""The record store's keys (`state.keys`): every constructor makes a key of the kind the
schema checks, in the shape it checks, and each parser gives back what was put in."""

from __future__ import annotations

import pytest

from gtmcluster.state import admin, keys, schema
from gtmcluster.state.persistence import PersistKey


def key_problem(key: str) -> str | None:
    """What the schema says is wrong with *key* (as a tombstone, so only the key counts)."""
    found = schema.problem(key, None, "n1", 60.0)
    return None if found is None else found.text


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        (keys.observation("vs", "www1", "n1"), "obs"),
        (keys.observation("link", "cnc", "n1"), "obs"),
        (keys.admin("vs", "www1"), "admin"),
        (keys.admin("member", "pool1/www1"), "admin"),
        (keys.admin("wideip", "www.example.com"), "admin"),
        (keys.held("www1"), "held"),
        (keys.load_figures("www1"), "metrics"),
        (keys.traffic("cnc"), "traffic"),
        (keys.path("192.0.2.1", "DC1"), "path"),
        (keys.path("2001:db8::1", "DC1"), "path"),
        (keys.probe_request("192.0.2.1"), "probe"),
        (keys.persist(PersistKey("www.example.com", 1, "192.0.2.0/24")), "persist"),
        (keys.persist(PersistKey("www.example.com", 28, "2001:db8::/56", "198.51.100.0/24")), "persist"),
    ],
)
def test_each_constructor_makes_a_key_the_schema_takes(key: str, kind: str) -> None:
    assert key.partition("/")[0] == kind
    assert key_problem(key) is None, key
    assert kind in schema.KINDS


def test_each_prefix_starts_its_keys() -> None:
    assert keys.observation("vs", "a", "n").startswith((keys.OBS_VS, keys.OBS))
    assert keys.observation("link", "a", "n").startswith(keys.OBS_LINK)
    assert keys.observations("vs", "a") == "obs/vs/a/"
    assert keys.observation("vs", "a", "n").startswith(keys.observations("vs", "a"))
    assert keys.admin("pool", "p").startswith(keys.ADMIN)
    assert keys.held("a").startswith(keys.HELD_VS)
    assert keys.load_figures("a").startswith(keys.METRICS_VS)
    assert keys.traffic("l").startswith(keys.TRAFFIC_LINK)
    assert keys.path("192.0.2.1", "DC1").startswith(keys.PATH)
    assert keys.probe_request("192.0.2.1").startswith(keys.PROBE)
    assert keys.persist(PersistKey("w", 1, "192.0.2.0/24")).startswith(keys.PERSIST)


def test_parsers_give_back_the_parts() -> None:
    assert keys.observed(keys.observation("vs", "www1", "n1")) == ("vs", "www1")
    assert keys.observed(keys.observation("link", "cnc", "n1")) == ("link", "cnc")
    assert keys.observed("obs/vs/www1") is None  # no observer
    assert keys.observed(keys.held("www1")) is None
    assert keys.admin_parts(keys.admin("member", "pool1/www1")) == ("member", "pool1/www1")
    assert admin.parse_key(keys.admin("member", "pool1/www1")) == ("member", "pool1/www1")
    assert admin.parse_key(keys.admin("planet", "x")) is None  # not a level
    assert keys.admin_parts("admin/vs/") is None
    assert keys.held_name(keys.held("www1")) == "www1"
    assert keys.held_name(keys.admin("vs", "www1")) is None
    assert keys.traffic_link(keys.traffic("cnc")) == "cnc"
    assert keys.traffic_link(keys.load_figures("cnc")) is None
    assert keys.path_parts(keys.path("2001:db8::1", "DC1")) == ("2001:db8::1", "DC1")
    assert keys.path_parts(keys.probe_request("192.0.2.1")) is None
