"""A config with monitors, links, dependencies and admin settings, for health tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.state.record import Record, Version
from gtmcluster.state.store import Store
from tests.support import configs


def health_config(**vs_extra: dict[str, Any]) -> dict[str, Any]:
    """configs.base() plus: monitor `web` (http) on vs1-vs3, link `l1` (DC1, two targets)
    under vs1, and *vs_extra* merged into the named virtual servers."""
    config = configs.base()
    configs.add_member(config, "n2", "DC2", "127.0.0.2")
    configs.add_member(config, "n3", "DC3", "127.0.0.3")
    config["monitors"] = {
        "web": {"type": "http", "interval": 5, "timeout": 1, "up_after": 2, "down_after": 3},
        "ping": {"type": "icmp", "interval": 2, "timeout": 1, "up_after": 1, "down_after": 2},
    }
    config["links"] = {"l1": {"datacenter": "DC1", "targets": ["192.0.2.1", "192.0.2.2"], "monitor": "ping"}}
    for name in ("vs1", "vs2", "vs3"):
        config["virtual_servers"][name]["monitor"] = "web"
    config["virtual_servers"]["vs1"]["link"] = "l1"
    for name, extra in vs_extra.items():
        config["virtual_servers"][name].update(copy.deepcopy(extra))
    return config


def load_config(tmp_path: Path, config: dict[str, Any]) -> Config:
    return load(configs.write(tmp_path, config))


def observe(store: Store, kind: str, name: str, observer: str, up: bool, reason: str = "", ttl: float = 90) -> None:
    """Record *observer*'s verdict on a virtual server or link, as its node would."""
    key = f"obs/{kind}/{name}/{observer}"
    value = {"up": up, "reason": reason or ("fine" if up else "broken")}
    if observer == store.origin:
        store.put(key, value, ttl=ttl)
    else:
        existing = store.get(key)
        logical = existing.version.logical + 1 if existing else 0
        store.merge(Record(key, value, Version(int(store.clock() * 1000), logical, observer), ttl, store.clock()))
