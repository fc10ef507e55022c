"""The registry of monitor kinds: the config's side (`config.monitorkinds`) and the
probe's (`probe.kinds`) name the same kinds, each kind's settings read from a config are
what its probe runs, and the facts a kind declares are the ones the config and the node use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gtmcluster.config.health import MONITOR_TYPES
from gtmcluster.config.load import load
from gtmcluster.config.monitoring import Monitor
from gtmcluster.config.monitorkinds import KINDS
from gtmcluster.probe.kinds import PROBES, make_check, needs_pinger
from gtmcluster.tap import uses_icmp
from tests.support import configs
from tests.support.probeservers import UdpMemoryReactor

#: the least settings of each kind (beyond ``type``)
LEAST: dict[str, dict[str, Any]] = {
    "tcp": {},
    "http": {},
    "https": {},
    "udp": {"send": "ping"},
    "dns": {"query_name": "www.example.com"},
    "icmp": {},
    "metrics": {},
}


def loaded(tmp_path: Path, kind: str) -> Monitor:
    """A config with one virtual server checked by a monitor of *kind*, loaded; its monitor."""
    config = configs.base()
    config["monitors"] = {"m": {"type": kind, **LEAST[kind]}}
    config["virtual_servers"]["x"] = {"address": "10.9.0.1", "port": 80, "datacenter": "DC1", "monitor": "m"}
    return load(configs.write(tmp_path, config)).virtual_servers["x"].monitors[0]


def test_the_config_and_the_probe_know_the_same_kinds() -> None:
    """A kind declared on one side only would be refused by the config or fail every check."""
    assert list(KINDS) == list(PROBES) == list(MONITOR_TYPES) == list(LEAST)
    assert all(name == kind.name for name, kind in KINDS.items())
    assert all(name == kind.name for name, kind in PROBES.items())


@pytest.mark.parametrize("kind", list(LEAST))
def test_each_kind_read_from_a_config_gets_a_check(tmp_path: Path, kind: str) -> None:
    """The settings a kind's reader makes are those its probe runs (no TypeError)."""
    monitor = loaded(tmp_path, kind)
    assert monitor.type == kind
    assert callable(make_check(monitor, UdpMemoryReactor()))


def test_a_check_for_settings_of_another_kind_is_refused(tmp_path: Path) -> None:
    """The probe looks the kind up by its type and insists on that kind's settings."""
    tcp = loaded(tmp_path, "tcp")
    with pytest.raises(TypeError, match="no udp check for TcpCheck"):
        make_check(Monitor("m", "udp", 5, 2, 2, 3, tcp.check), UdpMemoryReactor())
    with pytest.raises(TypeError, match="no check for type 'smtp'"):
        make_check(Monitor("m", "smtp", 5, 2, 2, 3, tcp.check), UdpMemoryReactor())


def test_only_icmp_needs_the_pinger_and_no_port(tmp_path: Path) -> None:
    """The facts each kind declares: icmp sends through the node's ICMP socket (so the node
    opens one) and checks no port (so a link target needs none)."""
    assert [name for name, kind in PROBES.items() if kind.uses_pinger] == ["icmp"]
    assert [name for name, kind in KINDS.items() if not kind.ported] == ["icmp"]
    assert needs_pinger([loaded(tmp_path, "tcp"), loaded(tmp_path, "icmp")])
    assert not needs_pinger([loaded(tmp_path, "tcp")])
    config = configs.base()
    config["monitors"] = {"ping": {"type": "icmp"}}
    config["links"] = {"up": {"datacenter": "DC1", "targets": ["192.0.2.1"], "monitor": "ping"}}
    assert uses_icmp(load(configs.write(tmp_path, config)))
