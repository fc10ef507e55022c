"""`--names random` of bench/compare.py (issue 34): the names an attacker chooses.

The mixes become
- nxdomain: a fresh random label below the zone each query (NXDOMAIN), no EDNS;
- wildcard: a fresh random label below `apps.bench.test` each query: in our node the wildcard
  wide IP `*.apps.bench.test` over the same servers (topology by the LDNS, no persistence),
  in NSD and the floor a static `*.apps` wildcard with the pool's three addresses;
- deep (only when asked for, `--mixes deep`): two fresh random labels below the zone each
  query (NXDOMAIN: its parent is absent too), no EDNS;
- nxecs (only when asked for): a fresh random label below the zone each query with an EDNS
  client subnet, as a resolver that sends ECS asks (10,000 /24s, split over the processes;
  raw packets, dnsperf -B); NSD and the floor echo no option.
Each dnsperf process reads its own file of `--random-lines` names from the top in every run,
so every server gets the same names and no name is asked twice in a run; the warm-up is
`--warmup` seconds only (there is nothing to learn). The report adds ours/floor CPU per query
against the issue's target (at most 2x: `floor_target`).
"""

from __future__ import annotations

import argparse
import base64
import random
import struct
from pathlib import Path
from typing import Any

import comparelib as lib  # bench/ is not a package: its folder is on sys.path

#: issue 34: with --names random, ours/floor CPU per query at most
FLOOR_TARGET = 2.0
MIXES = {"fixed": ("static", "wideip"), "random": ("nxdomain", "wildcard", "deep", "nxecs")}
#: the mixes run when --mixes is not given
DEFAULT_MIXES = {"fixed": ("static", "wideip"), "random": ("nxdomain", "wildcard")}
#: distinct client subnets of the nxecs mix
ECS_CLIENTS = 10_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mixes",
        help="static, wideip or both (default static,wideip); with --names random: nxdomain, wildcard"
        " (the default), deep, nxecs",
    )
    p.add_argument("--names", choices=tuple(MIXES), default="fixed", help="fixed (the mixes above) or random")
    p.add_argument("--random-lines", type=int, default=600_000, help="names per dnsperf process (600,000)")


def check(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    """Check the options; *args.mixes* becomes a list."""
    allowed = MIXES[args.names]
    args.mixes = [m.strip() for m in (args.mixes or ",".join(DEFAULT_MIXES[args.names])).split(",") if m.strip()]
    if any(m not in allowed for m in args.mixes) or not args.mixes:
        p.error(f"--mixes: with --names {args.names}, some of {', '.join(allowed)}")
    if args.names == "random" and (args.transport != "udp" or args.random_lines < 1000):
        p.error("--names random: over UDP, with --random-lines at least 1000")


def random_labels(rng: random.Random, count: int) -> list[str]:
    """*count* random labels of 12 letters and digits (60 bits each: none repeats in a run)."""
    text = base64.b32encode(rng.randbytes(count * 15 // 2 + 8)).decode().lower()
    return [text[i : i + 12] for i in range(0, count * 12, 12)]


def write_mixes(
    directory: Path, sources: int, lines: int, seed: int = 7, wanted: tuple[str, ...] = ("nxdomain", "wildcard")
) -> dict[str, lib.Mix]:
    """Query files for --names random, one per dnsperf process (each its own names, *lines*
    of them): `nxdomain`, a fresh label below the zone each query; `wildcard`, a fresh label
    below the wildcard `*.apps` each query; and the *wanted* of `deep` and `nxecs`. Each run
    reads its file from the top, so every server gets the same names, none of them asked
    twice in one run."""
    rng = random.Random(seed)
    mixes = {}
    for mix, parent, what in (
        ("nxdomain", lib.ORIGIN, "NXDOMAIN"),
        ("wildcard", lib.APPS, "the wildcard wide IP (NSD, floor: a static wildcard)"),
    ):
        files = []
        for s in range(sources):
            path = directory / f"{mix}-{s}.txt"
            path.write_text("".join(f"{label}.{parent} A\n" for label in random_labels(rng, lines)))
            files.append(path)
        mixes[mix] = lib.Mix(
            mix,
            f"<random 12 letters>.{parent} A, a fresh name each query: {what}; no EDNS; {lines:,} names per process",
            tuple(files),
            False,
            f"{sources} source addresses",
        )
    if "deep" in wanted:
        files = []
        for s in range(sources):
            path = directory / f"deep-{s}.txt"
            labels = random_labels(rng, 2 * lines)
            path.write_text("".join(f"{labels[2 * i]}.{labels[2 * i + 1]}.{lib.ORIGIN} A\n" for i in range(lines)))
            files.append(path)
        mixes["deep"] = lib.Mix(
            "deep",
            f"<random 12>.<random 12>.{lib.ORIGIN} A, a fresh name each query: NXDOMAIN (its parent absent"
            f" too); no EDNS; {lines:,} names per process",
            tuple(files),
            False,
            f"{sources} source addresses",
        )
    if "nxecs" in wanted:
        files = []
        for s in range(sources):
            path = directory / f"nxecs-{s}.bin"
            with path.open("wb") as f:
                for i, label in enumerate(random_labels(rng, lines)):
                    packet = lib.query(f"{label}.{lib.ORIGIN}", "A", lib.ecs_network((s + i * sources) % ECS_CLIENTS))
                    f.write(struct.pack("!H", len(packet)) + packet)
            files.append(path)
        mixes["nxecs"] = lib.Mix(
            "nxecs",
            f"<random 12 letters>.{lib.ORIGIN} A, a fresh name each query: NXDOMAIN; EDNS client subnet /24,"
            f" {ECS_CLIENTS:,} subnets; {lines:,} names per process",
            tuple(files),
            True,
            f"{sources} source addresses, {ECS_CLIENTS:,} client subnets",
        )
    return mixes


def floor_target(pinning: str, mix: str, ours: dict[str, Any], floor: dict[str, Any]) -> list[dict[str, Any]]:
    """Print ours/floor CPU per query against issue 34's target; the verdict."""
    ratio = ours["cpu_us_per_query"] / floor["cpu_us_per_query"] if floor["cpu_us_per_query"] else 0.0
    met = ratio <= FLOOR_TARGET
    print(f"  ours/floor: CPU/query {ratio:.2f}x (target <= {FLOOR_TARGET}x: {'met' if met else 'NOT met'})")
    what = {"pinning": pinning, "mix": mix, "what": "CPU/query ratio to the floor", "value": ratio}
    return [what | {"target": f"<= {FLOOR_TARGET}", "met": met}]
