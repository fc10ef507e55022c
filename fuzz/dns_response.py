"""Fuzz target: the whole UDP datagram -> response path, fast path and general path.

The input's first byte picks the client's address, the rest is the datagram. Two nodes
answer from one config (``fuzz/fixtures/dns.yaml``) and one clock: the reference through
the general path (`Responder`), the other through `FastPath` as the UDP protocol does, each
datagram twice (the second time from what the fast path kept). A third node answers it
over TCP, for the complete answer. Invariants:

- the fast path's reply is the general path's, byte for byte, and neither logs a traceback;
- runts and responses get no reply; every other datagram gets one (the fixture has no
  ``drop`` decisions), with QR=1, the query's ID, RA clear, the question echoed, and it
  is a well-formed DNS message (dnspython parses it);
- it fits the size limit: the client's EDNS payload size capped by ours, 512 without EDNS;
- TC is set exactly when records were left out: without TC the answer and authority
  sections hold as many records as over TCP; with TC, fewer records than over TCP.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import dns.message

from fuzz.harness import Finding, no_tracebacks
from gtmcluster.config.load import load
from gtmcluster.dns import wire
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.node import Node

FIXTURE = Path(__file__).parent / "fixtures" / "dns.yaml"
#: the client addresses the first byte chooses from: in regions r1 and r2, in none,
#: IPv4-mapped IPv6 and plain IPv6
SOURCES = ("127.0.1.9", "127.0.2.9", "192.0.2.200", "::ffff:127.0.2.9", "2001:db8:aaaa::1", "198.51.100.7")
_COUNTS = struct.Struct("!HHHH")


class _Nodes:
    """The reference (general path), the fast path's node and the TCP node."""

    def __init__(self) -> None:
        config = load(FIXTURE)
        nodes = [Node(config, "n1", clock=lambda: 1000.0, rng=random.Random(7)) for _ in range(3)]
        for node in nodes:
            node.ready = True
        self.reference, fast_node, self.tcp = nodes
        self.fast = FastPath(fast_node.responder)
        self.payload_size = config.dns_server.udp_payload_size


_nodes: _Nodes | None = None


def nodes() -> _Nodes:
    global _nodes  # noqa: PLW0603 - built once per process: loading the config is slow
    if _nodes is None:
        _nodes = _Nodes()
    return _nodes


def test_one_input(data: bytes) -> None:
    if not data:
        return
    n = nodes()
    source = SOURCES[data[0] % len(SOURCES)]
    datagram = data[1:]
    with no_tracebacks():
        for _ in range(2):
            expected = n.reference.responder.handle(datagram, source)
            reply = n.fast.handle(datagram, source)
            if reply != expected:
                raise Finding(f"the fast path replied {reply!r}, the general path {expected!r}")
        tcp = n.tcp.responder.handle(datagram, source, tcp=True)
    check_reply(datagram, reply, tcp, n.payload_size)


def check_reply(datagram: bytes, reply: bytes | None, tcp: bytes | None, payload_size: int) -> None:
    """The invariants of a UDP *reply* to *datagram* (*tcp*: the reply over TCP)."""
    try:
        query = wire.parse_query(datagram)
        edns, question = query.edns, query.question
    except wire.Drop:
        if reply is not None or tcp is not None:
            raise Finding("a runt or a response was answered") from None
        return
    except wire.QueryError as e:
        edns, question = e.edns, e.question
    if reply is None or tcp is None:
        raise Finding("a query got no reply")
    limit = min(edns.udp_size, payload_size) if edns is not None else wire.MIN_UDP
    if not 12 <= len(reply) <= limit:
        raise Finding(f"a reply of {len(reply)} bytes for a limit of {limit}")
    qid, flags = struct.unpack_from("!HH", reply)
    if qid != int.from_bytes(datagram[:2], "big") or not flags & wire.QR or flags & wire.RA:
        raise Finding(f"reply header: ID {qid}, flags {flags:#06x}")
    if question and reply[12 : 12 + len(question)] != question:
        raise Finding("the reply does not echo the question")
    try:  # (as a QUERY: dnspython reads other opcodes' sections by their own rules)
        dns.message.from_wire(reply[:2] + bytes([reply[2] & 0x87]) + reply[3:])
    except Exception as e:
        raise Finding(f"the reply is not a well-formed message: {type(e).__name__}: {e}") from None
    if reply[3] & 0xF != tcp[3] & 0xF:
        raise Finding(f"rcode {reply[3] & 0xF} over UDP, {tcp[3] & 0xF} over TCP")
    udp_counts = _COUNTS.unpack_from(reply, 4)
    tcp_counts = _COUNTS.unpack_from(tcp, 4)
    if flags & wire.TC:
        if sum(udp_counts[1:]) >= sum(tcp_counts[1:]):
            raise Finding(f"TC set but nothing left out: {udp_counts} over UDP, {tcp_counts} over TCP")
    elif udp_counts[1:3] != tcp_counts[1:3]:
        raise Finding(f"records left out without TC: {udp_counts} over UDP, {tcp_counts} over TCP")
