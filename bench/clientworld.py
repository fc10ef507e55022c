"""The world of bench/clientsources.py (issue 36): a node's config with and without client
sources, and its store filled as nodes fill it: LDNS paths, client subnets' figures, LDNS
populations; and how much memory what was added holds (`traced`, `deep_size`)."""

from __future__ import annotations

import gc
import ipaddress
import random
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.node import Node
from gtmcluster.proximity.clients import merge_sample, population_after
from gtmcluster.proximity.table import updated
from gtmcluster.state import keys
from gtmcluster.state.store import Store

DATACENTERS = ("DC1", "DC2", "DC3")
NODES = ("gtm-1", "gtm-2", "gtm-3")
WIDEIP = "www.bench.test"
PATH_TTL = 2419200.0
SAMPLE_TTL = 604800.0
MIN_SAMPLES = 10
#: the LDNSes (resolvers) are in 11.0.0.0/8, trusted for ECS; measured clients in 20.0.0.0/7,
#: unmeasured ones in 30.0.0.0/8
TRUSTED = "11.0.0.0/8"
MEASURED = 0x14000000
UNMEASURED = 0x1E000000
ZONE = """\
$TTL 3600
@    IN SOA ns1.bench.test. hostmaster.bench.test. 1 3600 600 86400 300
     IN NS  ns1
ns1  IN A   192.0.2.1
"""


def config_yaml(zone_file: Path, rum: bool) -> str:
    members = "\n".join(
        f"    - {{name: {n}, datacenter: {dc}, peer: 127.0.8.{i}:4353, dns: [127.0.8.{i}:5353], api: 127.0.8.{i}:8053}}"
        for i, (n, dc) in enumerate(zip(NODES, DATACENTERS, strict=True), 1)
    )
    servers = "\n".join(f"  vs{i}: {{address: 10.0.{i}.1, datacenter: {dc}}}" for i, dc in enumerate(DATACENTERS, 1))
    targets = ", ".join(f"{dc}: https://{dc.lower()}.bench.test/o" for dc in DATACENTERS)
    proximity = (
        f"rum: {{targets: {{{targets}}}, min_samples: {MIN_SAMPLES}, sample_ttl: {int(SAMPLE_TTL)}}}\n"
        if rum
        else "proximity: {sources: [ldns]}\n"
    )
    return f"""\
sync_group:
  name: bench
  members:
{members}
datacenters: [{", ".join(DATACENTERS)}]
dns_server: {{ecs_trusted: [{TRUSTED}]}}
virtual_servers:
{servers}
topology:
  - {{ldns: any, server: datacenter DC3, score: 1}}
pools:
  near:
    members: [vs1, vs2, vs3]
    load_balancing: {{preferred: rtt, alternate: topology}}
wideips:
  {WIDEIP}:
    pools: [near]
zones:
  - {{origin: bench.test, file: {zone_file}}}
{proximity}"""


def configs(directory: Path) -> tuple[Config, Config]:
    """The LDNS-only config and the one with client sources (``rum:`` on)."""
    zone = directory / "bench.test.zone"
    zone.write_text(ZONE)
    out = []
    for rum in (False, True):
        path = directory / ("rum.yaml" if rum else "ldns.yaml")
        path.write_text(config_yaml(zone, rum))
        out.append(load(path))
    return out[0], out[1]


class Fixed:
    """A clock that stands still but for `tick` (nothing ages or expires while measuring;
    this node's writes get versions a few to a millisecond)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += 0.0002


def ldns_address(i: int) -> str:
    return str(ipaddress.IPv4Address(0x0B000000 + i * 61))


def measured_subnet(i: int) -> str:
    return str(ipaddress.IPv4Network((MEASURED + i * 256, 24)))


def unmeasured_subnet(i: int) -> str:
    return str(ipaddress.IPv4Network((UNMEASURED + i * 256, 24)))


# --- filling the store ---


def add_paths(node: Node, ldns: range, rng: random.Random) -> None:
    store, clock = node.store, node.clock
    assert isinstance(clock, Fixed)
    for i in ldns:
        address = ldns_address(i)
        near = rng.randrange(3)  # (the LDNS is near one data center: 2-40 ms, 60-250 ms from the others)
        for n, (origin, dc) in enumerate(zip(NODES, DATACENTERS, strict=True)):
            rtt = rng.randrange(2_000, 40_000) if n == near else rng.randrange(60_000, 250_000)
            clock.tick()
            path = updated(None, True, rtt, rng.randrange(4, 24), "dns_dot", origin, address, dc)
            store.put(keys.path(address, dc), path.value(), ttl=PATH_TTL)


def client_value(rng: random.Random, base: int, by: str) -> dict[str, Any]:
    value: dict[str, Any] | None = None
    for _ in range(rng.randrange(2, 17)):
        value = merge_sample(value, base + rng.randrange(0, 5_000), "rum", by)
    assert value is not None
    return value


def add_clients(node: Node, subnets: range, rng: random.Random) -> None:
    """Client subnet i is near data center i % 3 (5-45 ms) and far from the others (60-250 ms)."""
    store, clock = node.store, node.clock
    assert isinstance(clock, Fixed)
    for i in subnets:
        subnet = measured_subnet(i)
        by = NODES[i % 3]
        for n, dc in enumerate(DATACENTERS):
            base = rng.randrange(5_000, 40_000) if n == i % 3 else rng.randrange(60_000, 250_000)
            clock.tick()
            store.put(keys.client(subnet, dc), client_value(rng, base, by), ttl=SAMPLE_TTL)


def figures_of(store: Store) -> Callable[[str], dict[str, int]]:
    """`population_after`'s figures: a subnet's client records held, as the join reads them."""

    def figures(name: str) -> dict[str, int]:
        out = {}
        for dc in DATACENTERS:
            record = store.get(keys.client(keys.subnet_of_text(name), dc))
            if record is not None:
                out[dc] = int(record.value["rtt"])
        return out

    return figures


def add_populations(node: Node, ldns: range, subnets: int, rng: random.Random) -> None:
    store, clock = node.store, node.clock
    assert isinstance(clock, Fixed)
    figures = figures_of(store)
    for i in ldns:
        # (its clients mostly near one data center, as a resolver's are: i % 3's)
        tied = [3 * rng.randrange(subnets // 3) + i % 3 for _ in range(rng.randrange(10, 33))]
        counts = {keys.subnet_text(measured_subnet(j)): rng.randrange(1, 4) for j in tied[:-1]}
        value = population_after({"subnets": counts}, ipaddress.IPv4Network(measured_subnet(tied[-1])), figures)
        clock.tick()
        store.put(keys.population(ldns_address(i)), value, ttl=SAMPLE_TTL)


def traced(fill: Callable[[], object]) -> int:
    """Bytes alive after *fill* less before (tracemalloc), garbage collected both times."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fill()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def deep_size(value: Any, seen: set[int] | None = None) -> int:
    """Bytes of *value* and what it holds (each object once)."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        size += sum(deep_size(v, seen) for v in value)
    elif hasattr(value, "__slots__"):
        size += sum(deep_size(getattr(value, s), seen) for s in value.__slots__ if hasattr(value, s))
    return size


# --- answers ---
