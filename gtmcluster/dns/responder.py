"""The authoritative responder: query bytes in, response bytes (or silence) out.

Semantics (RFC 1034, 1035, 2181, 2308, 6891, 7871, 8482):
- AA on answers from our zones, NXDOMAIN and NODATA carry the zone SOA (negative TTL) in
  authority; names outside every served zone get REFUSED; RA is never set; RD and CD are
  copied; the question is echoed byte for byte, so its case is preserved.
- Class CH is refused, but for TXT at version.bind and version.server when the config sets
  `dns_server.version` (a node does not say what it runs unless told to).
- Opcodes other than QUERY get NOTIMP; malformed queries and QDCOUNT != 1 get FORMERR;
  responses (QR=1) and runts get nothing.
- EDNS: OPT echoed (version 0, our payload size, DO copied), BADVERS for version > 0,
  unknown options ignored, answers cut to the client's payload size (512 without EDNS) with
  whole RRsets and TC; TCP carries up to 65535 bytes.
- EDNS Client Subnet: from a resolver in `dns_server.ecs_trusted`, the client subnet, not
  the LDNS address, is what topology and persistence see, and the reply echoes the option
  with the scope the decision depended on; from any other source the option is echoed with
  scope 0 and the query decided by its source address (RFC 7871 7.2.1).
- Wide IP names are answered by the load balancer for their types; other types at those
  names, and `return_to_dns` decisions, come from the static zone. A wide IP answers its
  own name, its aliases and, for a ``*.`` wildcard, the names below it that no more
  specific wide IP answers (`WideIPNames`), in place of the zone's records for its types;
  where the zone has no name there, other types get NODATA. A delegation still wins.
- DNSSEC (`zones[].dnssec`, docs/dnssec.md): a signed zone answers DNSKEY at its apex, and
  a DO=1 query gets RRSIGs and its denial (`dnssec.answers`); DO=0 answers are unsigned.
  Past the cap on fresh signatures (`dnssec.budget`), a UDP query that needs one is answered
  empty with TC.
- A CNAME wide IP answers every type with its CNAME (RFC 1034 3.6.2), followed inside our
  zones like a static one; MX and SRV answers carry their targets' addresses from our
  zones as additional data (docs/wideip-types.md).
- One-use names (``<id>.rum.<zone>`` while ``rum`` is on, `dns.rumnames`) are answered
  before the zone is looked at, with TTL 0, and never kept (not static, no decision).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from twisted.logger import Logger

from gtmcluster.config.addresses import IPNetwork
from gtmcluster.config.model import RecordTarget, WideIP
from gtmcluster.config.wideipnames import WideIPNames
from gtmcluster.dns import wire
from gtmcluster.dns.kept import KeptReplies
from gtmcluster.dns.rumnames import OneUseNames
from gtmcluster.dns.transfer import Outgoing, Reply, Transfers, transfer_type
from gtmcluster.dns.wire import Query, Section
from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import (
    TYPE_A,
    TYPE_AAAA,
    TYPE_ANY,
    TYPE_AXFR,
    TYPE_CNAME,
    TYPE_IXFR,
    TYPE_MX,
    TYPE_NS,
    TYPE_OPT,
    TYPE_SRV,
    TYPE_TXT,
    Outcome,
    RRset,
    ZoneSet,
)
from gtmcluster.dnssec.answers import Denial, ZoneSigning
from gtmcluster.dnssec.budget import OverBudget
from gtmcluster.dnssec.rrsets import TYPE_DNSKEY
from gtmcluster.lb.cache import Entry
from gtmcluster.lb.context import Client
from gtmcluster.lb.trace import Action, Decision, tally
from gtmcluster.runtime.sources import address_of
from gtmcluster.runtime.stats import QueryStats, Tally
from gtmcluster.topology.prefixes import PrefixMap

log = Logger()

MAX_CNAME_CHAIN = 8
#: label values for the query counters (few, so the metric stays small)
TYPE_LABELS = {
    0: "-",
    1: "A",
    2: "NS",
    5: "CNAME",
    6: "SOA",
    12: "PTR",
    15: "MX",
    16: "TXT",
    28: "AAAA",
    33: "SRV",
    35: "NAPTR",
    255: "ANY",
}
RCODE_LABELS = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED", 16: "BADVERS"}
_REFUSEDTYPE_LABELS = {TYPE_AXFR, TYPE_IXFR}
_NOTIMPTYPE_LABELS = {249, 250, 253, 254}  # TKEY, TSIG, MAILB, MAILA
#: the CH names that ask a server what it runs (BIND's and RFC 4892's spelling)
_VERSION_NAMES = {(b"version", b"bind"), (b"version", b"server")}

#: decides a wide IP answer: (wide IP, query type, client, client key) -> decision; the key
#: (the source address and the raw client subnet option) tells clients apart for reuse
Decide = Callable[[WideIP, int, Client, Hashable], Decision]
#: the decision kept for (wide IP, query type, client key) if it still holds, as its
#: `lb.cache.Entry`; the last argument makes the client, for decisions kept for a class of
#: clients
Cached = Callable[[WideIP, int, Hashable, Callable[[], Client] | None], Entry | None]


#: What answering one query gives the transport: (the reply, None for no reply; what decided
#: it, a `Tally` of wide IP, pool, slot, method and members for the query log, None when no
#: wide IP did; whether it is static: any query with the same question in any case and the
#: same EDNS presence and DO bit gets the same reply but for the ID and the RD and CD flags
#: and the client subnet option, echoed with scope 0, so the fast path keeps it as a
#: template). A plain tuple: one is made for every query, and a named tuple costs ten times
#: as much to make.
Answered = tuple[bytes | None, Tally | None, bool]


#: the answer to a query over TCP: the replies (one, none, or a zone transfer to begin), and
#: what decided them (`Answered`)
Streamed = tuple[Reply, Tally | None]


@dataclass(slots=True)
class _Answer:
    rcode: int = wire.NOERROR
    aa: bool = True
    drop: bool = False
    scope: int = 0
    answer: list[tuple[RRset, Name | None]] | None = None
    authority: list[tuple[RRset, Name | None]] | None = None
    additional: list[tuple[RRset, Name | None]] | None = None
    glue_required: bool = True
    #: where a negative answer ended, for its denial of existence when signed
    denial: Denial | None = None
    #: answered empty with TC: past the cap on fresh signatures (`dnssec.budget`)
    truncated: bool = False
    #: a one-use name's answer (`dns.rumnames`): never kept
    once: bool = False
    wideip: str = ""  # for the query counters: the wide IP that decided, and how
    method: str = ""
    decided: Tally | None = None  # for the query log (`Answered`): the same, with the pool and members


class Responder:
    """Answers queries from the zones and the wide IPs of one config."""

    def __init__(
        self,
        zones: ZoneSet,
        wideips: Mapping[Name, WideIP],
        decide: Decide,
        udp_payload_size: int = 1232,
        stats: QueryStats | None = None,
        cached: Cached | None = None,
        version: str | None = None,
        ecs_trusted: tuple[IPNetwork, ...] = (),
        wideip_names: WideIPNames[WideIP] | None = None,
        signing: ZoneSigning | None = None,
        transfers: Transfers | None = None,
        kept: KeptReplies | None = None,
        rum_names: OneUseNames | None = None,
    ):
        self.zones = zones
        #: resolvers whose client subnet option is used (dns_server.ecs_trusted)
        self.ecs_trusted: PrefixMap[bool] = PrefixMap((n, True) for n in ecs_trusted)
        #: the answer to CH TXT version.bind (dns_server.version); None: such queries are refused
        self.version = version
        self.wideips = wideips
        #: which wide IP answers a name (`Config.wideip_names`; made from *wideips* if not given)
        self.names = wideip_names if wideip_names is not None else WideIPNames.of(wideips.values())
        self.decide = decide
        self.cached = cached
        #: what the answer paths keep for this config (`dns.kept`): the fast path's replies
        #: and the kept decisions *cached* reads (its `decisions`, None when none are kept)
        self.kept = kept if kept is not None else KeptReplies()
        self.udp_payload_size = udp_payload_size
        self.stats = stats or QueryStats()
        #: the signed zones (`zones[].dnssec`); empty: nothing is signed
        self.signing = signing or ZoneSigning(zones, {})
        #: AXFR and IXFR of the zones with ``transfer`` (None or empty: refused as before)
        self.transfers = transfers or None
        #: the one-use names (``rum`` on), None when off
        self.rum_names = rum_names

    def direct_wideips(self) -> dict[Name, WideIP]:
        """Wide IPs a query for their own name (or an alias) and type is answered by
        directly (not below a delegation, not through a wildcard of the zone): the exact
        names the fast path may answer."""
        out = {}
        for key, wideip in self.names.exact.items():
            zone = self.zones.find(key)
            if zone is None:
                continue
            found = zone.find(key, min(wideip.types))
            if found.outcome is Outcome.NODE and not found.wildcard:
                out[key] = wideip
        return out

    def direct_wildcards(self) -> dict[Name, WideIP]:
        """Wildcard wide IPs (by the name they answer below) that answer every name below
        it the same way: no delegation and no other served zone below that name. The fast
        path may answer for these; names under the others go to the general path."""
        out = {}
        for suffix, wideip in self.names.wildcards.items():
            zone = self.zones.find((b"*", *suffix))
            if zone is None:
                continue
            if any(names.is_subdomain(cut, suffix) for cut in zone.cuts):
                continue
            if any(z is not zone and names.is_subdomain(z.origin_key, suffix) for z in self.zones):
                continue
            out[suffix] = wideip
        return out

    def client_of(self, source: str, ecs: wire.ClientSubnet | None) -> Client:
        """Who asks, as load balancing sees it: the client subnet is used only from a
        resolver in `dns_server.ecs_trusted` (the fast path asks here too)."""
        return client_of(source, ecs, self.ecs_trusted)

    def trusts_ecs_from(self, source: str) -> bool:
        """Whether a client subnet option from *source* is used (`client_of`)."""
        return address_of(source) in self.ecs_trusted

    def handle(self, data: bytes, source: str, tcp: bool = False) -> bytes | None:
        """The response to *data* from *source* (an IP address), or None for no reply."""
        return self.answer(data, source, tcp)[0]

    def handle_stream(self, data: bytes, source: str) -> Reply:
        """The responses to *data* from *source* over TCP (`answer_stream`'s replies)."""
        return self.answer_stream(data, source)[0]

    def answer_stream(self, data: bytes, source: str) -> Streamed:
        """The responses to *data* from *source* over TCP: one, none, or a zone transfer
        to begin (`gtmcluster.dns.transfer.Outgoing`), whose messages the connection asks
        for as its client reads them; and what decided them."""
        qtype = transfer_type(data) if self.transfers is not None else 0
        if qtype:
            messages = self._transfer(data, source, qtype, True, self.udp_payload_size)
            if messages is not None:
                return messages, None
        reply, decided, _ = self.answer(data, source, True)
        return ([] if reply is None else [reply]), decided

    def _transfer(self, data: bytes, source: str, qtype: int, tcp: bool, udp_size: int) -> Reply | None:
        """The transfer's answer, counted; None to answer it as any query (as without
        transfers: REFUSED)."""
        assert self.transfers is not None
        try:
            messages = self.transfers.answer(data, source, tcp, udp_size)
        except Exception:  # (a bug: the responder then refuses it, as without transfers)
            log.failure("internal error answering a zone transfer request from {source}", source=source)
            return None
        label = "AXFR" if qtype == TYPE_AXFR else "IXFR"

        def counted(rcode: int) -> None:
            self.stats.query("", label, RCODE_LABELS.get(rcode, "other"), "transfer")

        if isinstance(messages, Outgoing):  # (counted when the connection begins or refuses it)
            messages.answered = counted
            return messages
        if messages is not None:
            counted(messages[0][3] & 0xF)
        return messages

    def answer(self, data: bytes, source: str, tcp: bool = False) -> Answered:
        """The response to *data* from *source*, what decided it, and whether it is static
        (see `Answered`)."""
        if not tcp and self.transfers is not None and (qtype := transfer_type(data)):
            replies = self._transfer(data, source, qtype, False, self.udp_payload_size)
            if isinstance(replies, list) and replies:  # (IXFR over UDP; AXFR refused)
                return replies[0], None, False
        try:
            query = wire.parse_query(data)
        except wire.Drop:
            return None, None, False
        except wire.QueryError as e:
            self.stats.query("", TYPE_LABELS.get(0, "-"), RCODE_LABELS.get(e.rcode, str(e.rcode)), "")
            flags = wire.QR | (e.flags & (0xF << wire.OPCODE_SHIFT | wire.RD | wire.CD))
            opt = None
            if e.edns is not None:
                opt = wire.opt_record(self.udp_payload_size, e.rcode >> 4, e.edns.do, b"")
            limit = self._limit(e.edns, tcp)
            return wire.write_response(e.query_id, flags, e.rcode, e.question, e.qname, (), opt, limit), None, False
        try:
            answer = self._respond(query, source)
        except Exception:
            log.failure(
                "internal error answering {qname}/{qtype} from {source}",
                qname=names.to_text(query.qname),
                qtype=query.qtype,
                source=source,
            )
            return self._write(query, _Answer(rcode=wire.SERVFAIL, aa=False), tcp), None, False
        if answer.drop:
            self.stats.query(answer.wideip, TYPE_LABELS.get(query.qtype, "other"), "drop", answer.method)
            return None, answer.decided, False
        signed = False
        if self.signing and query.edns is not None and query.edns.do and query.qclass != wire.CLASS_CH:
            signed = answer.rcode in (wire.NOERROR, wire.NXDOMAIN)
            if signed:
                try:
                    self._sign(answer, query.qtype, not tcp)
                except OverBudget:  # (past the cap on fresh signatures: ask again over TCP)
                    answer.answer = answer.authority = answer.additional = None
                    answer.truncated = True
        reply = self._write(query, answer, tcp)
        static = (
            not signed
            and not answer.wideip
            and not answer.once
            and answer.aa
            and answer.rcode in (wire.NOERROR, wire.NXDOMAIN)
            and answer.scope == 0
            and not reply[2] & (wire.TC >> 8)
        )
        return reply, answer.decided, static

    def _respond(self, query: Query, source: str) -> _Answer:
        edns = query.edns
        if edns is not None and edns.version > 0:
            return _Answer(rcode=wire.BADVERS, aa=False)
        if query.qclass == wire.CLASS_CH:
            return self._chaos(query)
        if query.qclass not in (wire.CLASS_IN, wire.CLASS_ANY):
            return _Answer(rcode=wire.REFUSED, aa=False)
        qtype = query.qtype
        if qtype == TYPE_OPT:
            return _Answer(rcode=wire.FORMERR, aa=False)
        if qtype in _NOTIMPTYPE_LABELS:
            return _Answer(rcode=wire.NOTIMP, aa=False)
        key = names.key(query.qname)
        zone = self.zones.find(key)
        if zone is None or qtype in _REFUSEDTYPE_LABELS:
            return _Answer(rcode=wire.REFUSED, aa=False)
        ecs = edns.ecs if edns is not None else None
        client = self.client_of(source, ecs)
        rum = self.rum_names
        if rum is not None and (ident := rum.ident(key)) is not None:
            return self._one_use(rum, query, client, ident, zone.negative_soa)
        return self._resolve(query, client, client_key(source, ecs))

    def _one_use(self, rum: OneUseNames, query: Query, client: Client, ident: str, soa: RRset) -> _Answer:
        """A one-use name's answer (`dns.rumnames`), the LDNS that asked told on."""
        rtype, rdatas = rum.answer(query.qtype)
        result = _Answer(once=True, method="rum")
        if rdatas:
            result.answer = [(RRset(query.qname, rtype, 0, rdatas), None)]
        else:
            result.authority = [(soa, None)]
            result.denial = Denial(query.qname, rum.types - {query.qtype})
        rum.asked(ident, client.ldns, client.address if client.from_ecs else None, client.prefix)
        return result

    def _chaos(self, query: Query) -> _Answer:
        """CH TXT version.bind (or version.server): the configured string, not authoritative
        and not to be cached (TTL 0), as BIND, gdnsd and knotd answer it; else REFUSED."""
        if self.version is None or query.qtype not in (TYPE_TXT, TYPE_ANY):
            return _Answer(rcode=wire.REFUSED, aa=False)
        if names.key(query.qname) not in _VERSION_NAMES:
            return _Answer(rcode=wire.REFUSED, aa=False)
        text = self.version.encode()
        rrset = RRset(query.qname, TYPE_TXT, 0, ((bytes([len(text)]) + text,),), rclass=wire.CLASS_CH)
        return _Answer(aa=False, answer=[(rrset, None)])

    def _resolve(self, query: Query, client: Client, who: Hashable) -> _Answer:
        result = _Answer(answer=[])
        assert result.answer is not None
        name = query.qname
        qtype = query.qtype
        seen: set[Name] = set()
        for _ in range(MAX_CNAME_CHAIN):
            key = names.key(name)
            zone = self.zones.find(key)
            if zone is None or key in seen:  # a chain leaving our zones, or a loop, ends here
                return result
            seen.add(key)
            found = zone.find(key, qtype)
            if found.outcome is Outcome.REFERRAL:
                assert found.cut is not None
                result.aa = bool(result.answer)
                result.authority = [(found.cut, None)]
                result.additional = [(g, None) for g in zone.glue_for(found.cut)]
                return result
            # (a wide IP's name exists, whatever the zone holds there)
            wideip = self.names.find(key, len(zone.origin_key))
            if found.outcome is not Outcome.NODE and wideip is None:
                if found.outcome is Outcome.NXDOMAIN:
                    result.rcode = wire.NXDOMAIN
                result.authority = [(zone.negative_soa, None)]
                result.denial = Denial(name, None if found.outcome is Outcome.NXDOMAIN else frozenset())
                return result
            rrsets = found.node.rrsets if found.node is not None else {}
            owner = name if found.wildcard else None
            if wideip is not None:
                wanted = wanted_type(wideip, qtype)
                if wanted in wideip.types:
                    decision = self.decide(wideip, wanted, client, who)
                    if client.from_ecs:  # (else the answer depended on none of the client subnet)
                        result.scope = max(result.scope, decision.scope)
                    result.wideip = wideip.name
                    # (returned to the zone, by a pool's method or the failure response: counted as such)
                    back = decision.action is Action.RETURN_TO_DNS
                    result.method = "return_to_dns" if back else decision.method or decision.action.value
                    result.decided = tally(wideip.name, decision)
                    if decision.action is Action.DROP:
                        result.drop = True
                        return result
                    if decision.action is Action.RCODE:
                        result.rcode = decision.rcode
                        if decision.rcode == wire.NXDOMAIN:
                            result.authority = [(zone.negative_soa, None)]
                            result.denial = Denial(name, None)
                        else:
                            result.aa = False
                        return result
                    if decision.action is Action.ANSWER and decision.targets:
                        records = RRset(name, wanted, decision.ttl, tuple(t.rdata for t in decision.targets))
                        result.answer.append((records, None))
                        if wanted == TYPE_CNAME and qtype not in (TYPE_CNAME, TYPE_ANY):
                            name = decision.targets[0].name  # followed as a static CNAME is
                            continue
                        if wanted in (TYPE_MX, TYPE_SRV):
                            result.additional = self._addresses_of(decision.targets, client, who, result)
                            result.glue_required = False
                        return result
                    if decision.action is Action.ANSWER:
                        rdatas = tuple((a.packed,) for a in decision.addresses)
                        rtype = TYPE_A if wanted == TYPE_A else TYPE_AAAA
                        result.answer.append((RRset(name, rtype, decision.ttl, rdatas), None))
                        return result
                    # RETURN_TO_DNS or NOTHING: the static zone answers
            if qtype == TYPE_ANY and rrsets:
                # RFC 8482: one RRset is a complete answer to ANY
                rtype = TYPE_A if TYPE_A in rrsets else TYPE_AAAA if TYPE_AAAA in rrsets else min(rrsets)
                result.answer.append((rrsets[rtype], owner))
                return result
            rrset = rrsets.get(qtype)
            if rrset is None and qtype == TYPE_DNSKEY and key == zone.origin_key:
                rrset = self.signing.dnskeys.get(key)
            if rrset is not None:
                result.answer.append((rrset, owner))
                if qtype == TYPE_NS:
                    result.additional = [(g, None) for g in zone.glue_for(rrset)]
                    result.glue_required = False
                return result
            cname = rrsets.get(TYPE_CNAME)
            if cname is not None:
                result.answer.append((cname, owner))
                target = cname.rdatas[0][0]
                assert isinstance(target, tuple)
                name = target
                continue
            result.authority = [(zone.negative_soa, None)]
            # (a wide IP with no answer for its type now denies that type too)
            there = frozenset(rrsets) | (wideip.types if wideip is not None else frozenset())
            result.denial = Denial(name, there - {qtype})
            return result
        return result

    def _sign(self, answer: _Answer, qtype: int, capped: bool) -> None:
        """Add the RRSIGs and the denial of existence to *answer*, for a DO=1 query (*capped*:
        over UDP, `dnssec.budget`)."""
        signed = self.signing.sign(
            answer.answer or [],
            answer.authority or [],
            answer.additional or [],
            answer.denial,
            answer.rcode == wire.NXDOMAIN,
            qtype,
            capped,
        )
        answer.answer, answer.authority, answer.additional = signed.answer, signed.authority, signed.additional
        if signed.nxdomain_denied:
            answer.rcode = wire.NOERROR

    def _addresses_of(
        self, targets: tuple[RecordTarget, ...], client: Client, who: Hashable, result: _Answer
    ) -> list[tuple[RRset, Name | None]]:
        """The A and AAAA records of MX exchanges and SRV targets in our zones (their wide IPs'
        answers, or their static records), for the additional section."""
        out: list[tuple[RRset, Name | None]] = []
        for key, owner in {names.key(t.name): t.name for t in targets}.items():
            zone = self.zones.find(key)
            if zone is None or zone.delegation_for(key) is not None:
                continue
            node = zone.nodes.get(key)
            wideip = self.names.find(key, len(zone.origin_key))
            for rtype in (TYPE_A, TYPE_AAAA):
                if wideip is not None and rtype in wideip.types:
                    decision = self.decide(wideip, rtype, client, who)
                    if client.from_ecs:
                        result.scope = max(result.scope, decision.scope)
                    if decision.action is Action.ANSWER and decision.addresses:
                        rdatas = tuple((a.packed,) for a in decision.addresses)
                        out.append((RRset(owner, rtype, decision.ttl, rdatas), None))
                        continue
                    if decision.action is not Action.RETURN_TO_DNS and decision.action is not Action.NOTHING:
                        continue
                if node is not None and rtype in node.rrsets:
                    out.append((node.rrsets[rtype], None))
        return out

    def _limit(self, edns: wire.Edns | None, tcp: bool) -> int:
        """The largest response: 65535 over TCP, else the client's EDNS size capped by ours, else 512."""
        if tcp:
            return wire.MAX_MESSAGE
        if edns is not None:
            return min(edns.udp_size, self.udp_payload_size)
        return wire.MIN_UDP

    def _write(self, query: Query, answer: _Answer, tcp: bool) -> bytes:
        method = answer.method or ("static" if answer.aa else "")
        self.stats.query(
            answer.wideip, TYPE_LABELS.get(query.qtype, "other"), RCODE_LABELS.get(answer.rcode, "other"), method
        )
        edns = query.edns
        flags = wire.QR | (query.flags & (0xF << wire.OPCODE_SHIFT | wire.RD | wire.CD))
        if answer.aa:
            flags |= wire.AA
        if answer.truncated:
            flags |= wire.TC
        opt = None
        if edns is not None:
            options = b""
            if edns.ecs is not None:
                scope = answer.scope if edns.ecs.source_prefix else 0
                options += edns.ecs.option(scope)
            opt = wire.opt_record(self.udp_payload_size, answer.rcode >> 4, edns.do, options)
        limit = self._limit(edns, tcp)
        sections = [
            Section(answer.answer or []),
            Section(answer.authority or []),
            Section(answer.additional or [], required=answer.glue_required),
        ]
        return wire.write_response(query.id, flags, answer.rcode, query.question, query.qname, sections, opt, limit)


def wanted_type(wideip: WideIP, qtype: int) -> int:
    """The type a wide IP answers a *qtype* query with: a CNAME wide IP's CNAME for any, the
    first of its types for ANY, else *qtype* itself (answered when it is one of its types)."""
    if TYPE_CNAME in wideip.types:
        return TYPE_CNAME
    return min(wideip.types) if qtype == TYPE_ANY else qtype


def client_key(source: str, ecs: wire.ClientSubnet | None) -> Hashable:
    """Who asks, as far as reusing a decision goes: the source address as received, and the
    client subnet option's data as sent (family, source prefix, scope 0, address)."""
    if ecs is None:
        return source
    return (source, struct.pack("!HBB", ecs.family, ecs.source_prefix, 0) + ecs.address)


def client_of(source: str, ecs: wire.ClientSubnet | None, trusted: PrefixMap[bool] | None = None) -> Client:
    """The client of a query from *source* (an address as received) with *ecs*: known by
    the client subnet when *source* is in *trusted*, else by its own address."""
    ldns = address_of(source)
    if ecs is None or ecs.source_prefix == 0 or trusted is None or ldns not in trusted:
        return Client.from_ldns(ldns)
    return Client(ecs.network.network_address, ecs.source_prefix, ldns, True)
