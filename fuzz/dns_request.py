"""Fuzz target: the DNS query parser, `dns.wire.parse_query`.

Any bytes give a `Query` or the parser's one declared error, `BadQuery` (`Drop` only for
runts and responses). A query it accepts is what the bytes say: its ID, its question
(the raw bytes after the header, a name of labels of 1 to 63 octets, at most 255 in all,
then type and class), an EDNS payload size of at least 512, and a client subnet whose
network can be built and whose option re-encodes to what was sent.
"""

from __future__ import annotations

import struct

from fuzz.harness import Finding
from gtmcluster.dns import wire


def test_one_input(data: bytes) -> None:
    try:
        query = wire.parse_query(data)
    except wire.Drop:
        if len(data) >= 12 and not data[2] & 0x80:
            raise Finding("a query (QR=0, a whole header) was dropped without a reply") from None
        return
    except wire.QueryError as e:
        if e.query_id != int.from_bytes(data[:2], "big") or e.rcode not in (wire.FORMERR, wire.NOTIMP):
            raise Finding(f"error reply with ID {e.query_id} and rcode {e.rcode}") from None
        return
    if len(data) < 12 or data[2] & 0x80:
        raise Finding("a runt or a response was parsed as a query")
    if query.id != int.from_bytes(data[:2], "big"):
        raise Finding(f"ID {query.id} read from {data[:2]!r}")
    labels = query.qname
    if any(not 1 <= len(label) <= 63 for label in labels) or sum(len(label) + 1 for label in labels) + 1 > 255:
        raise Finding(f"question name {labels!r} breaks RFC 1035 limits")
    question = b"".join(bytes([len(label)]) + label for label in labels) + b"\0"
    question += struct.pack("!HH", query.qtype, query.qclass)
    if query.question != question or data[12 : 12 + len(question)] != question:
        raise Finding(f"question {query.question!r} is not what was sent")
    edns = query.edns
    if edns is not None:
        if not wire.MIN_UDP <= edns.udp_size <= 65535 or not 0 <= edns.version <= 255:
            raise Finding(f"EDNS {edns!r} out of range")
        if edns.ecs is not None:
            edns.ecs.network  # noqa: B018 - must not raise for a subnet the parser accepted
            if wire.parse_ecs(edns.ecs.option(0)[4:]) != edns.ecs:
                raise Finding(f"client subnet {edns.ecs!r} does not re-encode to itself")
