"""Restart benchmark: a member restarted on a full table's snapshot; when it answers, and what.

    .venv/bin/python bench/restart.py [--ldns 1000000] [--persist 100000]
    .venv/bin/python bench/restart.py --ldns 100000 --persist 10000          # quick
    .venv/bin/python bench/restart.py --cache var/restart-1M.sqlite          # build the snapshot once

The target (issue 12): a member with the 1M-LDNS table (1,000,000 LDNS x 3 data centers +
100,000 persistence records, as bench/scale.py fills it) answers within 10 s of its start,
and never with an answer the group would not give while the rest of its table loads.

1. The snapshot. A three-member group (gtm-1 in DC1, gtm-2, gtm-3), the state file of
   gtm-1: `--ldns` LDNSes with a path from each data center (written by its data
   center's member, values as the prober makes them, see bench/scale.py), `--persist`
   persistence records of the wide IP sticky.bench.test, and last (so they are read last)
   the paths of the benchmark's own `CLIENTS` LDNSes, 127.0.10.1-20, whose best data
   center by RTT is DC1 or DC2, where topology says DC3. With `--cache FILE` the file is
   built once and copied from there.
2. The member. A real ``twistd -n gtm`` for gtm-1 (its peers do not run, so it is ready
   for measured methods after `cold_start_wait`, 5 s, as a member whose peers are down).
   From the moment the process is started, a client asks every 20 ms, from the LDNS
   addresses 127.0.10.x, in turn: a static name, www.bench.test (rtt, then topology) and
   sticky.bench.test with an ECS subnet whose persistence record the snapshot holds. Each
   answer is checked against what a fully loaded member answers: the static address; for
   www, the data center of the best RTT once the member says it is ready (before that, as
   for any member in its cold start, topology's DC3); for sticky, the member the record
   holds. `/api/v1/status` is read every 100 ms (`ready`, `loading`), the member's RSS
   from /proc. Reported: seconds from the start of the process to the first answer, the
   first wide IP answer, the first answer by RTT, and the end of the load (the log line
   "loaded N records"); answers wrong, lost, and the slowest; RSS.
3. In process. The same snapshot loaded by the node's `Snapshotter` into a `Node` on the
   real reactor, with a `LoopingCall` probe every 10 ms (the longest gap between its
   calls is the longest stall of the reactor) and a decision every 20 ms for a client
   LDNS of the table chosen at random, compared with the decision of a reference node
   holding everything (phase 1, and every path of the LDNSes asked). Then, for
   reference, the whole snapshot read before answering (`snapshot.read`, what a
   restart did before).

Not a test: figures depend on the machine (and on what else runs on it: see the load average
printed at the start and the end).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dns.edns
import dns.flags
import dns.message
import dns.rdatatype
from scale import DATACENTERS, NODES, PATH_TTL, PERSIST_TTL, Versions, ldns_address, measured_path, persist_network
from twisted.internet import defer, reactor, task

from gtmcluster.config.load import load
from gtmcluster.dnsdata.zone import TYPE_A
from gtmcluster.lb.context import Client
from gtmcluster.node import Node
from gtmcluster.runtime import heap
from gtmcluster.state import keys, loading, snapshot
from gtmcluster.state.persistence import PersistKey
from gtmcluster.state.snapshotter import Snapshotter
from gtmcluster.state.store import Store
from gtmcluster.sync import certs

TARGET_S = 10.0
FULL_LDNS = 1_000_000
FULL_PERSIST = 100_000
#: the benchmark's own LDNSes (the source addresses of its queries), in the table last
CLIENTS = 20
RTT_WIDEIP = "www.bench.test"
PERSIST_WIDEIP = "sticky.bench.test"
STATIC = "ns1.bench.test"
STATIC_ADDRESS = "192.0.2.1"
SERVERS = {dc: f"10.0.{i}.1" for i, dc in enumerate(DATACENTERS, 1)}
TOPOLOGY_DC = "DC3"
HOST = "127.0.8.1"
DNS_PORT = 5353
API_PORT = 8053
QUERY_EVERY = 0.020
STATUS_EVERY = 0.100
QUERY_TIMEOUT = 2.0
BASELINE_S = 3.0

ZONE = """\
$TTL 3600
@    IN SOA ns1.bench.test. hostmaster.bench.test. 1 3600 600 86400 300
     IN NS  ns1
ns1  IN A   192.0.2.1
"""


def config_yaml(zone_file: Path, state_dir: Path, cert_dir: Path) -> str:
    members = "\n".join(
        f"    - {{name: {n}, datacenter: {dc}, peer: 127.0.8.{i}:4353, dns: ['127.0.8.{i}:{DNS_PORT}'], "
        f"api: '127.0.8.{i}:{API_PORT}'}}"
        for i, (n, dc) in enumerate(zip(NODES, DATACENTERS, strict=True), 1)
    )
    servers = "\n".join(f"  vs{i}: {{address: {SERVERS[dc]}, datacenter: {dc}}}" for i, dc in enumerate(DATACENTERS, 1))
    return f"""\
sync_group:
  name: bench
  tls: {{ca: {cert_dir}/ca.pem, cert: '{cert_dir}/{{node}}.pem', key: '{cert_dir}/{{node}}.key'}}
  members:
{members}
state_dir: {state_dir}/{{node}}
log_dir: {state_dir}/log
datacenters: [{", ".join(DATACENTERS)}]
virtual_servers:
{servers}
topology:
  - {{ldns: any, server: datacenter {TOPOLOGY_DC}, score: 1}}
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
dns_server:
  ecs_trusted: [{CLIENT_NET}]
"""


def client_address(k: int) -> str:
    return f"127.0.10.{k + 1}"


#: the /24 of the benchmark's LDNSes (persistence's prefix), trusted with client subnets
CLIENT_NET = "127.0.10.0/24"


def client_paths(k: int) -> dict[str, int]:
    """RTTs (us) of the benchmark's k-th LDNS: DC1 or DC2 the best, DC3 the worst."""
    best, second = ("DC1", "DC2") if k % 2 else ("DC2", "DC1")
    return {best: 5_000 + k * 10, second: 40_000, "DC3": 90_000}


@dataclass
class Table:
    """What the snapshot holds that the benchmark asks about."""

    persisted: dict[str, str]  # ECS subnet (a /24) -> the member's address
    rtt_answer: dict[str, str]  # client LDNS -> the address rtt gives


def build_rows(ldns: int, persist: int, wall: float) -> tuple[list[snapshot.Row], Table]:
    rng = random.Random(4)
    versions = Versions(wall)
    rows: list[snapshot.Row] = []
    for i in range(ldns):
        address = ldns_address(i)
        for origin, dc in zip(NODES, DATACENTERS, strict=True):
            v = versions.next(origin)
            value = json.dumps(measured_path(rng, address, dc, origin).value())
            rows.append((keys.path(address, dc), value, v.wall_ms, v.logical, origin, wall + PATH_TTL))
    persisted = {}
    for j in range(persist):
        network = str(persist_network(j))
        member = f"vs{rng.randrange(1, 4)}"
        origin = NODES[j % 3]
        v = versions.next(origin)
        value = json.dumps({"pool": "near", "members": [member]})
        # held per resolver and client subnet: the benchmark's LDNSes are all in CLIENT_NET
        key = keys.persist(PersistKey(PERSIST_WIDEIP, TYPE_A, network, CLIENT_NET))
        rows.append((key, value, v.wall_ms, v.logical, origin, wall + PERSIST_TTL))
        if j % max(1, persist // 200) == 0:
            persisted[network] = SERVERS[DATACENTERS[int(member[2:]) - 1]]
    rtt_answer = {}
    for k in range(CLIENTS):
        address = client_address(k)
        rtts = client_paths(k)
        for origin, dc in zip(NODES, DATACENTERS, strict=True):
            v = versions.next(origin)
            value = {
                "rtt": rtts[dc],
                "last_rtt": rtts[dc],
                "hops": 8,
                "completion": 10000,
                "protocol": "dns_dot",
                "failures": 0,
                "window": "1111111111",
                "by": origin,
            }
            rows.append((keys.path(address, dc), json.dumps(value), v.wall_ms, v.logical, origin, wall + PATH_TTL))
        rtt_answer[address] = SERVERS[min(rtts, key=lambda dc: rtts[dc])]
    return rows, Table(persisted, rtt_answer)


def prepare(args: argparse.Namespace, work: Path) -> tuple[Path, Path, Table]:
    """The config, certificates and gtm-1's snapshot in *work*; (config path, snapshot path, table)."""
    zone = work / "bench.test.zone"
    zone.write_text(ZONE)
    cert_dir = work / "certs"
    certs.init_ca(cert_dir)
    for name in NODES:
        certs.issue(cert_dir, name)
    config = work / "cluster.yaml"
    config.write_text(config_yaml(zone, work / "state", cert_dir))
    target = work / "state" / NODES[0] / snapshot.FILENAME
    target.parent.mkdir(parents=True, mode=0o700)
    cache = Path(args.cache) if args.cache else None
    meta = cache.with_suffix(".json") if cache else None
    if cache and meta and cache.exists() and meta.exists():
        table = Table(**json.loads(meta.read_text()))
        print(f"snapshot: copied from {cache}")
    else:
        started = time.monotonic()
        rows, table = build_rows(args.ldns, args.persist, time.time())
        made = time.monotonic() - started
        written_to = cache or target
        started = time.monotonic()
        snapshot.write(written_to, rows, NODES[0])
        print(f"snapshot: {len(rows):,} rows made in {made:.1f} s, written in {time.monotonic() - started:.1f} s")
        del rows
        if cache and meta:
            meta.write_text(json.dumps(table.__dict__))
    if cache:
        shutil.copyfile(cache, target)
        os.chmod(target, 0o600)
    os.sync()  # a restarted member's file was written long before: no writeback under way
    print(f"snapshot: {target.stat().st_size / (1 << 20):,.0f} MB")
    return config, target, table


# --- the member, as a real process ------------------------------------------------------------


@dataclass
class Asked:
    sent: float
    kind: str
    expected: str
    got: str | None = None
    answered: float | None = None
    method_ok: bool | None = None


@dataclass
class Watch:
    """Everything seen of the member, in seconds since its process started."""

    asked: list[Asked] = field(default_factory=list)
    ready_at: float | None = None
    first_status: float | None = None
    loading_seen: list[tuple[float, dict[str, int] | None]] = field(default_factory=list)
    rss: list[tuple[float, int]] = field(default_factory=list)


def query(name: str, qid: int, ecs: str | None = None) -> bytes:
    options = [dns.edns.ECSOption(ecs.split("/")[0], 24)] if ecs else []
    q = dns.message.make_query(name, dns.rdatatype.A, use_edns=0 if options else -1, options=options)
    q.id = qid
    q.flags &= ~dns.flags.RD
    return q.to_wire()


def poll_dns(watch: Watch, table: Table, started: float, stop: threading.Event) -> None:
    """Every `QUERY_EVERY`: one query in turn (static, rtt wide IP, persistence), each from a
    client LDNS's address; replies matched by socket and ID."""
    socks = []
    for k in range(CLIENTS):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((client_address(k), 0))
        s.setblocking(False)
        socks.append(s)
    pending: dict[tuple[int, int], Asked] = {}
    subnets = sorted(table.persisted)
    n = 0
    next_send = time.monotonic()
    try:
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_send:
                k = n % CLIENTS
                kind = ("static", "rtt", "persist")[n % 3]
                qid = n % 65536
                if kind == "static":
                    wire, expected = query(STATIC, qid), STATIC_ADDRESS
                elif kind == "rtt":
                    wire, expected = query(RTT_WIDEIP, qid), table.rtt_answer[client_address(k)]
                else:
                    subnet = subnets[n // 3 % len(subnets)]
                    wire, expected = query(PERSIST_WIDEIP, qid, ecs=subnet), table.persisted[subnet]
                asked = Asked(now - started, kind, expected)
                watch.asked.append(asked)
                pending[(k, qid)] = asked
                with contextlib.suppress(OSError):
                    socks[k].sendto(wire, (HOST, DNS_PORT))
                n += 1
                next_send += QUERY_EVERY
            readable, _, _ = select.select(socks, [], [], max(0.0, min(0.005, next_send - time.monotonic())))
            for s in readable:
                k = socks.index(s)
                with contextlib.suppress(OSError):
                    data = s.recv(4096)
                    reply = dns.message.from_wire(data)
                    asked_ = pending.pop((k, reply.id), None)
                    if asked_ is None:
                        continue
                    asked_.answered = time.monotonic() - started
                    addresses = [r.to_text() for rrset in reply.answer for r in rrset]
                    asked_.got = addresses[0] if addresses else f"rcode {reply.rcode()}"
    finally:
        for s in socks:
            s.close()


def poll_status(watch: Watch, pid: int, started: float, stop: threading.Event) -> None:
    url = f"http://{HOST}:{API_PORT}/api/v1/status"
    while not stop.is_set():
        now = time.monotonic() - started
        with contextlib.suppress(OSError, ValueError):
            watch.rss.append((now, rss_of(pid)))
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                body = json.load(response)
        except (OSError, ValueError):
            stop.wait(STATUS_EVERY)
            continue
        if watch.first_status is None:
            watch.first_status = now
        if body.get("ready") and watch.ready_at is None:
            watch.ready_at = now
        watch.loading_seen.append((now, body.get("loading")))
        stop.wait(STATUS_EVERY)


def rss_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def judge(watch: Watch) -> None:
    """Mark each answer right or wrong: what a fully loaded member answers at that moment
    (for rtt: topology's answer is right only before the member said it was ready, within
    one status poll)."""
    ready = watch.ready_at if watch.ready_at is not None else float("inf")
    for a in watch.asked:
        if a.got is None:
            continue
        if a.kind == "rtt" and a.got == SERVERS[TOPOLOGY_DC]:
            a.method_ok = a.sent < ready + STATUS_EVERY
        else:
            a.method_ok = a.got == a.expected


def member_run(config: Path, work: Path, table: Table, seconds_after: float) -> dict[str, Any]:
    log = work / "gtm-1.log"
    cmd = [
        sys.executable,
        "-c",
        "from twisted.scripts.twistd import run; run()",
        "--nodaemon",
        f"--logfile={log}",
        f"--pidfile={work / 'gtm-1.pid'}",
        "gtm",
        f"--config={config}",
        "--node=gtm-1",
    ]
    watch = Watch()
    stop = threading.Event()
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    pollers = [
        threading.Thread(target=poll_dns, args=(watch, table, started, stop), daemon=True),
        threading.Thread(target=poll_status, args=(watch, proc.pid, started, stop), daemon=True),
    ]
    for t in pollers:
        t.start()
    loaded_at = None
    try:
        deadline = started + 3600
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the member exited with {proc.returncode}; see {log}")
            text = log.read_text(errors="replace") if log.exists() else ""
            if "loaded " in text and " records from " in text and loaded_at is None:
                loaded_at = time.monotonic() - started
                deadline = time.monotonic() + seconds_after
            time.sleep(0.05)
    finally:
        stop.set()
        for t in pollers:
            t.join(timeout=5)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    judge(watch)
    text = log.read_text(errors="replace")
    answered = [a for a in watch.asked if a.answered is not None]
    lost = [a for a in watch.asked if a.answered is None and a.sent < (watch.asked[-1].sent - QUERY_TIMEOUT)]

    def first(kind: str | None = None, method_ok: bool | None = None, rtt_only: bool = False) -> float | None:
        for a in answered:
            if kind is not None and a.kind != kind:
                continue
            if rtt_only and a.got == SERVERS[TOPOLOGY_DC]:
                continue
            if method_ok is not None and a.method_ok != method_ok:
                continue
            return a.answered
        return None

    # (queries sent before the member answered at all waited in its socket for it)
    latencies = [a.answered - a.sent for a in answered if a.answered is not None and a.sent >= answered[0].answered]
    after_first = [a for a in watch.asked if answered and a.sent >= answered[0].sent]
    while_loading = [a for a in answered if loaded_at is not None and a.answered is not None and a.answered < loaded_at]
    return {
        "first_answer": first(),
        "first_status": watch.first_status,
        "first_wideip_answer": first("rtt") if first("rtt") is not None else None,
        "first_persist_answer": first("persist"),
        "first_rtt_answer": first("rtt", rtt_only=True),
        "ready": watch.ready_at,
        "loaded": loaded_at,
        "asked": len(watch.asked),
        "answered": len(answered),
        "lost_after_first_answer": sum(1 for a in after_first if a.answered is None and a in lost),
        "answered_while_loading": len(while_loading),
        "wrong": [(a.kind, a.sent, a.expected, a.got) for a in answered if a.method_ok is False],
        "slowest_ms": max(latencies) * 1000 if latencies else None,
        "slowest": sorted(
            ((a.answered - a.sent, a.sent, a.kind) for a in answered if a.answered and a.sent >= answered[0].answered),
            reverse=True,
        )[:5],
        "p99_ms": statistics.quantiles(latencies, n=100)[98] * 1000 if len(latencies) > 100 else None,
        "rss_loaded": max((r for t, r in watch.rss if loaded_at is None or t <= loaded_at + 1), default=0),
        "rss_peak": max((r for _, r in watch.rss), default=0),
        "log_loaded": [line for line in text.splitlines() if "records from" in line],
        "traceback": "Traceback" in text,
    }


# --- in process: stalls, and decisions against a reference --------------------------------------


def reference_node(config: Path, path: Path, sample: list[str]) -> Node:
    """A node holding everything but the paths, and every path of the LDNSes in *sample*:
    for those, a node with everything loaded (a decision reads no other record)."""
    node = Node(load(config), NODES[0], reactor.seconds, rng=random.Random(1))
    node.ready = True
    reader = snapshot.Reader.open(path, keys.PATH, time.time)
    assert reader is not None
    try:
        reader.first(node.store)
        for address in sample:
            for dc in DATACENTERS:
                reader.fetch(node.store, keys.path(address, dc))
    finally:
        reader.close()
    node.health.refresh()
    return node


async def in_process(config: Path, path: Path, ldns: int, table: Table) -> dict[str, Any]:
    rng = random.Random(7)
    sample = [ldns_address(rng.randrange(ldns)) for _ in range(2000)] + list(table.rtt_answer)
    reference = reference_node(config, path, sample)
    gc.collect()
    cfg = load(config)
    wideips = {w.name.rstrip("."): w for w in cfg.wideips.values()}
    rtt, sticky = wideips[RTT_WIDEIP], wideips[PERSIST_WIDEIP]
    subnets = sorted(table.persisted)

    baseline = await probe_gaps(BASELINE_S)  # the machine's own noise: the same probe, nothing loading
    turns: list[float] = []
    cpu_turns: list[float] = []

    def timed(step: Any) -> Any:
        def run() -> None:
            began, cpu = time.perf_counter(), time.thread_time()
            step()
            turns.append(time.perf_counter() - began)
            cpu_turns.append(time.thread_time() - cpu)

        return reactor.callLater(0, run)

    cooperator = task.Cooperator(terminationPredicateFactory=lambda: loading._Timer(loading.TURN), scheduler=timed)
    started = time.perf_counter()
    node = Node(cfg, NODES[0], reactor.seconds, rng=random.Random(1))
    node.ready = True  # as after the cold start: measured methods decide
    snaps = Snapshotter(
        node.store,
        path.parent,
        reactor,
        time.time,
        later=keys.PATH,
        settle=heap.collect_and_freeze,
        cooperator=cooperator,
    )
    snaps.load()
    node.health.refresh()
    gc.collect()
    heap.freeze_now()
    answering = time.perf_counter() - started
    keeper = heap.HeapKeeper(reactor)
    keeper.startService()
    gaps: list[float] = []
    last = [time.perf_counter()]
    decisions = {"asked": 0, "different": 0, "while_loading": 0}

    def probe() -> None:
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    def ask() -> None:
        decisions["asked"] += 1
        decisions["while_loading"] += not snaps.loaded
        if decisions["asked"] % 2:
            client = Client.from_ldns(ipaddress_of(rng.choice(sample)))
            wideip = rtt
        else:
            subnet = rng.choice(subnets)  # (asked by one of the benchmark's LDNSes, as queries are)
            client = Client(ipaddress_of(subnet.split("/")[0]), 24, ipaddress_of(client_address(0)), True)
            wideip = sticky
        mine = node.decide(wideip, TYPE_A, client)
        theirs = reference.decide(wideip, TYPE_A, client)
        if (mine.method, mine.addresses, mine.members) != (theirs.method, theirs.addresses, theirs.members):
            decisions["different"] += 1

    probes = task.LoopingCall(probe)
    asks = task.LoopingCall(ask)
    snaps.startService()
    probes.start(0.010)
    asks.start(QUERY_EVERY)
    await snaps.when_loaded()
    loaded = time.perf_counter() - started
    probes.stop()
    asks.stop()
    keeper.stopService()
    await snaps.stopService()
    held = len(node.store)
    gaps_ms = sorted(g * 1000 for g in gaps[1:])
    turns_ms = sorted(t * 1000 for t in turns)
    cpu_ms = sorted(t * 1000 for t in cpu_turns)
    result = {
        "turn_cpu_max_ms": cpu_ms[-1],
        "turn_cpu_p99_ms": cpu_ms[int(len(cpu_ms) * 0.99)],
        "baseline_max_ms": baseline[-1],
        "baseline_p99_ms": baseline[int(len(baseline) * 0.99)],
        "turn_max_ms": turns_ms[-1],
        "turn_p99_ms": turns_ms[int(len(turns_ms) * 0.99)],
        "turn_median_ms": statistics.median(turns_ms),
        "turns": len(turns_ms),
        "answering": answering,
        "loaded": loaded,
        "records": held,
        "stall_max_ms": gaps_ms[-1] if gaps_ms else None,
        "stall_p99_ms": gaps_ms[int(len(gaps_ms) * 0.99)] if gaps_ms else None,
        "probes": len(gaps_ms),
        "gc_full_collections": keeper.full_collections,
        "gc_longest_ms": keeper.longest * 1000,
        **decisions,
    }
    return result


def whole_read(path: Path) -> float:
    """Seconds to read the whole snapshot into a fresh store (what a restart did before)."""
    gc.collect()
    fresh = Store(NODES[0], time.monotonic)
    started = time.perf_counter()
    snapshot.read(path, fresh, time.time())
    return time.perf_counter() - started


async def probe_gaps(seconds: float) -> list[float]:
    """Gaps (ms, sorted) between the calls of a 10 ms LoopingCall over *seconds*."""
    gaps: list[float] = []
    last = [time.perf_counter()]

    def probe() -> None:
        now = time.perf_counter()
        gaps.append((now - last[0]) * 1000)
        last[0] = now

    loop = task.LoopingCall(probe)
    loop.start(0.010)
    await task.deferLater(reactor, seconds, lambda: None)
    loop.stop()
    return sorted(gaps[1:])


def ipaddress_of(text: str) -> Any:
    import ipaddress

    return ipaddress.ip_address(text)


def load_average() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def report(member: dict[str, Any] | None, inproc: dict[str, Any] | None, args: argparse.Namespace) -> None:
    size = f"{args.ldns:,} LDNS x 3 + {args.persist:,} persistence"
    if member is not None:
        print(f"\nthe member (twistd), {size}: seconds from the start of its process")

        def s(x: float | None) -> str:
            return "never" if x is None else f"{x:.2f} s"

        print(f"  first answer (any):             {s(member['first_answer'])}")
        print(f"  first wide IP answer:           {s(member['first_wideip_answer'])}")
        print(f"  first persistence answer:       {s(member['first_persist_answer'])}")
        print(f"  ready (status says so):         {s(member['ready'])} (cold_start_wait: its peers do not run)")
        print(f"  first wide IP answer by RTT:    {s(member['first_rtt_answer'])}")
        print(f"  everything loaded (log line):   {s(member['loaded'])}")
        print(
            f"  queries: {member['asked']:,} asked, {member['answered']:,} answered "
            f"({member['answered_while_loading']:,} while loading), "
            f"{member['lost_after_first_answer']} lost after the first answer; "
            f"slowest answer {member['slowest_ms']:.0f} ms, p99 {member['p99_ms'] or 0:.1f} ms"
        )
        slowest = ", ".join(f"{ms * 1000:.0f} ms ({kind}, asked at {at:.2f} s)" for ms, at, kind in member["slowest"])
        print(f"  slowest answers: {slowest}")
        print(f"  answers a fully loaded member would not give: {len(member['wrong'])} {member['wrong'][:5]}")
        mb = 1 << 20
        print(f"  RSS when loaded {member['rss_loaded'] / mb:,.0f} MB, peak {member['rss_peak'] / mb:,.0f} MB")
        for line in member["log_loaded"]:
            print(f"  log: {line.split(' ', 2)[-1]}")
        if member["traceback"]:
            print("  THE LOG HOLDS A TRACEBACK")
        ok = member["first_wideip_answer"] is not None and member["first_wideip_answer"] < TARGET_S
        print(
            f"TARGET answering (wide IPs included) within {TARGET_S:.0f} s of start: "
            f"{s(member['first_wideip_answer'])}: {'met' if ok and not member['wrong'] else 'NOT met'}"
        )
    if inproc is not None:
        print(f"\nin process, {size}: Node + Snapshotter on the real reactor")
        print(
            f"  answering after {inproc['answering']:.2f} s (phase 1: everything but paths), "
            f"all {inproc['records']:,} records in after {inproc['loaded']:.1f} s; "
            f"reading it all before answering (as before): {inproc['whole_read']:.1f} s"
        )
        print(
            f"  reactor: longest gap of a 10 ms LoopingCall {inproc['stall_max_ms']:.1f} ms, p99 "
            f"{inproc['stall_p99_ms']:.1f} ms ({inproc['probes']:,} gaps); before the load, nothing to do: "
            f"{inproc['baseline_max_ms']:.1f} ms, p99 {inproc['baseline_p99_ms']:.1f} ms (the machine's noise)"
        )
        print(
            f"  the load's reactor turns: {inproc['turns']:,}, median {inproc['turn_median_ms']:.1f} ms, "
            f"p99 {inproc['turn_p99_ms']:.1f} ms, longest {inproc['turn_max_ms']:.1f} ms (in CPU time of the "
            f"reactor's thread: p99 {inproc['turn_cpu_p99_ms']:.1f} ms, longest {inproc['turn_cpu_max_ms']:.1f} ms); "
            f"full GCs {inproc['gc_full_collections']}, longest {inproc['gc_longest_ms']:.0f} ms"
        )
        print(
            f"  decisions: {inproc['asked']:,} ({inproc['while_loading']:,} while loading), "
            f"different from a fully loaded node's: {inproc['different']}"
        )


def run() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ldns", type=int, default=FULL_LDNS, help="LDNSes in the table (each with 3 paths)")
    p.add_argument("--persist", type=int, default=FULL_PERSIST, help="persistence records")
    p.add_argument("--cache", default="", help="build the snapshot into FILE once, and copy it from there")
    p.add_argument("--after", type=float, default=2.0, help="seconds to keep asking after the load")
    p.add_argument("--skip-member", action="store_true", help="only the in-process run")
    p.add_argument("--skip-in-process", action="store_true", help="only the member")
    args = p.parse_args()
    print(f"load average at the start: {load_average()}")
    work = Path(tempfile.mkdtemp(prefix="gtm-restart-"))
    config, path, table = prepare(args, work)
    member = None if args.skip_member else member_run(config, work, table, args.after)
    if args.cache:  # the member's run has rewritten part of the file: start again from the same one
        shutil.copyfile(args.cache, path)
        os.sync()

    async def main() -> None:
        try:
            inproc = None
            if not args.skip_in_process:
                inproc = await in_process(config, path, args.ldns, table)
                inproc["whole_read"] = whole_read(path)
            report(member, inproc, args)
            print(f"load average at the end: {load_average()}")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    task.react(lambda _: defer.ensureDeferred(main()))


if __name__ == "__main__":
    run()
