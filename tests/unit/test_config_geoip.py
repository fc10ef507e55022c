"""The ``geoip`` section and GeoIP selectors in the config: a config with them loads and
answers by country; every mistake is one problem at its key path; the databases travel in
the config bundle and their contents are part of the config's digest."""

from __future__ import annotations

import gc
import ipaddress
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.groupconfig import bundle
from tests.support import configs, geodb
from tests.unit.test_config_errors import assert_form, find, problems_of_file


def geo_config(directory: Path, **changes: Any) -> Path:
    """configs.base() with both databases and a topology by country, continent and ASN."""
    geodb.write_country(directory / "country.mmdb")
    geodb.write_asn(directory / "asn.mmdb")
    config = configs.base()
    config["geoip"] = {"country": "country.mmdb", "asn": "asn.mmdb"}
    config["regions"]["europe"] = [{"continent": "EU"}, "127.0.3.0/24"]
    config["topology"] = [
        {"ldns": "asn 64501", "server": "datacenter DC3", "score": 300},
        {"ldns": "country JP", "server": "datacenter DC1", "score": 100},
        {"ldns": "region europe", "server": "datacenter DC2", "score": 100},
        {"ldns": "not country JP", "server": "datacenter DC3", "score": 1},
    ]
    config.update(changes)
    return configs.write(directory, config)


def best_dc(config: Config, address: str) -> str | None:
    """The data center of the best-scoring record for *address*."""
    match = config.topology.match(ipaddress.ip_address(address))
    return match.records[0][0].server.value if match.records else None


def test_a_config_with_geoip_loads_and_matches(tmp_path: Path) -> None:
    config = load(geo_config(tmp_path))
    assert config.regions["europe"].geo == (("continent", "EU"),)
    assert best_dc(config, "198.51.100.1") == "DC1"  # JP
    assert best_dc(config, "198.51.100.200") == "DC3"  # JP, but AS64501 is more specific
    assert best_dc(config, "203.0.113.7") == "DC2"  # EU by the region
    assert best_dc(config, "127.0.3.9") == "DC2"  # the region's own network
    assert best_dc(config, "192.0.2.7") == "DC3"  # US: only "not country JP"


def test_paths_are_relative_to_the_config_file(tmp_path: Path) -> None:
    sub = tmp_path / "geo"
    sub.mkdir()
    geodb.write_country(sub / "c.mmdb")
    config = configs.base()
    config["geoip"] = {"country": "geo/c.mmdb"}
    config["topology"] = [{"ldns": "country DE", "server": "datacenter DC2", "score": 5}]
    loaded = load(configs.write(tmp_path, config))
    assert best_dc(loaded, "203.0.113.1") == "DC2"


def test_a_server_selector_by_country(tmp_path: Path) -> None:
    config = configs.base()
    geodb.write_country(tmp_path / "c.mmdb", {"10.0.2.0/24": ("DE", "EU")})
    config["geoip"] = {"country": "c.mmdb"}
    config["topology"] = [{"ldns": "any", "server": "country DE", "score": 7}]
    loaded = load(configs.write(tmp_path, config))
    pool = loaded.pools["p"]
    match = loaded.topology.match(ipaddress.ip_address("192.0.2.1"))
    scores = {m.vs.name: loaded.topology.score(match, m.topology_mask) for m in pool.members}
    assert scores["vs2"] is not None and scores["vs2"][0] == 7
    assert scores["vs1"] is None and scores["vs3"] is None


# -- mistakes ---------------------------------------------------------------------------------


def problems(directory: Path, geoip: Any = None, topology: Any = None, regions: Any = None) -> tuple[Path, Any]:
    config = configs.base()
    if geoip is not None:
        config["geoip"] = geoip
    if topology is not None:
        config["topology"] = topology
    if regions is not None:
        config["regions"] = regions
    path = configs.write(directory, config)
    return path, problems_of_file(path)


def test_a_selector_without_its_database_names_the_key_to_set(tmp_path: Path) -> None:
    geodb.write_country(tmp_path / "c.mmdb")
    path, found = problems(
        tmp_path,
        geoip={"country": "c.mmdb"},
        topology=[
            {"ldns": "asn 4134", "server": "datacenter DC1", "score": 1},
            {"ldns": "any", "server": "country CN", "score": 1},
        ],
    )
    problem = find(found, "topology[0].ldns", "set geoip.asn")
    assert "'asn 4134' needs a GeoIP database" in assert_form(problem, path, "topology[0].ldns")
    assert len(found) == 1  # country CN has its database


def test_without_a_geoip_section(tmp_path: Path) -> None:
    path, found = problems(
        tmp_path, regions={"eu": [{"continent": "EU"}]}, topology=[{"ldns": "region eu", "server": "any", "score": 1}]
    )
    assert_form(find(found, "regions.eu[0].continent", "set geoip.country"), path, "regions.eu[0].continent")


@pytest.mark.parametrize(
    ("selector", "fragment"),
    [
        ("country CHN", "not a country: use its ISO 3166-1 alpha-2 code"),
        ("continent XX", "not a continent: use one of AF (Africa)"),
        ("asn big", "not an autonomous system number"),
        ("country", "is not a selector"),
    ],
)
def test_bad_terms(tmp_path: Path, selector: str, fragment: str) -> None:
    geodb.write_country(tmp_path / "c.mmdb")
    geodb.write_asn(tmp_path / "a.mmdb")
    _, found = problems(
        tmp_path,
        geoip={"country": "c.mmdb", "asn": "a.mmdb"},
        topology=[{"ldns": selector, "server": "datacenter DC1", "score": 1}],
    )
    find(found, "topology[0].ldns", fragment)


def test_an_unquoted_norway_is_a_boolean_to_yaml(tmp_path: Path) -> None:
    geodb.write_country(tmp_path / "c.mmdb")
    _, found = problems(tmp_path, geoip={"country": "c.mmdb"}, regions={"nordic": [{"country": [False, "SE"]}]})
    find(found, "regions.nordic[0].country[0]", "read as a boolean by YAML: quote the code")


def test_database_problems(tmp_path: Path) -> None:
    (tmp_path / "junk.mmdb").write_bytes(b"\x00" * 512)
    geodb.write_country(tmp_path / "c.mmdb")
    path, found = problems(
        tmp_path,
        geoip={"country": "missing.mmdb", "asn": "junk.mmdb", "city": "c.mmdb"},
        topology=[{"ldns": "country JP", "server": "datacenter DC1", "score": 1}],
    )
    assert "cannot read" in assert_form(find(found, "geoip.country", "missing.mmdb"), path, "geoip.country")
    find(found, "geoip.asn", "not a MaxMind DB (.mmdb) file")
    find(found, "geoip.city", "unknown key")
    assert len(found) == 3  # the selector needing the unreadable database is not reported too


def test_a_database_of_the_wrong_kind(tmp_path: Path) -> None:
    geodb.write_asn(tmp_path / "a.mmdb")
    _, found = problems(tmp_path, geoip={"country": "a.mmdb"})
    find(found, "geoip.country", "is a GeoLite2-ASN database, not one of country data")


# -- the bundle and the digest ----------------------------------------------------------------


def test_the_bundle_carries_the_databases(tmp_path: Path) -> None:
    path = geo_config(tmp_path)
    made = bundle.make(path, 1, 0, "n1", 0.0)
    assert made.files["country.mmdb"] == (tmp_path / "country.mmdb").read_bytes()
    assert made.files["asn.mmdb"] == (tmp_path / "asn.mmdb").read_bytes()
    out = tmp_path / "written"
    written = bundle.write(bundle.decode(bundle.encode(made)), out)
    assert best_dc(load(written, own_dir=tmp_path), "203.0.113.7") == "DC2"


def test_a_changed_database_changes_the_digest_and_the_answers(tmp_path: Path) -> None:
    path = geo_config(tmp_path)
    before = load(path)
    published = bundle.make(path, 1, 0, "n1", 0.0)
    assert best_dc(before, "192.0.2.7") == "DC3"
    geodb.write_country(tmp_path / "country.mmdb", {**geodb.COUNTRIES, "192.0.2.0/24": ("JP", "AS")})
    after = load(path)
    assert after.digest != before.digest
    assert best_dc(after, "192.0.2.7") == "DC1"
    assert bundle.make(path, 1, 0, "n1", 0.0).digest != published.digest  # a new bundle to publish


def mapped_databases() -> int:
    """The private copies of databases this process maps (unlinked files: `topology.geoip`)."""
    return sum("gtm-geoip-" in line for line in Path("/proc/self/maps").read_text().splitlines())


def test_a_replaced_config_lets_go_of_its_databases(tmp_path: Path) -> None:
    """Nothing holds the readers in a reference cycle: dropping the config unmaps them at
    once (a reload frees the old config by reference counting, `config.reload.free_in_turns`).
    Earlier tests' garbage is collected first, and the collector is off while this one
    counts: what it frees then, reference counting freed."""
    gc.collect()
    gc.disable()
    try:
        before = mapped_databases()
        config = load(geo_config(tmp_path))
        assert mapped_databases() == before + 2
        maps = [line for line in Path("/proc/self/maps").read_text().splitlines() if "gtm-geoip-" in line]
        assert all(line.endswith("(deleted)") for line in maps), maps  # no file left behind
        del config
        assert mapped_databases() == before
    finally:
        gc.enable()
