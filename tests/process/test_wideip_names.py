"""Wildcard wide IPs and aliases on a real node (``twistd -n gtm``), asked with the real
`dig`, and `gtmcluster explain` given names the wide IPs answer."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import configs
from tests.support.dig import DigResult, dig
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
#: a static record under the wildcard (its A overridden, its TXT kept)
ZONE = configs.ZONE + 'shop.apps IN A 192.0.2.70\nshop.apps IN TXT "static shop"\n'


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    address = loopback_address()
    raw = configs.base(address, 5353)
    raw["pools"]["two"] = {"members": ["vs2"], "ttl": 20}
    raw["pools"]["three"] = {"members": ["vs3"], "ttl": 20}
    raw["wideips"]["*.apps.example.test"] = {"pools": ["two"]}
    raw["wideips"]["api.apps.example.test"] = {"pools": ["three"]}
    raw["wideips"]["gslb.example.test"]["aliases"] = ["glb.example.test"]
    workdir = tmp_path_factory.mktemp("wideip-names")
    path = configs.write(workdir, raw, ZONE)
    with running_node(path, "n1", address, 5353, workdir) as running:
        yield running


def ask(node: RunningNode, name: str, rdtype: str = "A", source: str | None = None) -> DigResult:
    return dig(node.address, node.port, name, rdtype, source=source)


def test_a_wildcard_answers_two_names_with_the_names_asked(node: RunningNode) -> None:
    for name in ("web.apps.example.test", "a.b.apps.example.test"):
        got = ask(node, name)
        assert got.status == "NOERROR" and "aa" in got.flags
        assert got.answer == [f"{name}. 20 IN A 10.0.2.1"]


def test_a_static_record_under_the_wildcard_is_overridden_for_a(node: RunningNode) -> None:
    assert ask(node, "shop.apps.example.test").answer_data() == ["10.0.2.1"]
    assert ask(node, "shop.apps.example.test", "TXT").answer_data() == ['"static shop"']
    nodata = ask(node, "web.apps.example.test", "TXT")
    assert nodata.status == "NOERROR" and nodata.answer == [] and nodata.types("authority") == ["SOA"]


def test_an_exact_wide_ip_below_the_wildcard_wins(node: RunningNode) -> None:
    assert ask(node, "api.apps.example.test").answer_data() == ["10.0.3.1"]
    assert ask(node, "v2.api.apps.example.test").answer_data() == ["10.0.2.1"]


def test_an_alias_answers_as_its_wide_ip(node: RunningNode) -> None:
    for source, address in (("127.0.1.9", "10.0.1.1"), ("127.0.2.9", "10.0.2.1")):
        for name in ("gslb.example.test", "glb.example.test"):
            got = ask(node, name, source=source)
            assert got.answer == [f"{name}. 30 IN A {address}"], (name, source)
    assert ask(node, "glb.example.test", "AAAA", source="127.0.2.9").answer_data() == ["2001:db8:2::1"]


def test_explain_takes_an_alias_or_a_name_a_wildcard_answers(node: RunningNode) -> None:
    config = node.log.parent / "cluster.yaml"
    for name, first_line in (
        ("x.apps.example.test", "x.apps.example.test (wide IP *.apps.example.test) A asked by LDNS 127.0.2.9"),
        ("glb.example.test", "glb.example.test (wide IP gslb.example.test) A asked by LDNS 127.0.2.9"),
        ("*.apps.example.test", "*.apps.example.test A asked by LDNS 127.0.2.9"),
    ):
        ran = subprocess.run(
            [str(GTMCLUSTER), "explain", "--config", str(config), name, "--ldns", "127.0.2.9"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines()[0] == first_line, ran.stdout
        assert "=> 10.0.2.1 from pool" in ran.stdout, ran.stdout
