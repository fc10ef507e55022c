"""What the query log costs: node CPU per query with it off and on, in the same run, alternating.

    .venv/bin/python bench/querylog.py [--rounds 4] [--seconds 8] [--clients 4] [--sources 2]
                                       [--ecs 1000] [--rate QPS] [--processes N] [--queue N]
                                       [--variants off,on,thread] [--json FILE]
    .venv/bin/python bench/querylog.py --in-process | --parts [--rounds N] [--count N]

Starts three nodes (twistd gtm, one member each, the zone and wide IP of bench/compare.py)
on 127.0.0.243-245:5300: ``off`` without a query log, ``on`` with ``dns_server.query_log``
(records encoded on the reactor, the file written in a thread: as the node does), and
``thread`` with the log and the records encoded in the writing thread too
(`QueryLogWriter.encode_in_thread` set True by a sitecustomize on its PYTHONPATH). Then,
after a 3 s warm-up of each, in rounds, for each mix of bench/compare.py (static: the
PERF-BASELINE mix; wideip: the wide IP with an EDNS client subnet per query, --ecs
subnets), dnsperf drives each node at unlimited rate (or at --rate queries/s: the CPU a
query costs at equal load) for --seconds, the nodes' order turning each round. The figure
is the node process's CPU time (user + system from /proc) per completed query; the ratio to ``off`` is taken per
round and its median reported, so a busy neighbour affects both sides of a ratio alike.
Each log-on node reports what it wrote and dropped (/api/v1/status: the node's and its
workers' together), and each node the resident memory of its processes at the end.

With --processes N every node answers on N processes (``dns_server.processes``: the node
and N - 1 answering workers, each logging to a file of its own); the CPU is the whole
process tree's. --queue sets the log's queue (``query_log.queue``, per process; default
50,000): at its smallest (100) a saturated node shows what the log drops, and that the
answers do not wait for it. --variants picks which nodes run (``thread`` takes a third of
the time and is not what the node does).

With --in-process, instead: one node's answer path in this process (the UDP transport, the
fast and general paths, a transport that sends nothing), the same queries through it with
the log off and on alternating, and with it on the writer's whole work too (encoding, and
the file writes done in place); CPU time (time.process_time) per query. No sockets and no
dnsperf: the difference on, minus off, is what the log adds to a query, measured with
less noise than the end-to-end runs. With --parts: each part of the log's work alone, per
record (the queue's add, the encoding, the file's write), --count x 10 records. Not a
test: figures depend on the machine and what else runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import comparelib as lib  # bench/ is not a package: its folder is on sys.path
import proctree

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("off", "on", "thread")
HOSTS = {"off": "127.0.0.243", "on": "127.0.0.244", "thread": "127.0.0.245"}
PORT = 5300
API_PORT = 8063


def setup(
    work: Path,
    sources: int,
    ecs: int,
    processes: int = 1,
    queue: int | None = None,
    variants: tuple[str, ...] = VARIANTS,
) -> tuple[dict[str, lib.Server], dict[str, lib.Mix]]:
    (work / f"{lib.ORIGIN}.zone").write_text(lib.zone_text())
    mixes = lib.write_mixes(work, sources, ecs)
    patch = work / "thread-encode"
    patch.mkdir()
    (patch / "sitecustomize.py").write_text(
        "from gtmcluster.querylog.writer import QueryLogWriter\nQueryLogWriter.encode_in_thread = True\n"
    )
    servers = {}
    for variant in variants:
        endpoint = lib.Endpoint(HOSTS[variant], PORT)
        config = lib.node_config(endpoint, API_PORT, sources, processes)
        config["base_dir"] = str(work / variant)
        config["zones"][0]["file"] = str(work / f"{lib.ORIGIN}.zone")
        if variant != "off":
            config["dns_server"]["query_log"] = {"path": "log/queries.dnstap", "max_bytes": 50_000_000, "keep": 1}
            if queue is not None:
                config["dns_server"]["query_log"]["queue"] = queue
        (work / variant).mkdir()
        path = work / variant / "cluster.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        argv = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "--nodaemon"]
        argv += [f"--logfile={work / variant / 'node.log'}", f"--pidfile={work / variant / 'node.pid'}"]
        argv += ["gtm", f"--config={path}", "--node=bench"]
        if variant == "thread":
            # (the patch first, then what this run imports: PYTHONPATH=patch alone would run
            # whatever checkout the venv has installed, not this one)
            pythonpath = os.pathsep.join(p for p in (str(patch), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
            argv = ["env", f"PYTHONPATH={pythonpath}", *argv]
        servers[variant] = lib.Server(variant, variant, endpoint, argv, work / variant / "node.log", work / variant)
    return servers, mixes


def in_process(rounds: int, count: int, ecs: int) -> None:
    """The log's cost a query, measured on the answer path in this process (see above)."""
    from twisted.internet import defer, task

    from gtmcluster.config.dnsserver import QueryLog
    from gtmcluster.config.load import load
    from gtmcluster.dns.fastpath import FastPath
    from gtmcluster.dns.udpport import DNSDatagramProtocol
    from gtmcluster.node import Node
    from gtmcluster.querylog.writer import QueryLogWriter

    class Nowhere:
        def __init__(self) -> None:
            self.socket = self

        def sendto(self, data: bytes, addr: Any) -> None:
            pass

    with tempfile.TemporaryDirectory(prefix="querylog-bench-") as tmp:
        work = Path(tmp)
        (work / f"{lib.ORIGIN}.zone").write_text(lib.zone_text())
        config = lib.node_config(lib.Endpoint("127.0.0.1", PORT), API_PORT, 1)
        config["base_dir"] = str(work)
        (work / "cluster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        node = Node(load(work / "cluster.yaml"), "bench", time.time)
        node.ready = True
        proto = DNSDatagramProtocol(FastPath(node.responder), ("127.0.0.1", PORT))
        proto.transport = Nowhere()  # type: ignore[assignment]
        proto.startProtocol()
        settings = QueryLog(work / "queries.dnstap", max_bytes=50_000_000, keep=1, queue=count + 1)
        writer = QueryLogWriter(settings, node.stats, task.Clock(), defer.maybeDeferred, "bench")
        static = [
            (lib.query(line.split()[0], line.split()[1], qid=i % 65536), ("127.0.200.1", 10000 + i % 50000))
            for i, line in enumerate(lib.static_lines(count))
        ]
        wideip = [
            (lib.query(lib.WIDEIP, "A", lib.ecs_network(i % ecs), qid=i % 65536), ("127.0.200.1", 10000 + i % 50000))
            for i in range(count)
        ]
        print(f"in process: {count} queries a run, {rounds} rounds, off and on alternating")
        for name, queries in (("static", static), ("wideip", wideip)):
            for data, addr in queries:  # warm up: templates and kept decisions
                proto.datagramReceived(data, addr)
            cost: dict[str, list[float]] = {"off": [], "on": []}
            for r in range(rounds):
                for variant in ("off", "on") if r % 2 == 0 else ("on", "off"):
                    proto.log = writer.queue if variant == "on" else None
                    started = time.process_time()
                    for data, addr in queries:
                        proto.datagramReceived(data, addr)
                    while writer.queue.entries:
                        writer.flush()
                    cost[variant].append((time.process_time() - started) / len(queries) * 1e6)
            off, on = statistics.median(cost["off"]), statistics.median(cost["on"])
            ratios = statistics.median(b / a for a, b in zip(cost["off"], cost["on"], strict=True))
            print(
                f"{name:8} off {off:6.2f} us/query  on {on:6.2f} us/query  added {on - off:5.2f} us  ratio {ratios:.3f}"
            )
        writer.stop()


def parts(count: int) -> None:
    """Each part of the log's work a record, alone (--parts): the queue's add (the clock, the
    tuple, the bound check), the encoding (in batches of `writer.MAX_BATCH`) and the file's
    write; CPU time (time.process_time) per record, one wide IP query with a client subnet."""
    from gtmcluster.querylog.logfile import LogFile
    from gtmcluster.querylog.writer import MAX_BATCH, Encoder, QueryQueue
    from gtmcluster.runtime.stats import QueryStats

    query = lib.query(lib.WIDEIP, "A", lib.ecs_network(3), qid=7)
    reply = query[:2] + b"\x84\x00" + query[4:] + b"\x00" * 40
    queue = QueryQueue(count + 1, QueryStats())
    clients = [(f"127.0.200.{i % 4 + 1}", 10000 + i % 50000) for i in range(count)]
    local = ("127.0.0.1", PORT)
    started = time.process_time()
    for client in clients:
        queue.add(client, local, 1, query, reply, None)
    add = time.process_time() - started
    entries = list(queue.take())
    encoder = Encoder(b"bench", b"gtmcluster")
    started = time.process_time()
    frames = [f for i in range(0, count, MAX_BATCH) for f in encoder.frames(entries[i : i + MAX_BATCH])]
    encode = time.process_time() - started
    with tempfile.TemporaryDirectory(prefix="querylog-bench-") as tmp:
        file = LogFile(Path(tmp) / "q.dnstap", 1 << 40, 1, Path(tmp))
        started = time.process_time()
        for i in range(0, count, MAX_BATCH):
            file.write(frames[i : i + MAX_BATCH])
        write = time.process_time() - started
        file.close()
    print(
        f"per record: add {add / count * 1e6:.2f} us, encode {encode / count * 1e6:.2f} us,"
        f" write {write / count * 1e6:.2f} us ({len(frames[0])} bytes a frame, {count} records)"
    )


def rss_mb(server: lib.Server) -> float:
    """The resident memory of *server*'s process tree (the node and its workers), MB."""
    total = 0
    for pid in proctree.descendants(server.pid):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def status(server: lib.Server) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{server.endpoint.host}:{API_PORT}/api/v1/status", timeout=5) as response:
        result: dict[str, Any] = json.load(response)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--sources", type=int, default=2)
    parser.add_argument("--ecs", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--rate", type=float, help="queries/s each run sends (dnsperf -Q), for CPU per query at equal load"
    )
    parser.add_argument("--processes", type=int, default=1, help="dns_server.processes of every node (default 1)")
    parser.add_argument("--queue", type=int, help="query_log.queue of the log-on nodes (default: the node's, 50,000)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="which nodes run (default %(default)s)")
    parser.add_argument("--in-process", action="store_true", help="the answer path in this process, no sockets")
    parser.add_argument("--count", type=int, default=20000, help="queries a run, with --in-process")
    parser.add_argument("--parts", action="store_true", help="each part of the log's work a record, alone")
    args = parser.parse_args()
    print(f"$ {' '.join([Path(sys.executable).name, *sys.argv])}")
    python = f"{platform.python_implementation()} {platform.python_version()}"
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {python}")
    if args.parts:
        for _ in range(args.rounds):
            parts(args.count * 10)
        return
    if args.in_process:
        in_process(args.rounds, args.count, args.ecs)
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
        return
    with tempfile.TemporaryDirectory(prefix="querylog-bench-") as tmp:
        work = Path(tmp)
        variants = tuple(v for v in VARIANTS if v in args.variants.split(","))
        assert "off" in variants, "the ratios are to the off node: --variants needs off"
        servers, mixes = setup(work, args.sources, args.ecs, args.processes, args.queue, variants)
        ready = lib.query(lib.ORIGIN, "SOA")
        try:
            for server in servers.values():
                server.start(ready)
            # cpu[mix][variant] = CPU µs per query of each round; qps likewise
            cpu: dict[str, dict[str, list[float]]] = {m: {v: [] for v in variants} for m in mixes}
            qps: dict[str, dict[str, list[float]]] = {m: {v: [] for v in variants} for m in mixes}
            for mix in mixes.values():  # warm up: kept decisions and templates, every ECS subnet seen
                for server in servers.values():
                    lib.run_dnsperf(server.endpoint, mix, work, 3, args.clients, 100)
            for r in range(args.rounds):
                order = variants[r % len(variants) :] + variants[: r % len(variants)]
                for mix in mixes.values():
                    for variant in order:
                        server = servers[variant]
                        before = server.cpu_seconds()
                        result = lib.run_dnsperf(
                            server.endpoint, mix, work, args.seconds, args.clients, 100, qps=args.rate
                        )
                        used = server.cpu_seconds() - before
                        cpu[mix.name][variant].append(used / max(result.completed, 1) * 1e6)
                        qps[mix.name][variant].append(result.qps)
                        print(
                            f"round {r + 1} {mix.name:7} {variant:8} {result.qps:8.0f} qps"
                            f"  lost {result.lost:5}  node CPU {cpu[mix.name][variant][-1]:6.1f} us/query",
                            flush=True,
                        )
            time.sleep(1.5)  # (the workers' counts come with their tallies, every second)
            logs = {v: status(servers[v])["query_log"] for v in variants if v != "off"}
            rss = {v: rss_mb(servers[v]) for v in variants}
        finally:
            for server in servers.values():
                server.stop()
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
        report: dict[str, Any] = {"args": vars(args) | {"json": None}, "mixes": {}, "logs": logs, "rss_mb": rss}
        print(f"\n{'mix':8} {'variant':8} {'us/query':>9} {'qps':>8} {'CPU ratio to off (median of rounds)':>38}")
        for name in mixes:
            report["mixes"][name] = {}
            for variant in variants:
                ratios = [c / o for c, o in zip(cpu[name][variant], cpu[name]["off"], strict=True)]
                figures = {
                    "cpu_us": statistics.median(cpu[name][variant]),
                    "qps": statistics.median(qps[name][variant]),
                    "ratio": statistics.median(ratios),
                    "ratios": ratios,
                }
                report["mixes"][name][variant] = figures
                print(
                    f"{name:8} {variant:8} {figures['cpu_us']:9.1f} {figures['qps']:8.0f} "
                    f"{figures['ratio']:8.3f}  ({', '.join(f'{x:.3f}' for x in ratios)})"
                )
        for variant, figures in logs.items():
            print(
                f"query log of {variant}: written {figures['written']}, dropped {figures['dropped']},"
                f" failed {figures['failed']}"
            )
        print("resident memory at the end (MB, all processes): " + ", ".join(f"{v} {m:.0f}" for v, m in rss.items()))
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
