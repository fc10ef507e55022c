"""The UDP answer fast path: the common query answered from prepared bytes.

Most queries are alike: one question, class IN, no EDNS or a plain OPT (perhaps with a
client subnet), asking for a static record or a wide IP. For those the general path
(`Responder`) is run once and its work kept:

- a static answer (any query with the same question, in any case, and the same EDNS
  presence and DO bit gets it) is kept as a template: the reply is the template with the
  query's ID, RD and CD flags and its question (so its case) put in;
- a wide IP is answered from the decision the node keeps for that client (see
  `lb.cache`), encoded here: the question, one A or AAAA record per address pointing back
  to it, and the OPT (with the client subnet echoed and the decision's scope). The wide IP
  is found by the queried name: its own name or an alias, else the longest ``*.`` wildcard
  above it (one lookup per label). The encoded reply is kept per wide IP and client, without
  its question: any name the wide IP answers gets it with its own question. For names below
  a wildcard the reply sent is kept so too (`KeptReplies.client_hits`), not by the query's
  bytes, so they keep nothing each (a signed one is kept per name: its RRSIG covers the
  name). Wide IPs of the record types (CNAME, MX, SRV, NAPTR) are left
  to the general path;
- an NXDOMAIN or NODATA for a name the zone does not hold comes from the negative answer
  kept for its closest encloser (`dns.negative`: the SOA's pointers written for the name's
  length; with a client subnet, the option echoed with scope 0), never kept per name; in a
  signed zone, a DO=1 NXDOMAIN from the one kept for its parent and the span of the zone's
  NSEC chain it falls in (`dns.signednegative`).

A one-use name (``<id>.rum.<zone>``, `dns.rumnames`) is never answered here nor kept: each
is asked once, and its answer tells the node who asked. A name of that shape goes to the
general path before anything kept is looked at, and what it answers is kept nowhere.

In a signed zone (`dnssec.answers`), a DO=1 wide IP answer also carries its RRSIG, from the
signatures the zone's signer keeps (signed once per RRset contents, written as the general
path writes it, and made again when the signature it carries is due for renewal). Anything
else, anything not yet kept, and anything that would not fit the client's size goes to the
general path, which answers it and (for what qualifies) prepares the next one.

In front of both, the replies already sent are kept by the query's exact bytes after its
ID (flags, question in its case, OPT with its client subnet): a query seen before is
answered by one lookup and the ID put in (over TCP from replies kept apart, with no size
limit: `answer_stream`); names the client chooses (an absent name, a name below a wildcard)
are not kept so. Everything kept here (templates, replies by
their bytes, encoded wide IP replies) is the responder's `KeptReplies` (`dns.kept`), which
the node tells of every change; a static reply holds as long as the responder (a new config
makes a new one). A wide IP reply is kept with its client's address and the kept decision
it came from, and is sent again only while its time is not up and the decision still holds
(`DecisionCache.holds`: no clear since, the same health generation, every record it read
the same: mostly a flag, see `lb.cache`); a decision that asks for a probe is never
answered from there (the probe request goes with each answer). The UDP port
(`dns.udpport.DNSPort`) makes the same lookups inline, and calls `answer` for the rest.

Before all that, when response rate limiting is on, the client's prefix must have a token
(`ratelimit`): a limited query is dropped or answered truncated, at the cost of a lookup.
"""

from __future__ import annotations

import math
import struct
from functools import partial
from typing import NamedTuple

from gtmcluster.config.model import WideIP
from gtmcluster.dns import wire
from gtmcluster.dns.kept import Counter, Encoded, KeptReplies, WideHit
from gtmcluster.dns.negative import Negative, ecs_option, suffixes_of_soas
from gtmcluster.dns.ratelimit import SLIP, RateLimiter, truncated
from gtmcluster.dns.responder import RCODE_LABELS, TYPE_LABELS, Answered, Responder, Streamed
from gtmcluster.dns.transfer import Reply, transfer_type
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_AAAA, TYPE_OPT, RRset
from gtmcluster.dnssec.chain import canonical
from gtmcluster.dnssec.rrsets import TYPE_RRSIG
from gtmcluster.lb.context import Client
from gtmcluster.lb.trace import Action, Decision, tally

_HEADER = struct.Struct("!HHHHHH")
_OPT = struct.Struct("!HHIH")  # type, class (UDP size), TTL (flags), RDLENGTH
_RR = struct.Struct("!HHIH")
_OPTION = struct.Struct("!HH")
_COPIED = wire.RD | wire.CD
#: the wide IP types answered here; CNAME, MX, SRV and NAPTR wide IPs go the general path
_ADDRESS_TYPES = frozenset((TYPE_A, TYPE_AAAA))
#: the longest name in wire form (RFC 1035 3.1): a longer one is FORMERR, the general path's
_MAX_NAME = 255


class _Plain(NamedTuple):
    """A query of the plain shape, as far as the fast path reads it."""

    qid: int
    flags: int
    question_end: int  # the question is data[12:question_end]
    qname: bytes  # lowercased, in wire form
    qtype: int
    edns_class: int  # 0 no EDNS, 1 EDNS, 2 EDNS with DO
    do: int  # the DO bit as it sits in the OPT's TTL
    ecs: bytes | None  # the client subnet option's data, as sent
    limit: int  # the largest reply the client takes


class FastPath:
    """Answers what it can from prepared bytes, the rest through the general *responder*."""

    def __init__(self, responder: Responder, limiter: RateLimiter | None = None):
        self.responder = responder
        #: response rate limiting (UDP only, so here), or None when it is off
        self.limiter = limiter
        #: the signed zones: a DO=1 wide IP answer there carries the RRSIG its zone's signer
        #: keeps (static DO=1 answers of signed zones are never kept: the general path signs)
        self.signing = responder.signing if responder.signing else None
        self.now = responder.signing.clock
        #: what is kept, the responder's (`dns.kept`); the dicts below are its own, bound
        #: here for the lookups of every query
        kept: KeptReplies = responder.kept
        self.kept = kept
        #: (lowercased question, EDNS class, size limit) -> (reply, its flags without RD and
        #: CD, counter); the limit too, since glue that does not fit is left out unannounced
        self.templates = kept.templates
        self.wideips: dict[bytes, WideIP] = {
            _wire_name(name).lower(): w for name, w in responder.direct_wideips().items()
        }
        #: the wildcards answered here, by the wire name they answer below; and every exact
        #: name (a name of its own is never a wildcard's, even where it is not answered here)
        self.wildcards: dict[bytes, WideIP] = {_wire_name(name): w for name, w in responder.direct_wildcards().items()}
        self.exact: set[bytes] = {_wire_name(name) for name in responder.names.exact} if self.wildcards else set()
        #: (name, type, EDNS class, client) -> the reply encoded from the decision kept for it
        self._replies = kept.replies
        #: the kept decisions (None when the node keeps none: no wide IP reply is kept then)
        self.decisions = kept.decisions
        self.stats = responder.stats
        #: static replies by the query's bytes after the ID: (the reply after the ID, counter)
        self.static_hits = kept.static_hits
        #: wide IP replies by (the query's bytes after the ID, the client's address)
        self.wide_hits = kept.wide_hits
        #: the same two over TCP (`answer_stream`)
        self.stream_static_hits = kept.stream_static_hits
        self.stream_wide_hits = kept.stream_wide_hits
        #: unsigned replies below wildcards by (wide IP, type, EDNS class, client), question left out
        self.client_hits = kept.client_hits
        #: NXDOMAIN and NODATA answers by (closest encloser, type, EDNS class) (`dns.negative`)
        self.negatives = kept.negatives
        #: signed NXDOMAIN answers by (parent, type), each by span (`dns.signednegative`)
        self.signed_negatives = kept.signed_negatives
        #: names no `Negative` answers for: the zones' origins, and the names the SOAs' names end with
        self.not_negative = frozenset(_wire_name(z.origin_key) for z in responder.zones) | suffixes_of_soas(
            responder.zones
        )
        #: the one-use names (None: ``rum`` off), answered by the general path only
        self.rum_names = responder.rum_names

    def handle(self, data: bytes, source: str) -> bytes | None:
        """The reply to the UDP query *data* from *source*, or None for no reply."""
        return self.respond(data, source)[0]

    def respond(self, data: bytes, source: str) -> Answered:
        """The answer to the UDP query *data* from *source*: at the edge, rate limiting;
        then the replies kept by their bytes; then `answer`."""
        limiter = self.limiter
        if limiter is not None:
            verdict = limiter.check(source)
            if verdict:
                return (truncated(data, self.responder.udp_payload_size) if verdict == SLIP else None), None, False
        tail = data[2:]
        static = self.static_hits.get(tail)
        if static is not None:
            self.stats.queries[static[1]] += 1
            return data[:2] + static[0], None, False
        wide = self.wide_hits.get((tail, source))
        if wide is not None and self.still(wide):
            return data[:2] + wide.reply, wide.tally, False
        return self.answer(data, source)

    def still(self, hit: WideHit) -> bool:
        """Whether the kept wide IP reply *hit* may be sent again (counted if so)."""
        decisions = self.decisions
        if (
            decisions is None
            or decisions.clock() >= hit.until
            or (hit.renew_at < math.inf and self.now() >= hit.renew_at)
        ):
            return False
        stats = self.stats
        if hit.entry.fresh and decisions.settled():
            stats.kept_hits += 1
        elif not decisions.holds(hit.entry):
            return False
        stats.queries[hit.counter] += 1
        stats.answered[hit.tally] += 1
        stats.proximity[hit.entry.decision.proximity] += 1
        return True

    def handle_stream(self, data: bytes, source: str) -> Reply:
        """The replies to *data* from *source* over TCP (`answer_stream`'s replies)."""
        return self.answer_stream(data, source)[0]

    def answer_stream(self, data: bytes, source: str) -> Streamed:
        """The replies to *data* from *source* over TCP (`Responder.answer_stream`), and what
        decided them: the replies kept by their bytes over TCP first (as `respond` over UDP,
        but kept apart: no size limit here), zone transfers by the general path, the rest
        as over UDP (`answer`) with no size limit (the templates and kept decisions serve
        both). A transfer is never kept: only `answer`'s replies are."""
        tail = data[2:]
        static = self.stream_static_hits.get(tail)
        if static is not None:
            self.stats.queries[static[1]] += 1
            return [data[:2] + static[0]], None
        wide = self.stream_wide_hits.get((tail, source))
        if wide is not None and self.still(wide):
            return [data[:2] + wide.reply], wide.tally
        if self.responder.transfers is not None and transfer_type(data):
            return self.responder.answer_stream(data, source)
        reply, decided, _ = self.answer(data, source, True)
        return ([] if reply is None else [reply]), decided

    def answer(self, data: bytes, source: str, tcp: bool = False) -> Answered:
        """The answer to *data* from *source* when it is not kept by its exact bytes."""
        plain = _parse(data, self.responder.udp_payload_size)
        if plain is None:
            return self.responder.answer(data, source, tcp)
        if tcp:
            plain = plain._replace(limit=wire.MAX_MESSAGE)
        rum = self.rum_names
        if rum is not None and rum.may_be_one(plain.qname):
            return self.responder.answer(data, source, tcp)  # (and nothing kept)
        wideip = self.wideips.get(plain.qname)
        if wideip is None and self.wildcards and plain.qname not in self.exact:
            wideip = _covering(self.wildcards, plain.qname)
        if wideip is not None and plain.qtype in wideip.types and plain.qtype in _ADDRESS_TYPES:
            if self.client_hits and (not plain.do or self.signing is None) and plain.qname not in self.wideips:
                who = source if plain.ecs is None else (source, plain.ecs)
                hit = self.client_hits.get((wideip.name, plain.qtype, plain.edns_class, who))
                if hit is not None and len(hit.reply) + plain.question_end - 10 <= plain.limit and self.still(hit):
                    end = plain.question_end
                    flags = (wire.QR | wire.AA | (plain.flags & _COPIED)).to_bytes(2, "big")
                    return data[:2] + flags + hit.reply[2:10] + data[12:end] + hit.reply[10:], hit.tally, False
            answered = self._wideip(data, source, plain, wideip, tcp)
            if answered is not None:
                return answered
        else:
            reply = None
            if plain.ecs is None:
                if plain.do and self.signing is not None:
                    reply = self._signed_negative(data, plain)
                if reply is None:
                    reply = self._static(data, plain, tcp)
            if reply is None:
                reply = self._negative(data, plain)
            if reply is not None:
                return reply, None, False
        answered = self.responder.answer(data, source, tcp)
        reply = answered[0]
        if reply is None:
            return answered
        if answered[2]:
            if not self._keep_negative(plain, reply) and plain.ecs is None:
                self._keep(data, plain, reply, tcp)
        elif plain.do and plain.ecs is None and self.signing is not None and reply[3] & 0xF == wire.NXDOMAIN:
            self._keep_signed_negative(plain, reply)
        return answered

    def _keep_hit(self, data: bytes, reply: bytes, counter: Counter, tcp: bool) -> None:
        self.kept.keep_static(data[2:], reply[2:], counter, tcp)

    # -- static answers --------------------------------------------------------------------

    def _static(self, data: bytes, plain: _Plain, tcp: bool = False) -> bytes | None:
        end = plain.question_end
        kept = self.templates.get((data[12:end].lower(), plain.edns_class, plain.limit))
        if kept is None:
            return None
        template, template_flags, counter = kept
        self.responder.stats.queries[counter] += 1
        flags = template_flags | (plain.flags & _COPIED)
        reply = data[:2] + flags.to_bytes(2, "big") + template[4:12] + data[12:end] + template[end:]
        self._keep_hit(data, reply, counter, tcp)
        return reply

    def _keep(self, data: bytes, plain: _Plain, reply: bytes, tcp: bool) -> None:
        """Keep the static *reply* to *data* as a template."""
        end = plain.question_end
        if data[12:end] in reply[end:]:
            return  # the query's spelling of the name is in the answer: not a template
        flags = ((reply[2] << 8) | reply[3]) & ~_COPIED
        rcode = reply[3] & 0xF
        counter = ("", TYPE_LABELS.get(plain.qtype, "other"), RCODE_LABELS.get(rcode, "other"), "static")
        self.kept.keep_template((data[12:end].lower(), plain.edns_class, plain.limit), (reply, flags, counter))
        self._keep_hit(data, reply, counter, tcp)

    # -- names the zones do not hold ------------------------------------------------------

    def _negative(self, data: bytes, plain: _Plain) -> bytes | None:
        """The negative answer kept for the query's closest encloser, if its name is absent
        (`dns.negative`): the first name above it with one kept, whose child on the way
        the zone does not hold; the walk stops at a name the SOA's names end with (the
        general path points into it: the answer kept for it, if any, is the one)."""
        qname = plain.qname
        not_negative = self.not_negative
        if qname in not_negative or not 1 < len(qname) <= _MAX_NAME:
            return None  # (the root; a name too long: FORMERR)
        negatives = self.negatives
        qtype, edns_class = plain.qtype, plain.edns_class
        at = 0  # where the name below the candidate encloser starts
        while True:
            cut = at + 1 + qname[at]
            encloser = qname[cut:]
            negative = negatives.get((encloser, qtype, edns_class))
            if negative is not None:
                break
            if encloser in not_negative or len(encloser) == 1:
                return None  # (a zone's origin, or the root, with nothing kept)
            at = cut
        if not negative.covers(qname[at + 1 : cut]):
            return None
        tail = negative.tail(len(qname))
        end = plain.question_end
        ecs = plain.ecs
        if ecs is not None:
            option = ecs_option(ecs)
            if option is None:
                return None  # (FORMERR, from the general path)
            tail = tail[:-2] + option
        if end + len(tail) > plain.limit:
            return None  # (the general path truncates it)
        self.stats.queries[negative.counter] += 1
        flags = negative.flags | (plain.flags & _COPIED)
        return data[:2] + flags.to_bytes(2, "big") + negative.counts + data[12:end] + tail

    def _keep_negative(self, plain: _Plain, reply: bytes) -> bool:
        """Keep *reply*, the general path's static answer to *plain*, for every absent name
        below the same closest encloser if it is a negative answer to an absent name;
        whether it is."""
        if reply[6:8] != b"\x00\x00" or reply[3] & 0xF not in (wire.NOERROR, wire.NXDOMAIN):
            return False
        qname = plain.qname
        if qname in self.not_negative:
            return False
        key = _labels(qname)
        zone = self.responder.zones.find(key)
        if zone is None or zone.exists(key) or len(key) <= len(zone.origin_key):
            return False  # (a name of the zone: its template, as any static answer)
        encloser = key[1:]  # (or a name the SOA's names end with: see `dns.negative`)
        while not zone.exists(encloser) and _wire_name(encloser) not in self.not_negative:
            encloser = encloser[1:]  # (the origin exists)
        counter = ("", TYPE_LABELS.get(plain.qtype, "other"), RCODE_LABELS.get(reply[3] & 0xF, "other"), "static")
        negative = Negative.made(reply, plain.question_end, qname, plain.ecs, counter, zone, encloser)
        if negative is not None:
            self.kept.keep_negative((_wire_name(encloser), plain.qtype, plain.edns_class), negative)
        return True  # (a reply of its own otherwise: never kept by its name)

    def _signed_negative(self, data: bytes, plain: _Plain) -> bytes | None:
        """The signed NXDOMAIN kept for the query's parent and span (`dns.signednegative`)."""
        qname = plain.qname
        cut = qname[0] + 1
        spans = self.signed_negatives.get((qname[cut:], plain.qtype))
        if spans is None or qname in self.not_negative or len(qname) > _MAX_NAME:
            return None  # (nothing kept for the parent; a name too long: FORMERR)
        label = qname[1:cut]
        if not spans.covers(label):
            return None
        negative = spans.get(label)
        if negative is None or self.now() >= negative.renew_at:
            return None  # (a span not asked yet, or a signature due: the general path signs)
        tail = negative.tail(len(qname))
        end = plain.question_end
        if end + len(tail) > plain.limit:
            return None  # (the general path truncates it)
        self.stats.queries[negative.counter] += 1
        flags = negative.flags | (plain.flags & _COPIED)
        return data[:2] + flags.to_bytes(2, "big") + negative.counts + data[12:end] + tail

    def _keep_signed_negative(self, plain: _Plain, reply: bytes) -> None:
        """Keep *reply*, the general path's signed NXDOMAIN to *plain*, for the absent names
        below the same parent in the same span of the zone's chain (`dns.signednegative`)."""
        qname = plain.qname
        if reply[6:8] != b"\x00\x00" or reply[2] & (wire.TC >> 8) or qname in self.not_negative:
            return
        key = _labels(qname)
        zone = self.responder.zones.find(key)
        if zone is None or zone.exists(key) or len(key) <= len(zone.origin_key):
            return
        assert self.signing is not None
        chain = self.signing.chains.get(zone.origin_key)
        signer = self.signing.signers.get(zone.origin_key)
        if chain is None or signer is None:
            return  # (not a signed zone: a DO=1 answer there is the general path's)
        counter = ("", TYPE_LABELS.get(plain.qtype, "other"), "NXDOMAIN", "static")
        parent = key[1:]  # (the encloser the answer is made for: see `dns.signednegative`)
        negative = Negative.made(reply, plain.question_end, qname, None, counter, zone, parent, signer.refresh)
        if negative is not None:
            self.kept.keep_signed_negative(
                (qname[qname[0] + 1 :], plain.qtype), canonical(parent), chain.order, chain.covering(key), negative
            )

    # -- wide IPs --------------------------------------------------------------------------

    def _wideip(self, data: bytes, source: str, plain: _Plain, wideip: WideIP, tcp: bool = False) -> Answered | None:
        cached = self.responder.cached
        if cached is None:
            return None
        ecs = plain.ecs
        qtype = plain.qtype
        who = source if ecs is None else (source, ecs)
        # (with persistence, a new client of a held network gets its network's decision)
        client = partial(_client, self.responder, source, ecs) if wideip.persistence is not None else None
        try:
            entry = cached(wideip, qtype, who, client)
        except ValueError:
            return None  # a malformed client subnet: the general path answers FORMERR
        if entry is None:
            return None
        decision = entry.decision
        # The reply to this client is the same bytes but for the ID, RD and CD and the
        # question while the decision holds: kept per client, found by identity; by the wide
        # IP, whatever name it answers, but for a signed answer (its RRSIG covers the name).
        signed = plain.do and self.signing is not None
        key = (plain.qname if signed else wideip.name, qtype, plain.edns_class, who)
        kept = self._replies.get(key)
        if kept is None or kept[0] is not decision or (kept[4] < math.inf and kept[4] <= self.now()):
            if decision.action is not Action.ANSWER or not decision.addresses:
                return None
            reply, renew_at = self._encode(data, source, plain, decision)
            counter = _counter(wideip, qtype, decision)
            kept = self.kept.keep_encoded(
                key, Encoded(decision, reply, counter, tally(wideip.name, decision), renew_at)
            )
        reply = kept[1]
        end = plain.question_end
        if len(reply) + end - 12 > plain.limit:
            return None
        stats = self.responder.stats
        stats.queries[kept[2]] += 1
        stats.answered[kept[3]] += 1
        stats.proximity[decision.proximity] += 1
        flags = (wire.QR | wire.AA | (plain.flags & _COPIED)).to_bytes(2, "big")
        own = signed or plain.qname in self.wideips
        if decision.probe is None and not own:  # (below a wildcard: by wide IP and client)
            self.kept.keep_client(key, WideHit(reply[2:], entry, entry.until, kept[4], kept[2], kept[3]))
        reply = data[:2] + flags + reply[4:12] + data[12:end] + reply[12:]
        if decision.probe is None and own:
            # (by its bytes only for a wide IP's own names, or signed: names below a wildcard are many)
            hit = WideHit(reply[2:], entry, entry.until, kept[4], kept[2], kept[3])
            self.kept.keep_wide(data[2:], source, hit, tcp)
        return reply, kept[3], False

    def _encode(self, data: bytes, source: str, plain: _Plain, decision: Decision) -> tuple[bytes, float]:
        """The reply to *plain* with *decision*'s addresses, its question left out (the ID,
        flags and question are put in later), and when the signature it carries is due for
        renewal (never, when it carries none)."""
        rtype = TYPE_A if plain.qtype == TYPE_A else TYPE_AAAA
        answers = b"".join(
            b"\xc0\x0c" + _RR.pack(rtype, wire.CLASS_IN, decision.ttl, len(a.packed)) + a.packed
            for a in decision.addresses
        )
        opt = b""
        if plain.edns_class:
            options = b""
            ecs = plain.ecs
            if ecs is not None:
                # the scope the decision had on the client subnet, if it was used (see Responder.client_of)
                used = ecs[2] and self.responder.trusts_ecs_from(source)
                scope = decision.scope if used else 0
                body = ecs[:3] + bytes([scope]) + ecs[4:]
                options = _OPTION.pack(wire.OPTION_ECS, len(body)) + body
            opt = b"\x00" + _OPT.pack(TYPE_OPT, self.responder.udp_payload_size, plain.do, len(options)) + options
        count = len(decision.addresses)
        renew_at = math.inf
        if plain.do and self.signing is not None:
            records = tuple((a.packed,) for a in decision.addresses)
            signed = self.signing.rrsig_of(RRset(_labels(plain.qname), rtype, decision.ttl, records))
            if signed is not None:
                rrsig, renew_at = signed
                for (rdata,) in rrsig.rdatas:
                    assert isinstance(rdata, bytes)
                    answers += b"\xc0\x0c" + _RR.pack(TYPE_RRSIG, wire.CLASS_IN, decision.ttl, len(rdata)) + rdata
                count += len(rrsig.rdatas)
        header = _HEADER.pack(0, 0, 1, count, 0, 1 if plain.edns_class else 0)
        return header + answers + opt, renew_at


def _labels(name: bytes) -> Name:
    """The labels of a wire name (uncompressed, as a query's name is)."""
    labels = []
    at = 0
    while name[at]:
        labels.append(name[at + 1 : at + 1 + name[at]])
        at += 1 + name[at]
    return tuple(labels)


def _counter(wideip: WideIP, qtype: int, decision: Decision) -> Counter:
    return (wideip.name, TYPE_LABELS.get(qtype, "other"), "NOERROR", decision.method)


def _client(responder: Responder, source: str, ecs: bytes | None) -> Client:
    return responder.client_of(source, wire.parse_ecs(ecs) if ecs is not None else None)


def _parse(data: bytes, our_size: int) -> _Plain | None:
    """*data* read as a plain query, or None when it is not one (the general path decides)."""
    size = len(data)
    if size < 17:
        return None
    qid, flags, qdcount, ancount, nscount, arcount = _HEADER.unpack_from(data)
    if flags & 0xF800 or qdcount != 1 or ancount or nscount or arcount > 1:
        return None  # a response, another opcode, or another shape
    offset = 12
    length = data[offset]
    while length:
        if length > 63:
            return None  # a compression pointer or a bad label in the question
        offset += 1 + length
        if offset >= size:
            return None
        length = data[offset]
    qname_end = offset + 1
    question_end = qname_end + 4
    if question_end > size or data[qname_end + 2 : question_end] != b"\x00\x01":
        return None  # truncated, or a class other than IN
    qtype = data[qname_end] << 8 | data[qname_end + 1]
    if not arcount:
        if question_end != size:
            return None
        return _Plain(qid, flags, question_end, data[12:qname_end].lower(), qtype, 0, 0, None, wire.MIN_UDP)
    o = question_end
    if o + 11 > size or data[o] != 0:
        return None
    rtype, udp_size, ttl, rdlength = _OPT.unpack_from(data, o + 1)
    if rtype != TYPE_OPT or ttl & 0x00FF0000 or o + 11 + rdlength != size:
        return None  # not an OPT, EDNS version > 0, or bytes after it
    ecs = None
    i = o + 11
    while i < size:
        if i + 4 > size:
            return None
        code, olen = _OPTION.unpack_from(data, i)
        i += 4
        if i + olen > size:
            return None
        if code == wire.OPTION_ECS:
            if ecs is not None:
                return None
            ecs = data[i : i + olen]
        i += olen
    do = ttl & wire.EDNS_DO
    limit = min(max(udp_size, wire.MIN_UDP), our_size)
    return _Plain(qid, flags, question_end, data[12:qname_end].lower(), qtype, 2 if do else 1, do, ecs, limit)


def _covering(wildcards: dict[bytes, WideIP], qname: bytes) -> WideIP | None:
    """The wildcard wide IP with the longest suffix of *qname* (lowercased wire form)."""
    if len(qname) == 1:
        return None  # the root
    i = qname[0] + 1
    while True:
        wideip = wildcards.get(qname[i:])
        if wideip is not None or not qname[i]:
            return wideip
        i += qname[i] + 1


def _wire_name(name: Name) -> bytes:
    """*name* (labels) in wire form, ending with the root."""
    return b"".join(bytes([len(label)]) + label for label in name) + b"\x00"
