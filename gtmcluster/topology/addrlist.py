"""Address list files: one network per line (an ISP's address space), ``#`` comments.

A bare address counts as a host network (/32 or /128). Every bad line is reported with its
line number. A file is read as `runtime.files` reads what a config names: a regular file
of at most `runtime.files.ADDRESS_LIST` (64 MiB).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from gtmcluster.runtime import files
from gtmcluster.topology.prefixes import IPNetwork


@dataclass(frozen=True, slots=True)
class BadLine:
    line: int
    message: str


def parse(text: str) -> tuple[list[IPNetwork], list[BadLine]]:
    networks: list[IPNetwork] = []
    bad: list[BadLine] = []
    for number, raw in enumerate(text.splitlines(), 1):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry))
        except ValueError:
            try:
                ipaddress.ip_network(entry, strict=False)
                bad.append(BadLine(number, f"{entry!r} has host bits set"))
            except ValueError:
                bad.append(BadLine(number, f"{entry!r} is not an IPv4 or IPv6 network"))
    return networks, bad


def read(path: str) -> tuple[list[IPNetwork], list[BadLine]]:
    """Read an address list file. Raises OSError when it cannot be read (`files.Refused`
    when it is not a regular file of UTF-8 text within the cap)."""
    return parse(files.read_text(path, files.ADDRESS_LIST))
