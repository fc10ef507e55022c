"""GeoIP topology: facts of addresses from real .mmdb files (written by mmdb-writer), the
country/continent/asn selectors in topology records (LDNS and server side, with ``not``),
their place in longest-match order, the ECS scope, and a brute-force oracle under hypothesis."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtmcluster.runtime import slices
from gtmcluster.topology.geoip import GeoIP, GeoIPError, open_database, term_problem
from gtmcluster.topology.prefixes import IPAddress
from gtmcluster.topology.records import GEO_RANK, Match, Record, Selector, ServerFacts, Topology
from tests.support import geodb


def ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


@pytest.fixture(scope="module")
def geo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GeoIP]:
    directory = tmp_path_factory.mktemp("geo")
    country = slices.whole(open_database("country", geodb.write_country(directory / "country.mmdb")))
    asn = slices.whole(open_database("asn", geodb.write_asn(directory / "asn.mmdb")))
    databases = GeoIP([country, asn])
    yield databases
    databases.close()


def sel(kind: str, value: str, negate: bool = False) -> Selector:
    if kind == "subnet":
        network = ipaddress.ip_network(value)
        return Selector("subnet", negate, value, (network,))
    if kind == "any":
        return Selector("any", negate, "")
    return Selector(kind, negate, value, (), ((kind, value),))


DC = Selector("datacenter", False, "DC1")


def topology(geo: GeoIP, *ldns: Selector) -> Topology:
    return Topology.build([Record(i, s, DC, 10 + i) for i, s in enumerate(ldns)], geo)


def order(match: Match) -> list[int]:
    return [r.index for r, _ in match.records]


# -- facts ------------------------------------------------------------------------------------


def test_facts_of_an_address_from_both_databases(geo: GeoIP) -> None:
    facts = geo.facts(ip("198.51.100.200"))
    assert dict(facts.terms) == {"country": "JP", "continent": "AS", "asn": "64501"}
    assert facts.prefix == 25  # the ASN database's network is the longer one
    assert facts.text == "country JP, continent AS, asn 64501"


def test_an_address_neither_database_knows_has_no_facts(geo: GeoIP) -> None:
    facts = geo.facts(ip("10.9.9.9"))
    assert facts.terms == ()
    assert facts.text == "country -, continent -, asn -"


def test_ipv6_addresses_are_looked_up(geo: GeoIP) -> None:
    assert dict(geo.facts(ip("2001:db8:aaaa::53")).terms) == {"country": "JP", "continent": "AS"}


def test_only_the_databases_asked_for_are_consulted(geo: GeoIP) -> None:
    facts = geo.facts(ip("203.0.113.9"), frozenset({"asn"}))
    assert facts.terms == (("asn", "64502"),)
    assert facts.text == "asn 64502"


def test_the_cache_is_bounded(geo: GeoIP) -> None:
    small = GeoIP(geo.databases.values(), cache_entries=3)
    for i in range(10):
        assert dict(small.facts(ip(f"192.0.2.{i}")).terms)["country"] == "US"
        assert len(small._cache) <= 3


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mmdb"
    bad.write_bytes(b"not a database at all" * 100)
    with pytest.raises(GeoIPError, match="not a MaxMind DB"):
        slices.whole(open_database("country", bad))


def test_a_corrupt_search_tree_is_nothing_known_not_an_error(tmp_path: Path) -> None:
    """The metadata is read at load; a tree corrupt past it shows at lookup, in the answer path."""
    data = bytearray(geodb.write_country(tmp_path / "c.mmdb").read_bytes())
    data[:400] = b"\xff" * 400  # the search tree's first nodes point past its end
    (tmp_path / "c.mmdb").write_bytes(bytes(data))
    databases = GeoIP([slices.whole(open_database("country", tmp_path / "c.mmdb"))])
    assert databases.facts(ip("198.51.100.1")).terms == ()


def test_the_database_read_is_a_private_copy(tmp_path: Path) -> None:
    """The file rewritten in place after it was read changes nothing until it is read again."""
    path = geodb.write_country(tmp_path / "c.mmdb", {"192.0.2.0/24": ("US", "NA")})
    databases = GeoIP([slices.whole(open_database("country", path))])
    geodb.write_country(path, {"192.0.2.0/24": ("FR", "EU")})
    assert ("country", "US") in databases.facts(ip("192.0.2.1")).terms
    again = GeoIP([slices.whole(open_database("country", path))])
    assert ("country", "FR") in again.facts(ip("192.0.2.1")).terms


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("country", "jp", ("country", "JP")),
        ("continent", "eu", ("continent", "EU")),
        ("asn", "AS4134", ("asn", "4134")),
        ("asn", "0064500", ("asn", "64500")),
        ("country", "JPN", None),
        ("country", "J1", None),
        ("continent", "XX", None),
        ("asn", "4294967296", None),
        ("asn", "-1", None),
        ("asn", "١٢", None),  # digits, but not ASCII ones
    ],
)
def test_terms_are_checked_and_normalised(kind: str, value: str, expected: tuple[str, str] | None) -> None:
    found, why = term_problem(kind, value)
    assert found == expected
    assert bool(why) == (expected is None)


# -- LDNS side --------------------------------------------------------------------------------


def test_country_continent_and_asn_select_the_client(geo: GeoIP) -> None:
    topo = topology(geo, sel("country", "JP"), sel("continent", "EU"), sel("asn", "64500"))
    assert order(topo.match(ip("198.51.100.1"))) == [2, 0]
    assert order(topo.match(ip("203.0.113.1"))) == [1]
    assert order(topo.match(ip("192.0.2.1"))) == []


def test_not_country_matches_every_other_client_and_the_unknown(geo: GeoIP) -> None:
    topo = topology(geo, sel("country", "JP", negate=True))
    assert order(topo.match(ip("198.51.100.1"))) == []
    assert order(topo.match(ip("203.0.113.1"))) == [0]
    assert order(topo.match(ip("10.0.0.1"))) == [0]  # no facts: not in JP


def test_more_specific_facts_first_and_networks_before_them(geo: GeoIP) -> None:
    """asn, then country, then continent, whatever the config order; a network of one bit
    or more before any of them; any and negated selectors last."""
    topo = topology(
        geo,
        sel("any", ""),
        sel("continent", "AS"),
        sel("country", "JP"),
        sel("asn", "64500"),
        sel("subnet", "198.0.0.0/8"),
        sel("country", "DE", negate=True),
    )
    match = topo.match(ip("198.51.100.1"))
    assert order(match) == [4, 3, 2, 1, 0, 5]


def test_the_scope_covers_the_database_networks(geo: GeoIP) -> None:
    """An answer decided by the ASN database's /25 holds for that /25, not the /24."""
    by_asn = topology(geo, sel("asn", "64500"))
    assert by_asn.match(ip("198.51.100.1")).scope == 25
    by_country = topology(geo, sel("country", "JP"))
    assert by_country.match(ip("198.51.100.1")).scope == 24  # only the country database consulted


def test_the_match_says_what_it_found(geo: GeoIP) -> None:
    assert topology(geo, sel("country", "JP")).match(ip("198.51.100.1")).geo == "country JP, continent AS"
    assert topology(geo, sel("asn", "1")).match(ip("203.0.113.5")).geo == "asn 64502"
    assert topology(geo, sel("subnet", "10.0.0.0/8")).match(ip("10.0.0.1")).geo == ""


def test_a_region_of_networks_and_countries(geo: GeoIP) -> None:
    apac = Selector("region", False, "apac", (ipaddress.ip_network("10.0.0.0/8"),), (("country", "JP"),))
    not_apac = Selector("region", True, "apac", apac.networks, apac.geo)
    topo = topology(geo, apac, not_apac)
    assert order(topo.match(ip("10.1.1.1"))) == [0]
    assert order(topo.match(ip("198.51.100.9"))) == [0]
    assert order(topo.match(ip("203.0.113.9"))) == [1]


# -- server side ------------------------------------------------------------------------------


def test_server_selectors_match_candidates_by_their_addresses(geo: GeoIP) -> None:
    jp = Selector("country", False, "JP", (), (("country", "JP"),))
    not_eu = Selector("continent", True, "EU", (), (("continent", "EU"),))
    anyone = Selector("any", False, "")
    topo = Topology.build([Record(0, anyone, jp, 100), Record(1, anyone, not_eu, 50)], geo)
    in_jp = ServerFacts("vs-jp", False, frozenset(["p"]), frozenset(["DC1"]), (ip("198.51.100.10"),))
    in_de = ServerFacts("vs-de", False, frozenset(["p"]), frozenset(["DC1"]), (ip("203.0.113.10"),))
    match = topo.match(ip("10.0.0.1"))
    assert topo.score(match, topo.server_mask(in_jp)) == (100, topo.records[0])
    assert topo.score(match, topo.server_mask(in_de)) is None


# -- an oracle --------------------------------------------------------------------------------

FACTS = {  # what tests/support/geodb writes, by address
    "198.51.100.1": {("country", "JP"), ("continent", "AS"), ("asn", "64500")},
    "198.51.100.200": {("country", "JP"), ("continent", "AS"), ("asn", "64501")},
    "203.0.113.1": {("country", "DE"), ("continent", "EU"), ("asn", "64502")},
    "192.0.2.1": {("country", "US"), ("continent", "NA")},
    "10.0.0.1": set(),
}
TERMS = sorted({t for terms in FACTS.values() for t in terms} | {("country", "FR"), ("asn", "1")})
SUBNETS = ["198.51.100.0/24", "198.0.0.0/8", "0.0.0.0/0", "10.0.0.0/8"]


@st.composite
def selectors(draw: st.DrawFn) -> Selector:
    negate = draw(st.booleans())
    choice = draw(st.sampled_from(["geo", "subnet", "any", "region"]))
    if choice == "region":  # networks and facts together
        networks = draw(st.lists(st.sampled_from(SUBNETS), max_size=2, unique=True))
        terms = draw(st.lists(st.sampled_from(TERMS), max_size=3, unique=True))
        return Selector("region", negate, "r", tuple(ipaddress.ip_network(n) for n in networks), tuple(terms))
    if choice == "geo":
        kind, value = draw(st.sampled_from(TERMS))
        return sel(kind, value, negate)
    if choice == "subnet":
        return sel("subnet", draw(st.sampled_from(SUBNETS)), negate)
    return sel("any", "", negate)


def oracle(records: list[Record], address: str) -> list[int]:
    """Every record tested one by one: (prefix length, geo rank, config order)."""
    facts = FACTS[address]
    hits = []
    for r in records:
        s = r.ldns
        plen, rank, hit = 0, 0, s.kind == "any"
        containing = [n.prefixlen for n in s.networks if ip(address) in n]
        matched = [GEO_RANK[kind] for kind, value in s.geo if (kind, value) in facts]
        if s.kind != "any":
            hit = bool(containing or matched)
            plen, rank = max(containing, default=0), max(matched, default=0)
        if hit != s.negate:
            hits.append(((-plen, -rank, r.index) if not s.negate else (0, 0, r.index), r.index))
    return [i for _, i in sorted(hits)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(selectors(), max_size=12), st.sampled_from(sorted(FACTS)))
def test_match_agrees_with_testing_every_record(geo: GeoIP, ldns: list[Selector], address: str) -> None:
    records = [Record(i, s, DC, 1) for i, s in enumerate(ldns)]
    topo = Topology.build(records, geo)
    assert order(topo.match(ip(address))) == oracle(records, address)


@given(st.text(max_size=6))
def test_a_country_is_exactly_two_ascii_letters(text: str) -> None:
    found, _ = term_problem("country", text)
    letters = len(text) == 2 and all(c.isascii() and c.isalpha() for c in text)
    assert found == (("country", text.upper()) if letters else None)


@given(st.integers(min_value=-10, max_value=2**33), st.booleans())
def test_an_asn_is_a_32_bit_number_with_or_without_as(number: int, prefixed: bool) -> None:
    found, _ = term_problem("asn", f"AS{number}" if prefixed else str(number))
    assert found == (("asn", str(number)) if 0 <= number <= 2**32 - 1 else None)
