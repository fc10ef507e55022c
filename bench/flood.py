"""A random-name flood against our node while an honest client asks the wide IP (issue 34).

    .venv/bin/python bench/flood.py [--minutes 10] [--rate 0] [--sources 2] [--lines 1000000]
                                    [--sample 5] [--json FILE]

Starts our node as bench/compare.py does (127.0.0.242:5300, the bench zone and the wide IP
`gslb.bench.test`, with `--names random`'s wildcard wide IP `*.apps.bench.test`), then for
`--minutes` floods it with dnsperf from `--sources` processes (127.0.200.N), each reading its
own file of `--lines` names: a fresh random label below the zone (NXDOMAIN) and one below
`apps` (the wildcard wide IP), alternating, no EDNS, at `--rate` queries/s in all (0: as fast
as it answers, 200 in flight). Meanwhile an honest client (127.0.201.1) asks
`gslb.bench.test A` every 20 ms and waits up to 1 s for each answer. Every `--sample`
seconds it prints the node's resident memory (VmRSS of its processes), the flood's answers/s
(the node's own counter, /metrics) and the honest client's answers and latency in that time.
At the end: the honest client's answer rate, p50, p99 and worst latency, the node's RSS at
start, at the end and at most, and its CPU per flood query.

Not a test: the figures depend on the machine; memory growth is the node's own (the flood's
names change nothing else), and the honest client's figures say what the flood leaves to a
real resolver on this machine.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import comparelib as lib  # bench/ is not a package: its folder is on sys.path
import manyclients
import peers
import proctree
import randommix

HONEST = "127.0.201.1"
PERIOD = 0.020  # the honest client's interval
TIMEOUT = 1.0


def arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    head, _, rest = (__doc__ or "").partition("\n\n")
    p = argparse.ArgumentParser(description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0, help="how long the flood lasts (10)")
    p.add_argument("--rate", type=float, default=0.0, help="flood queries/s in all; 0: unlimited (0)")
    p.add_argument("--sources", type=int, default=2, help="dnsperf processes, one per source address (2)")
    p.add_argument("--lines", type=int, default=1_000_000, help="names in each process's file (1,000,000)")
    p.add_argument("--sample", type=float, default=5.0, help="seconds between samples (5)")
    p.add_argument("--python", default=sys.executable, help="the Python that runs twistd (this one)")
    p.add_argument("--node-address", type=lib.Endpoint.parse, help="our node's DNS (127.0.0.242:5300)")
    p.add_argument("--api-port", type=int, default=8053, help="our node's API port, on --node-address (8053)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the samples and the summary here")
    args = p.parse_args(argv)
    if not 1 <= args.sources <= 250 or args.minutes <= 0 or args.lines < 1000 or args.rate < 0:
        p.error("--sources 1-250, --minutes above 0, --lines at least 1000, --rate at least 0")
    return args


def write_flood(directory: Path, sources: int, lines: int) -> tuple[Path, ...]:
    """One file per process: random labels below the zone and below `apps`, alternating."""
    rng = random.Random(11)
    files = []
    for s in range(sources):
        path = directory / f"flood-{s}.txt"
        labels = randommix.random_labels(rng, lines)
        parents = (lib.ORIGIN, lib.APPS)
        path.write_text("".join(f"{label}.{parents[i % 2]} A\n" for i, label in enumerate(labels)))
        files.append(path)
    return tuple(files)


class Honest:
    """Asks the wide IP every PERIOD from its own address; notes each answer's latency (None: lost)."""

    def __init__(self, server: lib.Endpoint):
        self.server = server
        self.results: list[tuple[float, float | None]] = []  # (when sent, latency or None)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((HONEST, 0))
        sock.settimeout(TIMEOUT)
        qid = 0
        next_at = time.monotonic()
        while not self.stopping.is_set():
            qid = (qid + 1) & 0xFFFF
            sent = time.monotonic()
            sock.sendto(lib.query(lib.WIDEIP, "A", qid=qid), (self.server.host, self.server.port))
            latency = None
            while True:
                try:
                    data = sock.recv(4096)
                except TimeoutError:
                    break
                if data[:2] == qid.to_bytes(2, "big"):
                    latency = time.monotonic() - sent
                    break
                if time.monotonic() - sent > TIMEOUT:
                    break
            self.results.append((sent, latency))
            next_at += PERIOD
            time.sleep(max(0.0, next_at - time.monotonic()))
        sock.close()


def summary_of(results: list[tuple[float, float | None]]) -> dict[str, Any]:
    answered = sorted(latency for _, latency in results if latency is not None)
    return {
        "asked": len(results),
        "answered": len(answered),
        "answer_rate": len(answered) / len(results) if results else None,
        "p50": lib.percentile(answered, 50) if answered else None,
        "p99": lib.percentile(answered, 99) if answered else None,
        "max": answered[-1] if answered else None,
    }


def queries_answered(host: str, api_port: int) -> float:
    """The node's count of answered queries (/metrics `gtm_dns_queries_total`, summed)."""
    queries = peers.node_metrics(host, api_port).get("queries", {})
    return float(sum(queries.values()))


def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv)
    if shutil.which("dnsperf") is None:
        print("missing: dnsperf (`make bench-compare` installs it)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gtm-flood-"))
    endpoint = args.node_address or lib.Endpoint.parse(peers.SPECS["ours"].address)
    api_port = args.api_port
    lib.write_files(work, lib.Endpoint.parse(peers.SPECS["nsd"].address), endpoint, api_port, 1, args.sources, 1, True)
    files = write_flood(work, args.sources, args.lines)
    spec = argparse.Namespace(python=args.python, addresses={"ours": endpoint})
    server = peers.make_servers(spec, work, ["ours"])["ours"]
    seconds = args.minutes * 60
    print(
        f"random-name flood: {args.minutes:g} min, {args.sources} dnsperf processes"
        f" ({'unlimited' if not args.rate else f'{args.rate:g} q/s'}), {args.lines:,} names each;"
        f" an honest client asks {lib.WIDEIP} A every {PERIOD * 1000:.0f} ms from {HONEST}\n"
        f"  ours: {' '.join(server.argv)}; work folder {work}",
        flush=True,
    )
    samples: list[dict[str, Any]] = []
    flood: list[subprocess.Popen[bytes]] = []
    honest = Honest(endpoint)
    try:
        took = server.start(lib.query(lib.ORIGIN, "SOA"))
        rss_start = manyclients.rss_kib(proctree.descendants(server.pid))
        print(f"  up after {took:.1f} s, RSS {rss_start / 1024:.1f} MiB", flush=True)
        cpu_start, answered_start = server.cpu_seconds(), queries_answered(endpoint.host, api_port)
        for i, file in enumerate(files):
            argv = ["dnsperf", "-s", endpoint.host, "-p", str(endpoint.port), "-a", lib.source_address(i)]
            argv += ["-d", str(file), "-l", f"{seconds:g}", "-c", "2", "-T", "1", "-q", str(200 // len(files))]
            argv += ["-t", "2"] + (["-Q", str(max(1, round(args.rate / len(files))))] if args.rate else [])
            flood.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        print(f"  flood: {' '.join(argv)}", flush=True)
        honest.thread.start()
        started = time.monotonic()
        last_answered, last_at, seen = answered_start, started, 0
        print(f"  {'t':>6} {'RSS MiB':>8} {'answers/s':>10} {'honest':>9} {'p50':>9} {'p99':>9} {'max':>9}")
        while time.monotonic() - started < seconds:
            time.sleep(min(args.sample, max(0.0, seconds - (time.monotonic() - started))))
            now = time.monotonic()
            rss = manyclients.rss_kib(proctree.descendants(server.pid))
            answered = queries_answered(endpoint.host, api_port)
            window = honest.results[seen:]
            seen += len(window)
            h = summary_of(window)
            sample = {
                "t": now - started,
                "rss_kib": rss,
                "answers_per_s": (answered - last_answered) / (now - last_at),
                "honest": h,
            }
            samples.append(sample)
            last_answered, last_at = answered, now
            print(
                f"  {sample['t']:>6.0f} {rss / 1024:>8.1f} {sample['answers_per_s']:>10.0f}"
                f" {h['answered']:>4}/{h['asked']:<4} {fmt_ms(h['p50']):>9} {fmt_ms(h['p99']):>9}"
                f" {fmt_ms(h['max']):>9}",
                flush=True,
            )
        honest.stopping.set()
        honest.thread.join(timeout=5)
        for process in flood:
            process.wait(timeout=30)
        cpu = server.cpu_seconds() - cpu_start
        answered = queries_answered(endpoint.host, api_port) - answered_start
        rss_end = manyclients.rss_kib(proctree.descendants(server.pid))
        total = summary_of(honest.results)
        result = {
            "settings": {k: str(v) for k, v in vars(args).items()},
            "rss_kib_start": rss_start,
            "rss_kib_end": rss_end,
            "rss_kib_max": max([rss_start, rss_end, *(s["rss_kib"] for s in samples)]),
            "queries_answered": answered,
            "answers_per_s": answered / seconds,
            "cpu_us_per_query": cpu * 1e6 / answered if answered else None,
            "honest": total,
            "samples": samples,
        }
        print(
            f"\nhonest client: {total['answered']} of {total['asked']} answered"
            f" ({(total['answer_rate'] or 0):.2%}), p50 {fmt_ms(total['p50'])}, p99 {fmt_ms(total['p99'])},"
            f" worst {fmt_ms(total['max'])}\n"
            f"node: {answered:,.0f} answers ({answered / seconds:,.0f}/s), CPU"
            f" {result['cpu_us_per_query'] or 0:.1f} us a query; RSS {rss_start / 1024:.1f} MiB at start,"
            f" {rss_end / 1024:.1f} MiB at the end ({(rss_end - rss_start) / 1024:+.1f} MiB),"
            f" at most {result['rss_kib_max'] / 1024:.1f} MiB"
        )
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
            print(f"figures written to {args.json}")
        return 0
    except (lib.ServerExited, OSError) as e:
        print(f"\nfailed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 1
    finally:
        honest.stopping.set()
        for process in flood:
            if process.poll() is None:
                process.kill()
                process.wait()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
