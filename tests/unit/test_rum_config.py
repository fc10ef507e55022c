"""The ``rum`` and ``proximity`` sections and a member's ``rum`` listener: read with their
defaults, and each mistake one problem naming the file, the key path and what is wrong."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.config import rum
from gtmcluster.config.load import load
from tests.support import configs
from tests.unit.test_config_errors import assert_form, find, problems_of

TARGETS = {"DC1": "https://dc1.example.net/rum/v1/object", "DC2": "http://192.0.2.20/o.gif"}


def _rum(**settings: Any) -> Any:
    def apply(config: dict[str, Any]) -> None:
        config["rum"] = {"targets": TARGETS, **settings}

    return apply


def test_rum_is_read_with_its_defaults_and_turns_client_sources_on(tmp_path: Path) -> None:
    config = configs.base()
    tls = {"cert": "r.pem", "key": "r.key"}
    config["rum"] = {
        "targets": TARGETS,
        "allow": ["10.0.0.0/8"],
        "min_samples": 3,
        "tls": tls,
        "trusted_proxies": ["192.0.2.8/32"],
    }
    config["sync_group"]["members"][0]["rum"] = "127.0.0.1:8443"
    loaded = load(configs.write(tmp_path, config))
    assert loaded.rum is not None
    assert dict(loaded.rum.targets) == TARGETS
    assert loaded.rum.allow == (ipaddress.ip_network("10.0.0.0/8"),)
    assert (loaded.rum.min_samples, loaded.rum.max_subnets, loaded.rum.id_ttl) == (3, 100_000, 120)
    assert loaded.rum.tls == rum.TLSPair(tmp_path / "r.pem", tmp_path / "r.key")
    assert loaded.rum.trusted_proxies == (ipaddress.ip_network("192.0.2.8/32"),)
    assert loaded.proximity.sources == ("client", "population", "ldns")
    member = loaded.sync_group.members[0]
    assert member.rum is not None and (str(member.rum.host), member.rum.port) == ("127.0.0.1", 8443)


def test_without_rum_the_ldns_alone_decides(tmp_path: Path) -> None:
    loaded = load(configs.write(tmp_path, configs.base()))
    assert loaded.rum is None and loaded.sync_group.members[0].rum is None
    assert loaded.proximity == rum.Proximity(("ldns",))


def test_client_probing_alone_turns_client_sources_on_and_an_order_may_be_set(tmp_path: Path) -> None:
    config = configs.base()
    config["proximity"] = {"client_probe": {"enabled": True, "subnets_per_interval": 5}}
    assert load(configs.write(tmp_path, config)).proximity == rum.Proximity(rum.SOURCES, rum.ClientProbe(True, 5, 60.0))
    config["proximity"] = {"sources": ["client", "ldns"]}
    assert load(configs.write(tmp_path, config)).proximity.sources == ("client", "ldns")


def _proximity(**settings: Any) -> Any:
    def apply(config: dict[str, Any]) -> None:
        config["proximity"] = settings

    return apply


def _member_rum(value: Any) -> Any:
    def apply(config: dict[str, Any]) -> None:
        config["sync_group"]["members"][0]["rum"] = value

    return apply


@pytest.mark.parametrize(
    ("mutation", "path", "fragment"),
    [
        (_rum(targets={"DC9": "https://x.example/"}), "rum.targets.DC9", "is not a data center"),
        (_rum(targets={"DC1": "ftp://x.example/"}), "rum.targets.DC1", "is not an http:// or https:// URL"),
        (_rum(targets={}), "rum.targets", "names no data center"),
        (_rum(allow=["8.8.8.0/24"]), "rum.allow[0]", "holds no special-purpose address"),
        (_rum(min_samples=0), "rum.min_samples", "out of range"),
        (_rum(max_body=10_000_000), "rum.max_body", "out of range"),
        (_rum(id_ttl=86400), "rum.id_ttl", "out of range"),
        (_rum(max_subnets=10_000_000), "rum.max_subnets", "out of range"),
        (_rum(tls={"cert": "r.pem"}), "rum.tls.key", "key file is needed"),
        (_rum(zone=5), "rum.zone", ""),
        (_rum(colour="blue"), "rum.colour", "unknown key"),
        (_rum(trusted_proxies=["proxy.example"]), "rum.trusted_proxies[0]", ""),
        (_proximity(sources=["client", "gps"]), "proximity.sources[1]", "'gps'"),
        (_proximity(sources=["ldns", "ldns"]), "proximity.sources[1]", "listed twice"),
        (_proximity(sources=[]), "proximity.sources", "names no source"),
        (
            _proximity(client_probe={"subnets_per_interval": 0}),
            "proximity.client_probe.subnets_per_interval",
            "out of range",
        ),
        (_member_rum("not an address"), "sync_group.members[0].rum", ""),
        (_member_rum("127.0.0.1:8443"), "sync_group.members[0].rum", "no rum section"),
    ],
)
def test_a_bad_rum_setting_is_one_clear_problem(tmp_path: Path, mutation: Any, path: str, fragment: str) -> None:
    file, problems = problems_of(tmp_path, mutation)
    assert_form(find(problems, path, fragment), file, path)
