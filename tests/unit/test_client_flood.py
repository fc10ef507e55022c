"""What a flood of DNS clients leaves in a sync group: bounded, and the same on every member.

Three nodes in one process, replicating over real TLS and the real protocol (see
tests/support/cluster.py), answer queries each from a new source address with a new EDNS
client subnet (every resolver trusted: the worst case), IPv4 /24s and IPv6 /56s. Each
answer writes a persistence record and asks for a probe of its new LDNS. The group keeps
`persistence.max_records` persistence records, the same ones on every member, and files
no more probe requests than its nodes can probe; memory and snapshots stop growing; the
digests agree, also after members that were apart during the flood meet again.
"""

from __future__ import annotations

import gc
import heapq
import random
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from gtmcluster.config.load import load
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.node import Node
from gtmcluster.proximity.budget import queue_limit
from gtmcluster.state.record import Record, Version
from gtmcluster.state.snapshotter import Snapshotter
from tests.support import configs
from tests.support.cluster import MemoryCluster
from tests.support.ecsquery import ecs_query
from tests.support.inline import InlineThreads

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

NAMES = ["n1", "n2", "n3"]
WIDEIP = "gslb.example.test"
MAX_RECORDS = 100
PROBES_PER_SECOND = 2


class FloodGroup:
    """Three nodes on one clock, each with its fast path and its snapshot writer."""

    def __init__(self, directory: Path):
        raw = configs.base()
        configs.add_member(raw, "n2", "DC2", "127.0.0.2")
        configs.add_member(raw, "n3", "DC3", "127.0.0.3")
        raw["pools"]["p"]["load_balancing"] = {"preferred": "rtt", "alternate": "topology"}
        raw["wideips"][WIDEIP]["persistence"] = {"ttl": 3600, "ipv4_prefix": 24, "ipv6_prefix": 56}
        raw["persistence"] = {"max_records": MAX_RECORDS}
        raw["dns_server"]["ecs_trusted"] = ["0.0.0.0/0", "::/0"]
        raw["prober"]["max_per_second"] = PROBES_PER_SECOND
        config = load(configs.write(directory / "config", raw))
        self.cluster = MemoryCluster(NAMES, directory / "certs")
        self.nodes: dict[str, Node] = {}
        self.fast: dict[str, FastPath] = {}
        self.snapshots: dict[str, Snapshotter] = {}
        #: the newest MAX_RECORDS (version, key) of the persistence records nodes wrote
        #: themselves (a heap: the test's own memory stays bounded too), and how many
        self.newest: list[tuple[Version, str]] = []
        self.written = 0
        threads = self.threads = InlineThreads()
        for name in NAMES:
            node = Node(config, name, clock=self.cluster.clock.seconds, rng=random.Random(name))
            node.ready = True
            self.cluster.add(name, node.store)
            self.nodes[name] = node
            self.fast[name] = FastPath(node.responder)
            self.snapshots[name] = Snapshotter(
                node.store, directory / name, threads, lambda: 1_700_000_000.0 + self.cluster.clock.seconds()
            )
            node.store.subscribe(lambda r, n=name: self._heard(n, r))  # type: ignore[misc]
        self.links = {(a, b): self.cluster.connect(a, b) for a, b in (("n1", "n2"), ("n2", "n3"), ("n1", "n3"))}

    def _heard(self, name: str, record: Record) -> None:
        """Every query's client is new: each key is written once, so the newest version of
        each key is its only one."""
        if record.key.startswith("persist/") and record.origin == name and record.live(self.cluster.clock.seconds()):
            self.written += 1
            entry = (record.version, record.key)
            if len(self.newest) < MAX_RECORDS:
                heapq.heappush(self.newest, entry)
            else:
                heapq.heappushpop(self.newest, entry)

    def flood(self, start: int, count: int, on: tuple[str, ...] = tuple(NAMES)) -> None:
        """*count* queries, each from a new source with a new client subnet, 1 ms apart,
        spread over the nodes *on*; replication runs every 20 queries, the snapshot
        writers every 500."""
        for i in range(start, start + count):
            if i % 4 == 3:
                subnet = f"2001:db8:{i >> 8:x}:{(i & 255) << 8:x}::/56"
            else:
                subnet = f"{10 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}.0/24"
            source = f"198.18.{(i >> 8) & 255}.{i & 255}" if i < 65536 else f"198.19.{(i >> 8) & 255}.{i & 255}"
            name = on[i % len(on)]
            reply = self.fast[name].handle(ecs_query(i, WIDEIP, subnet), source)
            assert reply is not None
            self.cluster.clock.advance(0.001)
            if i % 20 == 19:
                self.cluster.settle()
            if i % 500 == 499:
                self.save()
        self.cluster.settle()

    def save(self) -> None:
        saving = [snaps.save() for snaps in self.snapshots.values()]
        while not all(d.called for d in saving):
            self.threads.clock.advance(0)  # (the rows of a big save are made over turns)

    def reconcile(self) -> None:
        for replicator in self.cluster.replicators.values():
            replicator.anti_entropy.reconcile_all()
        self.cluster.settle()

    def persisted(self, name: str) -> dict[str, Version]:
        return {r.key: r.version for r in self.nodes[name].store.all_records() if r.key.startswith("persist/")}

    def snapshot_rows(self, name: str) -> dict[str, int]:
        """Rows of each kind in *name*'s snapshot file."""
        import sqlite3

        db = sqlite3.connect(self.snapshots[name].path)
        try:
            rows = db.execute("SELECT key FROM records").fetchall()
        finally:
            db.close()
        kinds: dict[str, int] = {}
        for (key,) in rows:
            kind = key.partition("/")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        return kinds

    def snapshot_bytes(self) -> int:
        return sum(snaps.path.stat().st_size for snaps in self.snapshots.values())

    def top(self) -> dict[str, Version]:
        """The bound's rule applied to everything written: the newest MAX_RECORDS."""
        return {key: version for version, key in self.newest}


@pytest.fixture
def group(tmp_path: Path) -> Iterator[FloodGroup]:
    yield FloodGroup(tmp_path)


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_a_flood_of_client_subnets_stays_bounded_and_the_group_converges(group: FloodGroup) -> None:
    tracemalloc.start()
    try:
        group.flood(0, 1_000)
        group.reconcile()
        group.save()
        memory, size = traced(), group.snapshot_bytes()
        group.flood(1_000, 2_000)
        group.reconcile()
        group.save()
        grown, size_after = traced() - memory, group.snapshot_bytes()
    finally:
        tracemalloc.stop()
    assert group.written == 3_000  # every query wrote a record somewhere
    expected = group.top()
    for name, node in group.nodes.items():
        assert group.persisted(name) == expected, name
        bound = node.store.bounds()["persist"]
        assert bound.limit == MAX_RECORDS and bound.evicted + bound.refused >= 3_000 - MAX_RECORDS
        # probe requests: at most what a node files (its burst, then max_per_second) per node
        probes = node.store.kinds().get("probe", 0)
        assert probes <= len(NAMES) * (queue_limit(node.config.prober) + PROBES_PER_SECOND * 10), probes
        assert node.probe_budget.unfiled > 0
        rows = group.snapshot_rows(name)
        assert rows["persist"] == MAX_RECORDS and rows.get("probe", 0) == probes
    assert group.cluster.converged()
    # 2,000 more records held on each of three nodes would be ~1.8 MB, and ~1.2 MB of snapshots
    assert grown < 250_000, grown
    # (rows are bounded exactly, above; the files reuse the pages of deleted rows, at some
    # fragmentation: unbounded they grow 2.5 times here)
    assert size_after <= size * 1.4, (size, size_after)


def test_members_apart_during_a_flood_converge_on_the_same_records_when_they_meet(group: FloodGroup) -> None:
    """n3 is cut off while all three are flooded; when it meets the others again,
    anti-entropy offers each side what it evicted or never saw: each keeps what ranks
    within the bound and refuses the rest, and all end with the same records (the newest
    MAX_RECORDS of everything written) and equal digests, which stay equal."""
    group.flood(0, 300)
    for a, b in (("n2", "n3"), ("n1", "n3")):
        group.links[(a, b)].cut()
    for start in range(300, 1_500, 200):  # both sides flooded at the same time
        group.flood(start, 100, on=("n1", "n2"))
        group.flood(start + 100, 100, on=("n3",))
    assert not group.cluster.converged()
    group.cluster.connect("n3", "n1")
    group.cluster.connect("n2", "n3")
    group.reconcile()
    assert group.cluster.converged()
    expected = group.top()
    for name in NAMES:
        assert group.persisted(name) == expected, name
    digests = group.cluster.digests()
    group.reconcile()  # again: nothing moves, nothing is pulled back
    assert group.cluster.digests() == digests
    refused = sum(node.store.bounds()["persist"].refused for node in group.nodes.values())
    assert refused > 0  # what one side had evicted, offered back, was refused


def test_paths_are_bounded_per_data_center_and_a_reload_moves_the_bounds(tmp_path: Path) -> None:
    """prober.max_ldns bounds the path records at that many per data center with a member
    (each writes its own path to an LDNS); a reload with smaller bounds evicts at once, the
    oldest first, and the counters carry on."""
    raw = configs.base()
    configs.add_member(raw, "n2", "DC2", "127.0.0.2")
    raw["prober"]["max_ldns"] = 10
    raw["persistence"] = {"max_records": 50}
    path = configs.write(tmp_path, raw)
    clock = [1000.0]
    node = Node(load(path), "n1", clock=lambda: clock[0])
    bounds = {kind: b.limit for kind, b in node.store.bounds().items()}
    # (client proximity's kinds are bounded by rum's defaults even with rum off: client probes
    # write client figures, 100,000 subnets from each of the 3 data centers)
    assert bounds == {"persist": 50, "path": 20, "client": 300_000, "pop": 10_000, "rumid": 200_000, "cprobe": 100_000}
    for i in range(30):
        clock[0] += 1
        for dc in ("DC1", "DC2"):
            node.store.put(f"path/198.51.100.{i}/{dc}", {"rtt": i}, ttl=3600)
    held = sorted(r.key for r in node.store.scan("path/"))
    assert held == sorted(f"path/198.51.100.{i}/{dc}" for i in range(20, 30) for dc in ("DC1", "DC2"))
    raw["prober"]["max_ldns"] = 3
    node.reload(load(configs.write(tmp_path, raw)))
    held = sorted(r.key for r in node.store.scan("path/"))
    assert held == sorted(f"path/198.51.100.{i}/{dc}" for i in range(27, 30) for dc in ("DC1", "DC2"))
    assert node.store.bounds()["path"].evicted == 60 - 6
