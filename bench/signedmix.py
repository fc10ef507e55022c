"""Signed denial under a random-name flood in bench/compare.py (issue 34 item 3): `--dnssec`.

With `--dnssec` the zone is signed and the only mix is `dnssec`: DO=1 queries (EDNS, payload
1232, no RD) for `RANDOM.bench.test A`, a fresh random label each, `NAMES` distinct names
per dnsperf process (raw packets, dnsperf -B), so no server can keep a reply or a signature
per name (our node keeps at most 50,000 signatures per zone, oldest first; the names are
four times that). Every answer is a signed NXDOMAIN.

- Our node: `zones[].dnssec` with a CSK (ECDSA P-256) made by `gtmcluster.dnsdata.keys` in
  the work folder; it signs online.
- NSD: the same zone with the same key, signed offline by dnspython's `dns.dnssec.sign_zone`
  (NSEC, signatures for seven days), as `bench.test.signed.zone`: it answers from the
  precomputed chain, as a signer run by hand (ldns-signzone, knot's kzonesign) would give it.
- The floor (bench/floor.py) answers unsigned NXDOMAINs: the cost of the bare Python loop.

Only these three take part (PowerDNS and gdnsd are left out). The warm-up's passes through
the query files are skipped (`--warmup 0`: a pass over random names would take minutes and
teaches no server anything).
"""

from __future__ import annotations

import argparse
import random
import string
import struct
from pathlib import Path

import comparelib as lib  # bench/ is not a package: its folder is on sys.path
import dns.dnssec
import dns.zone
import yaml

from gtmcluster.dnsdata import keys as zonekeys

#: distinct random names per dnsperf process
NAMES = 50_000
SERVERS = ("ours", "nsd", "floor")
#: an OPT record: payload 1232, DO set
_OPT_DO = b"\0" + struct.pack("!HHIH", 41, 1232, 0x8000, 0)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dnssec", action="store_true", help="a signed zone and DO=1 random names (bench/signedmix.py)")


def check(args: argparse.Namespace) -> None:
    """With --dnssec: the `dnssec` mix alone, ours, NSD and the floor only, no warm-up passes."""
    if not args.dnssec:
        return
    args.mixes = ["dnssec"]
    args.servers = [k for k in args.servers if k in SERVERS]
    args.warmup = 0


def prepare(work: Path, sources: int) -> dict[str, lib.Mix]:
    """Sign the zone (our node's config, NSD's zone file) and write the query files."""
    zonekeys.keygen(work / "keys", lib.ORIGIN)
    zone_keys = zonekeys.load(work / "keys", lib.ORIGIN)
    config_path = work / "cluster.yaml"
    config = yaml.safe_load(config_path.read_text())
    for zone in config["zones"]:
        zone["dnssec"] = {"keys": "keys"}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    zone = dns.zone.from_text(lib.zone_text(), origin=lib.ORIGIN, relativize=False)
    with zone.writer() as txn:
        dns.dnssec.sign_zone(
            zone, txn=txn, keys=[(k.private, k.dnskey) for k in zone_keys], dnskey_ttl=3600, lifetime=7 * 86400
        )
    signed = f"{lib.ORIGIN}.signed.zone"
    zone.to_file(str(work / signed), relativize=False)
    nsd = work / "nsd.conf"
    nsd.write_text(nsd.read_text().replace(f"zonefile: {lib.ORIGIN}.zone", f"zonefile: {signed}"))
    rng = random.Random(34)
    files = []
    for s in range(sources):
        path = work / f"dnssec-{s}.bin"
        with path.open("wb") as f:
            for _ in range(NAMES):
                label = "".join(rng.choices(string.ascii_lowercase + string.digits, k=12))
                packet = lib.query(f"{label}.{lib.ORIGIN}", "A")
                packet = packet[:10] + b"\0\1" + packet[12:] + _OPT_DO  # ARCOUNT 1: the OPT
                f.write(struct.pack("!H", len(packet)) + packet)
        files.append(path)
    description = f"RANDOM.{lib.ORIGIN} A, DO=1 (a signed NXDOMAIN), {NAMES * sources:,} distinct names"
    return {"dnssec": lib.Mix("dnssec", description, tuple(files), True, f"{sources} source addresses")}
