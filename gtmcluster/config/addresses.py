"""The network values a config holds: an address, a network, and a host and port (a
member's ``peer``, ``dns`` and ``api`` addresses, an SNMP agent's)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class HostPort:
    host: IPAddress
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if self.host.version == 6 else f"{self.host}:{self.port}"
