"""Small MaxMind DB (.mmdb) files for the GeoIP tests, written with mmdb-writer in the shapes
of GeoLite2-Country (``country.iso_code``, ``continent.code``) and GeoLite2-ASN
(``autonomous_system_number``, ``autonomous_system_organization``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mmdb_writer import MMDBWriter
from netaddr import IPSet  # type: ignore[import-untyped]  # (no stubs; mmdb-writer takes its IPSet)

#: the tests' "countries": documentation networks and the ECS subnets the process test sends
COUNTRIES = {
    "198.51.100.0/24": ("JP", "AS"),
    "203.0.113.0/24": ("DE", "EU"),
    "192.0.2.0/24": ("US", "NA"),
    "2001:db8:aaaa::/48": ("JP", "AS"),
}
ASNS = {
    "198.51.100.0/25": (64500, "Example Net A"),
    "198.51.100.128/25": (64501, "Example Net B"),
    "203.0.113.0/24": (64502, "Example Net C"),
}


def write_country(path: Path, networks: Mapping[str, tuple[str, str]] = COUNTRIES) -> Path:
    """A GeoLite2-Country-shaped database: network -> (country code, continent code)."""
    writer = MMDBWriter(ip_version=6, database_type="GeoLite2-Country", ipv4_compatible=True)
    for network, (country, continent) in networks.items():
        record = {"country": {"iso_code": country}, "continent": {"code": continent}}
        writer.insert_network(IPSet([network]), record)
    writer.to_db_file(str(path))
    return path


def write_asn(path: Path, networks: Mapping[str, tuple[int, str]] = ASNS) -> Path:
    """A GeoLite2-ASN-shaped database: network -> (AS number, organisation)."""
    writer = MMDBWriter(ip_version=6, database_type="GeoLite2-ASN", ipv4_compatible=True)
    for network, (number, organization) in networks.items():
        record = {"autonomous_system_number": number, "autonomous_system_organization": organization}
        writer.insert_network(IPSet([network]), record)
    writer.to_db_file(str(path))
    return path
