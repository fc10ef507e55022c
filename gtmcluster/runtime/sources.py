"""What "a source" is, for every cap a node keeps per source: DNS TCP connections
(`dns.tcpclients`), zone transfers in flight (`dns.xfrslots`), the peer port's unproven
connections (`sync.admission`) and the API's connections, answers and log followers
(`api.slots`).

A source is an IPv4 address (also when it arrives IPv4-mapped, ``::ffff:192.0.2.1``), or
an IPv6 address's /64 (``2001:db8:1:2::/64``), its zone (``%eth0``) left out. A /64 is one
link, the least a host is given (SLAAC hosts pick any address in it): counted per address,
one IPv6 host could open as many connections as it has addresses. Anything that is not an
address (a UNIX socket's path) is its own source, as it is.

`source_of` is on the path of every accepted connection, so it parses with socket's
`inet_pton` (under a microsecond; `ipaddress` takes some 17). `plain` is one address as one
spelling (`address_of`, as a string), for the few places that name an
address rather than a source (a member's own peer address). Pure: nothing from Twisted.
"""

from __future__ import annotations

import ipaddress
import socket

#: the IPv6 prefix counted as one source: a /64 is one link (SLAAC hosts pick any address in
#: it), so one host has a whole /64 to open connections from
SOURCE_IPV6_PREFIX = 64
_KEPT = SOURCE_IPV6_PREFIX // 8
_IPV4_MAPPED = bytes(10) + b"\xff\xff"


def source_of(host: str) -> str:
    """The source *host* (a peer's address as Twisted gives it) counts as: an IPv4 address
    itself (also when IPv4-mapped), an IPv6 address its /64 (``2001:db8:1:2::/64``, its
    zone left out); anything else as it is."""
    if ":" not in host:
        return host  # (IPv4: Twisted's dotted quad)
    try:
        packed = socket.inet_pton(socket.AF_INET6, host.partition("%")[0])
    except (OSError, ValueError):
        return host
    if packed.startswith(_IPV4_MAPPED):
        return socket.inet_ntop(socket.AF_INET, packed[12:])
    return f"{socket.inet_ntop(socket.AF_INET6, packed[:_KEPT] + bytes(16 - _KEPT))}/{SOURCE_IPV6_PREFIX}"


def plain(host: str) -> str:
    """*host* as one spelling (its zone left out, IPv4-mapped unmapped, IPv6 compressed), or
    as it is when it is no address at all."""
    try:
        return str(address_of(host))
    except ValueError:
        return host


def address_of(source: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address of a source as received (an IPv6 zone left out, IPv4-mapped unmapped),
    as prefixes are matched against it. Raises ValueError."""
    address = ipaddress.ip_address(source.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
