"""A DNS query with an EDNS client subnet option, as bytes (for floods of distinct networks)."""

from __future__ import annotations

import ipaddress
import struct


def ecs_query(qid: int, name: str, subnet: str) -> bytes:
    """An A query for *name* with an EDNS client subnet option for *subnet* (RFC 7871)."""
    network = ipaddress.ip_network(subnet)
    family = 1 if network.version == 4 else 2
    address = network.network_address.packed[: (network.prefixlen + 7) // 8]
    option = struct.pack("!HBB", family, network.prefixlen, 0) + address
    opt = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 4 + len(option)) + struct.pack("!HH", 8, len(option)) + option
    qname = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\x00"
    return struct.pack("!HHHHHH", qid & 0xFFFF, 0x0100, 1, 0, 0, 1) + qname + struct.pack("!HH", 1, 1) + opt
