"""What F5 configuration does not hold, for a complete config: the sync group's members and
the zones the wide IPs live in.

Members: one per data center, from ``--site DATACENTER=ADDRESS`` (peer ADDRESS:4353, DNS
ADDRESS:53, API on loopback), else a placeholder on a loopback address (127.0.0.11, .12,
...) so that the config loads, and nothing listens beyond the host, until it is edited.
Zones: ``--zone ORIGIN`` as given, else each wide IP's name less its first label, the
shortest of nested ones kept, but never a public suffix (`inferred_zone`): a top-level domain
(``com``) or a country's registration category (``co.uk``, ``com.au``); a wide IP right below
one (``example.com``, ``example.co.uk``: an apex) gets a zone of its own name. Claiming a
zone too wide answers NXDOMAIN, with our SOA, for names that belong to others; one too
narrow only needs its own delegation. Each zone gets a small zone file (SOA, NS to the
members) written beside the config unless one is there already.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from gtmcluster.importers.f5names import domain_problem, one_line
from gtmcluster.importers.model import Imported

SERIAL = 1
#: second-level labels that countries register names under (``co.uk``, ``com.au``,
#: ``ne.jp``): below a two-letter top-level domain they make a public suffix
REGISTRY_CATEGORIES = frozenset(
    {"ac", "co", "com", "edu", "gen", "go", "gob", "gov", "govt", "int", "lg", "ltd", "me", "mil"}
    | {"ne", "net", "nhs", "nic", "nom", "or", "org", "plc", "sch"}
)


@dataclass(frozen=True)
class Member:
    name: str
    datacenter: str
    address: str
    placeholder: bool

    def value(self) -> dict[str, object]:
        host = f"[{self.address}]" if ":" in self.address else self.address
        dns_port = 5353 if self.placeholder else 53
        return {
            "name": self.name,
            "datacenter": self.datacenter,
            "peer": f"{host}:4353",
            "dns": [f"{host}:{dns_port}"],
            "api": "127.0.0.1:8053" if not self.placeholder else f"{host}:8053",
        }


def parse_sites(texts: list[str]) -> dict[str, str]:
    """``DATACENTER=ADDRESS`` options; raises ValueError naming a bad one."""
    out: dict[str, str] = {}
    for text in texts:
        dc, eq, address = text.partition("=")
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise ValueError(f"--site {text!r}: give DATACENTER=ADDRESS (an IP address)") from None
        if not eq or not dc:
            raise ValueError(f"--site {text!r}: give DATACENTER=ADDRESS")
        out[dc] = address
    return out


def members(imp: Imported, sites: dict[str, str]) -> list[Member]:
    """One member per data center with a --site; with none, a placeholder per data center."""
    for dc in sites:
        if dc not in imp.datacenters:
            imp.unmapped("--site", f"site {dc}", f"no such data center (data centers: {', '.join(imp.datacenters)})")
    taken: set[str] = set()
    given = [Member(member_name(dc, taken), dc, addr, False) for dc, addr in sites.items() if dc in imp.datacenters]
    if given:
        return given
    datacenters = list(imp.datacenters) or ["DC1"]
    return [Member(member_name(dc, taken), dc, f"127.0.0.{11 + i}", True) for i, dc in enumerate(datacenters[:200])]


def member_name(datacenter: str, taken: set[str]) -> str:
    """``gtm-`` and the data center's name as a DNS label (a node name is its certificate's
    DNS name: lower case, letters, digits and '-'), unique among *taken*."""
    base = "gtm-" + (re.sub(r"[^a-z0-9]+", "-", datacenter.lower()).strip("-")[:50] or "dc")
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def check_names(imp: Imported) -> None:
    """Drop wide IPs (and aliases) whose names we cannot serve, or that another wide IP
    answers already, as findings."""
    claimed: dict[str, str] = {}  # a name (lower case) -> the wide IP that answers it
    for name in list(imp.wideips):
        entry = imp.wideips[name]
        why = bad_name(name) or _claimed(claimed, name)
        if why:
            imp.lost(entry.where, f"wideip {name}", why + ": not imported")
            del imp.wideips[name]
            continue
        claimed[name.rstrip(".").lower()] = name
    for name, entry in imp.wideips.items():
        kept = []
        for alias in entry.value.get("aliases", []):
            why = bad_name(alias) or _claimed(claimed, alias)
            if why:
                imp.lost(entry.where, f"wideip {name} alias {alias}", why)
            else:
                claimed[alias.rstrip(".").lower()] = name
                kept.append(alias)
        if "aliases" in entry.value:
            entry.value["aliases"] = kept
            if not kept:
                del entry.value["aliases"]


def _claimed(claimed: dict[str, str], name: str) -> str:
    other = claimed.get(name.rstrip(".").lower())
    return f"wide IP {other} answers {name} already" if other else ""


def bad_name(name: str) -> str:
    """Why *name* cannot be a wide IP's name or alias here ("" when it can)."""
    labels = name.rstrip(".").split(".")
    if len(labels) < 2 or any(not label or len(label) > 63 for label in labels) or len(name) > 253:
        return f"{one_line(name)!r} is not a domain name of two labels or more"
    problem = domain_problem(name)
    if problem:
        return problem
    if "?" in name or any("*" in label for label in labels[1:]) or ("*" in labels[0] and labels[0] != "*"):
        return "'?' and '*' inside a label have no equivalent (ours: '*' as the whole leftmost label)"
    return ""


def public_suffix(domain: str) -> bool:
    """Whether *domain* (lower case, no final dot) is one under which others register names:
    a single label (``com``, ``io``, ``test``) or a country's category (``co.uk``)."""
    labels = domain.split(".")
    if len(labels) == 1:
        return True
    top = labels[-1]
    return len(labels) == 2 and len(top) == 2 and top.isalpha() and labels[0] in REGISTRY_CATEGORIES


def inferred_zone(name: str) -> str | None:
    """The zone inferred for a wide IP *name*: its parent, or the name itself when the
    parent is a public suffix (an apex wide IP); None for a wildcard right below one."""
    key = name.rstrip(".").lower()
    parent = key.split(".", 1)[1] if "." in key else ""
    if parent and not public_suffix(parent):
        return parent
    return None if key.startswith("*") or not parent else key


def zones(imp: Imported, explicit: list[str]) -> dict[str, list[str]]:
    """Zone origins and the wide IP names (with aliases) in each."""
    names = [n for e in imp.wideips for n in (e, *imp.wideips[e].value.get("aliases", []))]
    cnames = {n for e, w in imp.wideips.items() if "CNAME" in _types(w.value) for n in (e, *w.value.get("aliases", []))}
    origins = [o.rstrip(".").lower() for o in explicit]
    if not origins:
        # (none of its own for a CNAME: it cannot be at a zone's apex, where the SOA and NS are)
        found = {(n, inferred_zone(n)) for n in names}
        inferred = {z for n, z in found if z is not None and not (n in cnames and z == n.rstrip(".").lower())}
        for zone in sorted(inferred, key=lambda o: o.count(".")):
            if not any(zone == o or zone.endswith("." + o) for o in origins):
                origins.append(zone)
    out: dict[str, list[str]] = {o: [] for o in origins}
    for name in list(imp.wideips):
        entry = imp.wideips[name]
        types = _types(entry.value)
        for n in (name, *entry.value.get("aliases", [])):
            key = n.rstrip(".").lower().removeprefix("*.")
            inside = [o for o in origins if key == o or key.endswith("." + o)]
            origin = max(inside, key=len) if inside else None
            if origin is not None and not ("CNAME" in types and n.rstrip(".").lower() == origin):
                out[origin].append(n)
                continue
            why = f"not inside any --zone ({', '.join(origins)})"
            if origin is not None:  # (F5 answers a CNAME there; here the zone's SOA and NS are at its apex)
                why = f"a CNAME at the apex of zone {origin}, where its SOA and NS are: give --zone of a parent"
            elif not explicit:
                parent = n.rstrip(".").lower().split(".", 1)[-1]
                why = f"no zone is inferred at {parent}, a public suffix: give --zone ORIGIN for the zone you serve"
                if "CNAME" in types and inferred_zone(n) == n.rstrip(".").lower():
                    why = f"a CNAME below {parent}, a public suffix: a zone of its own would hold its SOA and NS there"
            if n == name:
                imp.lost(entry.where, f"wideip {name}", why + ": not imported")
                del imp.wideips[name]
                break
            imp.lost(entry.where, f"wideip {name} alias {n}", why)
            entry.value["aliases"].remove(n)
            if not entry.value["aliases"]:
                del entry.value["aliases"]
    return out


def _types(wideip: dict[str, Any]) -> list[str]:
    return wideip["type"] if isinstance(wideip["type"], list) else [wideip["type"]]


def zone_text(origin: str, members: list[Member]) -> str:
    """A small zone file: SOA and NS records naming the members (edit to taste)."""
    lines = [
        f"; zone {origin}: made by gtmcluster import f5 (the wide IPs below it are answered by the GTMs)",
        "$TTL 3600",
        f"@ IN SOA {members[0].name} hostmaster {SERIAL} 3600 600 86400 300",
    ]
    lines += [f"  IN NS {m.name}" for m in members]
    for m in members:
        kind = "AAAA" if ":" in m.address else "A"
        lines.append(f"{m.name} IN {kind} {m.address}")
    return "\n".join(lines) + "\n"
