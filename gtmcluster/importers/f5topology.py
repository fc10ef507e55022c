"""F5 regions and topology records, from either form, made into ours.

A selector is ``(negate, kind, value)`` with F5's kinds (tmsh's ``subnet``, ``region``,
``country``, ``continent``, ``isp``, ``state``, ``datacenter``, ``pool``; 3-DNS's ``dc`` is
``datacenter``). Our regions hold networks (and GeoIP terms), so an F5 region's data center
and pool members are kept aside: a record whose *server* is such a region becomes one
record per member (same LDNS selector and score), which scores each candidate as F5 does.

Regions are mapped after all are read, each after those it names (a cycle is lost). Our
regions cannot exclude, and F5's documentation leaves open whether a ``not`` member narrows
a region or adds its complement; the two readings agree only for a region that is one
``not`` member ("not X"): ours holds X and the records that use it say the opposite
(``ldns: region R`` becomes ``ldns: not region R-excluded``). Any other region with a ``not``
member is lost, with the records that use it: never a widening.
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
    """What an F5 region became: our region holding its networks and its server-side
    members, or (*negated*) what it excludes, for a region that is one ``not`` member; or
    why it could not be imported (*lost*: the records that use it are lost too)."""

    ours: str | None
    servers: list[str] = field(default_factory=list)
    negated: bool = False
    lost: str = ""


@dataclass(frozen=True)
class RegionDef:
    """An F5 region as read: its members (each a selector and its ``file:line``)."""

    f5: str
    members: list[tuple[Selector, str]]
    where: str
    source: str

    def names(self) -> list[str]:
        """The regions it names (partition dropped as in `TopologyMapper.regions`)."""
        return [f5names.strip_partition(v) for (_, kind, v), _ in self.members if kind == "region"]


def kind_of(word: str) -> str:
    return KIND_ALIASES.get(word.lower(), word.lower())


CANNOT_EXCLUDE = (
    "our regions cannot exclude, and F5's documentation leaves open whether a 'not' member narrows "
    "the region or adds its complement; write the exclusion as topology records with 'not region' "
    "(docs/coming-from-f5.md)"
)


class TopologyMapper:
    """Maps F5 regions and topology records into *imp*; *datacenter* and *pool* give our
    name of an F5 data center or pool (None when it was not imported).

    Regions are declared (`region`) and mapped together (`resolve`), each after the regions
    it names: tmsh lists them alphabetically, so a region may name one defined later."""

    def __init__(
        self, imp: Imported, datacenter: Callable[[str], str | None], pool: Callable[[str], str | None]
    ) -> None:
        self.imp = imp
        self.datacenter = datacenter
        self.pool = pool
        self.regions: dict[str, RegionInfo] = {}
        self.declared: dict[str, RegionDef] = {}

    def region(self, f5_name: str, members: list[tuple[Selector, str]], where: str, source: str) -> None:
        """F5 region *f5_name* with its *members* (each a selector and its ``file:line``),
        mapped by `resolve`."""
        key = f5names.strip_partition(f5_name)
        first = self.declared.get(key)
        if first is not None or key in self.regions:
            also = f" (also {first.where})" if first is not None else ""
            self.imp.lost(where, f"region {f5_name}", f"a second region of this name{also}: not imported")
            return
        self.declared[key] = RegionDef(f5_name, members, where, source)

    def resolve(self) -> None:
        """Map every region declared, each after the regions it names; the regions of a cycle
        are lost, naming it. (An explicit stack: a chain of nested regions may be long.)"""
        for start in list(self.declared):
            path: list[str] = []  # (and the same as a set: a chain may be long)
            pending: list[list[str]] = []
            if start not in self.regions:
                path, pending = [start], [self.declared[start].names()]
            on_path = set(path)
            while path:
                if not pending[-1]:
                    done = path.pop()
                    on_path.discard(done)
                    pending.pop()
                    if done not in self.regions:
                        self.regions[done] = self.map_region(self.declared[done])
                    continue
                name = pending[-1].pop(0)
                if name in self.regions or name not in self.declared:
                    continue
                if name in on_path:
                    self.cycle([*path[path.index(name) :], name])
                    continue
                path.append(name)
                on_path.add(name)
                pending.append(self.declared[name].names())
        self.declared.clear()

    def cycle(self, keys: list[str]) -> None:
        shown = " -> ".join(self.declared[k].f5 for k in keys)
        why = f"nested regions form a cycle ({shown})"
        for key in keys[:-1]:
            d = self.declared[key]
            self.imp.lost(d.where, f"region {d.f5}", why + ": not imported")
            self.regions[key] = RegionInfo(None, lost=why)

    def map_region(self, d: RegionDef) -> RegionInfo:
        if any(negate for (negate, _, _), _ in d.members):
            return self.negated_region(d)
        if len(d.members) == 1 and d.members[0][0][1] == "region":
            other = self.regions.get(f5names.strip_partition(d.members[0][0][2]))
            if other is not None and other.negated:  # a region of one region is that region
                return RegionInfo(other.ours, list(other.servers), True)
        unusable, detail = self.unusable_nested(d)
        if unusable:
            self.imp.lost(d.where, f"region {d.f5}", f"{unusable}{detail}: not imported")
            return RegionInfo(None, lost=unusable)
        ours = self.imp.namespace("region").name(d.f5)
        entries: list[object] = []
        info = RegionInfo(None)
        for (_, kind, value), at in d.members:
            what = f"region {d.f5} member {kind} {value}"
            if kind == "region":
                other = self.regions.get(f5names.strip_partition(value))
                if other is None:
                    self.imp.lost(at, what, "no such region")
                elif other.ours is None and not other.servers:
                    self.imp.lost(at, what, "that region has nothing that could be imported")
                else:
                    entries.extend([{"region": other.ours}] if other.ours else [])
                    info.servers.extend(other.servers)
                continue
            term = self.member(kind, value, at, what)
            if isinstance(term, RegionInfo):
                info.servers.extend(term.servers)
            elif term is not None:
                entries.append(term)
        if entries:
            info.ours = ours
            self.imp.regions[ours] = Entry(entries, d.where, d.source)
        return info

    def unusable_nested(self, d: RegionDef) -> tuple[str, str]:
        """Why *d* cannot be imported for a region it names (one lost, or one that is a
        'not' member: a union with an exclusion), and more for its finding; "" when it can."""
        for (_, kind, value), _ in d.members:
            other = self.regions.get(f5names.strip_partition(value)) if kind == "region" else None
            if other is not None and other.lost:
                return f"it names region {value}, which was not imported", ""
            if other is not None and other.negated:
                return f"it names region {value}, a 'not' member", ": " + CANNOT_EXCLUDE
        return "", ""

    def member(self, kind: str, value: str, at: str, what: str) -> object | RegionInfo | None:
        """One member that is not a region: a network or GeoIP term for our region, a
        `RegionInfo` holding a server-side member, or None (a finding)."""
        if kind == "subnet":
            network = f5names.network(value)
            if network is None:
                self.imp.lost(at, what, f"{value!r} is not a network")
                return None
            return str(network)
        if kind in ("country", "continent"):
            return self.geo(kind, value, at, what)
        if kind in ("datacenter", "pool"):
            server = self.server_name(kind, value)
            if server is None:
                self.imp.lost(at, what, f"no such {kind} was imported")
                return None
            return RegionInfo(None, [server])
        self.imp.lost(at, what, f"no equivalent for {kind} (F5's own address lists)")
        return None

    def negated_region(self, d: RegionDef) -> RegionInfo:
        """A region with a ``not`` member. Mapped only where F5's two readings agree: a region
        of that one member means "not X", so ours holds X and the records that use it say
        the opposite; anything else is lost, never widened."""
        if len(d.members) != 1:
            several = all(negate for (negate, _, _), _ in d.members)
            why = "it has several 'not' members" if several else "it mixes 'not' members with others"
            self.imp.lost(d.where, f"region {d.f5}", f"{why}: {CANNOT_EXCLUDE}: not imported")
            return RegionInfo(None, lost=f"{why} (our regions cannot exclude)")
        (_, kind, value), at = d.members[0]
        what = f"region {d.f5} member not {kind} {value}"
        if kind == "region":
            other = self.regions.get(f5names.strip_partition(value))
            if other is None or other.lost or (other.ours is None and not other.servers):
                why = "no such region" if other is None else other.lost or "that region has nothing imported"
                self.imp.lost(at, what, why)
                return RegionInfo(None, lost=f"its member: {why}")
            return RegionInfo(other.ours, list(other.servers), not other.negated)
        term = self.member(kind, value, at, what)
        if term is None:
            return RegionInfo(None, lost="its only member could not be imported")
        if isinstance(term, RegionInfo):
            return RegionInfo(None, term.servers, True)
        ours = self.imp.namespace("region").name(f"{d.f5}-excluded")
        note = f"F5 region {d.f5} is 'not {kind} {value}': this region holds what it excludes (records say 'not')"
        self.imp.regions[ours] = Entry([term], d.where, d.source, note=note)
        return RegionInfo(ours, negated=True)

    def used_region(self, value: str, at: str, what: str) -> RegionInfo | None:
        """The region a record names, or None (a finding) when there is none to use."""
        info = self.regions.get(f5names.strip_partition(value))
        if info is None:
            self.imp.lost(at, what, f"no such region {value}")
        elif info.lost:
            self.imp.lost(at, what, f"region {value} was not imported: {info.lost}")
        return None if info is None or info.lost else info

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
            info = self.used_region(value, at, what)
            if info is None:
                return None
            if info.ours is None:
                self.imp.lost(at, what, f"region {value} has no networks that could be imported")
                return None
            return f"{'not ' if negate != info.negated else ''}region {info.ours}"
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
            info = self.used_region(value, at, what)
            if info is None:
                return None
            out = [f"region {info.ours}"] if info.ours else []
            out.extend(info.servers)
            if not out:
                self.imp.lost(at, what, f"region {value} has nothing that could be imported")
                return None
            negate = negate != info.negated  # (a region of one 'not' member: its opposite)
            if negate and len(out) != 1:
                self.imp.lost(at, what, "'not region' over networks with data centers or pools has no equivalent")
                return None
            return [("not " if negate else "") + s for s in out]
        self.imp.lost(at, what, f"no equivalent for a server selector by {kind}")
        return None

    def record(self, ldns: Selector, server: Selector, score: int, at: str, source: str) -> None:
        """One F5 topology record (appended in the order given: sort them first)."""
        what = f"topology record {source}"
        if self.declared:
            self.resolve()
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
