"""Zone data and authoritative lookup within one zone.

A `Zone` is immutable once built. `Zone.find` answers "what does this zone say about this
name" (RFC 1034 4.3.2 steps 3a-3c, with RFC 4592 wildcards); the responder drives CNAME
chains and wide IPs on top of it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name

TYPE_A = 1
TYPE_NS = 2
TYPE_CNAME = 5
TYPE_SOA = 6
TYPE_PTR = 12
TYPE_MX = 15
TYPE_TXT = 16
TYPE_AAAA = 28
TYPE_SRV = 33
TYPE_NAPTR = 35
TYPE_DNAME = 39
TYPE_OPT = 41
TYPE_DS = 43
TYPE_IXFR = 251
TYPE_AXFR = 252
TYPE_MAILB = 253
TYPE_MAILA = 254
TYPE_ANY = 255

#: An RDATA as a sequence of pieces: literal bytes, or a domain name that the encoder may
#: compress (only for the RFC 1035 types whose names may be compressed).
RData = tuple["bytes | Name", ...]


@dataclass(frozen=True, slots=True)
class RRset:
    """All records of one owner name and type."""

    owner: Name
    rtype: int
    ttl: int
    rdatas: tuple[RData, ...]
    #: IN for everything from zones; CH only for the configured version string
    rclass: int = 1


@dataclass(frozen=True, slots=True)
class Node:
    """The RRsets at one name. A name that exists only as a wide IP has none."""

    rrsets: dict[int, RRset] = field(default_factory=dict)


class Outcome(enum.Enum):
    NODE = "node"  # the name exists (possibly through a wildcard)
    NODATA = "nodata"  # an empty non-terminal
    NXDOMAIN = "nxdomain"
    REFERRAL = "referral"  # the name is at or below a delegation


@dataclass(frozen=True, slots=True)
class Found:
    outcome: Outcome
    node: Node | None = None
    wildcard: bool = False
    #: for REFERRAL: the NS RRset at the zone cut
    cut: RRset | None = None


class Zone:
    """One served zone: its apex, SOA, nodes, delegations and empty non-terminals."""

    def __init__(self, origin: Name, rrsets: Iterable[RRset], extra_names: Iterable[Name] = ()):
        self.origin = origin
        self.origin_key = names.key(origin)
        nodes: dict[Name, Node] = {}
        for rrset in rrsets:
            node = nodes.setdefault(names.key(rrset.owner), Node())
            node.rrsets[rrset.rtype] = rrset
        for extra in extra_names:
            nodes.setdefault(names.key(extra), Node())
        apex = nodes.get(self.origin_key)
        if apex is None or TYPE_SOA not in apex.rrsets:
            raise ValueError(f"zone {names.to_text(origin)} has no SOA at its apex")
        self.soa = apex.rrsets[TYPE_SOA]
        self.nodes = nodes
        self.cuts = frozenset(k for k, node in nodes.items() if k != self.origin_key and TYPE_NS in node.rrsets)
        n = len(self.origin_key)
        ents: set[Name] = set()
        for k in nodes:
            for i in range(n + 1, len(k)):
                parent = k[-i:]
                if parent not in nodes:
                    ents.add(parent)
        self.empty_non_terminals = frozenset(ents)
        minimum = int.from_bytes(_soa_minimum(self.soa), "big")
        #: RFC 2308 section 5: negative answers carry the SOA with min(SOA TTL, MINIMUM)
        self.negative_soa = RRset(self.soa.owner, TYPE_SOA, min(self.soa.ttl, minimum), self.soa.rdatas)

    def exists(self, key: Name) -> bool:
        return key in self.nodes or key in self.empty_non_terminals

    def delegation_for(self, key: Name) -> Name | None:
        """The zone cut at or above *key* (below the apex), if any."""
        if not self.cuts:
            return None
        for i in range(len(self.origin_key) + 1, len(key) + 1):
            if key[-i:] in self.cuts:
                return key[-i:]
        return None

    def find(self, key: Name, qtype: int) -> Found:
        """What this zone holds at *key* (a lowercased name inside the zone)."""
        cut = self.delegation_for(key)
        # DS lives on the parent side of a cut (RFC 4035 3.1.4.1): no referral for it.
        if cut is not None and not (cut == key and qtype == TYPE_DS):
            return Found(Outcome.REFERRAL, cut=self.nodes[cut].rrsets[TYPE_NS])
        node = self.nodes.get(key)
        if node is not None:
            return Found(Outcome.NODE, node)
        if key in self.empty_non_terminals:
            return Found(Outcome.NODATA)
        # RFC 4592: the closest encloser is the longest existing ancestor; only its
        # wildcard child may synthesize an answer.
        encloser = key[1:]
        while not self.exists(encloser):
            encloser = encloser[1:]
        wild = self.nodes.get((b"*", *encloser))
        if wild is not None:
            return Found(Outcome.NODE, wild, wildcard=True)
        return Found(Outcome.NXDOMAIN)

    def glue_for(self, ns: RRset) -> list[RRset]:
        """Address records in this zone for the targets of an NS RRset."""
        glue = []
        for rdata in ns.rdatas:
            target = rdata[0]
            assert isinstance(target, tuple)
            node = self.nodes.get(names.key(target))
            if node is None:
                continue
            for rtype in (TYPE_A, TYPE_AAAA):
                if rtype in node.rrsets:
                    glue.append(node.rrsets[rtype])
        return glue


def _soa_minimum(soa: RRset) -> bytes:
    fixed = soa.rdatas[0][-1]
    assert isinstance(fixed, bytes) and len(fixed) == 20
    return fixed[16:20]


class ZoneSet:
    """Every zone this node serves, found by longest origin match."""

    def __init__(self, zones: Iterable[Zone]):
        self.by_origin = {z.origin_key: z for z in zones}
        self.depths = sorted({len(k) for k in self.by_origin}, reverse=True)

    def find(self, key: Name) -> Zone | None:
        for depth in self.depths:
            if depth <= len(key):
                zone = self.by_origin.get(key[len(key) - depth :])
                if zone is not None:
                    return zone
        return None

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.by_origin.values())
