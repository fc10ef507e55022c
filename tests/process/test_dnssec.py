"""DNSSEC online signing seen by a real validator: a real node (``twistd gtm``) serving a
zone with `zones[].dnssec`, asked by BIND's `delv` with the zone's DS as its trust anchor
(made by ``gtmcluster dnssec keygen`` and ``ds``): wide IP answers, the apex, a CNAME into
the zone, a wildcard, NODATA and NXDOMAIN all validate, random names too while a client
floods the node with them; DO=0 answers stay unsigned."""

from __future__ import annotations

import random
import string
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require_tool
from tests.support import configs
from tests.support.dig import dig
from tests.support.dnsflood import Flood
from tests.support.dnsseckeys import VARIANTS, keygen_and_ds
from tests.support.nodeproc import loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

DNS_PORT = 5353


@dataclass
class SignedNode:
    address: str
    anchor: Path

    def delv(self, name: str, rdtype: str = "A") -> str:
        server = [f"@{self.address}", "-p", str(DNS_PORT)]
        run = subprocess.run(
            ["delv", "-a", str(self.anchor), "+root=example.test", *server, name, rdtype],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return run.stdout + run.stderr


@pytest.fixture(scope="module", params=VARIANTS)
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SignedNode]:
    require_tool("delv", "bind9-dnsutils")
    workdir = tmp_path_factory.mktemp("dnssec")
    ds = keygen_and_ds(workdir / "keys", request.param).split()
    # example.test. 3600 IN DS TAG ALG 2 DIGEST
    tag, alg, digest_type, digest = ds[4:8]
    anchor = workdir / "anchor.conf"
    anchor.write_text(f'trust-anchors {{ example.test. static-ds {tag} {alg} {digest_type} "{digest}"; }};\n')
    address = loopback_address()
    config = configs.base(address, DNS_PORT)
    config["zones"][0]["dnssec"] = {"keys": "keys"}
    path = configs.write(workdir, config, zone=configs.ZONE + "into IN CNAME gslb\n")
    with running_node(path, "n1", address, DNS_PORT, workdir):
        yield SignedNode(address, anchor)


@pytest.mark.parametrize(
    ("name", "rdtype", "expected"),
    [
        ("gslb.example.test", "A", "gslb.example.test.\t30\tIN\tA\t10.0.3.1"),  # a wide IP, by topology
        ("example.test", "DNSKEY", "IN\tDNSKEY\t257 3 "),  # the apex
        ("example.test", "SOA", "IN\tSOA\tns1.example.test."),
        ("alias.example.test", "A", "www.example.test.\t3600\tIN\tA\t192.0.2.80"),  # CNAME, followed
        ("into.example.test", "A", "gslb.example.test.\t30\tIN\tA\t10.0.3.1"),  # CNAME into a wide IP
        ("x.wild.example.test", "A", "x.wild.example.test.\t3600\tIN\tA\t192.0.2.99"),  # a wildcard
    ],
)
def test_positive_answers_validate(node: SignedNode, name: str, rdtype: str, expected: str) -> None:
    out = node.delv(name, rdtype)
    assert out.startswith("; fully validated\n"), out
    assert expected in out
    lines = out.splitlines()
    first = lines[1].split()
    sig = next(fields for fields in (line.split() for line in lines[2:]) if fields[3] == "RRSIG")
    assert sig[:3] == first[:3] and sig[4] == first[3], out  # the first RRset's RRSIG follows it


@pytest.mark.parametrize(
    ("name", "rdtype", "bitmap"),
    [
        ("www.example.test", "AAAA", "A TXT RRSIG NSEC"),  # NODATA
        ("c.example.test", "A", "RRSIG NSEC"),  # an empty non-terminal
        ("gslb.example.test", "MX", "A AAAA RRSIG NSEC"),  # NODATA at a wide IP
        # a wide IP type with no answer now (no IPv6 server in DC3, where topology sends us)
        ("gslb.example.test", "AAAA", "A RRSIG NSEC"),
    ],
)
def test_denials_validate(node: SignedNode, name: str, rdtype: str, bitmap: str) -> None:
    out = node.delv(name, rdtype)
    assert "; negative response, fully validated" in out, out
    assert f"; {name}. NSEC \\000.{name}. {bitmap}\n" in out


def test_do0_answers_are_unsigned_and_nxdomain_stays(node: SignedNode) -> None:
    plain = dig(node.address, DNS_PORT, "nope.example.test", "A")
    assert plain.status == "NXDOMAIN"
    assert not any("RRSIG" in r or "NSEC" in r for r in plain.authority)
    for _ in range(2):  # the second from the fast path's template
        wide = dig(node.address, DNS_PORT, "gslb.example.test", "A")
        assert wide.answer_data() == ["10.0.3.1"]
        assert len(wide.answer) == 1
    signed = dig(node.address, DNS_PORT, "nope.example.test", "A", "+dnssec")
    assert signed.status == "NXDOMAIN"  # proved by the zone's NSEC chain
    assert any(" NSEC " in r.replace("\t", " ") for r in signed.authority)


@pytest.mark.parametrize(
    ("name", "proof"),
    [
        # the NSEC covering the name (from the chain), and the one covering *.example.test
        ("nope.example.test", ["mail.example.test. NSEC ns1.example.test. A RRSIG NSEC", "example.test. NSEC"]),
        # below an empty non-terminal (c): the name, and *.c.example.test
        ("x.c.example.test", ["a.b.c.example.test. NSEC chain.example.test.", "alias.example.test. NSEC a.b.c."]),
        ("zzz.example.test", ["www.example.test. NSEC example.test. A TXT RRSIG NSEC"]),  # the chain's last
    ],
)
def test_nxdomain_validates(node: SignedNode, name: str, proof: list[str]) -> None:
    out = node.delv(name, "A")
    assert "; negative response, fully validated" in out, out
    assert "NXDOMAIN" in out, out
    for nsec in proof:
        assert f"; {nsec}" in out, out
    assert "NSEC \\000." not in out  # not a compact answer


def test_random_names_validate_under_a_flood_of_random_names(node: SignedNode) -> None:
    """While a client floods the node with DO=1 queries for random names, `delv` asks for
    more random names: each is a validated NXDOMAIN, and every flood query is answered
    NXDOMAIN (none truncated: a denial costs the cap nothing)."""
    rng = random.Random(11)
    flood = Flood(node.address, DNS_PORT, rng)
    with flood.running(at_least=2000):
        for _ in range(5):
            name = "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(14)) + ".example.test"
            out = node.delv(name, "A")
            assert "; negative response, fully validated" in out and "NXDOMAIN" in out, out
    assert flood.answered >= 2000, flood.answered
    assert flood.rcodes == {3}, flood.rcodes  # NXDOMAIN
    assert not flood.truncated


def test_nxdomain_from_a_kept_span_validates(node: SignedNode) -> None:
    """DO=1 NXDOMAIN for names in the same span of the chain: the first is the general path's,
    kept for the span by the fast path (`dns.signednegative`), the others are answered from it
    with their own question (their length, their case); each validates. One that does not fit
    the client's 512 bytes is truncated, as the general path does."""
    for label in ("zza", "zz" + "b" * 30, "ZZc", "mailz", "mail" + "z" * 50, "MAILy"):
        name = f"{label}.example.test"
        out = node.delv(name, "A")
        assert "; negative response, fully validated" in out and "NXDOMAIN" in out, out
        signed = dig(node.address, DNS_PORT, name, "A", "+dnssec", "+norecurse")
        assert signed.status == "NXDOMAIN" and "tc" not in signed.flags
    for _ in range(2):
        long = dig(node.address, DNS_PORT, "zz" + "y" * 40 + ".example.test", "A", "+dnssec", "+bufsize=512", "+ignore")
        assert "tc" in long.flags, long
