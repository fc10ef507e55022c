"""DNS wire format: parse a query, write a response (RFC 1035, RFC 6891, RFC 7871).

Parsing is done by hand on the bytes: only the header, the question and the OPT record of a
query matter to an authoritative server, and building full message objects would cost more
than answering. Writing compresses names against the question and earlier records and drops
whole RRsets that do not fit the size limit, setting TC when the answer is incomplete.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import TYPE_OPT, RRset

HEADER = struct.Struct("!HHHHHH")
_RR_FIXED = struct.Struct("!HHIH")
_U16 = struct.Struct("!H")

QR = 0x8000
AA = 0x0400
TC = 0x0200
RD = 0x0100
RA = 0x0080
AD = 0x0020
CD = 0x0010
OPCODE_SHIFT = 11

NOERROR = 0
FORMERR = 1
SERVFAIL = 2
NXDOMAIN = 3
NOTIMP = 4
REFUSED = 5
BADVERS = 16

CLASS_IN = 1
CLASS_CH = 3
CLASS_ANY = 255

OPTION_ECS = 8
EDNS_DO = 0x8000
MIN_UDP = 512
MAX_MESSAGE = 65535


class BadQuery(Exception):
    """The one error `parse_query` raises, for any packet it does not take as a query to
    answer: `Drop` (no reply) or `QueryError` (an error reply). Any other exception from
    it is a bug (the fuzz target `fuzz.dns_request` checks that)."""


class Drop(BadQuery):
    """A packet that gets no reply at all (too short to answer, or itself a response)."""


class QueryError(BadQuery):
    """A query answered only with an error rcode (FORMERR, NOTIMP)."""

    def __init__(
        self,
        rcode: int,
        query_id: int,
        flags: int,
        question: bytes = b"",
        qname: Name = (),
        edns: Edns | None = None,
    ):
        super().__init__(rcode)
        self.rcode = rcode
        self.query_id = query_id
        self.flags = flags
        self.question = question
        self.qname = qname
        #: the query's EDNS when the message was well formed: the reply then carries OPT
        self.edns = edns


@dataclass(frozen=True, slots=True)
class ClientSubnet:
    """An EDNS Client Subnet option (RFC 7871) as the query sent it."""

    family: int
    source_prefix: int
    scope_prefix: int
    address: bytes

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        if self.family == 1:
            return ipaddress.IPv4Network((self.address.ljust(4, b"\0"), self.source_prefix))
        return ipaddress.IPv6Network((self.address.ljust(16, b"\0"), self.source_prefix))

    def option(self, scope: int) -> bytes:
        """The option for the response: the query's family, source and address, our scope."""
        data = struct.pack("!HBB", self.family, self.source_prefix, scope) + self.address
        return struct.pack("!HH", OPTION_ECS, len(data)) + data


@dataclass(frozen=True, slots=True)
class Edns:
    udp_size: int
    version: int
    do: bool
    ecs: ClientSubnet | None


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed query: what the responder needs and nothing more."""

    id: int
    flags: int
    question: bytes  # the raw question section, copied into the response (case preserved)
    qname: Name
    qtype: int
    qclass: int
    edns: Edns | None


def _read_qname(data: bytes, offset: int) -> tuple[Name, int]:
    """The question name at *offset*: no compression is valid there."""
    labels: list[bytes] = []
    total = 1
    end = len(data)
    while True:
        if offset >= end:
            raise ValueError("truncated name")
        length = data[offset]
        if length == 0:
            return tuple(labels), offset + 1
        if length > 63:
            raise ValueError("compression or extended label in the question name")
        total += length + 1
        if total > 255:
            raise ValueError("name longer than 255 octets")
        if offset + 1 + length > end:
            raise ValueError("truncated label")
        labels.append(data[offset + 1 : offset + 1 + length])
        offset += 1 + length


def _skip_name(data: bytes, offset: int) -> tuple[bool, int]:
    """Skip a possibly compressed name; returns (is_root, offset after it)."""
    first = offset
    end = len(data)
    while True:
        if offset >= end:
            raise ValueError("truncated name")
        length = data[offset]
        if length == 0:
            return offset == first, offset + 1
        if length & 0xC0 == 0xC0:
            if offset + 2 > end:
                raise ValueError("truncated pointer")
            return False, offset + 2
        if length > 63:
            raise ValueError("bad label type")
        offset += 1 + length


def _parse_options(rdata: bytes) -> ClientSubnet | None:
    ecs = None
    i = 0
    end = len(rdata)
    while i < end:
        if i + 4 > end:
            raise ValueError("truncated EDNS option")
        code, length = struct.unpack_from("!HH", rdata, i)
        i += 4
        if i + length > end:
            raise ValueError("EDNS option longer than the OPT record")
        if code == OPTION_ECS:
            if ecs is not None:
                raise ValueError("two client subnet options")
            ecs = parse_ecs(rdata[i : i + length])
        i += length
    return ecs


def parse_ecs(data: bytes) -> ClientSubnet:
    """A client subnet option's data, checked (RFC 7871). Raises `ValueError`."""
    if len(data) < 4:
        raise ValueError("client subnet option too short")
    family, source, scope = struct.unpack_from("!HBB", data)
    address = data[4:]
    width = {1: 32, 2: 128}.get(family)
    if width is None:
        raise ValueError(f"client subnet family {family}")
    if source > width:
        raise ValueError("client subnet source prefix too long")
    if scope != 0:
        raise ValueError("client subnet scope prefix set in a query")  # RFC 7871 7.1.1
    if len(address) != (source + 7) // 8:
        raise ValueError("client subnet address length does not match its prefix")
    if source % 8 and address[-1] & (0xFF >> (source % 8)):
        raise ValueError("client subnet address has bits beyond its prefix")  # RFC 7871 6
    return ClientSubnet(family, source, scope, address)


def _read_records(data: bytes, offset: int, count: int, additional: bool) -> tuple[Edns | None, int]:
    """Skip *count* records from *offset*; in the additional section, read the OPT."""
    edns = None
    end = len(data)
    for _ in range(count):
        is_root, offset = _skip_name(data, offset)
        if offset + 10 > end:
            raise ValueError("truncated record")
        rtype, rclass, ttl, rdlength = _RR_FIXED.unpack_from(data, offset)
        offset += 10
        if offset + rdlength > end:
            raise ValueError("truncated record data")
        if additional and rtype == TYPE_OPT:
            if edns is not None or not is_root:
                raise ValueError("a second OPT record, or one not at the root")
            ecs = _parse_options(data[offset : offset + rdlength])
            edns = Edns(max(rclass, MIN_UDP), (ttl >> 16) & 0xFF, bool(ttl & EDNS_DO), ecs)
        offset += rdlength
    return edns, offset


def parse_query(data: bytes) -> Query:
    """Parse a query. Raises `BadQuery` (`Drop` or `QueryError`); never anything else.

    The whole message is walked, so an error reply (NOTIMP for another opcode, FORMERR
    for a second question) still knows the query's EDNS and answers with an OPT.
    """
    if len(data) < 12:
        raise Drop("shorter than a DNS header")
    query_id, flags, qdcount, ancount, nscount, arcount = HEADER.unpack_from(data)
    if flags & QR:
        raise Drop("a response, not a query")
    question = b""
    qname: Name = ()
    qtype = qclass = 0
    edns = None
    offset = 12
    try:
        for i in range(qdcount):
            if i == 0:
                qname, offset = _read_qname(data, offset)
            else:
                offset = _skip_name(data, offset)[1]
            if offset + 4 > len(data):
                raise ValueError("truncated question")
            if i == 0:
                qtype, qclass = struct.unpack_from("!HH", data, offset)
                question = data[12 : offset + 4]
            offset += 4
        offset = _read_records(data, offset, ancount + nscount, additional=False)[1]
        edns, offset = _read_records(data, offset, arcount, additional=True)
        if offset != len(data):
            raise ValueError("trailing bytes after the message")
        well_formed = True
    except ValueError:
        well_formed = False
        edns = None
    if (flags >> OPCODE_SHIFT) & 0xF != 0:
        raise QueryError(NOTIMP, query_id, flags, question, qname, edns)
    if not well_formed:
        raise QueryError(FORMERR, query_id, flags, question, qname)
    if qdcount != 1 or ancount or nscount:
        raise QueryError(FORMERR, query_id, flags, edns=edns)
    return Query(query_id, flags, question, qname, qtype, qclass, edns)


def opt_record(udp_size: int, ext_rcode: int, do: bool, options: bytes) -> bytes:
    """An OPT pseudo-record (version 0) for a response."""
    ttl = (ext_rcode << 24) | (EDNS_DO if do else 0)
    return b"\0" + _RR_FIXED.pack(TYPE_OPT, udp_size, ttl, len(options)) + options


class _Writer:
    """Appends records to a message, compressing names, within a size limit."""

    __slots__ = ("buf", "comp", "limit")

    def __init__(self, limit: int):
        self.buf = bytearray(12)
        self.comp: dict[Name, int] = {}
        self.limit = limit

    def register(self, name: Name, offset: int) -> None:
        k = names.key(name)
        for i in range(len(k)):
            if offset >= 0x4000:
                return
            self.comp.setdefault(k[i:], offset)
            offset += len(k[i]) + 1

    def name(self, name: Name) -> None:
        buf = self.buf
        k = names.key(name)
        comp = self.comp
        for i in range(len(k)):
            pointer = comp.get(k[i:])
            if pointer is not None:
                buf += _U16.pack(0xC000 | pointer)
                return
            offset = len(buf)
            if offset < 0x4000:
                comp[k[i:]] = offset
            label = name[i]
            buf.append(len(label))
            buf += label
        buf.append(0)

    def rrset(self, rrset: RRset, owner: Name | None = None) -> bool:
        """Append every record of *rrset*; False (and nothing written) if they do not fit."""
        buf = self.buf
        mark = len(buf)
        head = _RR_FIXED.pack(rrset.rtype, rrset.rclass, rrset.ttl, 0)[:8]
        for rdata in rrset.rdatas:
            self.name(owner if owner is not None else rrset.owner)
            buf += head
            length_at = len(buf)
            buf += b"\0\0"
            for piece in rdata:
                if isinstance(piece, bytes):
                    buf += piece
                else:
                    self.name(piece)
            struct.pack_into("!H", buf, length_at, len(buf) - length_at - 2)
        if len(buf) > self.limit:
            del buf[mark:]
            self.comp = {k: v for k, v in self.comp.items() if v < mark}
            return False
        return True


@dataclass(slots=True)
class Section:
    """RRsets for one section; *owner* overrides the RRsets' owner (wildcard answers)."""

    rrsets: list[tuple[RRset, Name | None]]
    #: whether losing one of these RRsets to the size limit makes the answer incomplete (TC)
    required: bool = True


def write_response(
    query_id: int,
    flags: int,
    rcode: int,
    question: bytes,
    qname: Name,
    sections: Sequence[Section],
    opt: bytes | None,
    limit: int,
) -> bytes:
    """Encode a response. *sections* are answer, authority and additional, in order.

    RRsets that do not fit in *limit* bytes (with room kept for *opt*) are dropped whole,
    with everything after them; TC is set when a required one was dropped (RFC 2181 9).
    """
    w = _Writer(limit - (len(opt) if opt else 0))
    w.buf += question
    counts = [0, 0, 0]
    if question:
        w.register(qname, 12)
    for i, section in enumerate(sections):
        done = True
        for rrset, owner in section.rrsets:
            if not w.rrset(rrset, owner):
                done = False
                break
            counts[i] += len(rrset.rdatas)
        if not done:
            if section.required:
                flags |= TC
            break
    if opt is not None:
        w.buf += opt
        counts[2] += 1
    HEADER.pack_into(w.buf, 0, query_id, flags | (rcode & 0xF), 1 if question else 0, counts[0], counts[1], counts[2])
    return bytes(w.buf)
