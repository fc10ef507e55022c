"""Sync group benchmark: change propagation latency and a fresh node's full pull.

    .venv/bin/python bench/sync.py [--changes 1000] [--records 100000]

Three nodes (replicators with their stores) run in this one process on the real reactor,
connected by real mutual-TLS connections over loopback, exactly as twistd nodes connect.

1. Propagation: node A writes `--changes` records, one every 5 ms; the time from the
   write until the record is in both B's and C's stores is measured (median, p99, max).
2. Pull: A holds `--records` path records (the shape of LDNS proximity data); a fresh
   node D with an empty store connects to A; the time until D's state digest equals A's.

All three (or two) nodes share this process's one core, so both figures are pessimistic
against nodes on their own machines. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor, task

from gtmcluster.config.addresses import HostPort
from gtmcluster.config.model import Member, TLSFiles
from gtmcluster.state.record import Record
from gtmcluster.state.store import Store
from gtmcluster.sync import certs
from gtmcluster.sync.replicator import Replicator
from gtmcluster.sync.service import PeerService
from gtmcluster.sync.tls import load_credentials


def member(name: str, i: int) -> Member:
    host = ipaddress.ip_address(f"127.0.9.{i}")
    return Member(name, f"DC{i}", HostPort(host, 4300 + i), (HostPort(host, 53),), HostPort(host, 8000))


def start_node(name: str, i: int, names: list[str], directory: Path, store: Store) -> tuple[Replicator, PeerService]:
    members = [member(n, j + 1) for j, n in enumerate(names)]
    me = members[i - 1]
    creds = load_credentials(TLSFiles(directory / "ca.pem", directory / f"{name}.pem", directory / f"{name}.key"), name)
    replicator = Replicator(
        store, reactor, node=name, group="bench", datacenter=me.datacenter, members=names, config_digest="bench"
    )
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((str(me.peer.host), me.peer.port))
    listener.listen(64)
    listener.setblocking(False)
    service = PeerService(replicator, creds, listener, [m for m in members if m.name != name], reactor)
    service.startService()
    return replicator, service


async def wait_for(predicate: Any, timeout: float) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise TimeoutError("condition not reached")
        await task.deferLater(reactor, 0.005, lambda: None)
    return time.monotonic() - start


async def main(args: argparse.Namespace) -> None:
    directory = Path(tempfile.mkdtemp())
    names = ["node-a", "node-b", "node-c", "node-d"]
    certs.init_ca(directory)
    for name in names:
        certs.issue(directory, name)
    stores = {n: Store(n, reactor.seconds) for n in names}
    services = []
    for i, name in enumerate(names[:3], 1):
        services.append(start_node(name, i, names, directory, stores[name]))
    reps = {s[0].node: s[0] for s in services}
    await wait_for(lambda: all(sum(p.connected for p in r.peers.values()) == 2 for r in reps.values()), 30)

    # 1. propagation
    arrived: dict[str, dict[str, float]] = {"node-b": {}, "node-c": {}}
    for name, seen in arrived.items():
        stores[name].subscribe(lambda r, seen=seen: seen.setdefault(r.key, time.monotonic()))
    written: dict[str, float] = {}
    for i in range(args.changes):
        key = f"obs/vs/bench{i}/node-a"
        written[key] = time.monotonic()
        stores["node-a"].put(key, {"up": i % 2 == 0, "reason": "bench"}, ttl=600)
        await task.deferLater(reactor, 0.005, lambda: None)
    await wait_for(lambda: all(len(a) >= args.changes for a in arrived.values()), 60)
    latencies = sorted(max(arrived[n][k] for n in arrived) - t for k, t in written.items())
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(
        f"propagation to both other nodes, {args.changes} changes 5 ms apart: "
        f"median {statistics.median(latencies) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms, "
        f"max {latencies[-1] * 1000:.2f} ms"
    )

    # 2. a fresh node pulls a large table
    a = stores["node-a"]
    now = reactor.seconds()
    for i in range(args.records):
        ldns = f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"
        a.merge(
            Record(
                f"path/{ldns}/CNC",
                {
                    "rtt": 1000 + i % 5000,
                    "last_rtt": 1000 + i % 5000,
                    "hops": 12,
                    "completion": 10000,
                    "protocol": "dns_dot",
                    "failures": 0,
                    "window": "1111111111",
                    "by": "node-a",
                },
                a._next_version(),
                2419200.0,
                now,
            )
        )
    target = a.digest()
    await wait_for(lambda: stores["node-b"].digest() == target == stores["node-c"].digest(), 600)
    print(f"node-a holds {len(a)} records ({args.records} path records); starting an empty node-d")
    start = time.monotonic()
    d_rep, d_service = start_node("node-d", 4, names, directory, stores["node-d"])
    took = await wait_for(lambda: stores["node-d"].digest() == target, 600)
    print(
        f"fresh node pulled {len(stores['node-d'])} records in {time.monotonic() - start:.1f} s "
        f"(digests equal after {took:.1f} s)"
    )
    for _, service in [*services, (d_rep, d_service)]:
        await service.stopService()


def run() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--changes", type=int, default=1000)
    p.add_argument("--records", type=int, default=100_000)
    args = p.parse_args()
    task.react(lambda _: defer.ensureDeferred(main(args)))


if __name__ == "__main__":
    run()
