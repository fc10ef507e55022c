"""The imported config as YAML, with a comment naming each object's F5 source ``file:line``.

Each object is written on its own (compact flow style for its inner mappings) after a
``# F5 file:line: statement`` comment; a header says what was made up (members, zones) and
how many findings there were.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from gtmcluster.importers.assemble import Member
from gtmcluster.importers.f5names import one_line
from gtmcluster.importers.model import Entry, Imported


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, default_flow_style=None, width=1000, allow_unicode=True)


def _comment(text: str, limit: int = 300) -> str:
    """*text* fit for a YAML comment: one line, blanks run together, characters that do not
    print escaped (a quoted F5 word may hold a line break or a control character, which
    would end the comment or make the whole file no YAML)."""
    return one_line(" ".join(text.split()))[:limit]


def _entry_lines(name: str | None, entry: Entry, indent: str) -> list[str]:
    lines = [f"{indent}# F5 {_comment(entry.where)}: {_comment(entry.source)}"]
    if entry.note:
        lines.append(f"{indent}# note: {_comment(entry.note)}")
    if name is None:  # a list item, on one line
        text = yaml.safe_dump(entry.value, sort_keys=False, default_flow_style=True, width=1000).strip()
        body = ["- " + text.removesuffix("...").strip()]
    else:
        body = _dump({name: entry.value}).rstrip("\n").split("\n")
    lines += [indent + line for line in body]
    return lines


def _section(key: str, entries: Iterable[tuple[str, Entry]]) -> list[str]:
    items = list(entries)
    if not items:
        return []
    lines = ["", f"{key}:"]
    for name, entry in items:
        lines += _entry_lines(name, entry, "  ")
    return lines


def render(
    imp: Imported, files: list[str], members: list[Member], zones: dict[str, list[str]], zone_files: dict[str, str]
) -> str:
    placeholder = any(m.placeholder for m in members)
    essential = sum(f.essential for f in imp.findings)
    lines = [
        f"# Imported from F5 configuration by `gtmcluster import f5 {_comment(' '.join(files), 10_000)}`.",
        f"# {len(imp.findings)} findings ({essential} essential) were reported on stderr: read them.",
        "# Each object below names the F5 statement it came from (file:line).",
        "# The sync group's members are not in F5 configuration: "
        + (
            "these are PLACEHOLDERS on loopback addresses, one per data center; replace them with your"
            " GTM nodes (or import again with --site DATACENTER=ADDRESS)."
            if placeholder
            else "made from the --site options (API on loopback)."
        ),
        "# The zones are the wide IPs' parent domains, each with a small zone file (SOA, NS) to complete.",
        "# Validate with: gtmcluster check --config THIS_FILE",
        "",
        "sync_group:",
        "  name: imported",
        "  # tls: {ca: certs/ca.pem, cert: certs/{node}.pem, key: certs/{node}.key}   # gtmcluster certs init/issue",
        "  members:",
    ]
    lines += ["    " + line for line in _dump([m.value() for m in members]).rstrip("\n").split("\n")]
    if imp.geoip_country:
        lines += ["", "geoip:", f"  country: {_dump(imp.geoip_country).splitlines()[0]}"]
    lines += ["", "datacenters:"]
    for entry in list(imp.datacenters.values()) or [Entry("DC1", "-", "placeholder: no data center was imported")]:
        lines += _entry_lines(None, entry, "  ")
    lines += _section("monitors", imp.monitors.items())
    lines += _section("virtual_servers", imp.virtual_servers.items())
    lines += _section("regions", imp.regions.items())
    if imp.topology:
        lines += ["", "topology:"]
        for entry in imp.topology:
            lines += _entry_lines(None, entry, "  ")
    lines += _section("pools", imp.pools.items())
    lines += _section("wideips", imp.wideips.items())
    lines += ["", "zones:" if zones else "zones: []"]
    for origin, inside in zones.items():
        shown = ", ".join(inside[:5]) + (" ..." if len(inside) > 5 else "")
        lines.append(f"  # wide IPs: {_comment(shown)}" if shown else "  # no wide IP in it")
        lines += [
            "  " + line for line in _dump([{"origin": origin, "file": zone_files[origin]}]).rstrip("\n").split("\n")
        ]
    return "\n".join(lines) + "\n"
