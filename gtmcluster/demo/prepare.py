"""The demo's files: a config derived from the sample, and the group's certificates.

Everything the demo writes goes under ``var/demo`` of the sample's base folder: the derived
config (the sample's with faster timers, certificates, state and logs under var/demo, and
each member probing from its own address), the CA and node certificates (kept between runs),
state and logs (emptied at the start of each run, so each run starts with nothing measured).
"""

from __future__ import annotations

import ipaddress
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.sync import certs

#: stand-in resolvers: address, description, and the delay (ms) of its answers to each data
#: center's GTM. The last one sits in no region (topology sends it to TEL) but is nearest
#: to CMCC, so RTT moves it.
RESOLVERS: tuple[tuple[str, str, dict[str, float]], ...] = (
    ("127.0.1.1", "a CNC resolver", {"CNC": 4, "TEL": 30, "CMCC": 45}),
    ("127.0.2.1", "a TEL resolver", {"CNC": 30, "TEL": 4, "CMCC": 35}),
    ("127.0.3.1", "a CMCC resolver", {"CNC": 40, "TEL": 35, "CMCC": 4}),
    ("127.0.4.1", "a resolver in no region, nearest to CMCC", {"CNC": 50, "TEL": 40, "CMCC": 8}),
)


@dataclass(frozen=True)
class DemoFiles:
    directory: Path
    config_path: Path
    config: Config


class DemoError(Exception):
    """The demo cannot run with this config; the message says why."""


def prepare(sample: Path) -> DemoFiles:
    """Write var/demo/cluster.yaml and the certificates (kept when already there)."""
    original = load(sample)
    base = original.base_dir
    directory = base / "var" / "demo"
    for member in original.sync_group.members:
        if not all(hp.host.is_loopback for hp in (member.peer, *member.dns)):
            raise DemoError(f"the demo runs loopback members; {member.name} is not on loopback")
    raw: dict[str, Any] = yaml.safe_load(sample.read_text(encoding="utf-8"))
    raw["base_dir"] = str(base)
    group = raw["sync_group"]
    group["tls"] = {
        "ca": "var/demo/certs/ca.pem",
        "cert": "var/demo/certs/{node}.pem",
        "key": "var/demo/certs/{node}.key",
    }
    group.update({"reconcile_interval": 5, "cold_start_wait": 3, "snapshot_interval": 5})
    for member, entry in zip(original.sync_group.members, group["members"], strict=True):
        entry["probe_source"] = str(member.peer.host)
    raw["state_dir"] = "var/demo/state/{node}"
    raw["log_dir"] = "var/demo/log"
    prober = raw.setdefault("prober", {})
    # the demo's resolvers live on loopback, which a prober leaves alone unless opened
    prober.update({"protocols": ["dns_dot", "udp"], "timeout": 0.5, "probe_interval": 30, "allow": ["127.0.0.0/8"]})
    directory.mkdir(parents=True, exist_ok=True)
    for fresh in ("state", "log"):  # each run starts with nothing measured and new logs
        shutil.rmtree(directory / fresh, ignore_errors=True)
    path = directory / "cluster.yaml"
    header = "# Written by `gtmcluster demo` from " + str(sample) + "; edits are overwritten.\n"
    path.write_text(header + yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    config = load(path)
    cert_dir = base / "var" / "demo" / "certs"
    if not (cert_dir / "ca.pem").exists():
        certs.init_ca(cert_dir)
    for member in config.sync_group.members:
        if not (cert_dir / f"{member.name}.pem").exists():
            certs.issue(cert_dir, member.name)
    return DemoFiles(directory, path, config)


def resolver_delays(config: Config) -> list[tuple[str, str, dict[str, float]]]:
    """For each stand-in resolver: its address, description, and delay by GTM address."""
    out = []
    for address, description, by_dc in RESOLVERS:
        delays = {str(m.probe_source or m.peer.host): by_dc.get(m.datacenter, 20.0) for m in config.sync_group.members}
        ipaddress.ip_address(address)
        out.append((address, description, delays))
    return out
