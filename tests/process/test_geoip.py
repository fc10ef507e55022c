"""GeoIP topology on a real node (``twistd -n gtm``): `dig` queries carrying EDNS client
subnets from different "countries" (a GeoLite2-Country-shaped database written by the test)
get different data centers, the reply's scope is the database's network, `gtmcluster
explain` names the client's country, and a reload (the API's, then SIGHUP) with only a new
.mmdb file changes the answers. In a group of two with config sync, a new database and a
SIGHUP to one member change the other's answers too: the bundle carried it."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import apiclient, configs, geodb, poll
from tests.support.dig import dig
from tests.support.nodeproc import RunningNode, loopback_address, running_node
from tests.support.trio import running_group

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

DNS_PORT = 5353
GTMCLUSTER = Path(sys.executable).with_name("gtmcluster")
WIDEIP = "gslb.example.test"
#: what the answers are: DC1's, DC2's and DC3's virtual servers (configs.base)
DC1, DC2, DC3 = "10.0.1.1", "10.0.2.1", "10.0.3.1"


@dataclass
class Site:
    node: RunningNode
    config: Path
    directory: Path

    def answer(self, subnet: str) -> tuple[list[str], str]:
        """The addresses and the echoed client subnet option for a query from *subnet*."""
        result = dig(self.node.address, self.node.port, WIDEIP, "A", f"+subnet={subnet}", source="127.0.0.1")
        assert result.edns is not None
        return result.answer_data(), str(result.edns["CLIENT-SUBNET"])

    def digest(self) -> str:
        token = apiclient.token_of(self.config, "n1")
        status, body = apiclient.call((self.node.address, 8053), "/api/v1/status", token=token)
        assert status == 200, body
        return str(body["config_digest"])


TOPOLOGY = [
    {"ldns": "country JP", "server": "datacenter DC1", "score": 100},
    {"ldns": "continent EU", "server": "datacenter DC2", "score": 100},
    {"ldns": "asn 64501", "server": "datacenter DC3", "score": 200},
    {"ldns": "not country JP", "server": "datacenter DC3", "score": 1},
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    directory = tmp_path_factory.mktemp("geoip")
    geodb.write_country(directory / "country.mmdb")
    geodb.write_asn(directory / "asn.mmdb")
    address = loopback_address()
    config = configs.base(address, DNS_PORT)
    config["geoip"] = {"country": "country.mmdb", "asn": "asn.mmdb"}
    config["topology"] = TOPOLOGY
    path = configs.write(directory, config)
    with running_node(path, "n1", address, DNS_PORT, directory) as node:
        yield Site(node, path, directory)


@pytest.mark.parametrize(
    ("subnet", "address", "echoed"),
    [
        ("198.51.100.0/25", DC1, "198.51.100.0/25/25"),  # JP, AS64500
        ("198.51.100.128/25", DC3, "198.51.100.128/25/25"),  # JP, but AS64501 scores more
        ("203.0.113.0/24", DC2, "203.0.113.0/24/24"),  # DE: Europe
        ("192.0.2.0/24", DC3, "192.0.2.0/24/24"),  # US: not JP
    ],
)
def test_client_subnets_from_different_countries_get_different_answers(
    site: Site, subnet: str, address: str, echoed: str
) -> None:
    """The scope is the database network the facts hold for (the ASN database's /25s)."""
    assert site.answer(subnet) == ([address], echoed)


def test_explain_names_the_clients_country(site: Site) -> None:
    args = ["explain", WIDEIP, "--config", str(site.config), "--ldns", "127.0.0.1", "--subnet", "203.0.113.0/24"]
    ran = subprocess.run([str(GTMCLUSTER), *args], capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    assert "(client country DE, continent EU, asn 64502)" in ran.stdout, ran.stdout
    assert f"=> {DC2} from pool p" in ran.stdout, ran.stdout


def test_a_reload_with_only_a_new_database_changes_the_answers(site: Site) -> None:
    """The YAML is the same; the country database now puts 192.0.2.0/24 in Japan."""
    before = site.digest()
    assert site.answer("192.0.2.0/24")[0] == [DC3]
    moved = {**geodb.COUNTRIES, "192.0.2.0/24": ("JP", "AS")}
    geodb.write_country(site.directory / "country.mmdb", moved)
    token = apiclient.token_of(site.config, "n1")
    status, body = apiclient.call((site.node.address, 8053), "/api/v1/reload", "POST", token=token)
    assert status == 200, body
    moved_digest = body["config_digest"]
    assert moved_digest != before
    assert site.answer("192.0.2.0/24")[0] == [DC1]

    # and back, by SIGHUP (a database written again has another build time: another digest)
    geodb.write_country(site.directory / "country.mmdb")
    site.node.proc.send_signal(signal.SIGHUP)
    poll.until(lambda: site.digest() != moved_digest, 20, "the SIGHUP's reload", details=site.node.log_text)
    assert site.answer("192.0.2.0/24")[0] == [DC3]


def test_config_sync_carries_a_new_database_to_the_other_member(tmp_path: Path) -> None:
    """Only the .mmdb changes; n1 gets the SIGHUP and publishes; n2 runs the bundle it
    fetched (its own copy of the files, under its state_dir) and answers by the new data."""

    def with_geoip(config: dict[str, Any]) -> None:
        geodb.write_country(tmp_path / "country.mmdb")
        geodb.write_asn(tmp_path / "asn.mmdb")
        config["geoip"] = {"country": "country.mmdb", "asn": "asn.mmdb"}
        config["topology"] = TOPOLOGY

    with running_group(tmp_path, 2, customize=with_geoip) as group:

        def n2_answers() -> list[str]:
            host, port = group.members["n2"].dns
            found = dig(host, port, WIDEIP, "A", "+subnet=192.0.2.0/24", source="127.0.0.1")
            return found.answer_data()

        assert n2_answers() == [DC3]  # US
        geodb.write_country(tmp_path / "country.mmdb", {**geodb.COUNTRIES, "192.0.2.0/24": ("JP", "AS")})
        n1 = group.members["n1"].proc
        assert n1 is not None
        n1.send_signal(signal.SIGHUP)
        poll.until(lambda: n2_answers() == [DC1], 20, "n2 answering by the new database", details=n2_answers)
        carried = list((tmp_path / "var" / "state" / "n2" / "bundles").glob("*/files/country.mmdb"))
        assert any(f.read_bytes() == (tmp_path / "country.mmdb").read_bytes() for f in carried), carried
