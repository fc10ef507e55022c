"""Negative answers kept per closest encloser: NXDOMAIN and NODATA for names a zone does not hold.

A random-subdomain flood asks a new name each query, so a template per question (`dns.fastpath`'s
static templates) never hits and every name would be kept. But the general path's answer
to a name that does not exist depends on where the name is, not on its labels: for any
name whose closest encloser (its longest existing ancestor, RFC 4592) is E, the lookup
walks up to E, meets the same cuts, zone wildcards and wide IP wildcards, and answers with
the same SOA (RFC 2308), however many labels are below E and whatever they are. So a
`Negative` is kept per (E in wire form, query type, EDNS class): E is a name of the zone
(a node, an empty non-terminal or its origin), so what is kept is bounded by the zone, not
by the names asked. It is made from the first such answer the general path gives
(`Negative.made`), and answers every other name below E whose child of E on the way is
absent (`Negative.covers`): the header's flags and counts, the query's own question (its
case, its ID, its RD and CD bits), then the bytes after the question.

Those bytes are the same for every name of one length: the SOA's owner and the names in
its RDATA are compression pointers into the question's E part (or to names written after
the question), which move by the difference in the names' lengths. `Negative.tail` writes
them for a length once and keeps it (at most `MAX_TAILS` lengths; then it starts again).
The fast path checks that the reply fits the client's size (else the general path
truncates it), so one answer serves every size limit.

A query with an EDNS client subnet gets the same answer with the option echoed (RFC 7871
7.2.1: family, source prefix and address as sent, scope prefix 0, since a negative answer
depends on no client): `ecs_option` writes the OPT's RDATA for it, once the option is
checked as the general path checks it (else FORMERR, from the general path). A `Negative`
is kept without the option, whether the answer it was made from carried one or not.

The SOA's names (its owner, MNAME and RNAME) may continue below E: the general path's
answer to a name below one of them, say ``hostmaster.<zone>`` where no such name exists,
points into the question's ``hostmaster`` label. So such a name (`suffixes_of_soas`: a
handful per zone) is kept as if it were an encloser: the names below it have an answer kept
for it, and the walk up from a queried name stops there. A name that exists, and a name one
of the SOA's names ends with, never get a `Negative`'s answer. A reply with anything but one
SOA in authority (an answer, a referral, a signature: a signed zone's DO=1 denial is never
kept here: see below) or with a pointer into the question below E is never made into one,
nor is a reply that is not for an absent name.

A signed NXDOMAIN (`made` with the signer's *refresh*) is one too, though not kept per
closest encloser: the SOA, then the NSECs of the zone's chain and the RRSIGs (their RDATA
holds no compressed name), kept until the earliest of its signatures is due for renewal
(`renew_at`). The NSECs it carries depend on the span of the chain the name falls in, and
the one for the closest encloser's wildcard on the parent, so it is made with the parent as
its *encloser* and holds for the names below the parent in one span of the chain only
(`dns.signednegative` keeps one per parent, type and span). It is bounded as an unsigned
one: `MAX_TAILS` lengths, the fit checked per query.
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
_OPTION = struct.Struct("!HHH")  # the OPT's RDLENGTH, then the option's code and length
_OPTION_ECS = 8
#: the lengths of names one `Negative` keeps a tail for at most (then it starts again): a
#: flood of names of every length costs a tail's writing per query, never more memory (a
#: signed answer, kept per parent, sees at most 63 lengths: one label's)
MAX_TAILS = 32

#: the counter labels of a reply (`kept.Counter`)
_Counter = tuple[str, str, str, str]


class Negative:
    """The general path's negative answer to a name below one closest encloser, for any
    absent name below it (see the module's doc)."""

    __slots__ = (
        "counter",
        "counts",
        "encloser",
        "ents",
        "first",
        "flags",
        "length",
        "nodes",
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
        encloser: Name,
        zone: Zone,
        renew_at: float = math.inf,
    ):
        #: the reply's flags without RD and CD, and its QDCOUNT..ARCOUNT
        self.flags = flags
        self.counts = counts
        self.counter = counter
        #: the closest encloser, a name of the zone (lowercased labels)
        self.encloser = encloser
        self.nodes = zone.nodes
        self.ents = zone.empty_non_terminals
        #: the bytes after the question for the name of *length* it was made from, and
        #: where its pointers are in them (each pointing into the encloser part or later)
        self.first = tail
        self.length = length
        self.pointers = pointers
        #: the bytes after the question by the queried name's wire length
        self.tails: dict[int, bytes] = {length: tail}
        #: when the earliest signature it carries is due for renewal (the signer's clock;
        #: inf: it carries none): from then on the general path answers and signs anew
        self.renew_at = renew_at

    def covers(self, label: bytes) -> bool:
        """Whether the name *label* (lowercased) followed by the encloser is absent from the
        zone: then so is every name below it (the caller checks the SOAs' names)."""
        key = (label, *self.encloser)
        return key not in self.nodes and key not in self.ents

    def tail(self, length: int) -> bytes:
        """The bytes after the question for a queried name of wire *length*."""
        tails = self.tails
        kept = tails.get(length)
        if kept is not None:
            return kept
        made = bytearray(self.first)
        delta = length - self.length
        for at in self.pointers:
            pointer = _U16.unpack_from(made, at)[0] + delta
            _U16.pack_into(made, at, pointer)
        if len(tails) >= MAX_TAILS:
            tails.clear()
        tail = tails[length] = bytes(made)
        return tail

    @classmethod
    def made(
        cls,
        reply: bytes,
        question_end: int,
        qname: bytes,
        ecs: bytes | None,
        counter: _Counter,
        zone: Zone,
        encloser: Name,
        refresh: float | None = None,
    ) -> Negative | None:
        """The negative answer *reply* to the absent name *qname* (lowercased, wire form) of
        *zone*, asked with the client subnet option *ecs* (its data, or None), whose
        question ends at *question_end*, kept for the absent names below *encloser* (their
        closest encloser); None when it is not one this can answer for every such name.
        With *refresh* (the signer's: how long before its expiration a signature is made
        anew), a signed one: after the SOA, NSEC and RRSIG records (`renew_at`: the
        earliest expiration less *refresh*; *encloser*: the parent)."""
        if len(reply) < question_end or reply[4:8] != b"\x00\x01\x00\x00" or reply[8] or not reply[9]:
            return None  # not one question, an answer, or no authority
        authority = reply[9]
        if authority != 1 and refresh is None:
            return None  # (unsigned: the SOA alone)
        if reply[3] & 0xF not in (0, 3):
            return None
        # where the encloser starts in the question
        first = question_end - 4 - (sum(len(label) + 1 for label in encloser) + 1)
        found: list[int] = []
        expires = math.inf
        at = question_end
        size = len(reply)
        opt = b"\x00\x00"  # (the OPT's RDLENGTH, RDATA: none, or the client subnet's echo)
        if ecs is not None:  # (with scope 0; left out of what is kept)
            opt = _OPTION.pack(4 + len(ecs), _OPTION_ECS, len(ecs)) + ecs
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
                elif rtype != TYPE_OPT or reply[at - 2 : end] != opt or end != size:
                    return None  # (an OPT with other options, or not last)
                at = end
        except (IndexError, struct.error, ValueError):
            return None
        if at != size:
            return None
        pointers = []
        for position in found:
            if ((reply[position] & 0x3F) << 8 | reply[position + 1]) < first:
                return None  # into the labels below the encloser: only this name's reply
            pointers.append(position - question_end)
        flags = (reply[2] << 8 | reply[3]) & ~0x0110  # (RD and CD: the query's)
        tail = reply[question_end:]
        if ecs is not None:
            tail = tail[: -len(opt)] + b"\x00\x00"
        renew_at = math.inf if refresh is None else expires - refresh
        return cls(tail, len(qname), tuple(pointers), flags, reply[4:12], counter, encloser, zone, renew_at)


def ecs_option(ecs: bytes) -> bytes | None:
    """The OPT RDATA (with its RDLENGTH) of a negative answer to a query whose client subnet
    option is *ecs*: the option echoed with scope 0 (RFC 7871 7.2.1); None when the option
    is malformed as `wire.parse_ecs` reads it (the general path answers FORMERR)."""
    size = len(ecs)
    if size < 4 or ecs[3] or ecs[0]:
        return None
    family, source = ecs[1], ecs[2]
    if not ((family == 1 and source <= 32) or (family == 2 and source <= 128)):
        return None
    if size - 4 != (source + 7) >> 3 or (source & 7 and ecs[-1] & (0xFF >> (source & 7))):
        return None
    return _OPTION.pack(size + 4, _OPTION_ECS, size) + ecs


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
