"""`gtmcluster dnssec`: a zone's DNSSEC keys and the DS records for its parent.

``gtmcluster dnssec keygen ZONE --dir DIR [--algorithm 13|15] [--split]`` makes the zone's
keys in DIR, mode 0600: a combined signing key (``ZONE.csk.key``), or with ``--split`` a key
signing key and a zone signing key (``ZONE.ksk.key``, ``ZONE.zsk.key``). Algorithm 13 is
ECDSA P-256 (the default), 15 is Ed25519. Nothing is overwritten without ``--force``.

A rollover (`dnssec.rollover`): ``keygen ZONE --dir DIR --publish-only [--ksk]``
pre-publishes a new key (the ZSK of a pair, or the CSK; the KSK of a pair with ``--ksk``),
``roll ZONE --dir DIR [--ksk]`` makes it the active key and retires the old one (for a CSK
or KSK: now swap the DS at the parent), and ``roll ZONE --dir DIR [--ksk] --finish
[--ds-ttl SECONDS] [--max-ttl SECONDS]`` removes the retired key. Each step is refused until
the caches can have caught up with the one before (`dnssec.rollwait`), unless ``--force``.
Reload every member after each step.

``gtmcluster dnssec ds ZONE --dir DIR`` prints the DS records (SHA-256) to give the parent,
and with ``--dnskey`` the DNSKEY records too. See docs/dnssec.md.
"""

from __future__ import annotations

import argparse
import stat
import sys
from pathlib import Path
from typing import Any

from gtmcluster.dnsdata import keys
from gtmcluster.dnssec import rollover, rollwait


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "dnssec",
        help="make a zone's DNSSEC keys and print its DS records",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="dnssec_action", metavar="ACTION", required=True)
    keygen = actions.add_parser(
        "keygen", help="make a zone's keys (mode 0600)", description="Make a zone's DNSSEC keys."
    )
    keygen.add_argument("zone", metavar="ZONE", help="the zone's name, as in zones[].origin")
    keygen.add_argument(
        "--dir",
        required=True,
        type=Path,
        metavar="DIR",
        help="the key directory (zones[].dnssec.keys)",
    )
    keygen.add_argument(
        "--algorithm",
        type=int,
        choices=keys.ALGORITHMS,
        default=keys.ECDSAP256SHA256,
        help="13: ECDSA P-256 with SHA-256 (default); 15: Ed25519",
    )
    keygen.add_argument("--split", action="store_true", help="a KSK and a ZSK instead of one combined signing key")
    keygen.add_argument("--force", action="store_true", help="replace the zone's existing keys")
    keygen.add_argument(
        "--publish-only",
        action="store_true",
        help="a rollover's first step: pre-publish a new key (the ZSK of a pair, or the CSK) beside the active one",
    )
    keygen.add_argument("--ksk", action="store_true", help="with --publish-only: a new KSK of a KSK/ZSK pair")
    roll = actions.add_parser(
        "roll",
        help="a rollover's next step: sign with the pre-published key, or remove the retired one",
        description="Roll a zone's key: the pre-published key signs and the active one is retired "
        "(still published); with --finish, the retired key is removed. With --ksk, the KSK of a pair: "
        "the roll is when the parent's DS is swapped for the new key's. Each step is refused until the "
        "caches can have caught up with the one before (the DNSKEY TTL, then the zone's longest TTL or "
        "the parent's DS TTL, plus 300 s to reach every member), unless --force.",
    )
    roll.add_argument("zone", metavar="ZONE", help="the zone's name")
    roll.add_argument("--dir", required=True, type=Path, metavar="DIR", help="the key directory")
    roll.add_argument("--finish", action="store_true", help="remove the key the last roll retired")
    roll.add_argument(
        "--ksk", action="store_true", help="roll the KSK of a KSK/ZSK pair (default: its ZSK, or the CSK)"
    )
    roll.add_argument(
        "--ds-ttl",
        type=_seconds,
        metavar="SECONDS",
        help="with --finish, for a KSK or CSK: the TTL of the parent's DS records (the old DS may be cached that long)",
    )
    roll.add_argument(
        "--max-ttl",
        type=_seconds,
        default=rollwait.MAX_TTL,
        metavar="SECONDS",
        help=f"with --finish, for a ZSK or CSK: the zone's longest TTL (default {rollwait.MAX_TTL})",
    )
    roll.add_argument("--force", action="store_true", help="take the step without waiting for the caches")
    ds = actions.add_parser("ds", help="print the DS records for the parent", description="Print a zone's DS records.")
    ds.add_argument("zone", metavar="ZONE", help="the zone's name")
    ds.add_argument("--dir", required=True, type=Path, metavar="DIR", help="the key directory")
    ds.add_argument("--dnskey", action="store_true", help="print the DNSKEY records as well")
    p.set_defaults(run=run)


def _seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= 10 * 365 * 86400:
        raise argparse.ArgumentTypeError(f"{value} is not a TTL in seconds")
    return value


def _roll(args: argparse.Namespace) -> None:
    if args.finish:
        removed = rollover.finish(
            args.dir, args.zone, args.ksk, max_ttl=args.max_ttl, ds_ttl=args.ds_ttl, force=args.force
        )
        print(f"removed {removed}; reload every member")
        return
    active, old = rollover.roll(args.dir, args.zone, args.ksk, force=args.force)
    if not args.ksk:
        print(f"{active} now signs; {old} is retired (still published); reload every member")
        return
    zone_keys = keys.load(args.dir, args.zone)
    new = next(k for k in zone_keys if k.role == "ksk" and k.state == keys.ACTIVE)
    retired = next(k for k in zone_keys if k.role == "ksk" and k.state == keys.OLD)
    (ds,) = keys.ds_records(args.zone, [new])
    print(
        f"{active} is the active KSK (key tag {new.tag}); {old} is retired (still published and signing "
        "the DNSKEY set); reload every member"
    )
    print(f"now swap the DS at the parent: add  {keys.owner_text(args.zone)} IN DS {ds.to_text()}")
    print(f"                               remove the DS of key tag {retired.tag}")
    finish = f"gtmcluster dnssec roll {args.zone} --dir {args.dir} --ksk --finish --ds-ttl SECONDS"
    print(f"then, once the old DS's TTL has passed: {finish}")


def run(args: argparse.Namespace) -> int:
    try:
        if args.dnssec_action == "keygen" and args.publish_only:
            path = rollover.publish(args.dir, args.zone, args.ksk)
            mode = stat.S_IMODE(path.stat().st_mode)
            if args.ksk:
                doing = "published and signing the DNSKEY set beside the active KSK"
                print(f"wrote {path} (mode {mode:04o}): {doing}; reload every member")
            else:
                print(f"wrote {path} (mode {mode:04o}): published, not signing yet; reload every member")
            return 0
        if args.dnssec_action == "keygen" and args.ksk:
            raise keys.DnssecKeyError("--ksk makes a new KSK for a rollover: give it with --publish-only")
        if args.dnssec_action == "roll":
            _roll(args)
            return 0
        if args.dnssec_action == "keygen":
            for path in keys.keygen(args.dir, args.zone, args.algorithm, args.split, args.force):
                print(f"wrote {path} (mode {stat.S_IMODE(path.stat().st_mode):04o})")
            return 0
        zone_keys = keys.load(args.dir, args.zone)
    except (keys.DnssecKeyError, ValueError) as e:
        print(f"gtmcluster dnssec {args.dnssec_action}: {e}", file=sys.stderr)
        return 1
    owner = keys.owner_text(args.zone)
    if args.dnskey:
        for key in zone_keys:
            print(f"{owner} 3600 IN DNSKEY {key.dnskey.to_text()} ; {key.role} ({key.state}), key tag {key.tag}")
    for ds in keys.ds_records(args.zone, zone_keys):
        print(f"{owner} 3600 IN DS {ds.to_text()}")
    return 0
