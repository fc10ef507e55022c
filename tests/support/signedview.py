"""A DO=1 reply reduced to its DNSSEC shape, for comparing online signers.

Two online signers never give the same bytes (their keys, signature times and TTL choices
differ), so what is compared is the shape: the header fields a validator acts on, and per
section which RRsets there are and which are signed (``owner TYPE`` for an RRset, ``owner
RRSIG TYPE`` for the signatures over it), every NSEC with its type bitmap (``owner TYPES``;
its next name is a field apart), the RRSIGs whose TTL is not their RRset's, and the
RRSIGs whose Original TTL is not their RRset's TTL in the reply.
"""

from __future__ import annotations

from typing import Any

import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rdtypes.ANY.NSEC
import dns.rdtypes.ANY.RRSIG
import dns.rrset

from tests.support.dnsview import View

FIELDS = (
    "reply",
    "rcode",
    "aa",
    "tc",
    "ad",
    "do",
    "answer",
    "authority",
    "additional",
    "nsec",
    "nsec_next",
    "rrsig_ttl",
    "original_ttl",
)
COMPARED = FIELDS


def shape(reply: bytes | None) -> View:
    """The DNSSEC shape of *reply* (None: no reply)."""
    out: dict[str, Any] = dict.fromkeys(FIELDS)
    out["reply"] = reply is not None
    if reply is None:
        return out
    msg = dns.message.from_wire(reply)
    sections = (msg.answer, msg.authority, msg.additional)
    nsecs = [rrset for section in sections for rrset in section if rrset.rdtype == dns.rdatatype.NSEC]
    out |= {
        "rcode": dns.rcode.to_text(msg.rcode()),
        "aa": bool(msg.flags & 0x0400),
        "tc": bool(msg.flags & 0x0200),
        "ad": bool(msg.flags & 0x0020),
        "do": bool(msg.ednsflags & 0x8000) if msg.edns >= 0 else None,
        "answer": _rrsets(msg.answer),
        "authority": _rrsets(msg.authority),
        "additional": _rrsets(msg.additional),
        "nsec": frozenset(f"{_owner(r)} {_types(rd)}" for r in nsecs for rd in r),
        "nsec_next": frozenset(_next(r, rd) for r in nsecs for rd in r),
        "rrsig_ttl": _ttl_mismatches(sections),
        "original_ttl": _original_ttls(sections),
    }
    return out


def _owner(rrset: dns.rrset.RRset) -> str:
    return rrset.name.to_text().lower()


def _rrsets(section: list[dns.rrset.RRset]) -> frozenset[str]:
    out = set()
    for rrset in section:
        if rrset.rdtype == dns.rdatatype.RRSIG:
            covered = {
                dns.rdatatype.to_text(rd.type_covered) for rd in rrset if isinstance(rd, dns.rdtypes.ANY.RRSIG.RRSIG)
            }
            out |= {f"{_owner(rrset)} RRSIG {t}" for t in covered}
        else:
            out.add(f"{_owner(rrset)} {dns.rdatatype.to_text(rrset.rdtype)}")
    return frozenset(out)


def _ttl_mismatches(sections: tuple[list[dns.rrset.RRset], ...]) -> frozenset[str]:
    """The RRSIGs whose TTL is not that of the RRset they cover (RFC 4034 3: it MUST be)."""
    out = set()
    for section in sections:
        ttls = {(r.name, r.rdtype): r.ttl for r in section if r.rdtype != dns.rdatatype.RRSIG}
        for r in section:
            if r.rdtype != dns.rdatatype.RRSIG:
                continue
            for rd in r:
                assert isinstance(rd, dns.rdtypes.ANY.RRSIG.RRSIG)
                covered = ttls.get((r.name, rd.type_covered))
                if covered is not None and covered != r.ttl:
                    kind = dns.rdatatype.to_text(rd.type_covered)
                    out.add(f"{_owner(r)} RRSIG {kind} ttl {r.ttl}, {kind} ttl {covered}")
    return frozenset(out)


def _original_ttls(sections: tuple[list[dns.rrset.RRset], ...]) -> frozenset[str]:
    """Each RRSIG's Original TTL where the RRset it covers has another TTL in the reply (RFC
    4034 3.1.4: the Original TTL is the RRset's TTL in the zone, as the SOA of a negative
    answer, given with the negative TTL, shows)."""
    out = set()
    for section in sections:
        ttls = {(r.name, r.rdtype): r.ttl for r in section if r.rdtype != dns.rdatatype.RRSIG}
        for r in section:
            for rd in r if r.rdtype == dns.rdatatype.RRSIG else ():
                assert isinstance(rd, dns.rdtypes.ANY.RRSIG.RRSIG)
                covered = ttls.get((r.name, rd.type_covered))
                if covered is not None and covered != rd.original_ttl:
                    kind = dns.rdatatype.to_text(rd.type_covered)
                    out.add(f"{_owner(r)} RRSIG {kind} original {rd.original_ttl}, {kind} ttl {covered}")
    return frozenset(out)


def _types(rdata: dns.rdata.Rdata) -> str:
    assert isinstance(rdata, dns.rdtypes.ANY.NSEC.NSEC)
    # (dnspython before 2.7 does not know type 128, RFC 9824's NXNAME, by name)
    return " ".join(rdata.to_text().split()[1:]).replace("TYPE128", "NXNAME")


def _next(rrset: dns.rrset.RRset, rdata: dns.rdata.Rdata) -> str:
    """How the NSEC's next name relates to its owner: "\\000.owner" (compact denial, RFC 9824
    and the black lies alike), or the next name itself."""
    assert isinstance(rdata, dns.rdtypes.ANY.NSEC.NSEC)
    if rdata.next.labels[1:] == rrset.name.labels and rdata.next.labels[0] == b"\x00":
        return "\\000.owner"
    following: dns.name.Name = rdata.next
    return following.to_text().lower()
