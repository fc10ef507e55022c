"""F5 regions and topology records, from either form, made into ours.

A selector is ``(negate, kind, value)`` with F5's kinds (tmsh's ``subnet``, ``region``,
``country``, ``continent``, ``isp``, ``state``, ``datacenter``, ``pool``; 3-DNS's ``dc`` is
``datacenter``). Our regions hold networks (and GeoIP terms), so an F5 region's data center
and pool members are kept aside: a record whose *server* is such a region becomes one
record per member (same LDNS selector and score), which scores each candidate as F5 does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gtmcluster.importers import f5names
from gtmcluster.importers.model import Entry, Imported

Selector = tuple[bool, str, str]
KIND_ALIASES = {"dc": "datacenter", "ip": "subnet", "cidr": "subnet", "vs": "virtual_server"}
#: the selector kinds of either form (some have no equivalent of ours: findings)
KINDS = (
    "subnet",
    "region",
    "country",
    "continent",
    "isp",
    "state",
    "geoip-isp",
    "datacenter",
    "pool",
    "virtual_server",
)
#: continent codes F5 writes, by name (3-DNS wrote names)
CONTINENTS = {
    "africa": "AF",
    "antarctica": "AN",
    "asia": "AS",
    "europe": "EU",
    "north america": "NA",
    "oceania": "OC",
    "south america": "SA",
}
GEOIP_HINT = "give --geoip-country FILE.mmdb (a MaxMind country database) to import country and continent selectors"


@dataclass
class RegionInfo:
    """What an F5 region became: our region (networks), and its server-side members."""

    ours: str | None
    servers: list[str] = field(default_factory=list)


def kind_of(word: str) -> str:
    return KIND_ALIASES.get(word.lower(), word.lower())


class TopologyMapper:
    """Maps F5 regions and topology records into *imp*; *datacenter* and *pool* give our
    name of an F5 data center or pool (None when it was not imported)."""

    def __init__(
        self, imp: Imported, datacenter: Callable[[str], str | None], pool: Callable[[str], str | None]
    ) -> None:
        self.imp = imp
        self.datacenter = datacenter
        self.pool = pool
        self.regions: dict[str, RegionInfo] = {}

    def region(self, f5_name: str, members: list[tuple[Selector, str]], where: str, source: str) -> None:
        """F5 region *f5_name* with its *members* (each a selector and its ``file:line``)."""
        ours = self.imp.namespace("region").name(f5_name)
        entries: list[object] = []
        info = RegionInfo(None)
        for (negate, kind, value), at in members:
            what = f"region {f5_name} member {'not ' if negate else ''}{kind} {value}"
            if negate:
                self.imp.lost(at, what, "our regions cannot exclude; the region is imported without it")
                continue
            if kind == "subnet":
                network = f5names.network(value)
                if network is None:
                    self.imp.lost(at, what, f"{value!r} is not a network")
                else:
                    entries.append(str(network))
            elif kind == "region":
                other = self.regions.get(f5names.strip_partition(value))
                if other is None or other.ours is None:
                    self.imp.lost(at, what, "no such region with networks (regions must come before their use)")
                else:
                    entries.append({"region": other.ours})
                    info.servers.extend(other.servers)
            elif kind in ("country", "continent"):
                term = self.geo(kind, value, at, what)
                if term is not None:
                    entries.append(term)
            elif kind in ("datacenter", "pool"):
                server = self.server_name(kind, value)
                if server is None:
                    self.imp.lost(at, what, f"no such {kind} was imported")
                else:
                    info.servers.append(server)
            else:
                self.imp.lost(at, what, f"no equivalent for {kind} (F5's own address lists)")
        if entries:
            info.ours = ours
            self.imp.regions[ours] = Entry(entries, where, source)
        self.regions[f5names.strip_partition(f5_name)] = info

    def geo(self, kind: str, value: str, at: str, what: str) -> dict[str, str] | None:
        if self.imp.geoip_country is None:
            self.imp.lost(at, what, GEOIP_HINT)
            return None
        code = CONTINENTS.get(value.lower(), value) if kind == "continent" else value
        if not code.isalpha() or len(code) != 2:
            self.imp.lost(at, what, f"{value!r} is not a two-letter {kind} code")
            return None
        return {kind: code.upper()}

    def server_name(self, kind: str, value: str) -> str | None:
        ours = self.datacenter(value) if kind == "datacenter" else self.pool(value)
        return None if ours is None else f"{kind} {ours}"

    def ldns(self, sel: Selector, at: str, what: str) -> str | None:
        negate, kind, value = sel
        prefix = "not " if negate else ""
        if kind == "subnet":
            network = f5names.network(value)
            if network is None:
                self.imp.lost(at, what, f"{value!r} is not a network")
                return None
            return f"{prefix}subnet {network}"
        if kind == "region":
            info = self.regions.get(f5names.strip_partition(value))
            if info is None or info.ours is None:
                self.imp.lost(at, what, f"region {value} has no networks that could be imported")
                return None
            return f"{prefix}region {info.ours}"
        if kind in ("country", "continent"):
            term = self.geo(kind, value, at, what)
            return None if term is None else f"{prefix}{kind} {term[kind]}"
        self.imp.lost(at, what, f"no equivalent for an LDNS selector by {kind}")
        return None

    def servers(self, sel: Selector, at: str, what: str) -> list[str] | None:
        negate, kind, value = sel
        prefix = "not " if negate else ""
        if kind in ("datacenter", "pool"):
            server = self.server_name(kind, value)
            if server is None:
                self.imp.lost(at, what, f"no such {kind} was imported")
                return None
            return [prefix + server]
        if kind == "subnet":
            network = f5names.network(value)
            if network is None:
                self.imp.lost(at, what, f"{value!r} is not a network")
                return None
            return [f"{prefix}subnet {network}"]
        if kind == "region":
            info = self.regions.get(f5names.strip_partition(value))
            if info is None:
                self.imp.lost(at, what, f"no such region {value}")
                return None
            out = [f"region {info.ours}"] if info.ours else []
            out.extend(info.servers)
            if not out:
                self.imp.lost(at, what, f"region {value} has nothing that could be imported")
                return None
            if negate and len(out) != 1:
                self.imp.lost(at, what, "'not region' over data centers or pools has no equivalent")
                return None
            return [prefix + s for s in out]
        self.imp.lost(at, what, f"no equivalent for a server selector by {kind}")
        return None

    def record(self, ldns: Selector, server: Selector, score: int, at: str, source: str) -> None:
        """One F5 topology record (appended in the order given: sort them first)."""
        what = f"topology record {source}"
        ours_ldns = self.ldns(ldns, at, what)
        ours_servers = self.servers(server, at, what)
        if ours_ldns is None or ours_servers is None:
            return
        if not 0 <= score <= 2**32 - 1:
            self.imp.lost(at, what, f"score {score} is out of range")
            return
        for s in ours_servers:
            self.imp.topology.append(Entry({"ldns": ours_ldns, "server": s, "score": score}, at, source))


def selector(words: list[str]) -> Selector | None:
    """``[not|!] KIND VALUE`` (tmsh words) as a selector; None when malformed."""
    negate = bool(words) and words[0] in ("not", "!")
    rest = words[1:] if negate else words
    if len(rest) == 1 and rest[0].startswith("!"):
        negate, rest = True, [rest[0][1:]]
    if len(rest) == 1:  # 3-DNS: dc.CNC, region.cnc, a bare CIDR
        kind, dot, value = rest[0].partition(".")
        if dot and kind_of(kind) in KINDS:
            return negate, kind_of(kind), value
        if f5names.network(rest[0]) is not None:
            return negate, "subnet", rest[0]
        return None
    if len(rest) != 2 or kind_of(rest[0]) not in KINDS:
        return None
    return negate, kind_of(rest[0]), rest[1]
