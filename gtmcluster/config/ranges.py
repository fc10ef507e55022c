"""Address ranges a prober must leave alone: those never probed, and the special-purpose ones
that only ``prober.allow`` opens (the config refuses an allow entry that holds none;
`proximity.budget` applies both)."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gtmcluster.config.addresses import IPNetwork
    from gtmcluster.config.reader import Mapping, Reader

#: never probed, whatever prober.allow says
NEVER = (
    "0.0.0.0/8",  # "this network", the unspecified address
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, and the limited broadcast
    "::/128",  # unspecified
    "ff00::/8",  # multicast
)

#: the IANA IPv4 and IPv6 special-purpose address registries (RFC 6890 and their later
#: entries, as of 2026): probed only where prober.allow opens them
SPECIAL_PURPOSE = (
    "10.0.0.0/8",  # private use
    "100.64.0.0/10",  # shared address space (carrier-grade NAT)
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link local (cloud metadata services: 169.254.169.254)
    "172.16.0.0/12",  # private use
    "192.0.0.0/24",  # IETF protocol assignments
    "192.0.2.0/24",  # documentation (TEST-NET-1)
    "192.31.196.0/24",  # AS112-v4
    "192.52.193.0/24",  # AMT
    "192.88.99.0/24",  # deprecated 6to4 relay anycast
    "192.168.0.0/16",  # private use
    "192.175.48.0/24",  # direct delegation AS112 service
    "198.18.0.0/15",  # benchmarking
    "198.51.100.0/24",  # documentation (TEST-NET-2)
    "203.0.113.0/24",  # documentation (TEST-NET-3)
    "255.255.255.255/32",  # limited broadcast
    "::1/128",  # loopback
    "::ffff:0:0/96",  # IPv4-mapped
    "64:ff9b::/96",  # IPv4-IPv6 translation
    "64:ff9b:1::/48",  # local-use IPv4-IPv6 translation
    "100::/64",  # discard only
    "2001::/23",  # IETF protocol assignments (Teredo, benchmarking, ORCHID, ...)
    "2001:db8::/32",  # documentation
    "2002::/16",  # 6to4
    "2620:4f:8000::/48",  # direct delegation AS112 service
    "3fff::/20",  # documentation
    "5f00::/16",  # segment routing (SRv6) SIDs
    "fc00::/7",  # unique local
    "fe80::/10",  # link local
)


def read_allow(r: Reader, m: Mapping, key: str = "allow") -> list[IPNetwork]:
    """A section's list of special-purpose networks to open (``alerts.allow``, ``rum.allow``:
    as ``prober.allow``); an entry that holds no special-purpose address is a problem."""
    special = [ipaddress.ip_network(n) for n in SPECIAL_PURPOSE]
    allow: list[IPNetwork] = []
    for i, item in enumerate(r.list(m.at(key), m.get(key, []), "a list of networks") or []):
        network = r.network((*m.at(key), i), item)
        if network is None:
            continue
        if not any(network.overlaps(s) for s in special if s.version == network.version):
            why = "holds no special-purpose address (RFC 6890): only those need opening"
            r.error((*m.at(key), i), f"{network} {why}")
            continue
        allow.append(network)
    return allow
