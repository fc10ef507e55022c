"""Topology records: which servers suit which LDNSes, and how much.

A record is ``ldns-selector  server-selector  score``. For one LDNS (or client subnet), the
records whose LDNS selector matches are taken in *longest match* order: a record matched
through a longer prefix comes first (a region matches through the longest of its networks
that contains the address; ``any`` and negated selectors match with length 0), and records of
equal length keep their order in the config. A candidate (pool or virtual server) gets the
score of the first record in that order whose server selector matches it; a candidate no
record matches is not a topology choice at all. This is BIG-IP DNS's topology with "longest
match" on, over the selectors we support.

Both sides cost what matches, not what the config holds (a topology may have tens of
thousands of records): an LDNS's records come from a prefix lookup, plus the few records
that match without one (``any``, negated selectors). Server selectors are matched once, at
config load: each distinct server selector gets an id (`Record.server_id`), and each
candidate the set of ids of the selectors it passes (`Topology.server_mask`), found by
lookups by name and by address; answering is set membership in a short ordered list.

GeoIP selectors (``country CC``, ``continent CODE``, ``asn N``, and regions holding them)
match through one lookup of the client's facts (`topology.geoip`, cached per address) and
a dict of records by fact. In longest-match order they come after every match through a
network of one bit or more, the more specific first (``asn``, then ``country``, then
``continent``), and before ``any`` and the negated selectors; the scope of a match covers
the databases' networks too (every address sharing it has the same facts).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gtmcluster.runtime import slices
from gtmcluster.topology.geoip import DATABASE_OF, GeoIP, Term
from gtmcluster.topology.prefixes import IPAddress, IPNetwork, PrefixMap

GEO_KINDS = ("country", "continent", "asn")
LDNS_KINDS = ("subnet", "region", *GEO_KINDS, "any")
SERVER_KINDS = ("datacenter", "pool", "virtual_server", "subnet", "region", *GEO_KINDS, "any")
#: what follows a selector's kind, as problems show it
SHAPES = {"subnet": "CIDR", "country": "CC", "continent": "CODE", "asn": "N"}
#: among matches of prefix length 0, what a GeoIP fact ranks (higher first; others 0)
GEO_RANK = {"asn": 3, "country": 2, "continent": 1}
#: `Topology.build_steps` yields every this many records numbered or networks indexed
BUILD_STEP = 128


@dataclass(frozen=True, slots=True)
class Selector:
    """One side of a topology record, as written (``not region cnc-nets``) and resolved."""

    kind: str
    negate: bool
    value: str  # region, data center, pool or VS name; the network for subnet; "" for any
    networks: tuple[IPNetwork, ...] = ()
    #: the GeoIP facts it matches: its own (``country CN``) or its region's
    geo: tuple[Term, ...] = ()

    def __str__(self) -> str:
        text = self.kind if self.kind == "any" else f"{self.kind} {self.value}"
        return f"not {text}" if self.negate else text


@dataclass(frozen=True, slots=True)
class Record:
    index: int
    ldns: Selector
    server: Selector
    score: int
    #: the id of its server selector among the topology's distinct ones (set by `build`)
    server_id: int = field(default=-1, compare=False)

    def __str__(self) -> str:
        return f"ldns: {self.ldns}, server: {self.server}, score: {self.score}"


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What server selectors test about a candidate."""

    name: str
    is_pool: bool
    pools: frozenset[str]
    datacenters: frozenset[str]
    addresses: tuple[IPAddress, ...] = ()


@dataclass(frozen=True, slots=True)
class Match:
    """The records that match one address, in the order they are consulted."""

    records: tuple[tuple[Record, int], ...]  # (record, matched prefix length)
    scope: int  # prefix length over which this match is the same (RFC 7871 scope)
    #: the client's GeoIP facts the match consulted ("country JP, continent AS"), or ""
    geo: str = ""


NAMED_KINDS = ("datacenter", "pool", "virtual_server")


@dataclass(frozen=True)
class Topology:
    records: tuple[Record, ...]
    _ldns_map: PrefixMap[int] = field(repr=False, compare=False, default_factory=PrefixMap)
    _index: dict[int, Record] = field(repr=False, compare=False, default_factory=dict)
    #: records every LDNS matches without a lookup: ``any`` and the negated selectors
    _unconditional: tuple[Record, ...] = field(repr=False, compare=False, default=())
    _servers: _ServerIndex = field(repr=False, compare=False, default_factory=lambda: _ServerIndex({}))
    #: records by the GeoIP facts their LDNS selectors name, and the databases those need
    _geo_records: dict[Term, list[int]] = field(repr=False, compare=False, default_factory=dict)
    _geo_keys: frozenset[str] = field(repr=False, compare=False, default=frozenset())
    geoip: GeoIP | None = field(repr=False, compare=False, default=None)

    @classmethod
    def build(cls, records: Sequence[Record], geoip: GeoIP | None = None) -> Topology:
        return slices.whole(cls.build_steps(records, geoip))

    @classmethod
    def build_steps(cls, records: Sequence[Record], geoip: GeoIP | None = None) -> slices.Steps[Topology]:
        """`build` in steps (`gtmcluster.runtime.slices`): 20,000 records take a few hundred ms."""
        ids: dict[Selector, int] = {}
        numbered: list[Record] = []
        for i, r in enumerate(records):
            if i % BUILD_STEP == BUILD_STEP - 1:
                yield
            server_id = ids.setdefault(r.server, len(ids))
            numbered.append(r if r.server_id == server_id else dataclasses.replace(r, server_id=server_id))
        prefix_map: PrefixMap[int] = PrefixMap()
        geo_records: dict[Term, list[int]] = {}
        added = 0
        for record in numbered:
            for term in record.ldns.geo:
                geo_records.setdefault(term, []).append(record.index)
            for network in record.ldns.networks:
                prefix_map.add(network, record.index)
                added += 1
                if added % BUILD_STEP == 0:
                    yield
        yield
        unconditional = tuple(r for r in numbered if (r.ldns.kind == "any") != r.ldns.negate)
        if geo_records and geoip is None:  # (config validation names the missing database)
            raise ValueError("GeoIP selectors need the GeoIP databases")
        geo_keys = frozenset(DATABASE_OF[kind] for kind, _ in geo_records)
        return cls(
            tuple(numbered),
            prefix_map,
            {r.index: r for r in numbered},
            unconditional,
            _ServerIndex(ids, geoip),
            geo_records,
            geo_keys,
            geoip,
        )

    def match(self, address: IPAddress) -> Match:
        """Records whose LDNS selector matches *address*, in longest-match order."""
        hits, scope = self._ldns_map.lookup(address)
        best: dict[int, int] = {}
        for plen, indexes in hits:  # longest first: the first hit per record is its best
            for i in indexes:
                best.setdefault(i, plen)
        geo = ""
        ranks: dict[int, int] = {}
        if self._geo_records:
            assert self.geoip is not None
            facts = self.geoip.facts(address, self._geo_keys)
            scope = max(scope, facts.prefix)
            geo = facts.text
            for term in facts.terms:
                rank = GEO_RANK[term[0]]
                for i in self._geo_records.get(term, ()):
                    best.setdefault(i, 0)
                    ranks[i] = max(ranks.get(i, 0), rank)
        index = self._index
        ordered = [(record, plen) for i, plen in best.items() if not (record := index[i]).ldns.negate]
        for record in self._unconditional:
            if not record.ldns.negate or record.index not in best:
                ordered.append((record, 0))
        if ranks:
            ordered.sort(key=lambda hit: (-hit[1], -ranks.get(hit[0].index, 0), hit[0].index))
        else:
            ordered.sort(key=_consulted)
        return Match(tuple(ordered), scope, geo)

    def server_mask(self, facts: ServerFacts) -> frozenset[int]:
        """Ids of the server selectors a candidate passes (see `Record.server_id`)."""
        return self._servers.mask(facts)

    @staticmethod
    def score(match: Match, mask: frozenset[int]) -> tuple[int, Record] | None:
        """The candidate's score: from the first matching record that also matches it."""
        for record, _ in match.records:
            if record.server_id in mask:
                return record.score, record
        return None


def _consulted(hit: tuple[Record, int]) -> tuple[int, int]:
    return (-hit[1], hit[0].index)


class _ServerIndex:
    """The distinct server selectors, indexed so that finding those a candidate passes
    costs lookups by its names and addresses, not a test of every selector."""

    def __init__(self, ids: Mapping[Selector, int], geoip: GeoIP | None = None):
        self.geoip = geoip
        self.by_name: dict[tuple[str, str], list[int]] = {}  # (kind, value) -> positive ids
        self.negated_named: list[tuple[str, str, int]] = []
        self.always: list[int] = []  # any
        self.networks: PrefixMap[int] = PrefixMap()  # positive subnet/region selectors
        self.negated_networks: list[tuple[Selector, int]] = []  # and negated GeoIP ones
        self.by_fact: dict[Term, list[int]] = {}  # GeoIP fact -> positive ids
        self.geo_keys: set[str] = set()  # the databases server selectors need
        for selector, sid in ids.items():
            kind = selector.kind
            if kind == "any":
                if not selector.negate:
                    self.always.append(sid)
            elif kind in NAMED_KINDS:
                if selector.negate:
                    self.negated_named.append((kind, selector.value, sid))
                else:
                    self.by_name.setdefault((kind, selector.value), []).append(sid)
            elif selector.negate:
                self.negated_networks.append((selector, sid))
            else:
                for network in selector.networks:
                    self.networks.add(network, sid)
                for term in selector.geo:
                    self.by_fact.setdefault(term, []).append(sid)
            self.geo_keys.update(DATABASE_OF[kind] for kind, _ in selector.geo)

    def mask(self, facts: ServerFacts) -> frozenset[int]:
        names = {
            "datacenter": facts.datacenters,
            "pool": facts.pools,
            "virtual_server": frozenset() if facts.is_pool else frozenset([facts.name]),
        }
        ids = set(self.always)
        for kind, values in names.items():
            for value in values:
                ids.update(self.by_name.get((kind, value), ()))
        for kind, value, sid in self.negated_named:
            if value not in names[kind]:
                ids.add(sid)
        for address in facts.addresses:
            for _, found in self.networks.lookup(address)[0]:
                ids.update(found)
        terms: frozenset[Term] = frozenset()
        if self.geo_keys and self.geoip is not None:
            keys = frozenset(self.geo_keys)
            terms = frozenset(t for a in facts.addresses for t in self.geoip.facts(a, keys).terms)
            for term in terms:
                ids.update(self.by_fact.get(term, ()))
        for selector, sid in self.negated_networks:
            if server_matches(selector, facts, terms):
                ids.add(sid)
        return frozenset(ids)


def server_matches(selector: Selector, facts: ServerFacts, terms: frozenset[Term] = frozenset()) -> bool:
    """Whether a candidate with *facts* passes *selector* (*terms*: its addresses' GeoIP
    facts, when a selector needs them)."""
    kind = selector.kind
    if kind == "any":
        hit = True
    elif kind == "datacenter":
        hit = selector.value in facts.datacenters
    elif kind == "pool":
        hit = selector.value in facts.pools
    elif kind == "virtual_server":
        hit = not facts.is_pool and facts.name == selector.value
    elif kind in ("subnet", "region"):
        hit = any(a in n for a in facts.addresses for n in selector.networks if a.version == n.version)
        hit = hit or any(t in terms for t in selector.geo)
    elif kind in GEO_KINDS:
        hit = any(t in terms for t in selector.geo)
    else:  # pragma: no cover - config validation only builds known kinds
        raise ValueError(f"unknown server selector {kind!r}")
    return hit != selector.negate
