"""Queries and responses as dnspython messages, for tests that talk to the responder or
to a node directly (process tests use dig as well)."""

from __future__ import annotations

import socket
import struct

import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.rdatatype


def query(
    name: str,
    rdtype: str | int = "A",
    *,
    edns: int | None = None,
    payload: int = 1232,
    ecs: str | None = None,
    rd: bool = False,
    qid: int = 4242,
    options: list[dns.edns.Option] | None = None,
    dnssec: bool = False,
) -> bytes:
    """Wire bytes of a query. *ecs* is a client subnet such as ``"198.51.100.0/24"``;
    *dnssec* sets the DO bit."""
    opts = list(options or [])
    if ecs is not None:
        address, prefix = ecs.split("/")
        opts.append(dns.edns.ECSOption(address, int(prefix)))
    use_edns = edns if edns is not None else (0 if opts or dnssec else -1)
    q = dns.message.make_query(
        name,
        dns.rdatatype.RdataType.make(rdtype),
        use_edns=use_edns,
        payload=payload,
        options=opts,
        want_dnssec=dnssec,
    )
    q.id = qid
    if not rd:
        q.flags &= ~dns.flags.RD
    return q.to_wire()


def parse(wire: bytes) -> dns.message.Message:
    return dns.message.from_wire(wire)


def udp(wire: bytes, server: tuple[str, int], source: str | None = None, timeout: float = 2.0) -> bytes:
    family = socket.AF_INET6 if ":" in server[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        if source:
            s.bind((source, 0))
        s.sendto(wire, server)
        data, _ = s.recvfrom(65535)
        return data


def tcp(wire: bytes, server: tuple[str, int], timeout: float = 2.0) -> bytes:
    with socket.create_connection(server, timeout=timeout) as s:
        s.sendall(struct.pack("!H", len(wire)) + wire)
        return read_framed(s)


def read_framed(s: socket.socket) -> bytes:
    head = _read_exact(s, 2)
    (length,) = struct.unpack("!H", head)
    return _read_exact(s, length)


def _read_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed before a whole message arrived")
        data += chunk
    return data


def answers(msg: dns.message.Message) -> list[str]:
    """The answer section's records as text, one per record."""
    return [f"{rrset.name} {dns.rdatatype.to_text(rrset.rdtype)} {rd}" for rrset in msg.answer for rd in rrset]


def addresses(msg: dns.message.Message) -> list[str]:
    return [rd.address for rrset in msg.answer if rrset.rdtype in (1, 28) for rd in rrset]


def ecs_option(msg: dns.message.Message) -> dns.edns.ECSOption | None:
    for opt in msg.options:
        if isinstance(opt, dns.edns.ECSOption):
            return opt
    return None
