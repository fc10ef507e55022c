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

import struct
import time
from collections.abc import Mapping

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
from gtmcluster.dns import names, wire
from gtmcluster.dns.names import Name
from gtmcluster.dns.zone import TYPE_AXFR, TYPE_IXFR, TYPE_SOA, RRset, Zone, ZoneSet
from gtmcluster.topology.prefixes import address_of

log = Logger()

#: record bytes (uncompressed) per message before a new one is begun: a message stays
#: under 64 KiB, the OPT and TSIG records included, unless one RRset alone is near it
MESSAGE_BUDGET = 32768
#: the OPT record of a reply to a request with EDNS: version 0, our payload size, no flags
_OPT = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)


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
        data = b"".join(p if isinstance(p, bytes) else _name_wire(p) for p in pieces)
        out.add(dns.rdata.from_wire(rclass, rtype, data, 0, len(data)), rrset.ttl)
    return out


def _name_wire(name: Name) -> bytes:
    return b"".join(bytes([len(label)]) + label for label in name) + b"\0"


def serial_of(zone: Zone) -> int:
    """The SOA serial of *zone*."""
    fixed = zone.soa.rdatas[0][-1]
    assert isinstance(fixed, bytes)
    return int.from_bytes(fixed[:4], "big")


class Transfers:
    """Answers AXFR and IXFR for the zones of one config that have ``transfer``."""

    def __init__(self, zones: ZoneSet, settings: Mapping[Name, ZoneTransfer]):
        self.zones = zones
        self.settings = settings
        #: zone origin -> its transfer as messages to patch and sign (made on first use)
        self._bodies_of: dict[Name, list[bytes]] = {}

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
            bodies = _render(zone, [zone.soa])
        else:
            try:
                bodies = self._bodies(zone)
            except ValueError as e:  # an RRset over 64 KiB: it cannot be sent whole
                log.error("zone {zone} cannot be transferred: {error}", zone=names.to_text(zone.origin), error=e)
                return [self._error(query, dns.rcode.SERVFAIL)]
        return _finish(data, query, bodies, settings.tsig)

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
                ours = serial_of(zone)
                return theirs == ours or 0 < (theirs - ours) % 2**32 < 2**31
        return False

    def _bodies(self, zone: Zone) -> list[bytes]:
        """The zone's transfer as messages (ID 0, the question a placeholder): made once per
        config, on the first transfer; each transfer then only patches and signs them."""
        kept = self._bodies_of.get(zone.origin_key)
        if kept is None:
            rrsets = [zone.soa]
            for node in zone.nodes.values():
                rrsets.extend(r for t, r in node.rrsets.items() if t != TYPE_SOA or r is not zone.soa)
            rrsets.append(zone.soa)
            kept = self._bodies_of[zone.origin_key] = _render(zone, rrsets)
        return kept


def _render(zone: Zone, rrsets: list[RRset]) -> list[bytes]:
    """*rrsets* in as few messages as fit the budget (by the node's own encoder, names
    compressed), the first with a question for the zone's apex (patched with the request's
    own question by `_finish`)."""
    question = _name_wire(zone.origin) + struct.pack("!HH", TYPE_AXFR, wire.CLASS_IN)
    out: list[bytes] = []
    batch: list[tuple[RRset, Name | None]] = []
    size = 0
    for i, rrset in enumerate(rrsets):
        batch.append((rrset, None))
        size += sum(len(_name_wire(rrset.owner)) + 10 + _rdata_size(r) for r in rrset.rdatas)
        if size < MESSAGE_BUDGET and i < len(rrsets) - 1:
            continue
        first = question if not out else b""
        message = wire.write_response(
            0, wire.QR | wire.AA, wire.NOERROR, first, zone.origin, [wire.Section(batch)], None, wire.MAX_MESSAGE
        )
        if message[2] & (wire.TC >> 8):
            raise ValueError(f"an RRset of {names.to_text(batch[0][0].owner)} does not fit in a message")
        out.append(message)
        batch, size = [], 0
    return out


def _rdata_size(rdata: tuple[bytes | Name, ...]) -> int:
    return sum(len(p) if isinstance(p, bytes) else len(_name_wire(p)) for p in rdata)


def _finish(data: bytes, query: dns.message.Message, bodies: list[bytes], key: TSIGKey | None) -> list[bytes]:
    """The messages of one transfer: *bodies* with the request's ID, RD and question, an
    OPT when it had one, and each signed with *key* when given, chained as RFC 8945 5.3.1
    says (the first over the request's MAC, the others over the one before)."""
    question = 12 + len(query.question[0].name.to_wire() or b"") + 4
    out = []
    ctx = None
    keyname = dns.name.from_text(key.name) if key is not None else None
    for i, body in enumerate(bodies):
        msg = bytearray(body)
        msg[0:2] = data[0:2]
        msg[2] |= data[2] & 0x01  # RD copied
        if i == 0:
            msg[12:question] = data[12:question]
        additional = 0
        if query.edns >= 0:
            msg += _OPT
            additional += 1
        if key is not None:
            assert keyname is not None
            _set_arcount(msg, additional)
            unsigned = dns.message.Message._make_tsig(keyname, _algorithm(key), 0, 300, b"", query.id, 0, b"")[0]
            signed, ctx = dns.tsig.sign(
                bytes(msg), _dns_key(key), unsigned, int(time.time()), query.mac if i == 0 else None, ctx, True
            )
            rdata = signed.to_wire()
            assert rdata is not None
            msg += (keyname.to_wire() or b"") + struct.pack(
                "!HHIH", dns.rdatatype.TSIG, dns.rdataclass.ANY, 0, len(rdata)
            )
            msg += rdata
            additional += 1
        _set_arcount(msg, additional)
        out.append(bytes(msg))
    return out


def _set_arcount(message: bytearray, count: int) -> None:
    message[10:12] = count.to_bytes(2, "big")


def _allowed(source: str, settings: ZoneTransfer) -> bool:
    try:
        address = address_of(source)
    except ValueError:
        return False
    return any(address in network for network in settings.allow)


def _algorithm(key: TSIGKey) -> dns.name.Name:
    return dns.name.from_text(key.algorithm)


def _dns_key(key: TSIGKey) -> dns.tsig.Key:
    return dns.tsig.Key(key.name, key.secret, key.algorithm)
