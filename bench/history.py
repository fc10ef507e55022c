"""What the dashboard's history costs (gtmcluster/history.py).

    .venv/bin/python bench/history.py [--wideips 10,1000,10000] [--rounds 20]

A node of a small config whose counters hold N queried wide IPs (each with two query
types, as A and AAAA) and N distinct answers (servers of three data centers), as after a
busy hour. Measured, each the best of --rounds:

1. one sample (`History.sample_steps`, every 10 s on the node, run a few milliseconds per
   reactor turn): rates of every queried wide IP, the busiest 20 kept, answers per data
   center, RTT medians; its whole CPU time and the longest step between two yields (what
   one reactor turn may hold at most, beyond the 5 ms slice budget);
2. one answer of GET /api/v1/history (`History.to_json`) with all 360 samples held;
3. one path record heard (the store listener, on every path record written or received).

Prints microseconds. Not a test: figures depend on the machine and its load. A sample
costs in proportion to the wide IPs that had queries (not to the config's size).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from twisted.internet.task import Clock

from gtmcluster.config.load import load
from gtmcluster.history import History
from gtmcluster.node import Node
from gtmcluster.state import keys
from tests.support import configs

SERVERS = ("vs1", "vs2", "vs3")


def measure(n: int, rounds: int) -> tuple[float, float, float, float]:
    clock = Clock()
    with tempfile.TemporaryDirectory() as d:
        node = Node(load(configs.write(Path(d), configs.base())), "n1", clock=clock.seconds, rng=random.Random(1))
    history = History(node, clock)  # sampled by hand here, not by its loop
    stats = node.stats

    def busy() -> None:
        for i in range(n):
            name = f"w{i}.example.test"
            stats.queries[(name, "A", "NOERROR", "topology")] += i % 97 + 1
            stats.queries[(name, "AAAA", "NOERROR", "topology")] += 1
            stats.answered[(SERVERS[i % 3], f"x{i}")] += i % 97 + 1

    samples = []
    for _ in range(history.points + rounds):  # a full hour held, then the rounds measured
        busy()
        clock.advance(history.interval)
        steps, longest, total = history.sample_steps(), 0.0, 0.0
        while True:
            started = time.perf_counter()
            try:
                next(steps)
            except StopIteration:
                break
            finally:
                took = time.perf_counter() - started
                longest, total = max(longest, took), total + took
        samples.append((total, longest))
    answer = min(_timed(history.to_json) for _ in range(rounds))
    history.startService()
    value = {"rtt": 20000, "last_rtt": 20000, "hops": 0, "completion": 100}
    value.update({"protocol": "udp", "failures": 0, "window": "", "by": "n1"})
    record = node.store.put(keys.path("192.0.2.1", "DC2"), value)
    heard = min(_timed(lambda: [history._record_changed(record) for _ in range(1000)]) for _ in range(rounds)) / 1000
    history.stopService()
    measured = samples[-rounds:]
    return min(t for t, _ in measured), max(step for _, step in measured), answer, heard


def _timed(f: Callable[[], object]) -> float:
    started = time.perf_counter()
    f()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wideips", default="10,1000,10000")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(
        f"{'queried wide IPs':>16} {'sample µs':>10} {'longest step µs':>16} {'/history µs':>12} {'path heard µs':>14}"
    )
    for n in (int(x) for x in args.wideips.split(",")):
        sample, step, answer, heard = measure(n, args.rounds)
        print(f"{n:>16} {sample * 1e6:>10.0f} {step * 1e6:>16.0f} {answer * 1e6:>12.0f} {heard * 1e6:>14.2f}")


if __name__ == "__main__":
    main()
