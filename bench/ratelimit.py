"""What response rate limiting costs on the UDP answer path, in-process (no sockets).

    PYTHONPATH=. .venv/bin/python bench/ratelimit.py [--queries 50000]

Times `FastPath.handle` for a static answer and a wide IP answer without a limiter, with
one whose prefixes stay under the rate (the cost every answered query pays), and for
queries from a prefix over the rate (dropped: what a flood costs once limited, against the
answer it would otherwise get), and a spray of 100,000 prefixes (the table at its bound).
Not a test: the figures depend on the machine.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from gtmcluster.config.dnsserver import RateLimit
from gtmcluster.config.load import load
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dns.ratelimit import RateLimiter
from gtmcluster.node import Node
from tests.support import configs
from tests.support.dnsclient import query


def per_query(fast: FastPath, wire: bytes, sources: list[str], n: int) -> float:
    """Microseconds per `handle` call over *n* calls."""
    m = len(sources)
    start = time.perf_counter()
    for i in range(n):
        fast.handle(wire, sources[i % m])
    return (time.perf_counter() - start) / n * 1e6


def best(runs: list[tuple[FastPath, bytes, list[str]]], n: int, rounds: int = 9) -> list[float]:
    """The fastest of *rounds* timings of each run, the runs interleaved (so a busy moment
    of a shared machine hits them alike)."""
    out = [float("inf")] * len(runs)
    for _ in range(rounds):
        for i, (fast, wire, sources) in enumerate(runs):
            out[i] = min(out[i], per_query(fast, wire, sources, n))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=50_000)
    args = parser.parse_args()
    n = args.queries
    with tempfile.TemporaryDirectory() as tmp:
        now = [0.0]
        node = Node(load(configs.write(Path(tmp), configs.base())), "n1", clock=lambda: now[0], rng=random.Random(1))
        node.ready = True
        static = query("www.example.test")
        wideip = query("gslb.example.test")
        sources = [f"198.51.{i // 250}.{i % 250 + 1}" for i in range(1000)]  # in four /24s
        off = FastPath(node.responder)
        loose = RateLimiter(RateLimit(responses_per_second=1_000_000), lambda: now[0], node.stats)
        on = FastPath(node.responder, loose)
        tight = FastPath(node.responder, RateLimiter(RateLimit(responses_per_second=1), lambda: now[0], node.stats))
        spray_limiter = RateLimiter(RateLimit(responses_per_second=1, ipv4_prefix=32), lambda: now[0], node.stats)
        spray = FastPath(node.responder, spray_limiter)
        spray_sources = [f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(300_000)]
        for name, wire in (("static A", static), ("wide IP A", wideip)):
            for fast in (off, on):
                for source in sources:  # prepare the templates and every client's decision
                    fast.handle(wire, source)
            base, limited_on = best([(off, wire, sources), (on, wire, sources)], n)
            print(f"{name:10}  no limiter {base:5.2f} us   limiter, under the rate {limited_on:5.2f} us")
        (dropped,) = best([(tight, static, ["192.0.2.1"])], n)
        print(f"a prefix over the rate (dropped)        {dropped:5.2f} us")
        (sprayed,) = best([(spray, static, spray_sources)], len(spray_sources), rounds=3)
        print(
            f"{len(spray_sources):,} sources sprayed, each new (table bound {spray_limiter.table_size:,}, "
            f"held {len(spray_limiter):,})  {sprayed:5.2f} us"
        )


if __name__ == "__main__":
    main()
