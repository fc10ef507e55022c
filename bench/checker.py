"""Health checker benchmark: thousands of monitors on one node, with real sockets.

    sudo .venv/bin/python bench/checker.py                       # 5,000 servers, every case
    .venv/bin/python bench/checker.py --servers 1000 --seconds 15 --cases refused,blackhole
    .venv/bin/python bench/checker.py --health max_in_flight=4096 --json var/checker.json

Issue 12 part 3: 5,000 monitors at interval 5 are 1,000 checks a second on one node. This
runs the node's `HealthChecker` with the real (epoll) reactor, the real checks
(`gtmcluster.probe.kinds.make_check`) and a real `Store`, in a process of its own for each
case, inside a network namespace the benchmark creates (and deletes at the end; needs root).
Every virtual server has its own address and a monitor (`--interval` 5, `--timeout` 2):

- `accept`: tcp monitors; one listener (a separate process) on 0.0.0.0:8080 accepts, so
  every connect succeeds. Servers are 127.1.x.y (all of 127/8 is loopback on Linux), each
  its own address, so the connections' TIME_WAITs spread over 5,000 address pairs as they
  would in a real network.
- `refused`: tcp monitors on 127.2.x.y:8080, where nothing listens: refused at once.
- `blackhole`: tcp monitors on 10.200.x.y:8080, routed into an interface that drops
  every packet (a TUN device nobody reads): no answer at all, every check waits for its timeout.
- `http`: http monitors (GET /, expect 200 and "ok") against a listener that answers
  ``HTTP/1.0 200 OK`` with ``ok`` and closes.

After `--warmup` seconds (the first round and its spread), it measures for `--seconds`:
- checks/s: checks started in the window, against the configured N / interval;
- gap: the time between two starts of the same server's check, against the interval; a
  server checked less often than its interval detects failures that much later;
- lag: how late each check started after its due time (p50/p99/max), from the due times
  of the checker's schedule;
- skipped: checks the checker did not start (no budget or free slot within half an
  interval, or the previous round still running), from its statistics;
- CPU of the process (user + system) in the window, as a share of one core;
- file descriptors: the peak of ``/proc/self/fd`` over the run (sampled every 0.1 s);
- the reactor's longest stall: a 10 ms timer's worst lateness, over the whole run (the first
  round included) and in the window.

The process runs as a node does: what is loaded is frozen out of the garbage collector's
sight, and `gtmcluster.runtime.heap.HeapKeeper` freezes after a slow full collection; the time the
collector took and the freezes are reported.

`--source DIR` (repeatable) runs the checker of another source tree (a `git archive` of an
older commit, say), each case with each tree in turn, for figures taken side by side. For
the checker before issue 12 (a LoopingCall per subject, a semaphore of max_in_flight), the
lag is measured from the tick that made a check due to its start.

Not a test: figures depend on the machine and on what else runs on it (the load average
is printed with them).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

CASES = ("accept", "refused", "blackhole", "http")
PORT = 8080
NETNS_PREFIX = "gtmbench-checker"
BLACKHOLE_NET = "10.200.0.0/16"
BLACKHOLE_DEV = "gtmhole0"


# -- the orchestration (outside the namespace)


def run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def make_netns(name: str) -> None:
    run(["ip", "netns", "add", name])
    inside = ["ip", "netns", "exec", name]
    run([*inside, "ip", "link", "set", "lo", "up"])
    # a TUN device that no process reads drops whatever is routed into it, silently (the
    # kernel here has no dummy interfaces): a black-holed network
    run([*inside, "ip", "tuntap", "add", "dev", BLACKHOLE_DEV, "mode", "tun"])
    run([*inside, "ip", "addr", "add", "10.200.0.1/16", "dev", BLACKHOLE_DEV])
    run([*inside, "ip", "link", "set", BLACKHOLE_DEV, "up"])


def delete_netns(name: str) -> None:
    run(["ip", "netns", "delete", name], check=False)


def load_average() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def orchestrate(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        print("bench/checker.py needs root (it creates a network namespace)", file=sys.stderr)
        return 2
    netns = f"{NETNS_PREFIX}-{os.getpid()}"
    results = []
    here = Path(__file__).resolve().parent.parent
    sources = [Path(s).resolve() for s in args.source] or [here]
    try:
        make_netns(netns)
        for case, source in itertools.product(args.cases, sources):
            loads = Path("/proc/loadavg").read_text().split()[:3]
            cmd = [
                "ip",
                "netns",
                "exec",
                netns,
                sys.executable,
                __file__,
                "--inside",
                case,
                "--servers",
                str(args.servers),
                "--interval",
                str(args.interval),
                "--timeout",
                str(args.timeout),
                "--warmup",
                str(args.warmup),
                "--seconds",
                str(args.seconds),
            ]
            for setting in args.health:
                cmd += ["--health", setting]
            if args.no_keeper:
                cmd.append("--no-keeper")
            if args.gc_threshold:
                cmd += ["--gc-threshold", ",".join(str(n) for n in args.gc_threshold)]
            env = {**os.environ, "PYTHONPATH": str(source)}
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=source, env=env)
            if proc.returncode != 0:
                print(f"case {case} failed:\n{proc.stdout}\n{proc.stderr}", file=sys.stderr)
                return 1
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            result["load_average"] = " ".join(loads)
            result["source"] = "this checkout" if source == here else str(source)
            results.append(result)
            report(result)
    finally:
        delete_netns(netns)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f} ms" if value >= 0.0095 else f"{value * 1000:.1f} ms"


def report(r: dict[str, Any]) -> None:
    lag = r["lag"]
    gap = r["gap"]
    print(
        f"{r['case']:9} {r['servers']} servers, interval {r['interval']:g} s, timeout {r['timeout']:g} s, "
        f"health {r['health'] or 'defaults'}, {r['source']} (load average {r['load_average']})"
    )
    print(
        f"  checks/s {r['checks_per_second']:.0f} of {r['wanted_per_second']:.0f} wanted; "
        f"skipped {r['skipped']} (whole run {r['skipped_run']}); servers never checked in the window "
        f"{r['never_checked']}"
    )
    if gap["max"] is None:
        print("  gap: no server was checked twice in the window")
    else:
        print(
            f"  gap p50 {gap['p50']:.2f} s, p99 {gap['p99']:.2f} s, max {gap['max']:.2f} s, "
            f"interval {r['interval']:g} s"
        )
    print(f"  lag p50 {ms(lag['p50'])}, p99 {ms(lag['p99'])}, max {ms(lag['max'])} (whole run {ms(lag['max_run'])})")
    print(
        f"  CPU {r['cpu'] * 100:.0f}% of a core (garbage collection {r['gc'] * 100:.0f}%: "
        f"{', '.join(f'{t:.1f}' for t in r['gc_by_generation'])} s by generation over the run, "
        f"{r['freezes']} freezes); RSS {r['rss'][0]:.0f} -> {r['rss'][1]:.0f} MB in the window"
    )
    print(f"  peak fds {r['peak_fds']} (at start {r['base_fds']}); peak in flight {r['peak_in_flight']}")
    print(
        f"  reactor stall max {ms(r['stall_max'])} (window {ms(r['stall_max_window'])}, p99 {ms(r['stall_p99'])}); "
        f"verdicts {r['verdicts']}"
    )


# -- the backend (inside the namespace, its own process)


def serve(kind: str) -> None:
    from twisted.internet import protocol, reactor

    class Accept(protocol.Protocol):
        def connectionMade(self) -> None:
            if kind == "http":
                assert self.transport is not None
                self.transport.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
                self.transport.loseConnection()

    factory = protocol.Factory.forProtocol(Accept)
    factory.noisy = False
    reactor.listenTCP(PORT, factory, backlog=4096, interface="0.0.0.0")  # type: ignore[attr-defined]
    print("ready", flush=True)
    reactor.run()  # type: ignore[attr-defined]


# -- one case (inside the namespace)


def address(case: str, i: int) -> str:
    high, low = divmod(i, 250)
    if case in ("accept", "http"):
        return f"127.1.{high}.{low + 1}"
    if case == "refused":
        return f"127.2.{high}.{low + 1}"
    return f"10.200.{high + 1}.{low + 1}"


def config_for(case: str, args: argparse.Namespace, folder: Path) -> Path:
    monitor: dict[str, Any] = {
        "type": "http" if case == "http" else "tcp",
        "interval": args.interval,
        "timeout": args.timeout,
        "up_after": 2,
        "down_after": 3,
    }
    if case == "http":
        monitor.update({"path": "/", "expect_status": [200], "expect_body": "ok"})
    health: dict[str, Any] = {}
    for setting in args.health:
        key, _, value = setting.partition("=")
        health[key] = float(value) if "." in value else int(value)
    raw: dict[str, Any] = {
        "sync_group": {
            "name": "bench",
            "members": [{"name": "n1", "datacenter": "DC1", "peer": "127.0.0.1:4353", "dns": ["127.0.0.1:5353"]}],
        },
        "datacenters": ["DC1"],
        "monitors": {"m": monitor},
        "virtual_servers": {
            f"vs{i}": {"address": address(case, i), "port": PORT, "datacenter": "DC1", "monitor": "m"}
            for i in range(args.servers)
        },
        "zones": [{"origin": "bench.test", "file": "bench.test.zone"}],
    }
    (folder / "bench.test.zone").write_text(
        "$TTL 3600\n@ IN SOA ns1 hostmaster 1 3600 600 86400 300\n  IN NS ns1\nns1 IN A 192.0.2.1\n"
    )
    if health:
        raw["health"] = health
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_case(case: str, args: argparse.Namespace) -> dict[str, Any]:
    from twisted.internet import reactor as global_reactor

    from gtmcluster import limits
    from gtmcluster.config.load import load
    from gtmcluster.health.checker import HealthChecker
    from gtmcluster.probe.base import Check, Result, Target
    from gtmcluster.probe.kinds import make_check
    from gtmcluster.runtime import heap
    from gtmcluster.state.store import Store

    reactor: Any = global_reactor
    limits.raise_open_files(0)
    backend = None
    if case in ("accept", "http"):
        backend = subprocess.Popen(
            [sys.executable, __file__, "--serve", case], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert backend.stdout is not None
        backend.stdout.readline()
    folder = Path(tempfile.mkdtemp(prefix="gtmbench-checker-"))
    config = load(config_for(case, args, folder))

    starts: dict[str, list[float]] = defaultdict(list)
    lags: list[tuple[float, float]] = []  # (when started, how late)
    due_since: dict[str, float] = {}  # the old checker: address -> the tick that made it due
    in_flight = 0
    peak_in_flight = 0

    def factory(monitor: Any) -> Check:
        real = make_check(monitor, reactor)

        def check(target: Target) -> Any:
            nonlocal in_flight, peak_in_flight
            now = reactor.seconds()
            key = str(target.address)
            starts[key].append(now)
            due = due_since.pop(key, None)
            if due is not None:
                lags.append((now, now - due))
            in_flight += 1
            peak_in_flight = max(peak_in_flight, in_flight)

            def done(result: Result) -> Result:
                nonlocal in_flight
                in_flight -= 1
                return result

            return real(target).addBoth(done)

        return check

    store = Store("n1", reactor.seconds)
    checker = HealthChecker(config, store, reactor, "n1", factory)
    schedule = getattr(checker, "schedule", None)
    if schedule is not None:
        take = schedule.take

        def noting_lags(now: float) -> list[Any]:
            entries = take(now)
            for entry in entries:  # (an entry's due time moves on when its round ends)
                lags.append((now, now - entry.due))
            return entries

        schedule.take = noting_lags
    else:  # the checker before issue 12 (--source): a LoopingCall per subject and a semaphore
        tick = checker._tick

        def noting_ticks(subject: Any) -> None:
            for target in subject.targets:
                due_since.setdefault(str(target.address), reactor.seconds())
            tick(subject)

        checker._tick = noting_ticks

    stalls: list[tuple[float, float]] = []  # (when, lateness)
    fds = [fd_count()]
    base_fds = fds[0]
    period = 0.01

    def heartbeat(expected: float) -> None:
        now = time.monotonic()
        stalls.append((now, max(0.0, now - expected)))
        reactor.callLater(period, heartbeat, time.monotonic() + period)

    def sample_fds() -> None:
        fds.append(fd_count())
        reactor.callLater(0.1, sample_fds)

    gc_time = [0.0, 0.0]  # seconds spent collecting; when the current collection began
    gc_by_generation = [0.0, 0.0, 0.0]

    def gc_hook(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_time[1] = time.perf_counter()
        else:
            took = time.perf_counter() - gc_time[1]
            gc_time[0] += took
            gc_by_generation[info["generation"]] += took

    gc.callbacks.append(gc_hook)
    marks: dict[str, float] = {}

    def begin_window() -> None:
        marks["start"] = reactor.seconds()
        marks["mono"] = time.monotonic()
        marks["cpu"] = cpu_seconds()
        marks["gc"] = gc_time[0]
        marks["rss"] = rss_mb()
        marks["skipped"] = skipped_count()

    def end_window() -> None:
        marks["end"] = reactor.seconds()
        marks["mono_end"] = time.monotonic()
        marks["cpu_end"] = cpu_seconds()
        marks["gc_end"] = gc_time[0]
        marks["rss_end"] = rss_mb()
        marks["skipped_end"] = skipped_count()
        checker.stopService()
        reactor.callLater(args.timeout + 0.5, reactor.stop)

    def skipped_count() -> int:
        stats = getattr(checker, "stats", None)  # (the old checker skipped nothing: it queued)
        return 0 if stats is None else int(stats.skipped)

    # as the node does: what is loaded is frozen out of later collections, and a slow full
    # collection is followed by a freeze (gtmcluster/runtime/heap.py)
    heap.freeze_now()
    keeper = heap.HeapKeeper(reactor)
    if not args.no_keeper:
        reactor.callWhenRunning(keeper.startService)
    if args.gc_threshold:
        gc.set_threshold(*args.gc_threshold)
    reactor.callWhenRunning(checker.startService)
    reactor.callWhenRunning(heartbeat, time.monotonic() + period)
    reactor.callWhenRunning(sample_fds)
    reactor.callLater(args.warmup, begin_window)
    reactor.callLater(args.warmup + args.seconds, end_window)
    reactor.run()
    if backend is not None:
        backend.terminate()
        backend.wait()

    start, end = marks["start"], marks["end"]
    in_window = [t for times in starts.values() for t in times if start <= t < end]
    gaps = []
    for times in starts.values():
        gaps.extend(b - a for a, b in itertools.pairwise(times) if start <= b < end)
    never = sum(1 for i in range(args.servers) if not any(start <= t < end for t in starts[address(case, i)]))
    window_lags = [late for when, late in lags if start <= when < end]
    lag = {
        "p50": percentile(window_lags, 0.5),
        "p99": percentile(window_lags, 0.99),
        "max": max(window_lags) if window_lags else None,
        "max_run": max((late for _, late in lags), default=None),
    }
    window_stalls = [s for when, s in stalls if marks["mono"] <= when < marks["mono_end"]]
    verdicts: dict[str, int] = defaultdict(int)
    for i in range(args.servers):
        record = store.get(f"obs/vs/vs{i}/n1")
        verdicts["none" if record is None else "up" if record.value["up"] else "down"] += 1
    seconds = end - start
    return {
        "case": case,
        "servers": args.servers,
        "interval": args.interval,
        "timeout": args.timeout,
        "health": " ".join(args.health),
        "checks_per_second": len(in_window) / seconds,
        "wanted_per_second": args.servers / args.interval,
        "skipped": marks["skipped_end"] - marks["skipped"],
        "skipped_run": skipped_count(),
        "freezes": keeper.freezes,
        "rss": [marks["rss"], marks["rss_end"]],
        "never_checked": never,
        "gap": {
            "p50": percentile(gaps, 0.5),
            "p99": percentile(gaps, 0.99),
            "max": max(gaps) if gaps else None,
        },
        "lag": lag,
        "cpu": (marks["cpu_end"] - marks["cpu"]) / (marks["mono_end"] - marks["mono"]),
        "gc": (marks["gc_end"] - marks["gc"]) / (marks["mono_end"] - marks["mono"]),
        "gc_by_generation": gc_by_generation,
        "base_fds": base_fds,
        "peak_fds": max(fds),
        "peak_in_flight": peak_in_flight,
        "stall_max": max(s for _, s in stalls),
        "stall_max_window": max(window_stalls) if window_stalls else 0.0,
        "stall_p99": percentile(window_stalls, 0.99),
        "verdicts": dict(verdicts),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=5000)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before the window")
    parser.add_argument("--seconds", type=float, default=30.0, help="the measured window")
    parser.add_argument("--cases", type=lambda s: s.split(","), default=list(CASES))
    parser.add_argument("--health", action="append", default=[], help="a health setting, KEY=VALUE (repeatable)")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument(
        "--gc-threshold",
        type=lambda s: tuple(int(n) for n in s.split(",")),
        help="gc.set_threshold(...) for the run, e.g. 50000,10,10 (default: Python's, 700,10,10)",
    )
    parser.add_argument(
        "--no-keeper", action="store_true", help="no freeze after a slow full collection (gtmcluster/runtime/heap.py)"
    )
    parser.add_argument(
        "--source",
        action="append",
        default=[],
        help="run the checker of this source tree instead (repeatable: each case runs with each, in turn)",
    )
    parser.add_argument("--inside", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--serve", choices=("accept", "http"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    if args.inside:
        print(json.dumps(one_case(args.inside, args)))
        return 0
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}: choose from {', '.join(CASES)}")
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
