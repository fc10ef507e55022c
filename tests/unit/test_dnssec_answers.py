"""Signed answers in memory (a node with `zones[].dnssec`, asked through the fast path):
RRSIGs that validate, signatures reused for kept decisions, DO=0 replies byte for byte as
without DNSSEC, the DNSKEY at the apex, insecure delegations, and config errors. The NSEC
chain for NXDOMAIN and the cap on fresh signatures: tests/unit/test_dnssec_chain.py."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dns.dnssec
import dns.flags
import dns.message
import dns.name
import dns.node
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtmcluster.config.load import load
from gtmcluster.config.problems import ConfigError
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dnsdata import keys
from gtmcluster.node import Node
from tests.support import configs

ORIGIN = dns.name.from_text("example.test")


def make_node(tmp_path: Path, signed: bool = True, mutate: Callable[[dict[str, Any]], None] | None = None) -> Node:
    config = configs.base()
    if signed:
        if not (tmp_path / "keys").exists():
            keys.keygen(tmp_path / "keys", "example.test")
        config["zones"][0]["dnssec"] = {"keys": "keys"}
    if mutate:
        mutate(config)
    return Node(load(configs.write(tmp_path, config)), "n1", clock=lambda: 1000.0, rng=random.Random(7))


def ask(fast: FastPath, name: str, rdtype: str = "A", do: bool = True, source: str = "192.0.2.200") -> bytes:
    q = dns.message.make_query(name, rdtype, want_dnssec=do, use_edns=0)
    q.id = 77
    q.flags &= ~dns.flags.RD
    reply = fast.handle(q.to_wire(), source)
    assert reply is not None
    return reply


def dnskeys(node: Node) -> dns.rrset.RRset:
    return node.responder.signing.signers[(b"example", b"test")].dnskey


def validated(msg: dns.message.Message, section: list[dns.rrset.RRset], node: Node, rdtype: int) -> dns.rrset.RRset:
    """The *rdtype* RRset of *section*, checked against its RRSIG with the zone's DNSKEYs."""
    rrset = next(r for r in section if r.rdtype == rdtype)
    sig = next(r for r in section if r.rdtype == dns.rdatatype.RRSIG and r.covers == rdtype and r.name == rrset.name)
    dns.dnssec.validate(rrset, sig, {ORIGIN: dnskeys(node)})
    return rrset


def test_a_wide_ip_answer_is_signed_and_a_kept_decision_signs_nothing(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    fast = FastPath(node.responder)
    msg = dns.message.from_wire(ask(fast, "gslb.example.test"))
    rrset = validated(msg, msg.answer, node, dns.rdatatype.A)
    assert [r.address for r in rrset] == ["10.0.3.1"]
    signer = node.responder.signing.signers[(b"example", b"test")]
    made = signer.signed
    for _ in range(5):
        again = dns.message.from_wire(ask(fast, "GSLB.example.test"))
        assert again.answer[1] == msg.answer[1]  # the same signature, given again
    assert signer.signed == made
    # another client, another decision: another signature (then kept too)
    other = dns.message.from_wire(ask(fast, "gslb.example.test", source="127.0.1.9"))
    assert [r.address for r in validated(other, other.answer, node, dns.rdatatype.A)] == ["10.0.1.1"]
    assert signer.signed == made + 1


@pytest.mark.parametrize(
    ("name", "rdtype"),
    [("gslb.example.test", "A"), ("www.example.test", "A"), ("nope.example.test", "A"), ("www.example.test", "MX")],
)
def test_do0_replies_are_as_without_dnssec(tmp_path: Path, name: str, rdtype: str) -> None:
    signed = FastPath(make_node(tmp_path / "s").responder)
    plain = FastPath(make_node(tmp_path / "p", signed=False).responder)
    for _ in range(2):  # the general path, then the fast path's kept reply
        assert ask(signed, name, rdtype, do=False) == ask(plain, name, rdtype, do=False)


def test_the_apex_serves_its_dnskey_set_signed(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    fast = FastPath(node.responder)
    unsigned = dns.message.from_wire(ask(fast, "example.test", "DNSKEY", do=False))
    assert unsigned.answer == [dnskeys(node)]
    msg = dns.message.from_wire(ask(fast, "example.test", "DNSKEY"))
    assert validated(msg, msg.answer, node, dns.rdatatype.DNSKEY) == dnskeys(node)
    # below the apex there is no DNSKEY: a signed NODATA
    below = dns.message.from_wire(ask(fast, "www.example.test", "DNSKEY"))
    assert below.rcode() == dns.rcode.NOERROR and not below.answer
    nsec = validated(below, below.authority, node, dns.rdatatype.NSEC)
    assert dns.rdatatype.DNSKEY not in {t for w in nsec[0].windows for t in _types(w)}


def test_nodata_is_a_compact_nsec_at_the_name(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    msg = dns.message.from_wire(ask(FastPath(node.responder), "www.example.test", "AAAA"))
    assert msg.rcode() == dns.rcode.NOERROR and not msg.answer
    validated(msg, msg.authority, node, dns.rdatatype.SOA)
    nsec = validated(msg, msg.authority, node, dns.rdatatype.NSEC)
    assert nsec.name == dns.name.from_text("www.example.test")
    assert nsec[0].next == dns.name.from_text("\\000.www.example.test")
    assert {t for w in nsec[0].windows for t in _types(w)} == {dns.rdatatype.A, dns.rdatatype.TXT, 46, 47}


def test_a_referral_proves_the_child_unsigned_and_leaves_glue_unsigned(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    msg = dns.message.from_wire(ask(FastPath(node.responder), "host.sub.example.test"))
    assert not msg.flags & dns.flags.AA
    nsec = validated(msg, msg.authority, node, dns.rdatatype.NSEC)
    assert nsec.name == dns.name.from_text("sub.example.test")
    assert {t for w in nsec[0].windows for t in _types(w)} == {dns.rdatatype.NS, 46, 47}  # no DS
    assert not any(r.rdtype == dns.rdatatype.RRSIG and r.covers == dns.rdatatype.NS for r in msg.authority)
    assert msg.additional and not any(r.rdtype == dns.rdatatype.RRSIG for r in msg.additional)


@pytest.mark.parametrize(
    ("dnssec", "setup", "message"),
    [
        (
            {"keys": "keys"},
            False,
            r"zones\[0\]\.dnssec\.keys: .*no keys for example\.test in .*dnssec keygen",
        ),
        ({"keys": "nowhere"}, False, r"zones\[0\]\.dnssec\.keys: .*nowhere is not a directory"),
        ({}, False, r"zones\[0\]\.dnssec: missing key 'keys'"),
        ({"keys": "keys", "algo": 13}, True, r"zones\[0\]\.dnssec\.algo: unknown key"),
        ("yes", False, r"zones\[0\]\.dnssec: .*a mapping \{keys: DIR\}"),
    ],
)
def test_config_errors(tmp_path: Path, dnssec: object, setup: bool, message: str) -> None:
    (tmp_path / "keys").mkdir()
    if setup:
        keys.keygen(tmp_path / "keys", "example.test")
    config = configs.base()
    config["zones"][0]["dnssec"] = dnssec
    with pytest.raises(ConfigError) as e:
        load(configs.write(tmp_path, config))
    assert any(re.search(message, str(p)) for p in e.value.problems), [str(p) for p in e.value.problems]


def _types(window: tuple[int, bytes]) -> set[int]:
    number, bitmap = window
    return {number * 256 + i * 8 + j for i, byte in enumerate(bitmap) for j in range(8) if byte & (0x80 >> j)}


def test_the_fast_path_signs_wide_ip_answers_as_the_general_path_does(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    fast = FastPath(node.responder)
    q = dns.message.make_query("Gslb.Example.test", "A", want_dnssec=True, use_edns=0)
    q.flags &= ~dns.flags.RD
    general = node.responder.handle(q.to_wire(), "192.0.2.200")
    fast.handle(q.to_wire(), "192.0.2.200")  # (keeps the reply)
    key = next(k for k in fast._replies if k[2] == 2)
    assert fast.handle(q.to_wire(), "192.0.2.200") == general
    assert fast._replies[key][4] < float("inf")  # this one came from the kept reply, signed


def test_a_kept_reply_is_made_again_when_its_signature_is_due(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    now = [1_780_000_000.0]
    signing = node.responder.signing
    signer = signing.signers[(b"example", b"test")]
    signer.clock = signing.clock = lambda: now[0]
    fast = FastPath(node.responder)
    first = dns.message.from_wire(ask(fast, "gslb.example.test"))
    assert dns.message.from_wire(ask(fast, "gslb.example.test")).answer[1] == first.answer[1]
    now[0] = first.answer[1][0].expiration - 3600  # past its renewal, the decision still kept
    second = dns.message.from_wire(ask(fast, "gslb.example.test"))
    assert second.answer[0] == first.answer[0]
    assert second.answer[1][0].expiration > first.answer[1][0].expiration
    dns.dnssec.validate(second.answer[0], second.answer[1], {ORIGIN: dnskeys(node)}, now=now[0])


def test_a_reload_keeps_the_signatures_of_zones_whose_keys_did_not_change(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    origin = (b"example", b"test")
    signer = node.responder.signing.signers[origin]
    fast = FastPath(node.responder)
    ask(fast, "gslb.example.test")
    made = signer.signed
    config = configs.base()
    config["zones"][0]["dnssec"] = {"keys": "keys"}
    node.reload(load(configs.write(tmp_path, config)))
    assert node.responder.signing.signers[origin] is signer
    ask(FastPath(node.responder), "gslb.example.test")
    assert signer.signed == made  # nothing signed anew
    keys.keygen(tmp_path / "keys", "example.test", force=True)  # new keys: a new signer
    node.reload(load(configs.write(tmp_path, config)))
    new = node.responder.signing.signers[origin]
    assert new is not signer
    msg = dns.message.from_wire(ask(FastPath(node.responder), "gslb.example.test"))
    validated(msg, msg.answer, node, dns.rdatatype.A)


@pytest.fixture(scope="module")
def signed_node(tmp_path_factory: pytest.TempPathFactory) -> Node:
    return make_node(tmp_path_factory.mktemp("signed"))


NAMES = ["example.test", "www", "gslb", "alias", "chain", "x.wild", "c", "b.c", "a.b.c", "nope", "sub", "x.sub", "mail"]
TYPES = ["A", "AAAA", "MX", "TXT", "SOA", "NS", "DNSKEY", "CNAME", "SRV", "ANY", "DS", "NSEC", "RRSIG"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(NAMES),
    rdtype=st.sampled_from(TYPES),
    source=st.sampled_from(["192.0.2.200", "127.0.1.9", "127.0.2.9"]),
)
def test_every_signed_rrset_validates(signed_node: Node, name: str, rdtype: str, source: str) -> None:
    """Whatever is asked, every RRset of our signed zone in a DO=1 reply carries an RRSIG that
    validates, and a reply with no answer proves the denial with a signed NSEC at the name."""
    qname = name if name == "example.test" else f"{name}.example.test"
    msg = dns.message.from_wire(ask(FastPath(signed_node.responder), qname, rdtype, source=source))
    # (a name that does not exist: NXDOMAIN from the NSEC chain, tests/unit/test_dnssec_chain.py)
    assert msg.rcode() == (dns.rcode.NXDOMAIN if name == "nope" else dns.rcode.NOERROR)
    keyring: dict[dns.name.Name, dns.node.Node | dns.rdataset.Rdataset] = {ORIGIN: dnskeys(signed_node)}
    below_cut = dns.name.from_text("sub.example.test")
    for section in (msg.answer, msg.authority, msg.additional):
        for rrset in section:
            if rrset.rdtype == dns.rdatatype.RRSIG:
                continue
            if rrset.name.is_subdomain(below_cut) and rrset.rdtype in (dns.rdatatype.NS, dns.rdatatype.A):
                assert not any(r.rdtype == dns.rdatatype.RRSIG and r.covers == rrset.rdtype for r in section)
                continue  # a delegation's NS and its glue: the child's, unsigned
            sig = next(
                r
                for r in section
                if r.rdtype == dns.rdatatype.RRSIG and r.covers == rrset.rdtype and r.name == rrset.name
            )
            dns.dnssec.validate(rrset, sig, keyring)
    if name == "nope":
        assert not msg.answer and [r.name.to_text() for r in msg.authority if r.rdtype == dns.rdatatype.NSEC] == [
            "mail.example.test.",  # covers nope
            "example.test.",  # covers *.example.test
        ]
    elif rdtype == "NSEC" and msg.flags & dns.flags.AA:  # the NSEC at the name is the answer
        # (at the end of a CNAME chain, if any)
        assert [r.rdtype for r in msg.answer[-2:]] == [dns.rdatatype.NSEC, dns.rdatatype.RRSIG]
    elif rdtype != "RRSIG" and not msg.answer and msg.flags & dns.flags.AA:
        nsec = next(r for r in msg.authority if r.rdtype == dns.rdatatype.NSEC)
        types = {t for w in nsec[0].windows for t in _types(w)}
        assert dns.rdatatype.from_text(rdtype) not in types
