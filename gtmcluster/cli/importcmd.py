"""`gtmcluster import f5 FILE... [-o cluster.yaml]`: F5 GTM configuration (tmsh
``bigip_gtm.conf`` or 3-DNS ``wideip.conf``) as this project's YAML config.

The config goes to stdout (or -o FILE); everything that could not be mapped is listed on
stderr with its file:line and why. Exit 0 only when the config behaves as F5 did: nothing
was lost (LOST: a wide IP, pool or topology record not imported, a preferred method with no
equivalent) and nothing changed in meaning (CHANGED: a monitor that checks otherwise, a
setting not read); exit 1 otherwise, or when an input cannot be read. The zone files the config names are
written beside it (or in the current folder with stdout), never over existing ones.
See docs/coming-from-f5.md.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from gtmcluster.cli import terminal
from gtmcluster.importers import assemble, f5import
from gtmcluster.importers.model import Finding


def add_parser(sub: Any) -> None:
    p = sub.add_parser("import", help="convert another GTM's configuration", description=__doc__)
    kinds = p.add_subparsers(dest="kind", metavar="KIND", required=True)
    f5 = kinds.add_parser("f5", help="F5 BIG-IP DNS / GTM (tmsh) or 3-DNS (wideip.conf)", description=__doc__)
    f5.add_argument("files", nargs="+", metavar="FILE", help="bigip_gtm.conf or wideip.conf files")
    f5.add_argument("-o", "--output", metavar="FILE", help="write the config here (default: stdout)")
    f5.add_argument(
        "--site",
        action="append",
        default=[],
        metavar="DATACENTER=ADDRESS",
        help="a GTM node in this data center at this address (repeat; default: loopback placeholders)",
    )
    f5.add_argument(
        "--zone", action="append", default=[], metavar="ORIGIN", help="a zone the wide IPs live in (repeat)"
    )
    f5.add_argument("--geoip-country", metavar="FILE.mmdb", help="a MaxMind country database (country selectors)")
    f5.add_argument("--no-zone-files", action="store_true", help="do not write the zone files")
    f5.set_defaults(run=run)


def render_findings(findings: list[Finding]) -> list[str]:
    """One line per distinct finding; the places of repeats are listed together."""
    grouped: dict[tuple[bool, bool, str, str], list[str]] = defaultdict(list)
    for f in findings:
        grouped[(f.essential, f.changed, f.what, f.why)].append(f.where)
    lines = []
    for (essential, changed, what, why), places in grouped.items():
        line = Finding(places[0], what, why, essential, changed).render()
        if places[1:]:
            file = places[0].rpartition(":")[0]
            same = all(p.rpartition(":")[0] == file for p in places)
            shown = [p.rpartition(":")[2] if same else p for p in places[1:11]]
            more = f", and {len(places) - 11} more" if len(places) > 11 else ""
            line += f" (also {'line' + ('s' if len(shown) > 1 else '') + ' ' if same else ''}{', '.join(shown)}{more})"
        lines.append(line)
    return lines


def run(args: argparse.Namespace) -> int:
    try:
        sites = assemble.parse_sites(args.site)
    except ValueError as e:
        print(f"gtmcluster import f5: {e}", file=sys.stderr)
        return 2
    try:
        geoip = str(Path(args.geoip_country).resolve()) if args.geoip_country else None
        result = f5import.run(args.files, sites, args.zone, geoip)
    except f5import.InputError as e:
        print(f"gtmcluster import f5: {e}", file=sys.stderr)
        return 1
    for line in render_findings(result.imported.findings):
        print(terminal.escape(line), file=sys.stderr)  # (F5 text may hold control characters)
    folder = Path(args.output).parent if args.output else Path(".")
    try:
        if args.output:
            folder.mkdir(parents=True, exist_ok=True)
            Path(args.output).write_text(result.text, encoding="utf-8")
        else:
            sys.stdout.write(result.text)
        if not args.no_zone_files:
            for relative, text in result.zone_files.items():
                path = folder / relative
                if path.exists():
                    print(f"{path}: exists, left as it is", file=sys.stderr)
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                print(f"{path}: zone file written (SOA and NS records to complete)", file=sys.stderr)
    except OSError as e:
        print(f"gtmcluster import f5: cannot write {e.filename}: {e.strerror or e}", file=sys.stderr)
        return 1
    imp = result.imported
    lost = sum(f.essential and not f.changed for f in imp.findings)
    changed = sum(f.changed for f in imp.findings)
    print(
        f"gtmcluster import f5: {len(imp.wideips)} wide IPs, {len(imp.pools)} pools, "
        f"{len(imp.virtual_servers)} virtual servers, {len(imp.topology)} topology records; "
        f"{len(imp.findings)} findings, {lost} LOST, {changed} CHANGED"
        + (" (exit 1: the result does not behave as on F5)" if lost or changed else ""),
        file=sys.stderr,
    )
    sys.stdout.flush()
    return 1 if imp.failed else 0
