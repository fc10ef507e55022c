"""What checking records against their kind's schema costs (gtmcluster/state/schema.py).

    .venv/bin/python bench/records.py [--records 200000] [--rounds 3]

Path records are the ones that come by the million, so they are measured:

1. Decoding from a peer: `sync.codec.decode` of Publish batches of path records, with the
   schema check and with it switched off (`schema.problem` answering None), alternating,
   the best of each.
2. Loading the snapshot: `snapshot.read` of a file of path records (the rows checked one by
   one, and each origin's count of records kept by the store), the same way, with the
   check and with it switched off.
3. The store's count per (origin, kind) that the caps need (`Store.held_by`): `Store.load`
   of path records with the count kept and with it switched off.

Prints CPU microseconds per record and the ratio. Not a test: figures depend on the machine
and its load, so each pair is measured in the same run, alternating.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gtmcluster.proximity.table import updated
from gtmcluster.state import keys, schema, snapshot
from gtmcluster.state.record import Record, Version
from gtmcluster.state.store import Store
from gtmcluster.sync import codec

ORIGINS = ("gtm-a", "gtm-b", "gtm-c")
DATACENTERS = ("DC1", "DC2", "DC3")


def records(count: int, now: float) -> list[Record]:
    out = []
    for i in range(count):
        n = i % 3
        ldns = f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"
        path = updated(None, True, 1000 + i % 5000, 9, "dns_dot", ORIGINS[n], ldns, DATACENTERS[n])
        version = Version(int(now * 1000) - 60_000 + i // 3, n, ORIGINS[n])
        out.append(Record(keys.path(ldns, DATACENTERS[n]), path.value(), version, 2419200.0, now))
    return out


@contextmanager
def unchecked() -> Iterator[None]:
    """The schema check switched off (every record taken)."""
    real = schema.problem
    schema.problem = lambda *args: None  # type: ignore[assignment]
    try:
        yield
    finally:
        schema.problem = real


@contextmanager
def uncounted() -> Iterator[None]:
    """The store's count per (origin, kind) switched off."""
    real = Store._own
    Store._own = lambda self, origin, kind, change: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        Store._own = real  # type: ignore[method-assign]


def timed(run: Callable[[], Any]) -> float:
    """CPU seconds *run* takes (this process's: others on the machine count less than in
    wall time), without a garbage collection in the middle (one before)."""
    gc.collect()
    gc.disable()
    try:
        started = time.process_time()
        run()
        return time.process_time() - started
    finally:
        gc.enable()


def best(rounds: int, run: Callable[[], Any], off: Callable[[], Any]) -> tuple[float, float]:
    """The best time of *run* with the thing measured on, and with it off (*off* a context),
    alternating (which goes first alternates too)."""
    on_times, off_times = [], []
    for i in range(rounds):
        for on in (True, False) if i % 2 == 0 else (False, True):
            if on:
                on_times.append(timed(run))
            else:
                with off():
                    off_times.append(timed(run))
    return min(on_times), min(off_times)


def show(what: str, count: int, on: float, off: float) -> None:
    print(
        f"{what}: {on / count * 1e6:.2f} us/record with, {off / count * 1e6:.2f} without: x{on / off:.3f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.records} path records; best of {args.rounds}", flush=True)
    now = 1_800_000_000.0
    made = records(args.records, now)

    batches = [batch for batch, _ in codec.batches(made, now)]
    members = frozenset(ORIGINS)

    def decode() -> None:
        for batch in batches:
            codec.decode(batch, now, members)

    show("decode from a peer", len(made), *best(args.rounds, decode, unchecked))

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / snapshot.FILENAME
        snapshot.write(path, [row for r in made if (row := snapshot.row(r, now, now)) is not None], ORIGINS[0])

        def read() -> None:
            assert snapshot.read(path, Store(ORIGINS[0], lambda: now), now) == len(made)

        show("snapshot load", len(made), *best(args.rounds, read, unchecked))

    def load() -> None:
        Store(ORIGINS[0], lambda: now).load(made)

    show("Store.load, count per (origin, kind)", len(made), *best(args.rounds, load, uncounted))


if __name__ == "__main__":
    sys.exit(main())
