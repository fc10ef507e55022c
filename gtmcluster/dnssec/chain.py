"""A signed zone's NSEC chain, so that denying a name that does not exist costs no signature.

A compact denial (`rrsets.compact_nsec`) is an NSEC at the name asked: under a flood of
random names every answer needed a fresh signature. A name that does not exist is denied
instead by the classic NSEC proof (RFC 4035 3.1.3.2) from the zone's own chain: the NSEC
whose owner is the greatest existing name before it and whose next name is the one after
(it covers the name), and the NSEC covering the wildcard at the closest encloser (there is
none). The chain holds one NSEC per name of the zone, so the proofs for every random name
come from the same few records, each signed once (kept by the zone's `Signer`, which keeps
them across a reload that leaves them as they were): NXDOMAIN costs two lookups, no
signature, and its RCODE stays NXDOMAIN, so a validating resolver may answer later random
names from the cached NSECs itself (RFC 8198).

The chain's names are every name with records in the zone, the wide IP names and wildcards
(which the config adds as empty nodes) and the cuts, in canonical order (RFC 4034 6.1), less
the names below a cut (the child's) and those of another zone served below it (*owns*); an
empty non-terminal is not in it (an NSEC covers it). Each NSEC's bitmap lists the types that
may be there: the static records, every type of the wide IP answering there (a type with no
answer now is still listed: this chain never denies one; NODATA stays a compact answer at
the name), DNSKEY at the apex. It is made on the first NXDOMAIN of a config, once (a few
microseconds a name).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping

from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import RRset, Zone
from gtmcluster.dnssec.rrsets import TYPE_DNSKEY, TYPE_NSEC, name_wire, type_bitmap

_WILDCARD = b"*"


def canonical(key: Name) -> tuple[bytes, ...]:
    """The sort key of a lowercased name in canonical order (RFC 4034 6.1): its labels from
    the root down, each compared as octets (a shorter label first, a parent before its children)."""
    return tuple(reversed(key))


class Chain:
    """The NSEC records of one zone's names in canonical order (see the module docstring)."""

    def __init__(
        self, zone: Zone, extra_types: Mapping[Name, frozenset[int]], owns: Callable[[Name], bool] | None = None
    ):
        self.zone = zone
        owners = [k for k in zone.nodes if zone.delegation_for(k) in (None, k) and (owns is None or owns(k))]
        owners.sort(key=canonical)
        self.owners = owners
        #: the owners' canonical sort keys (`canonical`), for `bisect` (the fast path's
        #: signed negative answers look a name's span up in it: `dns.signednegative`)
        self.order = [canonical(k) for k in owners]
        self._extra = extra_types
        self._nsec: dict[int, RRset] = {}

    def __len__(self) -> int:
        return len(self.owners)

    def nsec(self, index: int) -> RRset:
        """The NSEC at the chain's *index*-th name (the last one's next name is the apex)."""
        nsec = self._nsec.get(index)
        if nsec is None:
            owner = self.owners[index]
            following = self.owners[(index + 1) % len(self.owners)]
            node = self.zone.nodes[owner]
            types = frozenset(node.rrsets) | self._extra.get(owner, frozenset())
            if owner == self.zone.origin_key:
                types |= {TYPE_DNSKEY}
            rdata = name_wire(following) + type_bitmap(types)
            nsec = self._nsec[index] = RRset(owner, TYPE_NSEC, self.zone.negative_soa.ttl, ((rdata,),))
        return nsec

    def covering(self, key: Name) -> int:
        """The index of the NSEC at or before *key* (lowercased, inside the zone)."""
        return bisect.bisect_right(self.order, canonical(key)) - 1

    def nxdomain(self, key: Name) -> tuple[int, ...] | None:
        """The indexes of the NSECs that prove *key* (lowercased, inside the zone, not below a
        cut) does not exist: the one covering it, and the one covering the wildcard at its
        closest encloser (one index when the same NSEC covers both). None when the name
        exists (or an empty non-terminal does, or a wildcard answers it): not for the chain."""
        zone = self.zone
        if zone.exists(key):
            return None
        encloser = key[1:]
        while not zone.exists(encloser):
            encloser = encloser[1:]
        wildcard = (_WILDCARD, *encloser)
        if wildcard in zone.nodes:
            return None
        first = self.covering(key)
        second = self.covering(wildcard)
        return (first,) if first == second else (first, second)
