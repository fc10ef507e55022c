"""Topology records: which servers suit which LDNSes, and how much.

A record is ``ldns-selector  server-selector  score``. For one LDNS (or client subnet), the
records whose LDNS selector matches are taken in *longest match* order: a record matched
through a longer prefix comes first (a region matches through the longest of its networks
that contains the address; ``any`` and negated selectors match with length 0), and records of
equal length keep their order in the config. A candidate (pool or virtual server) gets the
score of the first record in that order whose server selector matches it; a candidate no
record matches is not a topology choice at all. This is BIG-IP DNS's topology with "longest
match" on, over the selectors we support.

Server selectors are matched once, at config load, into a set of record indexes per
candidate (`Topology.server_mask`), so answering is set membership in a short ordered list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gtmcluster.topology.prefixes import IPAddress, IPNetwork, PrefixMap

LDNS_KINDS = ("subnet", "region", "any")
SERVER_KINDS = ("datacenter", "pool", "virtual_server", "subnet", "region", "any")


@dataclass(frozen=True, slots=True)
class Selector:
    """One side of a topology record, as written (``not region cnc-nets``) and resolved."""

    kind: str
    negate: bool
    value: str  # region, data center, pool or VS name; the network for subnet; "" for any
    networks: tuple[IPNetwork, ...] = ()

    def __str__(self) -> str:
        text = self.kind if self.kind == "any" else f"{self.kind} {self.value}"
        return f"not {text}" if self.negate else text


@dataclass(frozen=True, slots=True)
class Record:
    index: int
    ldns: Selector
    server: Selector
    score: int

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


@dataclass(frozen=True)
class Topology:
    records: tuple[Record, ...]
    _ldns_map: PrefixMap[int] = field(repr=False, compare=False, default_factory=PrefixMap)

    @classmethod
    def build(cls, records: Sequence[Record]) -> Topology:
        prefix_map: PrefixMap[int] = PrefixMap()
        for record in records:
            for network in record.ldns.networks:
                prefix_map.add(network, record.index)
        return cls(tuple(records), prefix_map)

    def match(self, address: IPAddress) -> Match:
        """Records whose LDNS selector matches *address*, in longest-match order."""
        hits, scope = self._ldns_map.lookup(address)
        best: dict[int, int] = {}
        for plen, indexes in hits:  # longest first: the first hit per record is its best
            for i in indexes:
                best.setdefault(i, plen)
        ordered = []
        for record in self.records:
            sel = record.ldns
            if sel.kind == "any":
                matched, plen = not sel.negate, 0
            else:
                inside = record.index in best
                matched = inside != sel.negate
                plen = best.get(record.index, 0) if not sel.negate else 0
            if matched:
                ordered.append((record, plen))
        ordered.sort(key=lambda rp: (-rp[1], rp[0].index))
        return Match(tuple(ordered), scope)

    def server_mask(self, facts: ServerFacts) -> frozenset[int]:
        """Indexes of the records whose server selector matches a candidate."""
        return frozenset(r.index for r in self.records if server_matches(r.server, facts))

    @staticmethod
    def score(match: Match, mask: frozenset[int]) -> tuple[int, Record] | None:
        """The candidate's score: from the first matching record that also matches it."""
        for record, _ in match.records:
            if record.index in mask:
                return record.score, record
        return None


def server_matches(selector: Selector, facts: ServerFacts) -> bool:
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
    else:  # pragma: no cover - config validation only builds known kinds
        raise ValueError(f"unknown server selector {kind!r}")
    return hit != selector.negate
