"""A DNS reply reduced to the fields the conformance test compares between servers.

Every field is a plain value (bool, str, int, tuple, frozenset) so two views compare with
``==`` field by field and a difference prints readably. Record sections are sets of
lowercased presentation lines (order and name case within records do not matter to a
resolver); the question keeps its case, since echoing it exactly is what is checked.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any

import dns.exception
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from tests.support import dnsclient

#: edns-tcp-keepalive (RFC 7828): a field of its own, since a server may add it unasked
OPTION_KEEPALIVE = 11

#: the fields of a view, in the order a report lists them
FIELDS = (
    "reply",
    "id",
    "opcode",
    "rcode",
    "qr",
    "aa",
    "tc",
    "rd",
    "ra",
    "z",
    "ad",
    "cd",
    "question",
    "answer",
    "authority",
    "additional",
    "edns",
    "do",
    "edns_flags",
    "options",
    "keepalive",
    "payload",
    "size",
)

#: the fields compared between servers (the size follows from the rest)
COMPARED = FIELDS[:-1]

View = Mapping[str, Any]

NO_REPLY: View = dict.fromkeys(FIELDS) | {"reply": False}


def view(query: bytes, reply: bytes | None) -> View:
    """The comparable fields of *reply* to *query* (None: no reply)."""
    if reply is None:
        return NO_REPLY
    qid, flags = struct.unpack_from("!HH", reply) if len(reply) >= 4 else (None, 0)
    out: dict[str, Any] = dict.fromkeys(FIELDS)
    out |= {
        "reply": True,
        "id": "same" if reply[:2] == query[:2] else qid,
        "opcode": (flags >> 11) & 0xF,
        "qr": bool(flags & 0x8000),
        "aa": bool(flags & 0x0400),
        "tc": bool(flags & 0x0200),
        "rd": bool(flags & 0x0100),
        "ra": bool(flags & 0x0080),
        "z": bool(flags & 0x0040),
        "ad": bool(flags & 0x0020),
        "cd": bool(flags & 0x0010),
        "size": len(reply),
    }
    try:
        msg = dns.message.from_wire(reply, ignore_trailing=True)
    except (dns.exception.DNSException, ValueError) as e:
        # a reply dnspython will not read (FORMERR without question, say): header only
        out["rcode"] = dns.rcode.to_text(flags & 0xF)
        out["question"] = f"unreadable: {type(e).__name__}"
        return out
    out |= {
        "rcode": dns.rcode.to_text(msg.rcode()),
        "question": tuple(
            f"{r.name} {dns.rdataclass.to_text(r.rdclass)} {dns.rdatatype.to_text(r.rdtype)}" for r in msg.question
        ),
        "answer": _records(msg.answer),
        "authority": _records(msg.authority),
        "additional": _records(msg.additional),
        "edns": msg.edns if msg.edns >= 0 else None,
    }
    if msg.edns >= 0:
        out |= {
            "do": bool(msg.ednsflags & 0x8000),
            "edns_flags": msg.ednsflags & 0x7FFF,
            "options": tuple(sorted(int(o.otype) for o in msg.options if o.otype != OPTION_KEEPALIVE)),
            "keepalive": any(o.otype == OPTION_KEEPALIVE for o in msg.options),
            "payload": msg.payload,
        }
    return out


def _records(section: list[dns.rrset.RRset]) -> frozenset[str]:
    return frozenset(line.lower() for rrset in section for line in rrset.to_text().splitlines())


def differences(ours: View, theirs: View, fields: tuple[str, ...] = COMPARED) -> dict[str, tuple[Any, Any]]:
    """{field: (ours, theirs)} for the *fields* where the views differ; when only one server
    replied, that alone ("reply") is the difference."""
    if ours["reply"] != theirs["reply"]:
        return {"reply": (ours["reply"], theirs["reply"])}
    return {f: (ours[f], theirs[f]) for f in fields if ours[f] != theirs[f]}


# --- sending probes --------------------------------------------------------------------

SENTINEL_ID = 0x5E57


def udp_exchange(packet: bytes, server: tuple[str, int], patience: float = 0.3, timeout: float = 10.0) -> bytes | None:
    """Send *packet* over UDP; its reply, or None when the server sends none.

    "None" is decided without a long timeout: when no reply comes within *patience*, a
    normal query (the sentinel) follows on the same socket; once its reply is in, a reply
    to the probe would have been sent already (a short grace covers servers that answer
    on several threads, out of order). Only if the sentinel too gets nothing within
    *timeout* is the server taken for dead (AssertionError).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(server)
        s.send(packet)
        reply = _receive(s, patience, lambda data: True)
        if reply is not None:
            return reply
        s.send(dnsclient.query("sentinel.invalid", "A", qid=SENTINEL_ID))
        got = _receive(s, timeout, lambda data: True)
        if got is None:
            raise AssertionError(f"{server} answered neither a probe nor a normal query within {timeout}s")
        if got[:2] != struct.pack("!H", SENTINEL_ID):
            return got
        return _receive(s, 0.2, lambda data: data[:2] != struct.pack("!H", SENTINEL_ID))


def _receive(s: socket.socket, timeout: float, wanted: Callable[[bytes], bool]) -> bytes | None:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        s.settimeout(left)
        try:
            data = s.recv(65535)
        except TimeoutError:
            return None
        except ConnectionRefusedError:
            return None
        if wanted(data):
            return data


def tcp_exchange(packet: bytes, server: tuple[str, int], timeout: float = 10.0) -> bytes | None:
    """Send *packet* over TCP; its reply, or None when the server closes without one."""
    with socket.create_connection(server, timeout=timeout) as s:
        s.sendall(struct.pack("!H", len(packet)) + packet)
        try:
            return dnsclient.read_framed(s)
        except (ConnectionError, TimeoutError):
            return None
