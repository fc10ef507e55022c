"""Topology records: longest-match ordering, negation, scores and server selectors."""

from __future__ import annotations

import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.topology.prefixes import IPAddress, IPNetwork
from gtmcluster.topology.records import Match, Record, Selector, ServerFacts, Topology, server_matches


def ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


def subnet(text: str, negate: bool = False) -> Selector:
    network = ipaddress.ip_network(text)
    return Selector("subnet", negate, str(network), (network,))


def region(name: str, *networks: str, negate: bool = False) -> Selector:
    return Selector("region", negate, name, tuple(ipaddress.ip_network(n) for n in networks))


def anyone(negate: bool = False) -> Selector:
    return Selector("any", negate, "")


def datacenter(name: str, negate: bool = False) -> Selector:
    return Selector("datacenter", negate, name)


def pool(name: str, negate: bool = False) -> Selector:
    return Selector("pool", negate, name)


def virtual_server(name: str, negate: bool = False) -> Selector:
    return Selector("virtual_server", negate, name)


def topology(*records: tuple[Selector, Selector, int]) -> Topology:
    return Topology.build([Record(i, ldns, server, score) for i, (ldns, server, score) in enumerate(records)])


def order(match: Match) -> list[tuple[int, int]]:
    """(record index, matched length) in the order the records are consulted."""
    return [(r.index, plen) for r, plen in match.records]


ANY_DC = datacenter("DC1")


# -- ordering -------------------------------------------------------------------------------


def test_longer_prefix_first_whatever_the_config_order() -> None:
    """A record matched through a /16 is consulted before one matched through a /8 listed earlier."""
    topo = topology((subnet("10.0.0.0/8"), ANY_DC, 10), (subnet("10.1.0.0/16"), ANY_DC, 20))
    assert order(topo.match(ip("10.1.2.3"))) == [(1, 16), (0, 8)]
    reverse = topology((subnet("10.1.0.0/16"), ANY_DC, 20), (subnet("10.0.0.0/8"), ANY_DC, 10))
    assert order(reverse.match(ip("10.1.2.3"))) == [(0, 16), (1, 8)]


def test_only_matching_records_are_listed() -> None:
    """A record whose LDNS selector does not contain the address is not in the match."""
    topo = topology((subnet("10.0.0.0/8"), ANY_DC, 10), (subnet("10.1.0.0/16"), ANY_DC, 20))
    assert order(topo.match(ip("10.2.0.1"))) == [(0, 8)]
    assert order(topo.match(ip("192.0.2.1"))) == []


def test_region_matches_through_its_longest_containing_network() -> None:
    """A region counts with the longest of its networks that holds the address."""
    topo = topology(
        (subnet("10.1.0.0/16"), ANY_DC, 20),
        (region("r", "10.0.0.0/8", "10.1.2.0/24"), ANY_DC, 10),
    )
    assert order(topo.match(ip("10.1.2.3"))) == [(1, 24), (0, 16)]
    assert order(topo.match(ip("10.1.9.9"))) == [(0, 16), (1, 8)]


def test_ties_keep_config_order() -> None:
    """Records matched through equally long prefixes are consulted in config order."""
    topo = topology(
        (subnet("10.1.0.0/16"), datacenter("B"), 1),
        (region("r", "10.1.0.0/16"), datacenter("A"), 2),
        (subnet("10.1.0.0/16"), datacenter("C"), 3),
    )
    assert order(topo.match(ip("10.1.0.1"))) == [(0, 16), (1, 16), (2, 16)]


def test_any_matches_with_length_zero() -> None:
    """`any` matches every address (both families) with length 0, so it comes after prefix matches."""
    topo = topology((anyone(), ANY_DC, 1), (subnet("10.0.0.0/8"), ANY_DC, 2))
    assert order(topo.match(ip("10.0.0.1"))) == [(1, 8), (0, 0)]
    assert order(topo.match(ip("192.0.2.1"))) == [(0, 0)]
    assert order(topo.match(ip("2001:db8::1"))) == [(0, 0)]


def test_zero_length_network_ties_with_any_in_config_order() -> None:
    """A 0.0.0.0/0 subnet matches with length 0 like `any`, and config order breaks the tie."""
    topo = topology((anyone(), ANY_DC, 1), (subnet("0.0.0.0/0"), ANY_DC, 2))
    assert order(topo.match(ip("10.0.0.1"))) == [(0, 0), (1, 0)]


def test_not_any_never_matches() -> None:
    """`not any` matches no address."""
    topo = topology((anyone(negate=True), ANY_DC, 1))
    assert topo.match(ip("10.0.0.1")).records == ()


def test_negated_subnet() -> None:
    """`not subnet N` matches addresses outside N (length 0) and not those inside."""
    topo = topology((subnet("10.0.0.0/8", negate=True), ANY_DC, 5), (subnet("192.0.2.0/24"), ANY_DC, 6))
    assert order(topo.match(ip("10.1.1.1"))) == []
    assert order(topo.match(ip("192.0.2.1"))) == [(1, 24), (0, 0)]
    assert order(topo.match(ip("2001:db8::1"))) == [(0, 0)]


def test_negated_region() -> None:
    """`not region R` matches addresses in none of R's networks, with length 0."""
    topo = topology((region("r", "10.0.0.0/8", "2001:db8::/32", negate=True), ANY_DC, 5))
    assert order(topo.match(ip("10.1.1.1"))) == []
    assert order(topo.match(ip("2001:db8::1"))) == []
    assert order(topo.match(ip("11.0.0.1"))) == [(0, 0)]
    assert order(topo.match(ip("2001:db9::1"))) == [(0, 0)]


def test_negated_match_comes_after_a_shorter_positive_one() -> None:
    """A negated selector counts as length 0 even when the address is far from its networks."""
    topo = topology((subnet("172.16.0.0/12", negate=True), ANY_DC, 5), (subnet("10.0.0.0/8"), ANY_DC, 6))
    assert order(topo.match(ip("10.0.0.1"))) == [(1, 8), (0, 0)]


def test_match_scope_covers_the_networks() -> None:
    """The match's scope is the prefix length over which the same records match."""
    topo = topology((subnet("10.0.0.0/8"), ANY_DC, 1), (subnet("10.1.2.0/24"), ANY_DC, 2))
    assert topo.match(ip("10.1.2.3")).scope == 24
    assert topo.match(ip("10.200.0.1")).scope == 9  # 10.128/9 holds no /24 of the records
    assert topo.match(ip("10.1.3.1")).scope == 24


# -- scores ---------------------------------------------------------------------------------


def test_score_takes_the_first_matching_record_for_the_candidate() -> None:
    """A candidate scores from the first record, in match order, whose server selector it passes."""
    topo = topology(
        (subnet("10.0.0.0/8"), datacenter("A"), 10),
        (subnet("10.1.0.0/16"), datacenter("A"), 70),
        (subnet("10.1.0.0/16"), datacenter("B"), 50),
    )
    match = topo.match(ip("10.1.0.1"))
    a = topo.server_mask(ServerFacts("vs-a", False, frozenset({"p"}), frozenset({"A"})))
    b = topo.server_mask(ServerFacts("vs-b", False, frozenset({"p"}), frozenset({"B"})))
    c = topo.server_mask(ServerFacts("vs-c", False, frozenset({"p"}), frozenset({"C"})))
    hit_a = Topology.score(match, a)
    hit_b = Topology.score(match, b)
    assert hit_a is not None and (hit_a[0], hit_a[1].index) == (70, 1)
    assert hit_b is not None and (hit_b[0], hit_b[1].index) == (50, 2)
    assert Topology.score(match, c) is None
    # outside the /16 only the /8 record is left for A, and nothing for B
    outer = topo.match(ip("10.2.0.1"))
    hit_outer = Topology.score(outer, a)
    assert hit_outer is not None and hit_outer[0] == 10
    assert Topology.score(outer, b) is None


def test_score_zero_record_matches_and_shadows_later_records() -> None:
    """A first matching record with score 0 is the candidate's score: later records do not rescue it."""
    topo = topology(
        (subnet("10.1.0.0/16"), datacenter("A"), 0),
        (subnet("10.0.0.0/8"), datacenter("A"), 90),
    )
    mask = topo.server_mask(ServerFacts("vs-a", False, frozenset({"p"}), frozenset({"A"})))
    hit = Topology.score(topo.match(ip("10.1.0.1")), mask)
    assert hit is not None and (hit[0], hit[1].index) == (0, 0)
    hit = Topology.score(topo.match(ip("10.2.0.1")), mask)
    assert hit is not None and hit[0] == 90


# -- server selectors -----------------------------------------------------------------------

MEMBER = ServerFacts("vs1", False, frozenset({"web"}), frozenset({"DC1"}), (ip("10.0.1.1"),))
POOL = ServerFacts("web", True, frozenset({"web"}), frozenset({"DC1", "DC2"}), (ip("10.0.1.1"), ip("10.0.2.1")))


def mask_of(server: Selector, facts: ServerFacts) -> bool:
    """Whether a one-record topology with this server selector matches *facts*."""
    return topology((anyone(), server, 1)).server_mask(facts) == frozenset({0})


def test_datacenter_selector() -> None:
    """`datacenter D` matches candidates in D (a pool: any of its members' data centers)."""
    assert mask_of(datacenter("DC1"), MEMBER)
    assert not mask_of(datacenter("DC2"), MEMBER)
    assert mask_of(datacenter("DC2"), POOL)
    assert not mask_of(datacenter("DC3"), POOL)


def test_pool_selector() -> None:
    """`pool P` matches P itself and the members of P."""
    assert mask_of(pool("web"), MEMBER)
    assert mask_of(pool("web"), POOL)
    assert not mask_of(pool("api"), MEMBER)
    assert not mask_of(pool("api"), POOL)


def test_virtual_server_selector() -> None:
    """`virtual_server V` matches the member V only, never a pool of the same name."""
    assert mask_of(virtual_server("vs1"), MEMBER)
    assert not mask_of(virtual_server("vs2"), MEMBER)
    assert not mask_of(virtual_server("web"), POOL)


def test_subnet_and_region_server_selectors() -> None:
    """Server `subnet`/`region` match a candidate with an address inside (a pool: any member's)."""
    assert mask_of(subnet("10.0.1.0/24"), MEMBER)
    assert not mask_of(subnet("10.0.2.0/24"), MEMBER)
    assert mask_of(subnet("10.0.2.0/24"), POOL)
    assert mask_of(region("r", "192.0.2.0/24", "10.0.0.0/16"), MEMBER)
    assert not mask_of(region("r", "192.0.2.0/24", "2001:db8::/32"), MEMBER)


def test_any_server_selector() -> None:
    """Server `any` matches every candidate; `not any` none."""
    assert mask_of(anyone(), MEMBER)
    assert mask_of(anyone(), POOL)
    assert not mask_of(anyone(negate=True), MEMBER)


def test_negated_server_selectors() -> None:
    """`not ...` on the server side inverts each selector kind."""
    assert not mask_of(datacenter("DC1", negate=True), MEMBER)
    assert mask_of(datacenter("DC2", negate=True), MEMBER)
    assert not mask_of(pool("web", negate=True), MEMBER)
    assert mask_of(pool("api", negate=True), MEMBER)
    assert not mask_of(virtual_server("vs1", negate=True), MEMBER)
    assert mask_of(virtual_server("vs2", negate=True), MEMBER)
    assert not mask_of(subnet("10.0.0.0/8", negate=True), MEMBER)
    assert mask_of(subnet("192.0.2.0/24", negate=True), MEMBER)
    assert mask_of(region("r", "192.0.2.0/24", negate=True), MEMBER)


def test_server_mask_lists_every_matching_record() -> None:
    """`server_mask` is the set of indexes of all records whose server selector matches."""
    topo = topology(
        (anyone(), datacenter("DC1"), 1),
        (anyone(), datacenter("DC2"), 1),
        (anyone(), pool("web"), 1),
        (anyone(), virtual_server("vs1"), 1),
        (anyone(), subnet("10.0.0.0/8"), 1),
    )
    assert topo.server_mask(MEMBER) == frozenset({0, 2, 3, 4})
    assert topo.server_mask(POOL) == frozenset({0, 1, 2, 4})


# -- property: ordering ---------------------------------------------------------------------

BASE = int(ipaddress.IPv4Address("10.0.0.0"))


@st.composite
def networks_near(draw: st.DrawFn) -> IPNetwork:
    """IPv4 networks inside 10.0.0.0/8 or containing it, so they nest and overlap often."""
    plen = draw(st.integers(0, 32))
    low = draw(st.integers(0, 2**16 - 1)) << 8 | draw(st.integers(0, 3))
    return ipaddress.IPv4Network((BASE | (low & 0xFFFFFF), plen), strict=False)


@st.composite
def selectors(draw: st.DrawFn) -> Selector:
    negate = draw(st.booleans()) and draw(st.booleans())
    kind = draw(st.sampled_from(["subnet", "region", "region", "any"]))
    if kind == "any":
        return anyone(negate)
    if kind == "subnet":
        n = draw(networks_near())
        return Selector("subnet", negate, str(n), (n,))
    nets = tuple(draw(st.lists(networks_near(), min_size=1, max_size=3)))
    return Selector("region", negate, "r", nets)


def brute_force(records: list[Record], address: IPAddress) -> list[tuple[int, int]]:
    out = []
    for record in records:
        sel = record.ldns
        inside = [n.prefixlen for n in sel.networks if address in n]
        if sel.kind == "any":
            matched, plen = not sel.negate, 0
        else:
            matched = bool(inside) != sel.negate
            plen = 0 if sel.negate else max(inside, default=0)
        if matched:
            out.append((record.index, plen))
    return sorted(out, key=lambda t: (-t[1], t[0]))


@settings(max_examples=300)
@given(
    st.lists(selectors(), max_size=8),
    st.integers(0, 2**16 - 1),
    st.integers(0, 255),
    st.lists(st.integers(0, 2**32 - 1), max_size=4),
)
def test_match_order_property(ldns: list[Selector], mid: int, last: int, probes: list[int]) -> None:
    """The match lists exactly the records whose selector matches, sorted by (-length, index),
    and every address sharing `scope` bits with the client gets the same list."""
    records = [Record(i, sel, ANY_DC, 1) for i, sel in enumerate(ldns)]
    topo = Topology.build(records)
    a = ipaddress.IPv4Address(BASE | mid << 8 | last)
    match = topo.match(a)
    assert order(match) == brute_force(records, a)
    host_bits = 32 - match.scope
    for p in probes:
        b = ipaddress.IPv4Address((int(a) >> host_bits << host_bits) | (p & ((1 << host_bits) - 1)))
        assert order(topo.match(b)) == order(match)


# -- property: server masks -----------------------------------------------------------------


@st.composite
def server_selectors(draw: st.DrawFn) -> Selector:
    negate = draw(st.booleans())
    kind = draw(st.sampled_from(["datacenter", "pool", "virtual_server", "subnet", "region", "any"]))
    if kind == "any":
        return anyone(negate)
    if kind in ("datacenter", "pool", "virtual_server"):
        return Selector(kind, negate, draw(st.sampled_from(["a", "b", "c"])))
    if kind == "subnet":
        n = draw(networks_near())
        return Selector("subnet", negate, str(n), (n,))
    nets = tuple(draw(st.lists(networks_near(), max_size=3)))
    return Selector("region", negate, "r", nets)


@st.composite
def candidates(draw: st.DrawFn) -> ServerFacts:
    names = st.frozensets(st.sampled_from(["a", "b", "c"]))
    addresses = st.lists(st.integers(0, 2**24 - 1).map(lambda low: ipaddress.IPv4Address(BASE | low)), max_size=3)
    return ServerFacts(
        draw(st.sampled_from(["a", "b", "c"])),
        draw(st.booleans()),
        draw(names),
        draw(names),
        tuple(draw(addresses)),
    )


@settings(max_examples=300)
@given(st.lists(server_selectors(), max_size=10), st.lists(candidates(), min_size=1, max_size=3))
def test_server_mask_property(servers: list[Selector], facts: list[ServerFacts]) -> None:
    """A candidate's mask holds a record's server selector exactly when the selector, tested
    on its own, matches the candidate (however many records share a selector)."""
    topo = Topology.build([Record(i, anyone(), sel, 1) for i, sel in enumerate(servers)])
    for candidate in facts:
        mask = topo.server_mask(candidate)
        for record in topo.records:
            assert (record.server_id in mask) == server_matches(record.server, candidate), (record, candidate)
