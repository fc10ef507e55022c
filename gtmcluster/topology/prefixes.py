"""Longest-prefix lookups over sets of networks, with the EDNS client-subnet scope.

`PrefixMap.lookup(address)` returns every network containing the address (longest first)
and the *scope*: the shortest prefix length L such that every address sharing the first L
bits with *address* is contained in exactly the same networks. An answer that depends only
on which networks contain the client is therefore valid for the whole ``address/L``, which
is what RFC 7871 asks a server to report as SCOPE PREFIX-LENGTH.

Per family, the map keeps the set of networks of each prefix length (for matching) and the
set of every prefix of every network (the nodes of a binary trie, one set per depth). The
deepest trie node on the address's path is found by binary search over depth (a node's
parent always exists); the scope is that depth, plus one when that node has children off
the address's path.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Generic, TypeVar

V = TypeVar("V")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class _Family(Generic[V]):
    __slots__ = ("exact", "lengths", "levels", "width")

    def __init__(self, width: int):
        self.width = width
        self.exact: dict[int, dict[int, list[V]]] = {}
        self.lengths: list[int] = []
        self.levels: list[set[int]] = [set() for _ in range(width + 1)]

    def add(self, network: IPNetwork, value: V) -> None:
        plen = network.prefixlen
        top = int(network.network_address) >> (self.width - plen)
        table = self.exact.get(plen)
        if table is None:
            table = self.exact[plen] = {}
            self.lengths = sorted(self.exact, reverse=True)
        values = table.setdefault(top, [])
        if value not in values:
            values.append(value)
        levels = self.levels
        for depth in range(plen, -1, -1):
            prefix = top >> (plen - depth)
            if prefix in levels[depth]:
                break
            levels[depth].add(prefix)

    def lookup(self, value: int) -> tuple[list[tuple[int, list[V]]], int]:
        width = self.width
        levels = self.levels
        if not levels[0]:
            return [], 0
        lo, hi = 0, width  # levels[lo] holds the path node; find the deepest one
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if (value >> (width - mid)) in levels[mid]:
                lo = mid
            else:
                hi = mid - 1
        depth = lo
        scope = depth
        if depth < width:
            sibling = ((value >> (width - depth)) << 1) | (1 - ((value >> (width - depth - 1)) & 1))
            if sibling in levels[depth + 1]:
                scope = depth + 1
        matches = []
        for plen in self.lengths:
            if plen > depth:
                continue
            hit = self.exact[plen].get(value >> (width - plen))
            if hit is not None:
                matches.append((plen, hit))
        return matches, scope


class PrefixMap(Generic[V]):
    """Networks (IPv4 and IPv6) mapped to values."""

    def __init__(self, items: Iterable[tuple[IPNetwork, V]] = ()):
        self._v4: _Family[V] = _Family(32)
        self._v6: _Family[V] = _Family(128)
        self.size = 0
        for network, value in items:
            self.add(network, value)

    def add(self, network: IPNetwork, value: V) -> None:
        (self._v4 if network.version == 4 else self._v6).add(network, value)
        self.size += 1

    def lookup(self, address: IPAddress) -> tuple[list[tuple[int, list[V]]], int]:
        """All (prefix length, values) containing *address*, longest first, and the scope."""
        family = self._v4 if address.version == 4 else self._v6
        return family.lookup(int(address))

    def longest(self, address: IPAddress) -> tuple[int, list[V]] | None:
        matches, _ = self.lookup(address)
        return matches[0] if matches else None

    def __contains__(self, address: IPAddress) -> bool:
        return bool(self.lookup(address)[0])
