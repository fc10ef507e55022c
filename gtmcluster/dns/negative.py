"""Negative answers kept per parent name: NXDOMAIN and NODATA for names a zone does not hold.

A random-subdomain flood asks a new name each query, so a template per question (`dns.fastpath`'s
static templates) never hits and every name would be kept. But the general path's answer
to a name that does not exist depends on where the name is, not on its first label: for
``<label>.<parent>`` that the zone does not hold, the lookup walks up to the same closest
encloser, meets the same cuts, zone wildcards and wide IP wildcards, and answers with the
same SOA (RFC 2308), whatever the label. So a `Negative` is kept per (the parent name in
wire form, query type, EDNS class, size limit), made from the first such answer the general
path gives (`Negative.made`), and answers every other absent name below the same parent:
the header's flags and counts, the query's own question (its case, its ID, its RD and CD
bits), then the bytes after the question.

Those bytes are the same for every name of one length: the SOA's owner and the names in
its RDATA are compression pointers into the question's parent part (or to names written
after the question), which move by the difference in the names' lengths. `Negative.tail`
writes them for a length once and keeps it (at most one per length a name can have).

Where it does not hold, the fast path does not use it (`Negative.covers`): a name that
exists (a node or an empty non-terminal of the zone, which includes every wide IP name), a
zone's origin, and a name one of the SOA's names ends with (the general path would point
into the question's first label: `suffixes_of_soas`). A reply with anything but one SOA in
authority (an answer, a referral, a signature) or with a pointer into the first label is
never made into one, nor is a reply that is not for an absent name; a name whose reply
would not fit the client's size goes to the general path (which truncates it).

A signed NXDOMAIN (`made` with the signer's *refresh*) is one too: the SOA, then the NSECs of
the zone's chain and the RRSIGs (their RDATA holds no compressed name), kept until the
earliest of its signatures is due for renewal (`renew_at`); it holds for the names below the
parent in one span of the chain only (`dns.signednegative` keeps one per span). At most
`MAX_TAILS` lengths are kept per answer; a name of another length has its tail made anew.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Set

from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import TYPE_OPT, TYPE_SOA, Zone

_RR = struct.Struct("!HHIH")
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_TYPE_NSEC = 47
_TYPE_RRSIG = 46
#: the tails kept per answer at most (one per length of the names asked; 63 lengths below a
#: parent are a label's): a name of another length has its tail made each time
MAX_TAILS = 64
#: what `Negative.tail` keeps for a length whose reply does not fit the client's size
NO_FIT = b""

#: the counter labels of a reply (`kept.Counter`)
_Counter = tuple[str, str, str, str]


class Negative:
    """The general path's negative answer to a name below one parent, for any absent name
    below it (see the module's doc)."""

    __slots__ = (
        "counter",
        "counts",
        "ents",
        "flags",
        "length",
        "limit",
        "nodes",
        "parent",
        "pointers",
        "renew_at",
        "tails",
    )

    def __init__(
        self,
        tail: bytes,
        length: int,
        pointers: tuple[int, ...],
        flags: int,
        counts: bytes,
        counter: _Counter,
        parent: Name | None,
        zone: Zone,
        limit: int,
        renew_at: float = math.inf,
    ):
        #: the reply's flags without RD and CD, and its QDCOUNT..ARCOUNT
        self.flags = flags
        self.counts = counts
        self.counter = counter
        #: the parent as a key when it exists (a name below it may too: asked of the zone),
        #: else None (nothing below a name that does not exist exists)
        self.parent = parent
        self.nodes = zone.nodes
        self.ents = zone.empty_non_terminals
        self.limit = limit
        #: the bytes after the question for the name of *length* it was made from, and
        #: where its pointers are in them (each pointing into the parent part or later)
        self.length = length
        self.pointers = pointers
        #: the bytes after the question by the queried name's wire length (NO_FIT: too big)
        self.tails: dict[int, bytes] = {length: tail}
        #: when the earliest signature it carries is due for renewal (the signer's clock;
        #: inf: it carries none): from then on the general path answers and signs anew
        self.renew_at = renew_at

    def covers(self, label: bytes) -> bool:
        """Whether the name *label* (lowercased) followed by the parent is absent from the
        zone, as far as the zone's nodes tell (the caller checks origins and the SOAs' names)."""
        parent = self.parent
        if parent is None:
            return True
        key = (label, *parent)
        return key not in self.nodes and key not in self.ents

    def tail(self, length: int) -> bytes:
        """The bytes after the question for a queried name of wire *length*, or NO_FIT."""
        kept = self.tails.get(length)
        if kept is not None:
            return kept
        made = bytearray(self.tails[self.length])
        delta = length - self.length
        for at in self.pointers:
            pointer = _U16.unpack_from(made, at)[0] + delta
            _U16.pack_into(made, at, pointer)
        tail = bytes(made)
        if 12 + length + 4 + len(tail) > self.limit:
            tail = NO_FIT
        if len(self.tails) < MAX_TAILS:
            self.tails[length] = tail
        return tail

    @classmethod
    def made(
        cls,
        reply: bytes,
        question_end: int,
        qname: bytes,
        counter: _Counter,
        zone: Zone,
        parent: Name,
        limit: int,
        refresh: float | None = None,
    ) -> Negative | None:
        """The negative answer *reply* to the absent name *qname* (lowercased, wire form) of
        *zone*, whose question ends at *question_end*, kept for the names below *parent* (a
        key); None when it is not one this can answer for every such name. With *refresh*
        (the signer's: how long before its expiration a signature is made anew), a signed
        one: after the SOA, NSEC and RRSIG records (`renew_at`: the earliest expiration
        less *refresh*)."""
        if len(reply) < question_end or reply[4:8] != b"\x00\x01\x00\x00" or reply[8] or not reply[9]:
            return None  # not one question, an answer, or no authority
        authority = reply[9]
        if authority != 1 and refresh is None:
            return None  # (unsigned: the SOA alone)
        if reply[3] & 0xF not in (0, 3):
            return None
        first = 12 + 1 + qname[0]  # where the parent starts in the question
        found: list[int] = []
        expires = math.inf
        at = question_end
        size = len(reply)
        try:
            for index in range(authority + (reply[10] << 8 | reply[11])):
                at = _name(reply, at, found)
                rtype, _, _, rdlength = _RR.unpack_from(reply, at)
                at += 10
                end = at + rdlength
                if index == 0:
                    if rtype != TYPE_SOA:
                        return None
                    at = _name(reply, _name(reply, at, found), found)
                    if end - at != 20:
                        return None
                elif index < authority:
                    if rtype == _TYPE_RRSIG:  # (its signer's name is never compressed)
                        expires = min(expires, _U32.unpack_from(reply, at + 8)[0])
                    elif rtype != _TYPE_NSEC:  # (nor the NSEC's next name)
                        return None
                elif rtype != TYPE_OPT or rdlength:
                    return None  # (an OPT with options: a client subnet, kept nowhere)
                at = end
        except (IndexError, struct.error, ValueError):
            return None
        if at != size:
            return None
        pointers = []
        for position in found:
            if ((reply[position] & 0x3F) << 8 | reply[position + 1]) < first:
                return None  # into the first label: only this name's reply
            pointers.append(position - question_end)
        flags = (reply[2] << 8 | reply[3]) & ~0x0110  # (RD and CD: the query's)
        parent_key = parent if parent == zone.origin_key or zone.exists(parent) else None
        return cls(
            reply[question_end:],
            len(qname),
            tuple(pointers),
            flags,
            reply[4:12],
            counter,
            parent_key,
            zone,
            limit,
            math.inf if refresh is None else expires - refresh,
        )


def _name(message: bytes, at: int, pointers: list[int]) -> int:
    """Skip the name at *at* in *message*, noting where its pointer is; where it ends."""
    while True:
        length = message[at]
        if length == 0:
            return at + 1
        if length & 0xC0 == 0xC0:
            pointers.append(at)
            message[at + 1]  # (raises IndexError when cut)
            return at + 2
        if length & 0xC0:
            raise ValueError("a label type that is not used")
        at += 1 + length


def suffixes_of_soas(zones: Iterable[Zone]) -> Set[bytes]:
    """Every name that ends one of the names in the zones' SOA records (lowercased, in wire
    form): a query for one of these has its negative answer point into its first label."""
    out: set[bytes] = set()
    for zone in zones:
        for rdata in zone.soa.rdatas:
            for piece in rdata:
                if isinstance(piece, tuple):
                    labels = [label.lower() for label in piece]
                    for i in range(len(labels)):
                        out.add(b"".join(bytes([len(label)]) + label for label in labels[i:]) + b"\0")
    return out
