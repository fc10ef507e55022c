"""PrefixMap: longest-prefix lookups over IPv4 and IPv6 networks and the RFC 7871 scope."""

from __future__ import annotations

import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.topology.prefixes import IPAddress, IPNetwork, PrefixMap


def net(text: str) -> IPNetwork:
    return ipaddress.ip_network(text)


def ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


def build(*networks: str) -> PrefixMap[str]:
    """A map whose values are the networks' own text."""
    return PrefixMap((net(n), n) for n in networks)


NESTED_V4 = ("10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "192.0.2.0/24")
NESTED_V6 = ("2001:db8::/32", "2001:db8:aa::/48", "2001:db8:aa:bb::/64")


def test_ipv4_nested_networks_longest_first() -> None:
    """An address inside nested networks gets every one of them, longest prefix first."""
    matches, _ = build(*NESTED_V4).lookup(ip("10.1.2.3"))
    assert matches == [(24, ["10.1.2.0/24"]), (16, ["10.1.0.0/16"]), (8, ["10.0.0.0/8"])]


def test_ipv4_partial_nesting() -> None:
    """An address outside the inner networks matches only the outer ones that contain it."""
    prefixes = build(*NESTED_V4)
    assert prefixes.lookup(ip("10.1.3.1"))[0] == [(16, ["10.1.0.0/16"]), (8, ["10.0.0.0/8"])]
    assert prefixes.lookup(ip("10.200.0.1"))[0] == [(8, ["10.0.0.0/8"])]
    assert prefixes.lookup(ip("192.0.2.255"))[0] == [(24, ["192.0.2.0/24"])]


def test_longest_returns_the_innermost_network() -> None:
    """`longest` gives the longest containing network, or None when nothing contains the address."""
    prefixes = build(*NESTED_V4)
    assert prefixes.longest(ip("10.1.2.200")) == (24, ["10.1.2.0/24"])
    assert prefixes.longest(ip("10.9.9.9")) == (8, ["10.0.0.0/8"])
    assert prefixes.longest(ip("172.16.0.1")) is None


def test_no_match() -> None:
    """An address outside every network gets no match, and `in` says so."""
    prefixes = build(*NESTED_V4)
    assert prefixes.lookup(ip("172.16.5.4"))[0] == []
    assert ip("172.16.5.4") not in prefixes
    assert ip("10.0.0.1") in prefixes


def test_empty_map_matches_nothing_with_scope_zero() -> None:
    """With no networks at all the answer is the same for everyone: no match, scope 0."""
    prefixes: PrefixMap[str] = PrefixMap()
    assert prefixes.lookup(ip("10.1.2.3")) == ([], 0)
    assert prefixes.lookup(ip("2001:db8::1")) == ([], 0)


def test_default_route_matches_every_address_of_its_family() -> None:
    """0.0.0.0/0 contains every IPv4 address (with length 0) and no IPv6 one; scope 0."""
    prefixes = build("0.0.0.0/0")
    for a in ("0.0.0.0", "10.1.2.3", "255.255.255.255"):
        assert prefixes.lookup(ip(a)) == ([(0, ["0.0.0.0/0"])], 0)
    assert prefixes.lookup(ip("::1"))[0] == []


def test_ipv6_default_route() -> None:
    """::/0 contains every IPv6 address and no IPv4 one."""
    prefixes = build("::/0")
    assert prefixes.lookup(ip("2001:db8::1")) == ([(0, ["::/0"])], 0)
    assert prefixes.lookup(ip("10.0.0.1"))[0] == []


def test_host_route_v4() -> None:
    """A /32 matches its one address with scope 32; its neighbour does not match, also scope 32."""
    prefixes = build("10.0.0.0/8", "10.1.2.3/32")
    assert prefixes.lookup(ip("10.1.2.3")) == ([(32, ["10.1.2.3/32"]), (8, ["10.0.0.0/8"])], 32)
    assert prefixes.lookup(ip("10.1.2.2")) == ([(8, ["10.0.0.0/8"])], 32)


def test_host_route_v6() -> None:
    """A /128 matches its one address with scope 128; its neighbour differs in the last bit only."""
    prefixes = build("2001:db8::/32", "2001:db8::5/128")
    assert prefixes.lookup(ip("2001:db8::5")) == ([(128, ["2001:db8::5/128"]), (32, ["2001:db8::/32"])], 128)
    assert prefixes.lookup(ip("2001:db8::4")) == ([(32, ["2001:db8::/32"])], 128)
    assert prefixes.lookup(ip("2001:db8::6")) == ([(32, ["2001:db8::/32"])], 127)


def test_ipv6_nested_networks() -> None:
    """IPv6 lookups return every containing network, longest first."""
    prefixes = build(*NESTED_V6)
    assert prefixes.lookup(ip("2001:db8:aa:bb::1"))[0] == [
        (64, ["2001:db8:aa:bb::/64"]),
        (48, ["2001:db8:aa::/48"]),
        (32, ["2001:db8::/32"]),
    ]
    assert prefixes.lookup(ip("2001:db8:aa:cc::1"))[0] == [(48, ["2001:db8:aa::/48"]), (32, ["2001:db8::/32"])]
    assert prefixes.lookup(ip("2001:db9::1"))[0] == []


def test_families_are_separate() -> None:
    """IPv4 networks never match IPv6 addresses (not even the mapped form) and the reverse."""
    prefixes = build("10.0.0.0/8", "::/96")
    assert prefixes.lookup(ip("::ffff:10.1.2.3"))[0] == []
    assert prefixes.lookup(ip("::a01:203"))[0] == [(96, ["::/96"])]
    assert prefixes.lookup(ip("10.1.2.3"))[0] == [(8, ["10.0.0.0/8"])]


def test_several_values_on_one_network() -> None:
    """Values added under the same network are all returned, in insertion order, without duplicates."""
    prefixes: PrefixMap[int] = PrefixMap()
    for value in (3, 1, 3, 2):
        prefixes.add(net("10.0.0.0/8"), value)
    assert prefixes.lookup(ip("10.2.3.4"))[0] == [(8, [3, 1, 2])]
    assert prefixes.size == 4


def test_scope_of_an_address_inside_one_network() -> None:
    """Inside a lone /8 the answer holds for the whole /8: scope 8."""
    assert build("10.0.0.0/8").lookup(ip("10.200.1.1"))[1] == 8


def test_scope_outside_every_network() -> None:
    """Outside every network, the scope is where the address's path leaves the networks' trie.

    192.0.2.1 differs from 10.0.0.0/8 in the first bit (scope 1); 11.0.0.1 shares the first
    seven bits of 10/8, so only its eighth bit tells them apart (scope 8).
    """
    prefixes = build("10.0.0.0/8")
    assert prefixes.lookup(ip("192.0.2.1"))[1] == 1
    assert prefixes.lookup(ip("11.0.0.1"))[1] == 8


def test_scope_when_a_longer_network_is_nearby() -> None:
    """An address in 10/8 but next to 10.1/16 has a scope that excludes 10.1/16 exactly.

    10.2.0.1 shares 14 bits with 10.1.0.0/16; bit 15 separates 10.2-10.3 from 10.0-10.1.
    """
    prefixes = build("10.0.0.0/8", "10.1.0.0/16")
    assert prefixes.lookup(ip("10.2.0.1")) == ([(8, ["10.0.0.0/8"])], 15)
    assert prefixes.lookup(ip("10.1.200.1")) == ([(16, ["10.1.0.0/16"]), (8, ["10.0.0.0/8"])], 16)


def test_scope_is_the_inner_network_when_it_has_no_subnets() -> None:
    """Within the innermost network the scope is that network's length."""
    assert build(*NESTED_V4).lookup(ip("10.1.2.99"))[1] == 24
    assert build(*NESTED_V6).lookup(ip("2001:db8:aa:bb::99"))[1] == 64


# -- property: the scope is exact ---------------------------------------------------------


@st.composite
def scenarios(draw: st.DrawFn, width: int) -> tuple[int, list[tuple[int, int]], list[int]]:
    """An address, networks (many near it, so they nest and border it) and probe suffixes."""
    top = 2**width - 1
    a = draw(st.integers(0, top))
    networks = []
    for _ in range(draw(st.integers(0, 8))):
        plen = draw(st.integers(0, width))
        if draw(st.integers(0, 3)):
            # a's path with one bit flipped (or none) and random bits below it: a sibling,
            # cousin or container of a
            flip = draw(st.integers(-1, width - 1))
            base = a if flip < 0 else a ^ (1 << flip)
            low = flip if flip >= 0 else draw(st.integers(0, width))
            base = (base >> low << low) | draw(st.integers(0, (1 << low) - 1))
        else:
            base = draw(st.integers(0, top))
        networks.append((base, plen))
    probes = draw(st.lists(st.integers(0, top), max_size=6))
    return a, networks, probes


def make(width: int, value: int, plen: int) -> IPNetwork:
    if width == 32:
        return ipaddress.IPv4Network((value, plen), strict=False)
    return ipaddress.IPv6Network((value, plen), strict=False)


def address(width: int, value: int) -> IPAddress:
    return ipaddress.IPv4Address(value) if width == 32 else ipaddress.IPv6Address(value)


def check_scope(width: int, a_int: int, raw: list[tuple[int, int]], probes: list[int]) -> None:
    networks = [make(width, v, p) for v, p in raw]
    prefixes: PrefixMap[int] = PrefixMap((n, i) for i, n in enumerate(networks))
    a = address(width, a_int)
    matches, scope = prefixes.lookup(a)

    def containing(b: IPAddress) -> frozenset[IPNetwork]:
        return frozenset(n for n in networks if b in n)

    # the matches are every containing network, longest first, with their values
    expected = sorted({(n.prefixlen, n) for n in containing(a)}, key=lambda t: -t[0])
    assert matches == [(plen, [i for i, m in enumerate(networks) if m == n]) for plen, n in expected]

    mine = containing(a)
    block = make(width, a_int, scope)
    # exact: every network holds all of a/scope or none of it ...
    for n in networks:
        assert block.subnet_of(n) or not block.overlaps(n), f"{n} splits {block}"  # type: ignore[arg-type]
    # ... and, by brute force, random addresses of a/scope see the same networks as a
    host_bits = width - scope
    for p in probes:
        b = address(width, (a_int >> host_bits << host_bits) | (p & ((1 << host_bits) - 1)))
        assert containing(b) == mine
    # minimal: some address sharing scope - 1 bits sees different networks. The witnesses
    # are a with bit `scope` flipped and the first address of each network inside the block.
    if scope > 0:
        wider = make(width, a_int, scope - 1)
        witnesses = [address(width, a_int ^ (1 << (width - scope)))]
        witnesses += [n.network_address for n in networks if n.subnet_of(wider)]  # type: ignore[arg-type]
        assert any(containing(w) != mine for w in witnesses if w in wider), f"scope {scope} is not minimal"


@settings(max_examples=300)
@given(scenarios(32))
def test_scope_is_exact_and_minimal_v4(scenario: tuple[int, list[tuple[int, int]], list[int]]) -> None:
    """IPv4: every address sharing `scope` bits with a has a's networks, and scope - 1 bits would not do."""
    check_scope(32, *scenario)


@settings(max_examples=300)
@given(scenarios(128))
def test_scope_is_exact_and_minimal_v6(scenario: tuple[int, list[tuple[int, int]], list[int]]) -> None:
    """IPv6: every address sharing `scope` bits with a has a's networks, and scope - 1 bits would not do."""
    check_scope(128, *scenario)
