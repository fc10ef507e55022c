"""The answer path's cost for random names, in process: `FastPath.answer` against the floor's.

    PYTHONPATH=.:twistd-plugins .venv/bin/python bench/randomnames.py [--names 100000]

Builds a node from bench/compare.py's `--names random` config (the bench zone, the wide IP
and the wildcard wide IP `*.apps.bench.test`), then answers `--names` queries of a fresh
12-letter label below the zone (NXDOMAIN), as many below `apps` (the wildcard wide IP), as
many two random labels below the zone (NXDOMAIN, the parent absent too) and as many one
label below the zone with a client subnet (10,000 /24s), from one LDNS, through
`FastPath.answer`, and the same queries through the floor's `answer` (bench/floor.py: a
reply written from its records). Prints µs per query for each, and how many entries each
of the node's kept-reply dicts holds afterwards (`KeptReplies`): what the flood left
behind. No sockets: the cost of the answer path alone.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import comparelib as lib  # bench/ is not a package: its folder is on sys.path
import floor
import randommix

from gtmcluster.config.load import load
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.node import Node


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").partition("\n\n")[0])
    p.add_argument("--names", type=int, default=100_000, help="queries of each kind (100,000)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gtm-randomnames-"))
    try:
        local = lib.Endpoint("127.0.0.1", 5300)
        lib.write_files(work, local, local, 8053, 1, 4, 1, True)
        node = Node(load(work / "cluster.yaml"), "bench", clock=lambda: 1000.0, rng=random.Random(1))
        node.ready = True
        fast = FastPath(node.responder)
        records = floor.zone_records()
        names = {name for name, _ in records}
        rng = random.Random(3)
        kinds = {
            f"<label>.{lib.ORIGIN}": lambda label, i: lib.query(f"{label}.{lib.ORIGIN}", "A", qid=i),
            f"<label>.{lib.APPS}": lambda label, i: lib.query(f"{label}.{lib.APPS}", "A", qid=i),
            f"<label>.<label>.{lib.ORIGIN}": lambda label, i: lib.query(
                f"{label}.{label[::-1]}.{lib.ORIGIN}", "A", qid=i
            ),
            f"<label>.{lib.ORIGIN} with ECS": lambda label, i: lib.query(
                f"{label}.{lib.ORIGIN}", "A", lib.ecs_network(i % randommix.ECS_CLIENTS), qid=i
            ),
        }
        for kind, make in kinds.items():
            labels = randommix.random_labels(rng, args.names)
            queries = [make(label, i & 0xFFFF) for i, label in enumerate(labels)]
            for query in queries[:100]:  # (the first of each kind goes the general path)
                fast.answer(query, lib.source_address(0))
            start = time.perf_counter()
            for query in queries:
                fast.answer(query, lib.source_address(0))
            ours = (time.perf_counter() - start) / len(queries) * 1e6
            start = time.perf_counter()
            for query in queries:
                floor.answer(query, records, names)
            bare = (time.perf_counter() - start) / len(queries) * 1e6
            kept = {k: len(v) for k, v in vars(node.kept).items() if isinstance(v, dict)}
            print(f"{kind}: ours {ours:.2f} us a query, the floor's reply {bare:.2f} us; kept: {kept}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
