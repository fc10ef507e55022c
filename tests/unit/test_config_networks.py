"""The config's network reader (`reader.network_of`) reads plain IPv4 networks without
`ipaddress`'s string parser: it must accept, refuse and return exactly what
`ipaddress.ip_network` does, for every text."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gtmcluster.config.load import load
from gtmcluster.config.reader import network_of
from tests.support import configs

OCTET = st.one_of(st.integers(0, 300).map(str), st.sampled_from(["00", "01", "010", "0x1", "", " 1", "١"]))
PREFIX = st.one_of(st.integers(0, 40).map(str), st.sampled_from(["08", "", " 8", "+8", "٨"]))


def outcome(parse: object, text: str) -> tuple[str, object]:
    try:
        network = parse(text)  # type: ignore[operator]
    except ValueError:
        return ("refused", None)
    return (type(network).__name__, network)


@given(st.lists(OCTET, min_size=3, max_size=5), PREFIX, st.sampled_from(["/", "", "//"]))
def test_the_same_networks_as_ipaddress(octets: list[str], prefix: str, slash: str) -> None:
    text = ".".join(octets) + slash + prefix
    assert outcome(network_of, text) == outcome(ipaddress.ip_network, text)


@given(st.text(max_size=24))
def test_any_text_the_same_as_ipaddress(text: str) -> None:
    assert outcome(network_of, text) == outcome(ipaddress.ip_network, text)


def test_ipv6_and_host_bits() -> None:
    assert network_of("2001:db8::/32") == ipaddress.ip_network("2001:db8::/32")
    for text in ("192.0.2.1/24", "2001:db8::1/32"):
        assert outcome(network_of, text) == ("refused", None)


def test_a_config_built_again_reuses_the_networks_of_the_last_one(tmp_path: Path) -> None:
    """A reload reads the networks the running config read as the same objects (it pays
    for the ones that changed); a network only the config before had is let go."""
    raw = configs.base("127.0.0.1", 5353)
    raw["regions"]["east"] = ["198.51.100.0/24", "203.0.113.0/25"]
    first = load(configs.write(tmp_path, raw))
    raw["regions"]["east"] = ["198.51.100.0/24", "192.0.2.0/26"]
    second = load(configs.write(tmp_path, raw))
    assert second.regions["east"].networks[0] is first.regions["east"].networks[0]
    assert second.regions["east"].networks[1] == ipaddress.ip_network("192.0.2.0/26")
    raw["regions"]["east"] = ["198.51.100.0/24", "203.0.113.0/25"]
    third = load(configs.write(tmp_path, raw))
    assert third.regions["east"].networks[0] is first.regions["east"].networks[0]
    assert third.regions["east"].networks[1] is not first.regions["east"].networks[1]  # read anew
    assert third.regions["east"].networks[1] == first.regions["east"].networks[1]
