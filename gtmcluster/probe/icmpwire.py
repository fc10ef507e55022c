"""ICMP and ICMPv6 echo messages as bytes: building requests, reading replies and errors.

Pure functions, no sockets. An IPv4 raw socket receives the IP header before the ICMP
message (``ip_header=True``); ping sockets and ICMPv6 sockets receive the ICMP message alone.
The ICMPv4 checksum is computed here; the kernel computes ICMPv6's (it covers a
pseudo-header with addresses only the kernel knows for sure).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

from gtmcluster.probe.base import IPAddress

ECHO_REQUEST = {4: 8, 6: 128}
ECHO_REPLY = {4: 0, 6: 129}
UNREACHABLE = {4: 3, 6: 1}
TIME_EXCEEDED = {4: 11, 6: 3}
#: the next-header / protocol number of ICMP in an IP header
ICMP_PROTOCOL = {4: 1, 6: 58}

UNREACHABLE_CODES = {
    4: {
        0: "network unreachable",
        1: "host unreachable",
        2: "protocol unreachable",
        3: "port unreachable",
        4: "fragmentation needed",
        9: "network administratively prohibited",
        10: "host administratively prohibited",
        13: "communication administratively prohibited",
    },
    6: {
        0: "no route to destination",
        1: "communication administratively prohibited",
        3: "address unreachable",
        4: "port unreachable",
        5: "source address failed policy",
        6: "reject route to destination",
    },
}


@dataclass(frozen=True, slots=True)
class Echo:
    """An echo reply."""

    identifier: int
    sequence: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Undeliverable:
    """An ICMP error about one of our echo requests (destination unreachable, time exceeded)."""

    identifier: int
    sequence: int
    destination: IPAddress  # where the request was going
    reason: str


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071): one's complement of the one's complement sum."""
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def echo_request(version: int, identifier: int, sequence: int, payload: bytes) -> bytes:
    """An echo request; with its checksum for ICMPv4, with zero for ICMPv6 (the kernel's)."""
    header = struct.pack("!BBHHH", ECHO_REQUEST[version], 0, 0, identifier, sequence)
    if version == 6:
        return header + payload
    message = header + payload
    return message[:2] + struct.pack("!H", checksum(message)) + message[4:]


def strip_ip_header(data: bytes) -> bytes | None:
    """The payload of an IPv4 packet (the header is IHL 32-bit words long)."""
    if len(data) < 20 or data[0] >> 4 != 4:
        return None
    ihl = (data[0] & 0x0F) * 4
    if ihl < 20 or len(data) < ihl:
        return None
    return data[ihl:]


def parse(version: int, data: bytes, ip_header: bool = False) -> Echo | Undeliverable | None:
    """What *data* (as received on an ICMP socket of *version*) says about an echo request,
    or None for anything else (other ICMP types, our own requests seen on loopback)."""
    message = strip_ip_header(data) if ip_header else data
    if message is None or len(message) < 8:
        return None
    kind, code = message[0], message[1]
    if kind == ECHO_REPLY[version] and code == 0:
        identifier, sequence = struct.unpack("!HH", message[4:8])
        return Echo(identifier, sequence, message[8:])
    if kind == UNREACHABLE[version]:
        reason = UNREACHABLE_CODES[version].get(code, f"destination unreachable (code {code})")
    elif kind == TIME_EXCEEDED[version]:
        reason = "time exceeded in transit"
    else:
        return None
    return _quoted(version, message[8:], reason)


def _quoted(version: int, quoted: bytes, reason: str) -> Undeliverable | None:
    """The echo request quoted in an ICMP error: its IP header and first 8 bytes."""
    destination: IPAddress
    if version == 4:
        inner = strip_ip_header(quoted)
        if inner is None or quoted[9] != ICMP_PROTOCOL[4]:
            return None
        destination = ipaddress.IPv4Address(quoted[16:20])
    else:
        if len(quoted) < 40 or quoted[0] >> 4 != 6 or quoted[6] != ICMP_PROTOCOL[6]:
            return None
        destination = ipaddress.IPv6Address(quoted[24:40])
        inner = quoted[40:]
    if len(inner) < 8 or inner[0] != ECHO_REQUEST[version]:
        return None
    identifier, sequence = struct.unpack("!HH", inner[4:8])
    return Undeliverable(identifier, sequence, destination, reason)
