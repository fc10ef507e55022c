"""Scale benchmark: a full proximity table in one node: memory, answer speed, a fresh node's pull.

    .venv/bin/python bench/scale.py [--ldns 1000000] [--persist 100000] [--pull 1000000]
    .venv/bin/python bench/scale.py --ldns 100000 --persist 10000 --pull 100000   # quick

The targets (issue 7): a proximity table of 1,000,000 LDNS x 3 data centers plus 100,000
persistence records fits in under 1.5 GB of resident memory and does not slow answers by
more than 10%; a full state pull of 1,000,000 path records to a fresh node takes under 60 s.

1. Memory. A `Node` of a three-member group (data centers DC1, DC2, DC3; this node is in
   DC1) is filled the way a running node fills up: its own data center's paths and a third
   of the persistence records are written locally (as the prober and the answer path write
   them), the other data centers' paths and the rest of the persistence records arrive as
   sync batches (encoded and decoded by the sync codec, merged as the replicator merges).
   Path values are made by `proximity.table.updated`, as the prober makes them. Resident
   memory (VmRSS) is read before and after.
2. Answer speed. `Node.decide` for a wide IP whose pool is `preferred: rtt` over the three
   data centers, for random LDNSes of the table (every decision is made by rtt), first with
   an empty-ish table (`--small` LDNSes), then with the full one; and the same for a wide IP
   with persistence, for clients whose persistence record is held (a persistence hit).
   Then both again as whole answers: the query's bytes through the node's UDP fast path
   with no decision kept (each answer decided: the worst case; a kept decision does not
   read the table). The target is judged on answers; the decision alone is shown too.
   Also timed: the work the reactor does besides answers that could walk the store
   (health re-evaluation, an anti-entropy listing, the counts of /metrics), and a full
   garbage collection before and after the freeze the node makes (gtmcluster/runtime/heap.py).
3. Pull. Node A holds `--pull` path records (of three origins); a fresh node D with an empty
   store starts in another process (so each has a core, as two machines would) and connects
   to A over real mutual TLS with the real replicator; the time until D's state digest
   equals A's, and D's resident memory then.

Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sync import start_node, wait_for  # bench/sync.py: the three-node TLS machinery
from twisted.internet import defer, protocol, reactor, task

from gtmcluster.config.load import load
from gtmcluster.config.model import WideIP
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dnsdata.zone import TYPE_A
from gtmcluster.lb.context import Client
from gtmcluster.node import Node
from gtmcluster.proximity.table import PathInfo, updated
from gtmcluster.runtime import heap
from gtmcluster.state import keys, snapshot
from gtmcluster.state.persistence import PersistKey, PersistRecord
from gtmcluster.state.record import Record, Version, bucket_of
from gtmcluster.state.store import Store
from gtmcluster.sync import certs, codec

GB = 1 << 30
RSS_TARGET = 1.5 * GB
SLOWDOWN_TARGET = 1.10
PULL_TARGET_S = 60.0
FULL_LDNS = 1_000_000
FULL_PERSIST = 100_000
FULL_PULL = 1_000_000

DATACENTERS = ("DC1", "DC2", "DC3")
NODES = ("gtm-1", "gtm-2", "gtm-3")  # one per data center, in that order
RTT_WIDEIP = "www.bench.test"
PERSIST_WIDEIP = "sticky.bench.test"
#: the prober's settings (the defaults): a path record lives for inactive_ldns_ttl
PATH_TTL = 2419200.0
PERSIST_TTL = 3600
#: writes per millisecond of a node's hybrid clock
WRITES_PER_MS = 8

ZONE = """\
$TTL 3600
@    IN SOA ns1.bench.test. hostmaster.bench.test. 1 3600 600 86400 300
     IN NS  ns1
ns1  IN A   192.0.2.1
"""


def config_yaml(zone_file: Path) -> str:
    members = "\n".join(
        f"    - {{name: {n}, datacenter: {dc}, peer: 127.0.8.{i}:4353, dns: [127.0.8.{i}:5353], api: 127.0.8.{i}:8053}}"
        for i, (n, dc) in enumerate(zip(NODES, DATACENTERS, strict=True), 1)
    )
    servers = "\n".join(f"  vs{i}: {{address: 10.0.{i}.1, datacenter: {dc}}}" for i, dc in enumerate(DATACENTERS, 1))
    return f"""\
sync_group:
  name: bench
  members:
{members}
datacenters: [{", ".join(DATACENTERS)}]
virtual_servers:
{servers}
topology:
  - {{ldns: any, server: datacenter DC3, score: 1}}
pools:
  near:
    members: [vs1, vs2, vs3]
    load_balancing: {{preferred: rtt, alternate: topology}}
wideips:
  {RTT_WIDEIP}:
    pools: [near]
  {PERSIST_WIDEIP}:
    pools: [near]
    persistence: {{ttl: {PERSIST_TTL}, ipv4_prefix: 24}}
zones:
  - {{origin: bench.test, file: {zone_file}}}
"""


def rss() -> int:
    """This process's resident memory in bytes (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def ldns_address(i: int) -> str:
    """The i-th LDNS of the table: spread over 11.0.0.0 - 14.x (no list of them is kept)."""
    return str(ipaddress.IPv4Address(0x0B000000 + i * 61))


def persist_network(j: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network((0x14000000 + j * 256, 24))


class Fixed:
    """A clock that stands still but for `tick`: nothing ages or expires while the benchmark
    runs, and this node's own writes get versions a few to a millisecond, as in real life."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += 0.001 / WRITES_PER_MS


def measured_path(rng: random.Random, ldns: str, dc: str, by: str) -> PathInfo:
    """A path as the prober leaves it after one to ten probes (now and then a lost one)."""
    path = None
    base = rng.randrange(2_000, 300_000)
    for _ in range(rng.choice((1, 1, 2, 3, 10))):
        ok = rng.random() > 0.05
        path = updated(path, ok, base + rng.randrange(0, 5_000), rng.randrange(4, 24), "dns_dot", by, ldns, dc)
    assert path is not None
    return path


class Versions:
    """Hybrid clock stamps of the other nodes, for records that arrive over sync: a few
    writes per millisecond at most, as a node's prober writes them (a small counter)."""

    def __init__(self, now: float) -> None:
        self.wall_ms = int(now * 1000)
        self.written: dict[str, int] = {}

    def next(self, origin: str) -> Version:
        n = self.written.get(origin, 0)
        self.written[origin] = n + 1
        return Version(self.wall_ms - WRITES_PER_MS * 1000 + n // WRITES_PER_MS, n % WRITES_PER_MS, origin)


def receive(store: Store, records: list[Record], now: float) -> None:
    """Merge *records* as the replicator merges a peer's batches: encoded, decoded, merged."""
    members = frozenset(NODES)
    for batch, _ in codec.batches(records, now):
        for record in codec.decode(batch, now, members):
            store.merge(record)


def fill(node: Node, ldns: range, persist: range, seed: int) -> None:
    """Add LDNSes *ldns* (a path from each data center) and persistence records *persist*."""
    rng = random.Random(seed)
    store = node.store
    clock = node.clock
    assert isinstance(clock, Fixed)
    now = clock()
    versions = Versions(now)
    me, dc = node.member.name, node.member.datacenter
    wideip = wideip_named(node, PERSIST_WIDEIP)
    chunk = 10_000
    for start in range(ldns.start, ldns.stop, chunk):
        remote: list[Record] = []
        for i in range(start, min(start + chunk, ldns.stop)):
            address = ldns_address(i)
            for origin, other in zip(NODES, DATACENTERS, strict=True):
                path = measured_path(rng, address, other, origin)
                if origin == me:
                    clock.tick()
                    store.put(keys.path(address, dc), path.value(), ttl=PATH_TTL)
                else:
                    version = versions.next(origin)
                    remote.append(Record(keys.path(address, other), path.value(), version, PATH_TTL, now))
        receive(store, remote, now)
    for start in range(persist.start, persist.stop, chunk):
        remote = []
        for j in range(start, min(start + chunk, persist.stop)):
            key = PersistKey(wideip.name, TYPE_A, str(persist_network(j)))
            member = f"vs{rng.randrange(1, 4)}"
            origin = NODES[j % 3]
            if origin == me:
                clock.tick()
                node.persistence.put(PersistRecord(key, "near", (member,), now, PERSIST_TTL))
            else:
                value = {"pool": "near", "members": [member]}
                remote.append(Record(keys.persist(key), value, versions.next(origin), float(PERSIST_TTL), now))
        receive(store, remote, now)


def wideip_named(node: Node, name: str) -> WideIP:
    return next(w for w in node.config.wideips.values() if w.name.rstrip(".") == name)


class Workload:
    """Decisions to time: one wide IP, asked by random clients (new ones every round, so
    no round finds the records of the one before in the CPU's caches), every decision
    made by *method*. With *answers*, whole answers instead: the client's query (no EDNS,
    from the client's address) through the node's UDP fast path, as the server answers
    it, with no decision kept (every answer decided, as for a client not seen within the
    last five minutes: the kept ones do not read the table at all)."""

    def __init__(
        self,
        node: Node,
        wideip: WideIP,
        client: Callable[[random.Random], Client],
        method: str,
        count: int,
        answers: bool = False,
    ) -> None:
        self.node, self.wideip, self.client, self.count = node, wideip, client, count
        self.fast = FastPath(node.responder) if answers else None
        self.query = (
            b"\x12\x34\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00"
            + b"".join(bytes([len(label)]) + label.encode() for label in wideip.name.rstrip(".").split("."))
            + b"\x00\x00\x01\x00\x01"
        )
        self.rng = random.Random(2)
        for _ in range(10):
            asker = client(self.rng)
            got = node.decide(wideip, TYPE_A, asker).method
            if got != method:
                raise RuntimeError(f"{wideip.name} for {asker.ldns} was decided by {got!r}, not {method}")
            if self.fast is not None:
                reply = self.fast.handle(self.query, str(asker.ldns))
                if reply is None or reply[3] & 0xF or reply[6:8] != b"\x00\x01":
                    raise RuntimeError(f"{wideip.name} for {asker.ldns}: no one-address NOERROR answer")

    def round(self) -> float:
        """Microseconds of this process's CPU time per decision (or answer), over *count*
        (CPU time, not wall time: other processes on the machine do not count)."""
        clients = [self.client(self.rng) for _ in range(self.count)]
        started = time.process_time()
        if self.fast is not None:
            handle, query = self.fast.handle, self.query
            addresses = [str(c.ldns) for c in clients]
            kept, self.node.cache = self.node.cache, None  # every answer decided (see the class)
            started = time.process_time()
            try:
                for address in addresses:
                    handle(query, address)
            finally:
                self.node.cache = kept
        else:
            decide, wideip = self.node.decide, self.wideip
            for client in clients:
                decide(wideip, TYPE_A, client)
        return (time.process_time() - started) / len(clients) * 1e6


def alternate(workloads: list[Workload], rounds: int) -> tuple[list[list[float]], int]:
    """Rounds of each workload in turn (so a busy machine weighs on all alike): the
    figures per workload, and how many full collections the garbage collector made."""
    full = [0]

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full[0] += 1

    figures: list[list[float]] = [[] for _ in workloads]
    gc.callbacks.append(count)
    try:
        for _ in range(rounds):
            for w, out in zip(workloads, figures, strict=True):
                out.append(w.round())
    finally:
        gc.callbacks.remove(count)
    return figures, full[0]


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def mb(n: float) -> str:
    return f"{n / (1 << 20):,.0f} MB"


def bench_node(directory: Path) -> Node:
    node = Node(load(directory / "cluster.yaml"), NODES[0], clock=Fixed(time.time()), rng=random.Random(1))
    node.ready = True
    return node


def workloads(node: Node, ldns: int, persist: int, args: argparse.Namespace) -> list[Workload]:
    """Deciding by rtt for random LDNSes of the table; persistence hits for random clients;
    the same as whole answers."""

    def rtt_client(rng: random.Random) -> Client:
        return Client.from_ldns(ipaddress.IPv4Address(ldns_address(rng.randrange(ldns))))

    def persist_client(rng: random.Random) -> Client:
        return Client.from_ldns(persist_network(rng.randrange(persist))[1 + rng.randrange(250)])

    rtt, sticky = wideip_named(node, RTT_WIDEIP), wideip_named(node, PERSIST_WIDEIP)
    return [
        Workload(node, rtt, rtt_client, "rtt", args.decisions),
        Workload(node, sticky, persist_client, "persistence", args.decisions),
        Workload(node, rtt, rtt_client, "rtt", args.decisions, answers=True),
        Workload(node, sticky, persist_client, "persistence", args.decisions, answers=True),
    ]


def reactor_pauses(small: Node, full: Node) -> list[tuple[str, float, float]]:
    """What else the node does in its reactor that might walk the store, timed on each node
    (seconds, least of 5): a health re-evaluation (at every verdict change), the anti-entropy
    listing of one bucket of a peer's records, the counts by kind (every /metrics scrape)."""

    def least(f: Callable[[], object]) -> float:
        times = []
        for _ in range(5):
            started = time.perf_counter()
            f()
            times.append(time.perf_counter() - started)
        return min(times)

    def listing(node: Node) -> Callable[[], object]:
        bucket = bucket_of(keys.path(ldns_address(0), DATACENTERS[1]))
        return lambda: node.store.listing(NODES[1], {bucket})

    return [
        ("health re-evaluation", least(small.health.refresh), least(full.health.refresh)),
        ("anti-entropy listing of one bucket", least(listing(small)), least(listing(full))),
        ("record counts by kind (/metrics)", least(small.store.kinds), least(full.store.kinds)),
    ]


def memory_and_speed(args: argparse.Namespace, directory: Path) -> None:
    zone = directory / "bench.test.zone"
    zone.write_text(ZONE)
    (directory / "cluster.yaml").write_text(config_yaml(zone))
    small_ldns, small_persist = min(args.small, args.ldns), min(args.small, args.persist)
    small = bench_node(directory)
    fill(small, range(small_ldns), range(small_persist), seed=3)
    small_work = workloads(small, small_ldns, small_persist, args)
    gc.collect()
    base_rss = rss()
    print(
        f"empty-ish node: {len(small.store):,} records ({small_ldns:,} LDNS x 3 + {small_persist:,} persistence), "
        f"RSS of the process {mb(base_rss)}"
    )
    (alone_rtt, alone_hit, answer_rtt, answer_hit), _ = alternate(small_work, args.rounds)
    print(
        f"  decide alone: rtt {statistics.median(alone_rtt):.1f} us, "
        f"persistence hit {statistics.median(alone_hit):.1f} us; "
        f"answer: rtt {statistics.median(answer_rtt):.1f} us, persistence hit {statistics.median(answer_hit):.1f} us"
    )

    full = bench_node(directory)
    started = time.monotonic()
    fill(full, range(args.ldns), range(args.persist), seed=4)
    filled_in = time.monotonic() - started
    started = time.perf_counter()
    gc.collect()
    collected_in = time.perf_counter() - started
    full_rss = rss()
    per_record = (full_rss - base_rss) / len(full.store)
    print(
        f"full node: {len(full.store):,} records ({args.ldns:,} LDNS x 3 + {args.persist:,} persistence), "
        f"filled in {filled_in:.1f} s ({len(full.store) / filled_in:,.0f} records/s)"
    )
    print(f"  RSS of the process {mb(full_rss)} ({mb(full_rss - base_rss)} more: {per_record:,.0f} bytes per record)")
    print(f"  a full garbage collection ({len(gc.get_objects()):,} objects tracked) takes {collected_in:.2f} s")
    frozen = heap.freeze_now()
    started = time.perf_counter()
    gc.collect()
    print(
        f"  after a freeze ({frozen:,} objects, as the node does after loading its snapshot or a slow "
        f"collection): {time.perf_counter() - started:.3f} s"
    )
    for what, small_s, full_s in reactor_pauses(small, full):
        print(f"  {what}: empty-ish {small_s * 1000:.2f} ms, full {full_s * 1000:.2f} ms")

    full_work = workloads(full, args.ldns, args.persist, args)
    figures, collections = alternate([w for pair in zip(small_work, full_work, strict=True) for w in pair], args.rounds)
    print(
        f"answer speed: {args.rounds} rounds of {args.decisions:,} each, alternating between the two "
        f"nodes, in us of CPU per decision or answer (least of the rounds / median; every round):"
    )
    ratios = []
    answer_ratios = []
    for what, small_rounds, full_rounds in (
        ("decide alone, rtt", figures[0], figures[1]),
        ("decide alone, persistence hit", figures[2], figures[3]),
        ("answer (UDP fast path), rtt", figures[4], figures[5]),
        ("answer (UDP fast path), persistence hit", figures[6], figures[7]),
    ):
        least, median = (
            min(full_rounds) / min(small_rounds),
            statistics.median(full_rounds) / statistics.median(small_rounds),
        )
        (answer_ratios if what.startswith("answer") else ratios).append(least)
        print(
            f"  {what}: empty-ish {min(small_rounds):.1f} / {statistics.median(small_rounds):.1f}, "
            f"full {min(full_rounds):.1f} / {statistics.median(full_rounds):.1f}: x{least:.3f} / x{median:.3f}"
        )
        print(f"    {' '.join(f'{r:.1f}' for r in small_rounds)}\n    {' '.join(f'{r:.1f}' for r in full_rounds)}")
    print(f"  full garbage collections during the timed rounds: {collections}")

    whole = args.ldns == FULL_LDNS and args.persist == FULL_PERSIST
    projected = base_rss + per_record * (3 * FULL_LDNS + FULL_PERSIST)
    memory = full_rss if whole else projected
    what = "RSS" if whole else "RSS projected to the full size"
    print(f"TARGET memory: {what} {mb(memory)} < {mb(RSS_TARGET)}: {verdict(memory < RSS_TARGET)}")
    worst = max(answer_ratios)
    print(
        f"TARGET answer speed: answers with the full table / with the empty-ish one (least of the rounds, which "
        f"load elsewhere on the machine cannot inflate) at most x{worst:.3f} <= x{SLOWDOWN_TARGET:.2f}: "
        f"{verdict(worst <= SLOWDOWN_TARGET)} (the decision alone: at most x{max(ratios):.3f})"
    )
    if args.snapshot:
        restart(full, directory)


def restart(full: Node, directory: Path) -> None:
    """The full node's snapshot written and read back, as a restart does (the node answers
    only once its snapshot is loaded)."""
    path = directory / snapshot.FILENAME
    wall = time.time()
    started = time.perf_counter()
    written = snapshot.write(path, snapshot.rows(full.store, wall, full.clock()), full.member.name)
    wrote_in = time.perf_counter() - started
    fresh = Store(full.member.name, full.clock)
    started = time.perf_counter()
    loaded = snapshot.read(path, fresh, wall)
    read_in = time.perf_counter() - started
    same = "the same digest" if fresh.digest() == full.store.digest() else "A DIFFERENT DIGEST"
    print(
        f"restart: the snapshot ({path.stat().st_size / (1 << 20):,.0f} MB, {written:,} rows) written in "
        f"{wrote_in:.1f} s (all at once; a running node writes only what changed), read into a fresh store in "
        f"{read_in:.1f} s ({loaded:,} records, {same})"
    )


# --- the pull --------------------------------------------------------------------------------

PULL_NAMES = ["node-a", "node-b", "node-c", "node-d"]  # bench/sync.py's members; D is fresh


def pull_source(count: int, now: float) -> Store:
    """Node A's store: *count* path records, each LDNS measured from three origins."""
    store = Store("node-a", reactor.seconds)
    versions = Versions(now)
    rng = random.Random(5)
    origins = list(zip(PULL_NAMES[:3], DATACENTERS, strict=True))
    for n in range(count):
        origin, dc = origins[n % 3]
        address = ldns_address(n // 3)
        path = measured_path(rng, address, dc, origin)
        store.merge(Record(keys.path(address, dc), path.value(), versions.next(origin), PATH_TTL, now))
    return store


class Child(protocol.ProcessProtocol):
    def __init__(self) -> None:
        self.out = b""
        self.done: defer.Deferred[bytes] = defer.Deferred()

    def outReceived(self, data: bytes) -> None:
        self.out += data

    def errReceived(self, data: bytes) -> None:
        sys.stderr.buffer.write(data)

    def processEnded(self, reason: Any) -> None:
        self.done.callback(self.out)


async def pull(args: argparse.Namespace, directory: Path) -> None:
    certs.init_ca(directory)
    for name in ("node-a", "node-d"):
        certs.issue(directory, name)
    started = time.monotonic()
    source = pull_source(args.pull, reactor.seconds())
    print(f"node A holds {len(source):,} path records (made in {time.monotonic() - started:.1f} s); starting node D")
    _, service = start_node("node-a", 1, PULL_NAMES, directory, source)
    child = Child()
    command = [sys.executable, __file__, "--fresh-node", source.digest(), "--dir", str(directory)]
    reactor.spawnProcess(child, sys.executable, command, env=None)
    report = json.loads((await child.done).decode().strip().splitlines()[-1])
    await service.stopService()
    seconds, records = report["seconds"], report["records"]
    print(
        f"fresh node D pulled {records:,} records in {seconds:.1f} s ({records / seconds:,.0f} records/s); "
        f"D's RSS {mb(report['rss'])} ({mb(report['rss'] - report['rss_before'])} for the records)"
    )
    projected = seconds * FULL_PULL / records
    what = "" if records == FULL_PULL else f" (projected from {records:,})"
    print(
        f"TARGET pull: {FULL_PULL:,} path records in {projected:.1f} s{what} < {PULL_TARGET_S:.0f} s: "
        f"{verdict(projected < PULL_TARGET_S)}"
    )


async def fresh_node(target: str, directory: Path) -> None:
    """Node D (in its own process): start empty, report when its digest equals *target*."""
    store = Store("node-d", reactor.seconds)
    before = rss()
    started = time.monotonic()
    _, service = start_node("node-d", 4, PULL_NAMES, directory, store)
    seconds = await wait_for(lambda: store.digest() == target, 3600)
    report = {"seconds": time.monotonic() - started, "within": seconds, "records": len(store)}
    report.update(rss=rss(), rss_before=before)
    await service.stopService()
    print(json.dumps(report), flush=True)


async def main(args: argparse.Namespace) -> None:
    if args.fresh_node:
        await fresh_node(args.fresh_node, Path(args.dir))
        return
    directory = Path(tempfile.mkdtemp(prefix="gtm-scale-"))
    if args.ldns:
        memory_and_speed(args, directory)
    gc.collect()
    if args.pull:
        await pull(args, directory)


def run() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ldns", type=int, default=FULL_LDNS, help="LDNSes in the table (each with 3 paths); 0: skip")
    p.add_argument("--persist", type=int, default=FULL_PERSIST, help="persistence records")
    p.add_argument("--small", type=int, default=1000, help="LDNSes (and persistence records) of the empty-ish table")
    p.add_argument("--decisions", type=int, default=5_000, help="decisions per timed round")
    p.add_argument("--rounds", type=int, default=15, help="timed rounds of each kind")
    p.add_argument(
        "--snapshot", action=argparse.BooleanOptionalAction, default=True, help="time a restart's snapshot load"
    )
    p.add_argument("--pull", type=int, default=FULL_PULL, help="path records a fresh node pulls; 0: skip")
    p.add_argument("--fresh-node", default="", help=argparse.SUPPRESS)  # internal: run node D
    p.add_argument("--dir", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    task.react(lambda _: defer.ensureDeferred(main(args)))


if __name__ == "__main__":
    run()
