"""Zone transfer out (RFC 5936 AXFR, RFC 1995 IXFR) of the static zones, with TSIG (RFC 8945).

A zone is handed out when its config has ``transfer`` (`ZoneTransfer`), over TCP only, to
sources in its ``allow`` networks, and, when it names a ``tsig`` key, only to requests
signed with that key; the replies are then signed, every message of a multi-message
transfer included. Refusals: no ``transfer``, a name that is not a zone apex, UDP, or a
source outside ``allow`` get REFUSED (as knotd and gdnsd answer them); a missing, unknown
or wrong signature gets NOTAUTH with the TSIG error RFC 8945 5.3.2 names (BADKEY and BADSIG
unsigned, BADTIME signed).

What is transferred is the zone file's content: wide IP names carry no records of their
own in a transfer (as F5 BIG-IP DNS transfers none), so a secondary answers them from the
zone file's static records at those names, if any (the same records a `return_to_dns`
decision falls back to), else NXDOMAIN/NODATA as the file says.

IXFR is answered by a full AXFR-style transfer (RFC 1995 4 allows it) unless the client is
already at our serial, which gets our SOA alone; no journal is kept.

dnspython builds and signs the messages; the zone's records are converted once per config
(on the first transfer) and the conversion kept with the responder.
"""

from __future__ import annotations

import ipaddress
import struct
import time
from collections.abc import Iterator, Mapping

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import dns.tsig
from twisted.logger import Logger

from gtmcluster.config.model import TSIGKey, ZoneTransfer
from gtmcluster.dns import names
from gtmcluster.dns.names import Name
from gtmcluster.dns.zone import TYPE_AXFR, TYPE_IXFR, TYPE_SOA, RRset, Zone, ZoneSet

log = Logger()

#: RDATA bytes per message before a new one is begun: messages stay well under 64 KiB
#: after compression, the TSIG record included
MESSAGE_BUDGET = 16384


def transfer_type(data: bytes) -> int:
    """AXFR or IXFR if *data* is a QUERY for one (read from the question, cheaply), else 0."""
    if len(data) < 17 or (data[2] >> 3) & 0xF != 0:
        return 0
    offset = 12
    while offset < len(data):
        length = data[offset]
        if length == 0:
            break
        if length & 0xC0:
            return 0
        offset += 1 + length
    if offset + 5 > len(data):
        return 0
    qtype = (data[offset + 1] << 8) | data[offset + 2]
    return qtype if qtype in (TYPE_AXFR, TYPE_IXFR) else 0


def to_dnspython(rrset: RRset) -> dns.rrset.RRset:
    """One of our RRsets as dnspython's."""
    owner = dns.name.Name((*rrset.owner, b""))
    rclass = dns.rdataclass.RdataClass(rrset.rclass)
    rtype = dns.rdatatype.RdataType(rrset.rtype)
    out = dns.rrset.RRset(owner, rclass, rtype)
    for pieces in rrset.rdatas:
        wire = b"".join(p if isinstance(p, bytes) else _name_wire(p) for p in pieces)
        out.add(dns.rdata.from_wire(rclass, rtype, wire, 0, len(wire)), rrset.ttl)
    return out


def _name_wire(name: Name) -> bytes:
    return b"".join(bytes([len(label)]) + label for label in name) + b"\0"


def _serial(zone: Zone) -> int:
    fixed = zone.soa.rdatas[0][-1]
    assert isinstance(fixed, bytes)
    return int.from_bytes(fixed[:4], "big")


class Transfers:
    """Answers AXFR and IXFR for the zones of one config that have ``transfer``."""

    def __init__(self, zones: ZoneSet, settings: Mapping[Name, ZoneTransfer]):
        self.zones = zones
        self.settings = settings
        #: zone origin -> its records in transfer order, SOA first (made on first use)
        self._records: dict[Name, list[dns.rrset.RRset]] = {}

    def __bool__(self) -> bool:
        return bool(self.settings)

    def answer(self, data: bytes, source: str, tcp: bool) -> list[bytes] | None:
        """The messages answering the transfer request *data* from *source*, or None to
        let the responder answer it (a zone without ``transfer``, a malformed request)."""
        try:
            query = dns.message.from_wire(data, keyring=False)
        except (dns.exception.DNSException, ValueError):
            return None
        if len(query.question) != 1 or query.flags & dns.flags.QR:
            return None
        question = query.question[0]
        key = names.key(tuple(question.name.labels[:-1]))
        zone = self.zones.find(key)
        settings = self.settings.get(zone.origin_key) if zone is not None else None
        if zone is None or settings is None or question.rdclass != dns.rdataclass.IN:
            return None
        if key != zone.origin_key or not tcp or not _allowed(source, settings):
            return [self._error(query, dns.rcode.REFUSED)]
        if settings.tsig is not None or query.had_tsig:
            verified = self._verify(data, query, settings.tsig)
            if isinstance(verified, bytes):
                return [verified]
            query = verified
        if question.rdtype == dns.rdatatype.IXFR and self._up_to_date(query, zone):
            return list(self._messages(query, zone, [self._rrsets(zone)[0]], settings.tsig))
        rrsets = self._rrsets(zone)
        return list(self._messages(query, zone, [*rrsets, rrsets[0]], settings.tsig))

    def _verify(self, data: bytes, query: dns.message.Message, key: TSIGKey | None) -> dns.message.Message | bytes:
        """The request verified with *key*, or the NOTAUTH reply saying why not."""
        if not query.had_tsig:
            return self._error(query, dns.rcode.NOTAUTH)
        assert query.keyname is not None
        if key is None or query.keyname != dns.name.from_text(key.name) or query.keyalgorithm != _algorithm(key):
            return self._tsig_error(query, dns.rcode.BADKEY, None)
        ring = {dns.name.from_text(key.name): _dns_key(key)}
        try:
            return dns.message.from_wire(data, keyring=ring)
        except dns.tsig.BadTime:
            return self._tsig_error(query, dns.rcode.BADTIME, key)
        except (dns.tsig.BadSignature, dns.tsig.BadKey, dns.tsig.BadAlgorithm, dns.message.UnknownTSIGKey):
            return self._tsig_error(query, dns.rcode.BADSIG, None)
        except dns.exception.DNSException:
            return self._error(query, dns.rcode.FORMERR)

    def _error(self, query: dns.message.Message, rcode: dns.rcode.Rcode) -> bytes:
        response = dns.message.make_response(query)
        response.flags &= ~dns.flags.AA
        response.set_rcode(rcode)
        response.tsig = None  # (an unverified request's TSIG is not answered with one)
        return response.to_wire()

    def _tsig_error(self, query: dns.message.Message, error: int, key: TSIGKey | None) -> bytes:
        """NOTAUTH with a TSIG record carrying *error*: signed with *key* (BADTIME), else
        with an empty MAC (BADKEY, BADSIG; RFC 8945 5.3.2)."""
        response = dns.message.make_response(query)
        response.flags &= ~dns.flags.AA
        response.set_rcode(dns.rcode.NOTAUTH)
        assert query.tsig is not None and query.keyname is not None
        request = query.tsig[0]
        if key is not None:
            now = struct.pack("!Q", int(time.time()))[2:]  # RFC 8945 5.2.3: our time
            response.use_tsig(
                _dns_key(key), query.keyname, request.fudge, query.id, error, now, algorithm=_algorithm(key)
            )
            response.request_mac = request.mac
            return response.to_wire()
        tsig = dns.message.Message._make_tsig(
            query.keyname, request.algorithm, int(time.time()), request.fudge, b"", query.id, error, b""
        )
        response.tsig = tsig
        response.want_tsig_sign = False
        return response.to_wire()

    def _up_to_date(self, query: dns.message.Message, zone: Zone) -> bool:
        """Whether an IXFR request names our serial (or a later one, RFC 1982) already."""
        for rrset in query.authority:
            if rrset.rdtype == dns.rdatatype.SOA and len(rrset):
                theirs = int(rrset[0].serial)
                ours = _serial(zone)
                return theirs == ours or 0 < (theirs - ours) % 2**32 < 2**31
        return False

    def _rrsets(self, zone: Zone) -> list[dns.rrset.RRset]:
        kept = self._records.get(zone.origin_key)
        if kept is None:
            kept = [to_dnspython(zone.soa)]
            for node in zone.nodes.values():
                kept.extend(to_dnspython(r) for t, r in node.rrsets.items() if t != TYPE_SOA or r is not zone.soa)
            self._records[zone.origin_key] = kept
        return kept

    def _messages(
        self, query: dns.message.Message, zone: Zone, rrsets: list[dns.rrset.RRset], key: TSIGKey | None
    ) -> Iterator[bytes]:
        """*rrsets* in as few messages as fit the budget, the first with the question, each
        signed with *key* when given, chained as RFC 8945 5.3.1 says."""
        first = True
        ctx = None
        batch: list[dns.rrset.RRset] = []
        size = 0
        for i, rrset in enumerate(rrsets):
            batch.append(rrset)
            size += sum(len(r.to_digestable()) for r in rrset) + 12 * len(rrset)
            if size < MESSAGE_BUDGET and i < len(rrsets) - 1:
                continue
            if first:
                message = dns.message.make_response(query)
            else:
                message = dns.message.Message(id=query.id)
                message.flags = dns.flags.QR
                if key is not None:
                    message.use_tsig(_dns_key(key), dns.name.from_text(key.name), algorithm=_algorithm(key))
            message.flags |= dns.flags.AA
            message.answer = batch
            if key is None:
                message.tsig = None
            wire = message.to_wire(multi=key is not None, tsig_ctx=ctx)
            ctx = message.tsig_ctx
            first = False
            batch, size = [], 0
            yield wire


def _allowed(source: str, settings: ZoneTransfer) -> bool:
    try:
        address = ipaddress.ip_address(source.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in settings.allow)


def _algorithm(key: TSIGKey) -> dns.name.Name:
    return dns.name.from_text(key.algorithm)


def _dns_key(key: TSIGKey) -> dns.tsig.Key:
    return dns.tsig.Key(key.name, key.secret, key.algorithm)
