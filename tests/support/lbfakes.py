"""Small recording fakes and builders for the load-balancing tests.

A fake clock, availability that tests switch by virtual server name, a persistence view that
never has a record, a minimal candidate, a context builder, and helpers that turn a config
dict from `tests.support.configs` into a loaded `Config` and its wide IPs.
"""

from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gtmcluster.config.load import load
from gtmcluster.config.model import Config, Prefixes, VirtualServer, WideIP
from gtmcluster.lb.context import Client, Context, Rotations
from gtmcluster.lb.methods import Slot
from gtmcluster.state.admin import AdminState
from gtmcluster.state.persistence import PersistKey, PersistRecord
from gtmcluster.topology.records import Topology
from tests.support import configs

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class FakeClock:
    """A clock tests move by hand; call it for the current time in seconds."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeAvailability:
    """Every virtual server is up except those named in `down` (which tests may change);
    those in `draining` keep only persisted clients; `weights` sets slow-start shares."""

    down: set[str] = field(default_factory=set)
    draining: set[str] = field(default_factory=set)
    weights: dict[str, float] = field(default_factory=dict)
    #: admin states of pools, pool members, wide IPs by "<level>/<name>"
    admin: dict[str, AdminState] = field(default_factory=dict)

    def vs_up(self, vs: VirtualServer) -> bool:
        return vs.name not in self.down and vs.name not in self.draining

    def vs_serving(self, vs: VirtualServer) -> bool:
        return vs.name not in self.down

    def weight(self, vs: VirtualServer, now: float) -> float:
        return self.weights.get(vs.name, 1.0)

    def admin_states(self) -> dict[str, AdminState]:
        return self.admin


class NoPersistence:
    """A persistence view that never holds a record."""

    def get(self, key: PersistKey, now: float) -> PersistRecord | None:
        return None


@dataclass(frozen=True)
class Cand:
    """A load-balancing candidate with just what methods read."""

    name: str
    ratio: int = 1
    topology_mask: frozenset[int] = frozenset()
    datacenters: frozenset[str] = frozenset()
    members: tuple[VirtualServer, ...] = ()


def cands(*names: str, ratio: int = 1) -> list[Cand]:
    return [Cand(n, ratio) for n in names]


def addr(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


def client(text: str) -> Client:
    """A client identified by its LDNS address alone (no ECS)."""
    return Client.from_ldns(addr(text))


def ecs_client(network: str, ldns: str) -> Client:
    """A client that sent an EDNS client subnet *network* through the LDNS *ldns*."""
    net = ipaddress.ip_network(network)
    return Client(net.network_address, net.prefixlen, addr(ldns), True)


def context(
    who: Client | str = "192.0.2.1",
    topology: Topology | None = None,
    rng: random.Random | None = None,
    rotations: Rotations | None = None,
    now: float = 0.0,
) -> Context:
    """A decision context with everything up and no persistence."""
    return Context(
        client(who) if isinstance(who, str) else who,
        now,
        rng or random.Random(0),
        rotations or Rotations(),
        FakeAvailability(),
        NoPersistence(),
        topology or Topology.build([]),
    )


def slot(name: str = "test", ipv4: int = 32, ipv6: int = 128) -> Slot:
    return Slot(("test", name), Prefixes(ipv4, ipv6))


def load_config(tmp_path: Path, config: dict[str, Any]) -> Config:
    """Write *config* under *tmp_path* and load it the way the node does."""
    return load(configs.write(tmp_path, config))


def wideip(config: Config, name: str = "gslb.example.test") -> WideIP:
    for w in config.wideips.values():
        if w.name == name:
            return w
    raise KeyError(name)
