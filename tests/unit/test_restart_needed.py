"""Which config changes a running node refuses to reload (they need a restart), and which
it takes: the sockets and group identity are fixed at start; the rest (TLS file paths
included: a reload loads and checks the files) is not."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from gtmcluster.config.changes import restart_needed
from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from tests.support import configs


def two_members() -> dict[str, Any]:
    raw = configs.base()
    configs.add_member(raw, "n2", "DC2", "127.0.0.2")
    raw["sync_group"]["tls"] = {"ca": "certs/ca.pem", "cert": "certs/{node}.pem", "key": "certs/{node}.key"}
    return raw


def loaded(tmp_path: Path, raw: dict[str, Any], name: str) -> Config:
    return load(configs.write(tmp_path, raw, name=name))


def problems(tmp_path: Path, change: Any) -> list[str]:
    raw = two_members()
    changed = copy.deepcopy(raw)
    change(changed)
    return restart_needed(loaded(tmp_path, raw, "old.yaml"), loaded(tmp_path, changed, "new.yaml"), "n1")


def test_wide_ip_pool_and_timer_changes_reload(tmp_path: Path) -> None:
    def change(raw: dict[str, Any]) -> None:
        raw["pools"]["p"]["ttl"] = 5
        raw["pools"]["p"]["load_balancing"] = {"preferred": "round_robin"}
        raw["virtual_servers"]["vs4"] = {"address": "10.0.4.1", "datacenter": "DC3"}
        raw["sync_group"]["members"][1]["api"] = "127.0.0.2:9053"  # another member's sockets
        raw["sync_group"]["members"].append(
            {"name": "n3", "datacenter": "DC3", "peer": "127.0.0.3:4353", "dns": ["127.0.0.3:5353"]}
        )

    assert problems(tmp_path, change) == []


def test_own_sockets_need_a_restart(tmp_path: Path) -> None:
    def change(raw: dict[str, Any]) -> None:
        me = raw["sync_group"]["members"][0]
        me["dns"] = ["127.0.0.1:5354"]
        me["peer"] = "127.0.0.1:4354"
        me["api"] = "127.0.0.1:8054"
        me["probe_source"] = "127.0.0.1"

    found = problems(tmp_path, change)
    assert [p.split("'s ")[1].split(" ")[0] for p in found] == ["dns", "peer", "api", "probe_source"]
    assert all("restart the node" in p for p in found)


def test_group_identity_needs_a_restart_but_new_tls_paths_do_not(tmp_path: Path) -> None:
    def rename(raw: dict[str, Any]) -> None:
        raw["sync_group"]["name"] = "other"

    def new_tls(raw: dict[str, Any]) -> None:
        raw["sync_group"]["tls"]["cert"] = "elsewhere/{node}.pem"

    def alone(raw: dict[str, Any]) -> None:
        del raw["sync_group"]["members"][1]

    def removed(raw: dict[str, Any]) -> None:
        raw["sync_group"]["members"][0]["name"] = "n9"

    assert problems(tmp_path, rename) == ["the sync group's name changed: restart every node"]
    assert problems(tmp_path, new_tls) == []  # the reload loads and checks the files instead
    assert "between one member and several" in problems(tmp_path, alone)[0]
    assert problems(tmp_path, removed) == ["n1 is no longer a member of the sync group: stop it instead"]


def test_a_new_log_dir_needs_a_restart(tmp_path: Path) -> None:
    """The node's own log file is opened at start (gtmcluster.nodelog)."""

    def change(raw: dict[str, Any]) -> None:
        raw["log_dir"] = "elsewhere"

    assert problems(tmp_path, change) == ["log_dir changed: restart the node to write its log there"]
