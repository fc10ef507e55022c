"""What a flood of new clients costs a store with and without a bound on persistence records.

    .venv/bin/python bench/bounds.py [--records 100000] [--bound 10000] [--rounds 2]

For each round, in one process: N persistence records written 0.2 ms apart (each a new
client network, TTL one hour) into a store without a bound and into one bounded to B (full
after the first B): the time per write, and the memory the store holds at the end (traced
allocations, a second pass). Figures depend on the machine and its load: compare the two
columns of one run (the ratio), not runs on different machines.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import tracemalloc

from gtmcluster.state import persistence  # (also registers the persistence value form)
from gtmcluster.state.keys import PERSIST
from gtmcluster.state.store import Store

VALUE = {"pool": "web", "members": ["vs-cnc"]}


def keys(count: int) -> list[str]:
    return [f"{PERSIST}www/1/{10 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}.0/24" for i in range(count)]


def flood(names: list[str], bound: int | None, traced: bool = False) -> tuple[float, int]:
    """(seconds per write, bytes held after) for one flood into a fresh store."""
    now = [1_000.0]
    store = Store("bench", lambda: now[0])
    if bound is not None:
        store.bound(persistence.KIND, bound)
    if traced:
        gc.collect()
        tracemalloc.start()
    started = time.perf_counter()
    for key in names:
        now[0] += 0.0002
        store.put(key, VALUE, ttl=3600)
    elapsed = time.perf_counter() - started
    held = 0
    if traced:
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    assert bound is None or store.kinds()[persistence.KIND] == bound
    return elapsed / len(names), held


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--bound", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    names = keys(args.records)
    print(f"{args.records} writes, bound {args.bound}; load average {os.getloadavg()[0]:.2f}")
    for _ in range(args.rounds):
        free, _ = flood(names, None)
        bounded, _ = flood(names, args.bound)
        print(
            f"  per write: no bound {free * 1e6:.1f} us, bounded (evicting) {bounded * 1e6:.1f} us, "
            f"ratio {bounded / free:.2f}"
        )
    _, free_bytes = flood(names, None, traced=True)
    _, bounded_bytes = flood(names, args.bound, traced=True)
    print(
        f"  held after: no bound {free_bytes / 1e6:.1f} MB ({free_bytes / args.records:.0f} B a record), "
        f"bounded {bounded_bytes / 1e6:.1f} MB ({bounded_bytes / args.bound:.0f} B a record held)"
    )


if __name__ == "__main__":
    main()
