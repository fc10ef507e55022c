"""Our node against its peers in the same run: queries/s, loss, latency and server CPU per query.

    .venv/bin/python bench/compare.py [--rounds 3] [--seconds 10] [--pin-load 0 [--also-unpinned]]
                                      [--servers ours,nsd,pdns,pdns-nocache,gdnsd,floor] [--json FILE]
                                      [--transport tcp [--connections 64]] [--ecs 100000] [--query-log]
                                      [--names random [--random-lines 600000]] [--dnssec]
                                      (make bench-compare ARGS='...')

Starts, each on its own loopback address with the same zone `bench.test` (bench/peers.py,
configs from bench/peerconf/): our node (twistd gtm, one member, no peers) on 127.0.0.242:5300,
NSD (server-count = cores, reuseport, RRL off) on .241, PowerDNS 4.7 with the bind backend
and a LUA record on .243 (packet cache on) and .244 (caches off), gdnsd 3.8 with its geoip
plugin on `nets` data on .245, and the bare Python floor (bench/floor.py) on .246. A server
whose program is missing is reported and left out (outside CI). In our node,
`gslb.bench.test` is a wide IP over three virtual servers in three data centers (rtt ->
topology -> global_availability, with LDNS persistence); PowerDNS and gdnsd choose the same
data center by the same topology networks; NSD and the floor answer the name statically
with the three addresses. Then, in rounds, alternating the servers, dnsperf drives each mix
at unlimited rate and at a fixed rate of 70% of that server's max:

- static: the PERF-BASELINE mix (87% www A, 10% hostN A, 3% NXDOMAIN, 2% NODATA), no EDNS;
- wideip: `gslb.bench.test A`, each query with an EDNS client subnet, 10,000 distinct /24s.

With `--names random` (issue 34) the mixes are a fresh random name each query instead:
NXDOMAIN, and below a wildcard wide IP; on request two random labels deep, or with a client
subnet (`--mixes deep,nxecs`: bench/randommix.py).

Clients: dnsperf 2.10 sends from one source address per process and its `-E` option puts
the same EDNS option in every query, so one process cannot be many clients. Instead several
dnsperf processes run at once, each from its own loopback address (127.0.200.N, the
"LDNS"), and the wide IP queries are raw packets (dnsperf -B) that each carry their own
client subnet: 10.0.0.0/24, 10.0.1.0/24, ... split between the processes. Our node decides
topology and persistence by that subnet, so it sees `--ecs` distinct clients; the report
says how many persistence records it held afterwards.

Server CPU is user + system time of the server's whole process tree from /proc (NSD forks
its servers; our node may too), before and after each run; dnsperf's own CPU comes from
wait4. Latency percentiles come from dnsperf -v (each query's latency) in the fixed-rate
runs. The report gives each server's queries/s and CPU per query against ours and against the
floor's. Not a test: figures depend on the machine and what else runs; the alternation is
what makes the ratios fair. TCP (`--transport tcp`) and our node's memory and kept decisions
with many clients (`--ecs 100000`): bench/manyclients.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import comparelib as lib  # bench/ is not a package: its folder is on sys.path
import manyclients
import peers
import proctree
import randommix
import signedmix
from comparereport import Run, fmt_ms, fmt_qps, report

ROOT = Path(__file__).resolve().parent.parent
# the issue's targets: ours/NSD queries per second at least, CPU per query at most


@dataclass(frozen=True)
class Slot:
    round: int
    mix: str
    server: str  # a key of peers.SPECS
    pinning: str  # "unpinned" or "pinned"


def arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    head, _, rest = (__doc__ or "").partition("\n\n")
    p = argparse.ArgumentParser(description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="rounds; each runs every server and mix (default 3)")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds per unlimited-rate run (default 10)")
    p.add_argument("--fixed-seconds", type=float, help="seconds per fixed-rate run (default: --seconds)")
    p.add_argument("--fixed-load", type=float, default=0.7, help="fixed rate, as a share of the max (default 0.7)")
    p.add_argument("--fixed-rate", type=float, metavar="QPS", help="fixed rate in queries/s instead (both servers)")
    p.add_argument("--warmup", type=float, default=2.0, help="unrecorded seconds per server and mix first (2)")
    randommix.add_arguments(p)
    p.add_argument("--sources", type=int, default=4, help="dnsperf processes, one per source address (default 4)")
    p.add_argument("--clients", type=int, default=2, help="dnsperf -c of each process (default 2)")
    p.add_argument("--outstanding", type=int, default=200, help="queries in flight, all processes (200)")
    p.add_argument("--ecs", type=int, default=10000, help="distinct ECS client subnets; 0: no EDNS (10000)")
    p.add_argument("--server-count", type=int, default=os.cpu_count() or 1, help="NSD server-count (cores)")
    p.add_argument("--processes", type=int, default=1, help="our node's dns_server.processes (default 1)")
    p.add_argument(
        "--query-log", action="store_true", help="our node writes its query log (dnstap files in the work folder)"
    )
    p.add_argument("--servers", default=",".join(peers.SPECS), help="which, of %(default)s (default: all)")
    p.add_argument("--peer-threads", type=int, default=1, help="PowerDNS's and gdnsd's answering threads (1)")
    p.add_argument("--nsd-address", type=lib.Endpoint.parse, help="NSD's (127.0.0.241:5300)")
    p.add_argument("--node-address", type=lib.Endpoint.parse, help="our node's DNS (127.0.0.242:5300)")
    p.add_argument("--address", action="append", default=[], metavar="KEY=ADDRESS:PORT", help="a server's address")
    p.add_argument("--api-port", type=int, default=8053, help="our node's API port, on --node-address (8053)")
    p.add_argument("--pin-load", type=int, metavar="CPU", help="dnsperf on this CPU (taskset), servers on the rest")
    p.add_argument("--also-unpinned", action="store_true", help="with --pin-load: run unpinned as well")
    default_python = ROOT / ".venv/bin/python"
    p.add_argument(
        "--python",
        default=str(default_python if default_python.exists() else sys.executable),
        help="the Python that runs twistd (default: .venv/bin/python)",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="write every run's figures and the summary here")
    p.add_argument("--keep", action="store_true", help="keep the work folder (configs, logs)")
    manyclients.add_arguments(p)
    signedmix.add_arguments(p)
    args = p.parse_args(argv)
    manyclients.check(args, p)
    try:
        args.servers = peers.parse_servers(args.servers)
        args.addresses = {k: lib.Endpoint.parse(s.address) for k, s in peers.SPECS.items()}
        for given in args.address:
            key, _, address = given.partition("=")
            args.addresses[peers.parse_servers(key)[0]] = lib.Endpoint.parse(address)
    except ValueError as e:
        p.error(f"--servers/--address: {e}")
    args.addresses["nsd"] = args.nsd_address or args.addresses["nsd"]
    args.node_address = args.addresses["ours"] = args.node_address or args.addresses["ours"]
    if args.peer_threads < 1:
        p.error("--peer-threads: at least 1")
    args.fixed_seconds = args.fixed_seconds or args.seconds
    randommix.check(args, p)
    signedmix.check(args)
    if not 0 <= args.ecs <= lib.ECS_LIMIT:
        p.error(f"--ecs: 0 to {lib.ECS_LIMIT}")
    if args.sources < 1 or args.sources > 250 or args.clients < 1 or args.rounds < 1:
        p.error("--sources 1-250, --clients and --rounds at least 1")
    if not 0 < args.fixed_load <= 1:
        p.error("--fixed-load: a share of the max, e.g. 0.7")
    if args.fixed_rate is not None and args.fixed_rate < 1:
        p.error("--fixed-rate: queries per second, at least 1")
    args.fixed_label = f"{args.fixed_rate:g} qps" if args.fixed_rate else f"{args.fixed_load:.0%}"
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin_load is not None and (args.pin_load not in cpus or len(cpus) < 2):
        p.error(f"--pin-load: one of the CPUs {cpus}, and at least one other must be left for the servers")
    if args.also_unpinned and args.pin_load is None:
        p.error("--also-unpinned needs --pin-load CPU")
    return args


def missing_tools(pin: bool) -> list[str]:
    """What the load needs and is not installed, each with its Debian package (the servers': peers)."""
    needed = {"dnsperf": "dnsperf"} | ({"taskset": "util-linux"} if pin else {})
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [f"{cmd} (Debian package {pkg})" for cmd, pkg in needed.items() if shutil.which(cmd, path=path) is None]


def code_state() -> str:
    """The checkout our node runs from: commit, and whether gtmcluster/ has uncommitted changes."""
    head = lib.command_version(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], r"^[0-9a-f]+")
    try:
        status = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "gtmcluster"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return head
    return f"{head} + uncommitted changes to {len(status)} files in gtmcluster/" if status else head


#: passes through every query file before measuring
WARM_PASSES = 3


class Bench:
    """The servers, the query mixes and the schedule of one comparison."""

    def __init__(self, args: argparse.Namespace, work: Path, keys: Sequence[str]):
        self.args = args
        self.work = work
        self.cpus = set(os.sched_getaffinity(0))
        addresses = args.addresses
        random_names = args.names == "random"
        lib.write_files(
            work,
            addresses["nsd"],
            addresses["ours"],
            args.api_port,
            args.server_count,
            args.sources,
            args.processes,
            random_names,
        )
        if args.query_log:  # (each answering worker to a file of its own beside it)
            config = work / "cluster.yaml"
            raw = yaml.safe_load(config.read_text())
            raw["dns_server"]["query_log"] = {"path": "log/queries.dnstap", "max_bytes": 50_000_000, "keep": 1}
            config.write_text(yaml.safe_dump(raw, sort_keys=False))
        peers.write_files(work, keys, addresses, args.peer_threads, args.sources)
        if random_names:
            self.mixes = randommix.write_mixes(work, args.sources, args.random_lines, wanted=tuple(args.mixes))
        else:
            self.mixes = lib.write_mixes(work, args.sources, args.ecs)
        self.mixes |= signedmix.prepare(work, args.sources) if args.dnssec else {}
        self.servers = peers.make_servers(args, work, keys)
        self.runs: list[Run] = []

    # --- servers ---

    def start(self) -> None:
        ready = lib.query(lib.ORIGIN, "SOA")
        for server in self.servers.values():
            took = server.start(ready)
            print(f"  {server.label:<8} up after {took:.1f} s: {' '.join(server.argv)}", flush=True)

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()

    def sanity(self, asks: list[peers.Ask] | None = None) -> list[str]:
        """Ask each server a few questions (*asks*, or `peers.sanity_asks`); print the answers
        and return what looks wrong."""
        problems = []
        print(f"    {'':<44}" + "".join(f" {s.label:<20}" for s in self.servers.values()).rstrip())
        for ask in asks if asks is not None else peers.sanity_asks(self.args.sources):
            line = f"    {ask.label:<44}"
            for server in self.servers.values():
                reply = lib.ask(server.endpoint, ask.message, timeout=2.0, source=ask.source)
                problem = "no reply" if reply is None else ask.check(reply, server.key)
                line += f" {peers.reply_text(reply):<20}"
                if problem:
                    problems.append(f"{server.label} {ask.label}: {problem}")
            print(line.rstrip())
        return problems

    # --- load ---

    def pin(self, pinning: str) -> int | None:
        """Set the servers' affinity for *pinning*; the CPU for dnsperf (None: unpinned)."""
        load_cpu = self.args.pin_load if pinning == "pinned" else None
        server_cpus = self.cpus - {load_cpu} if load_cpu is not None else self.cpus
        for server in self.servers.values():
            proctree.set_tree_affinity(server.pid, server_cpus)
        return load_cpu

    def measure(
        self,
        server: lib.Server,
        mix: str,
        seconds: float,
        qps: float | None,
        load_cpu: int | None,
        passes: int | None = None,
    ) -> tuple[lib.LoadResult, float]:
        if not server.alive():
            raise lib.ServerExited(f"{server.label} is no longer running:\n{server.tail()}")
        a = self.args
        before = server.cpu_seconds()
        result = lib.run_dnsperf(
            server.endpoint,
            self.mixes[mix],
            self.work,
            seconds,
            manyclients.clients_per_process(a.transport, a.connections, a.sources, a.clients),
            a.outstanding,
            qps=qps,
            verbose=qps is not None,
            pin=load_cpu,
            passes=passes,
            mode=a.transport,
        )
        cpu = server.cpu_seconds() - before
        time.sleep(0.5)  # let the server drain before the next run
        return result, cpu

    def record(
        self, slot: Slot, kind: str, seconds: float, qps: float | None, result: lib.LoadResult, cpu: float
    ) -> Run:
        completed = max(result.completed, 1)
        ordered = sorted(result.latencies)
        p50, p90, p99, p999 = (lib.percentile(ordered, p) if ordered else None for p in (50, 90, 99, 99.9))
        run = Run(
            **asdict(slot),
            kind=kind,
            seconds=seconds,
            target_qps=qps,
            qps=result.qps,
            sent=result.sent,
            completed=result.completed,
            lost=result.lost,
            rcodes=result.rcodes,
            avg_latency=result.avg_latency,
            server_cpu=cpu,
            cpu_us_per_query=cpu * 1e6 / completed,
            load_cpu_us_per_query=result.load_cpu * 1e6 / completed,
            p50=p50,
            p90=p90,
            p99=p99,
            p999=p999,
            timeouts=result.timeouts,
            commands=tuple(result.commands),
        )
        self.runs.append(run)
        return run

    def pinnings(self) -> list[str]:
        if self.args.pin_load is None:
            return ["unpinned"]
        return ["unpinned", "pinned"] if self.args.also_unpinned else ["pinned"]

    def warm_up(self) -> None:
        """Every client asks WARM_PASSES times first (a server that learns clients, as ours
        keeps decisions, is measured on clients it has seen), then --warmup seconds more."""
        if self.args.warmup <= 0:
            return
        for mix in self.args.mixes:
            for server in self.servers.values():
                pin = self.pin(self.pinnings()[0])
                if self.args.names == "fixed":  # (random names: nothing to learn)
                    self.measure(server, mix, 0, None, pin, passes=WARM_PASSES)
                self.measure(server, mix, self.args.warmup, None, pin)

    def schedule(self) -> None:
        a = self.args
        order = list(self.servers.values())
        for rnd in range(1, a.rounds + 1):
            for pinning in self.pinnings():
                load_cpu = self.pin(pinning)
                for mix in a.mixes:
                    for server in order if rnd % 2 else order[::-1]:
                        result, cpu = self.measure(server, mix, a.seconds, None, load_cpu)
                        slot = Slot(rnd, mix, server.key, pinning)
                        top = self.record(slot, "max", a.seconds, None, result, cpu)
                        rate = a.fixed_rate or top.qps * a.fixed_load
                        result, cpu = self.measure(server, mix, a.fixed_seconds, rate, load_cpu)
                        fixed = self.record(slot, "fixed", a.fixed_seconds, rate, result, cpu)
                        print(
                            f"  round {rnd} {pinning:<8} {mix:<6} {server.label:<5}"
                            f" max {fmt_qps(top.qps):>7} qps, {top.cpu_us_per_query:5.1f} us/q, lost {top.lost};"
                            f" at {fmt_qps(rate)}: p50 {fmt_ms(fixed.p50)}, p99 {fmt_ms(fixed.p99)},"
                            f" lost {fixed.lost}",
                            flush=True,
                        )


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return str(value) if isinstance(value, Path | lib.Endpoint) else value


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv)
    missing = missing_tools(args.pin_load is not None)
    if missing:
        print(
            f"missing: {', '.join(missing)}.\n`make bench-compare` installs them (tools/ensure-system-tools)",
            file=sys.stderr,
        )
        return 2
    absent = peers.unavailable(args.servers)
    for key, what in absent.items():
        print(f"{key}: left out, missing {what} (`make bench-compare` installs it)", file=sys.stderr)
    if absent and peers.in_ci():
        return 2
    absent |= manyclients.left_out(args.transport, args.servers)
    keys = [k for k in args.servers if k not in absent]

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    work = Path(tempfile.mkdtemp(prefix="gtm-compare-"))
    bench = Bench(args, work, keys)
    per_server = (args.seconds + args.fixed_seconds + 1) * len(args.mixes) * len(bench.pinnings())
    estimate = (args.rounds * per_server + args.warmup * len(args.mixes)) * len(keys) + 10
    dnsperf = lib.command_version(["dnsperf", "-h"], r"Version [\d.]+")
    code = code_state()
    print(
        f"gtmcluster vs {', '.join(s.label for k, s in bench.servers.items() if k != 'ours')}: {args.rounds} rounds,"
        f" alternating; each run {args.seconds:g} s at unlimited rate, then"
        f" {args.fixed_seconds:g} s at {args.fixed_label}{'' if args.fixed_rate else ' of that max'}"
        f" (about {estimate / 60:.1f} min)\n"
        f"  machine: {len(bench.cpus)} CPUs, {platform.platform()}, load average {os.getloadavg()[0]:.2f};"
        f" work folder {work}\n"
        f"  ours: checkout {code}, {args.processes} answering process{'es' if args.processes > 1 else ''}"
        f"{', query log on (dnstap files)' if args.query_log else ''}\n"
        + "\n".join(peers.header_lines(bench.servers, args))
        + f"\n{manyclients.load_line(args)}"
        + f"\n  load: {args.sources} dnsperf ({dnsperf}) processes at once from 127.0.200.1-{args.sources},"
        f" each -c {args.clients} -T 1, {args.outstanding} queries in flight in all, timeout 2 s",
        flush=True,
    )
    started = time.monotonic()
    failed = True
    try:
        bench.start()
        print("  what each answers:")
        problems = bench.sanity() + (manyclients.tcp_sanity(bench.servers) if args.transport == "tcp" else [])
        if args.names == "random":
            problems += bench.sanity(peers.random_asks())
        ours = bench.servers.get("ours")
        rss_before = manyclients.rss_kib(proctree.descendants(ours.pid)) if ours else 0
        for problem in problems:
            print(f"  WRONG: {problem}")
        passes = f"{WARM_PASSES} passes through every query file, then " if args.names == "fixed" else ""
        print(f"  warming up ({passes}{args.warmup:g} s, per server and mix)", flush=True)
        bench.warm_up()
        kept_before = manyclients.kept_metrics(args.node_address.host, args.api_port) if ours else {}
        bench.schedule()
        kept_after = manyclients.kept_metrics(args.node_address.host, args.api_port) if ours else {}
        rss_after = manyclients.rss_kib(proctree.descendants(ours.pid)) if ours else 0
        metrics = peers.node_metrics(args.node_address.host, args.api_port) if "ours" in keys else {}
        processes = {key: s.processes() for key, s in bench.servers.items()}
        results = report(bench, time.monotonic() - started)
        print("\nprocesses at the end: " + ", ".join(f"{bench.servers[k].label} {n}" for k, n in processes.items()))
        if "ours" in keys:
            print("our node's own counters and log:")
            summary = results["summary"]
            wide = summary.get(f"{bench.pinnings()[0]}/wideip") or summary.get(f"{bench.pinnings()[0]}/wildcard", {})
            cpu_us = wide.get("ours", {}).get("cpu_us_per_query")
            lines, kept = manyclients.kept_report(rss_before, rss_after, kept_before, kept_after, cpu_us)
            for line in peers.node_findings(work, metrics) + lines:
                print(f"  {line}")
            results["node_memory"] = kept
        if args.json:
            document = {
                "settings": {k: _plain(v) for k, v in vars(args).items()},
                "environment": {
                    "cpus": sorted(bench.cpus),
                    "load_average_at_end": os.getloadavg(),
                    "platform": platform.platform(),
                    "versions": {key: server.version for key, server in bench.servers.items()},
                    "commands": {key: server.argv for key, server in bench.servers.items()},
                    "left_out": absent,
                    "checkout": code,
                    "dnsperf": dnsperf,
                    "clients": {mix: bench.mixes[mix].clients for mix in args.mixes},
                    "processes": processes,
                },
                "sanity_problems": problems,
                "runs": [asdict(r) for r in bench.runs],
                **results,
                "node_metrics": metrics,
                "seconds": time.monotonic() - started,
            }
            args.json.write_text(json.dumps(document, indent=1))
            print(f"figures written to {args.json}")
        failed = False
    except KeyboardInterrupt:
        print("\ninterrupted; stopping the servers", file=sys.stderr)
    except (lib.ServerExited, RuntimeError, ValueError) as e:
        print(f"\nfailed: {e}", file=sys.stderr)
    finally:
        bench.stop()
        if failed or args.keep:
            print(f"configs and logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
