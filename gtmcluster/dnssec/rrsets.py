"""Between the responder's RRsets and dnspython's, for signing; and compact denial records.

The responder keeps records as `dnsdata.zone.RRset` (RDATA as pieces of bytes and names, names
in their original case). An RRset with names in its records is signed by dnspython
(`dns.dnssec.sign`; the others from their wire pieces, `dnssec.wiresign`), so it is
converted when, and only when, it has to be signed (a kept signature needs no conversion):
`kept_key` is what a signature is kept under, `to_dnspython` builds the RRset to sign, and
`rrsig_rrset` turns the signatures back into an RRset the responder writes.

A name with no record of the type asked is denied by a compact answer (RFC 9824): NOERROR
with one NSEC at the name itself whose next name is the name with a ``\\000`` label before it
(the least name after it, so the NSEC covers no other name) and whose type bitmap lists the
types at the name (NODATA), or NXNAME for a wide IP's NXDOMAIN at its own name.
`compact_nsec` makes it; a name that does not exist is denied by the zone's NSEC chain
(`dnssec.chain`).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable

import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import RRset

TYPE_RRSIG = 46
TYPE_NSEC = 47
TYPE_DNSKEY = 48
#: RFC 9824: the pseudo-type in a compact NXDOMAIN's NSEC bitmap
TYPE_NXNAME = 128


def name_wire(name: Name) -> bytes:
    return b"".join(bytes([len(label)]) + label for label in name) + b"\0"


def to_dnspython_name(name: Name) -> dns.name.Name:
    return dns.name.Name([*name, b""])


def kept_key(rrset: RRset, owner: Name | None = None) -> Hashable:
    """What the signature over *rrset* (written at *owner*, for a wildcard) is kept under:
    the owner in lower case, the type, the TTL and the records."""
    return (names.key(owner if owner is not None else rrset.owner), rrset.rtype, rrset.ttl, rrset.rdatas)


def to_dnspython(rrset: RRset, owner: Name | None = None) -> dns.rrset.RRset:
    """*rrset* (at *owner* if given) as dnspython's RRset, to be signed."""
    rclass = dns.rdataclass.RdataClass.make(rrset.rclass)
    rtype = dns.rdatatype.RdataType.make(rrset.rtype)
    out = dns.rrset.RRset(to_dnspython_name(owner if owner is not None else rrset.owner), rclass, rtype)
    for rdata in rrset.rdatas:
        wire = b"".join(piece if isinstance(piece, bytes) else name_wire(piece) for piece in rdata)
        out.add(dns.rdata.from_wire(rclass, rtype, wire, 0, len(wire)), rrset.ttl)
    return out


def from_dnspython(rrset: dns.rrset.RRset) -> RRset:
    """dnspython's *rrset* as the responder writes it (names inside RDATA never compressed,
    as RFC 4034 asks of RRSIG, NSEC and DNSKEY)."""
    owner = tuple(rrset.name.labels[:-1])
    return RRset(owner, rrset.rdtype, rrset.ttl, tuple((_wire(rd),) for rd in rrset), rclass=rrset.rdclass)


def compact_nsec(name: Name, types: Iterable[int], ttl: int) -> RRset:
    """The compact denial NSEC at *name* (RFC 9824): next name ``\\000.name``, and a bitmap of
    *types* with RRSIG and NSEC (give NXNAME for a name that does not exist). Written as bytes
    (the next name in the case asked, which RFC 6840 5.1 keeps out of the canonical form)."""
    rdata = b"\x01\x00" + name_wire(name) + type_bitmap(frozenset(types))
    return RRset(name, TYPE_NSEC, ttl, ((rdata,),))


@functools.lru_cache(maxsize=1024)
def type_bitmap(types: frozenset[int]) -> bytes:
    """The NSEC type bitmap (RFC 4034 4.1.2) of *types* with RRSIG and NSEC (a few sets
    recur: NXNAME's, and each name's types, so they are made once)."""
    windows: dict[int, bytearray] = {}
    for rtype in sorted({*types, TYPE_RRSIG, TYPE_NSEC}):
        window, bit = divmod(rtype, 256)
        windows.setdefault(window, bytearray(32))[bit // 8] |= 0x80 >> (bit % 8)
    out = b""
    for window, bits in sorted(windows.items()):
        used = bytes(bits).rstrip(b"\0")
        out += bytes((window, len(used))) + used
    return out


def _wire(rdata: dns.rdata.Rdata) -> bytes:
    data = rdata.to_wire()
    assert data is not None  # (None only when writing into a file)
    return data
