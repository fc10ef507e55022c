"""What a source is (`gtmcluster.runtime.sources`), for every per-source cap: an IPv4 address (also
IPv4-mapped), an IPv6 address's /64 (its zone left out), anything else as it is; and one
address as one spelling (`plain`). The fast `source_of` agrees with `ipaddress` on any
address."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtmcluster.runtime.sources import SOURCE_IPV6_PREFIX, plain, source_of


@pytest.mark.parametrize(
    ("host", "source"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2::", "2001:db8:1:2::/64"),
        ("::1", "::/64"),
        ("::ffff:192.0.2.9", "192.0.2.9"),  # IPv4-mapped: the IPv4 address
        ("fe80::1%eth0", "fe80::/64"),
        ("not an address", "not an address"),  # (a UNIX socket's path: as it is)
        ("zz::zz:", "zz::zz:"),
        ("1:\x00::", "1:\x00::"),
    ],
)
def test_a_source_is_an_ipv4_address_or_an_ipv6_64(host: str, source: str) -> None:
    assert source_of(host) == source


@pytest.mark.parametrize(
    ("host", "source"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("unix", "unix"),
    ],
)
def test_sources(host: str, source: str) -> None:
    """An IPv4 address is its own source (also IPv4-mapped); an IPv6 address counts as its /64."""
    assert source_of(host) == source


def _by_ipaddress(host: str) -> str:
    """What a source is, worked out with `ipaddress` (slow, plain)."""
    address = ipaddress.ip_address(host)
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, SOURCE_IPV6_PREFIX), strict=False))
    return str(address)


@given(st.ip_addresses())
def test_source_of_agrees_with_ipaddress(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    """On any address, however spelled (compressed, exploded), the fast parse and ipaddress agree."""
    for spelling in {str(address), address.exploded}:
        assert source_of(spelling) == _by_ipaddress(str(address))


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("2001:DB8:0:0:0:0:0:1", "2001:db8::1"),
        ("fe80::1%eth0", "fe80::1"),
        ("unix", "unix"),
    ],
)
def test_plain_is_one_spelling_of_an_address(host: str, address: str) -> None:
    """A member's peer address from the config and a peer's address from the socket compare
    equal however each was written."""
    assert plain(host) == address
