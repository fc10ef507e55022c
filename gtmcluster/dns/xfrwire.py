"""The messages of a zone transfer: encoded (the node's own encoder, names compressed) and
finished for one request (its ID, RD and question, an OPT, the TSIG chain of RFC 8945).

`messages` encodes RRsets one message at a time, as a generator, so the caller decides
when each message is made (`transfer.Transfers` lets the reactor run between them), and
`finish_each` finishes them one at a time too, so a transfer's messages are made only as
its client takes them.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence

import dns.message
import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.tsig

from gtmcluster.config.dnsserver import TSIGKey
from gtmcluster.dns import wire
from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import TYPE_AXFR, RData, RRset, Zone

#: record bytes (uncompressed) per message before a new one is begun: a message stays
#: under 64 KiB, the OPT and TSIG records included, unless one RRset alone is near it
MESSAGE_BUDGET = 32768
#: the OPT record of a reply to a request with EDNS: version 0, our payload size, no flags
OPT = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)


def name_wire(name: Name) -> bytes:
    return b"".join(bytes([len(label)]) + label for label in name) + b"\0"


def rrset_size(rrset: RRset) -> int:
    """*rrset*'s bytes, uncompressed."""
    owner = len(name_wire(rrset.owner)) + 10
    return sum(owner + rdata_size(r) for r in rrset.rdatas)


def rdata_size(rdata: RData) -> int:
    return sum(len(p) if isinstance(p, bytes) else len(name_wire(p)) for p in rdata)


def messages(zone: Zone, rrsets: Iterable[RRset], budget: int = MESSAGE_BUDGET) -> Iterator[bytes]:
    """*rrsets* in as few messages as fit *budget*, made one at a time (ID 0, the first with
    a question for the zone's apex, patched with the request's own by `finish`). *rrsets*
    is read as the messages are made. Raises ValueError for an RRset that does not fit in a
    message of its own."""
    question = name_wire(zone.origin) + struct.pack("!HH", TYPE_AXFR, wire.CLASS_IN)
    first = True
    batch: list[tuple[RRset, Name | None]] = []
    size = 0
    for rrset in rrsets:
        if batch and size >= budget:
            yield _message(zone, question if first else b"", batch)
            first, batch, size = False, [], 0
        batch.append((rrset, None))
        size += rrset_size(rrset)
    if batch:
        yield _message(zone, question if first else b"", batch)


def _message(zone: Zone, question: bytes, batch: list[tuple[RRset, Name | None]]) -> bytes:
    message = wire.write_response(
        0, wire.QR | wire.AA, wire.NOERROR, question, zone.origin, [wire.Section(batch)], None, wire.MAX_MESSAGE
    )
    if message[2] & (wire.TC >> 8):
        raise ValueError(f"an RRset of {names.to_text(batch[0][0].owner)} does not fit in a message")
    return message


def single(zone: Zone, rrsets: Sequence[RRset], limit: int) -> bytes | None:
    """*rrsets* in one message of at most *limit* bytes, or None when they do not fit."""
    question = name_wire(zone.origin) + struct.pack("!HH", TYPE_AXFR, wire.CLASS_IN)
    section = wire.Section([(r, None) for r in rrsets])
    message = wire.write_response(0, wire.QR | wire.AA, wire.NOERROR, question, zone.origin, [section], None, limit)
    return None if message[2] & (wire.TC >> 8) else message


def tsig_room(key: TSIGKey | None) -> int:
    """The most bytes a TSIG record signed with *key* takes (and an OPT record)."""
    if key is None:
        return len(OPT)
    algorithm = len(dns.name.from_text(key.algorithm).to_wire() or b"")
    return len(OPT) + len(dns.name.from_text(key.name).to_wire() or b"") + 10 + algorithm + 16 + 64


def finish(data: bytes, query: dns.message.Message, bodies: Sequence[bytes], key: TSIGKey | None) -> list[bytes]:
    """The messages of one transfer, all made at once (`finish_each`)."""
    return list(finish_each(data, query, bodies, key))


def finish_each(
    data: bytes, query: dns.message.Message, bodies: Sequence[bytes], key: TSIGKey | None
) -> Iterator[bytes]:
    """The messages of one transfer, made one at a time as they are asked for (a connection
    asks as its client reads: `dns.stream`): *bodies* with the request's ID, RD and
    question, an OPT when it had one, and each signed with *key* when given, chained as RFC
    8945 5.3.1 says (the first over the request's MAC, the others over the one before)."""
    question = 12 + len(query.question[0].name.to_wire() or b"") + 4
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
            msg += OPT
            additional += 1
        if key is not None:
            assert keyname is not None
            _set_arcount(msg, additional)
            unsigned = dns.message.Message._make_tsig(keyname, algorithm(key), 0, 300, b"", query.id, 0, b"")[0]
            signed, ctx = dns.tsig.sign(
                bytes(msg), dns_key(key), unsigned, int(time.time()), query.mac if i == 0 else None, ctx, True
            )
            rdata = signed.to_wire()
            assert rdata is not None
            msg += (keyname.to_wire() or b"") + struct.pack(
                "!HHIH", dns.rdatatype.TSIG, dns.rdataclass.ANY, 0, len(rdata)
            )
            msg += rdata
            additional += 1
        _set_arcount(msg, additional)
        yield bytes(msg)


def _set_arcount(message: bytearray, count: int) -> None:
    message[10:12] = count.to_bytes(2, "big")


def algorithm(key: TSIGKey) -> dns.name.Name:
    return dns.name.from_text(key.algorithm)


def dns_key(key: TSIGKey) -> dns.tsig.Key:
    return dns.tsig.Key(key.name, key.secret, key.algorithm)
