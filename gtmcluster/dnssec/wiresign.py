"""Signing an RRset straight from the responder's wire pieces, without dnspython.

A fresh signature over a compact denial or an address answer (a NODATA at a name asked, an
answer a wildcard makes there: `dnssec.rrsets`) is made often; through dnspython (converting the RRset,
building the RRSIG template, the canonical form, back again) that cost over ten times the
signature itself. Here the signed data (RFC 4034 3.1.8.1) is put together from bytes:

    RRSIG RDATA without the signature (signer's name in lower case)
    | for each record, in canonical order: owner (lower case) | type | class | TTL | RDLENGTH | RDATA

for an RRset whose records hold no names (`signable`: A, AAAA, TXT, DNSKEY, the NSEC of a
compact denial, ...): its RDATA is its canonical form as it stands (an NSEC's next name is
not lowercased, RFC 6840 5.1). An RRset with names inside its records (CNAME, MX, NS, SOA,
...) is left to dnspython, whose canonical form lowercases them (RFC 4034 6.2).

Each key's fixed parts (algorithm, key tag, the signer's name, the ECDSA parameters) are
made once, in `WireKey`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import dns.dnssec
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.keys import ECDSAP256SHA256, ZoneKey
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import RRset

TYPE_RRSIG = 46
_FIXED = struct.Struct("!HBBIIIH")
_RR = struct.Struct("!HHIH")
_ECDSA = ec.ECDSA(hashes.SHA256())


def name_wire(name: Name) -> bytes:
    return b"".join(bytes((len(label),)) + label for label in name) + b"\0"


def signable(rrset: RRset) -> bool:
    """Whether *rrset*'s records are bytes only (no names to put in canonical form)."""
    return all(isinstance(piece, bytes) for rdata in rrset.rdatas for piece in rdata)


@dataclass(frozen=True, slots=True)
class WireKey:
    """One key's fixed parts of an RRSIG: algorithm, key tag, signer's name (as written, and
    lower case as signed)."""

    key: ZoneKey
    algorithm: int
    tag: int
    signer: bytes
    signer_lower: bytes

    @classmethod
    def of(cls, key: ZoneKey, origin: Name) -> WireKey:
        return cls(key, key.algorithm, dns.dnssec.key_id(key.dnskey), name_wire(origin), name_wire(names.key(origin)))

    def sign(self, data: bytes) -> bytes:
        private = self.key.private
        if self.algorithm == ECDSAP256SHA256:
            assert isinstance(private, ec.EllipticCurvePrivateKey)
            r, s = decode_dss_signature(private.sign(data, _ECDSA))
            return r.to_bytes(32, "big") + s.to_bytes(32, "big")
        assert isinstance(private, ed25519.Ed25519PrivateKey)
        return private.sign(data)


def rrsig(rrset: RRset, owner: Name | None, keys: list[WireKey], inception: int, expiration: int) -> RRset:
    """The RRSIG RRset over *rrset* (written at *owner*, for a wildcard answer), by *keys*,
    as the responder writes it. *rrset* must be `signable`."""
    at = owner if owner is not None else rrset.owner
    labels = len(at) - (1 if at and at[0] == b"*" else 0)
    fixed_rr = name_wire(names.key(at))
    records = b"".join(
        fixed_rr + _RR.pack(rrset.rtype, rrset.rclass, rrset.ttl, len(rdata)) + rdata
        for rdata in sorted({b"".join(pieces) for pieces in rrset.rdatas})  # type: ignore[arg-type]
    )
    out = []
    for key in keys:
        head = _FIXED.pack(rrset.rtype, key.algorithm, labels, rrset.ttl, expiration, inception, key.tag)
        signature = key.sign(head + key.signer_lower + records)
        out.append((head + key.signer + signature,))
    return RRset(at, TYPE_RRSIG, rrset.ttl, tuple(out), rclass=rrset.rclass)
